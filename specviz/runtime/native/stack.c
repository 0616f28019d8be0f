/* The lean Llama forward's layer stack and its matmuls in C: one call runs every layer of a pass over the rows it
 * is given, on a team of OpenMP threads that meet at barriers between the steps of a layer.
 *
 * Why: at the bundled sizes (d 320, 24 layers, 1-7 rows a pass) torch spends about half a pass on per-operator
 * overhead (some 480 small operators), and MKL's fp32 GEMM with a few rows is far from memory speed. Here every
 * weight is packed once into panels of PW columns stored contiguously (a panel is K rows of PW floats), so a pass
 * streams each weight once from memory whatever its row count, and up to MR rows share each loaded vector.
 *
 * The arithmetic is that of specviz.runtime.lean_llama (transformers' Llama layer): RMSNorm, q/k/v, optional
 * per-head q/k norms (Qwen3), RoPE from the caller's tables (partial rotary where rot < hd), attention over the
 * cache's visible slots, the output projection, SiLU(gate) * up, down; only the order of float additions differs.
 * Written with GCC/Clang vector extensions (no intrinsics): compiled with -march=native they become AVX-512,
 * AVX2 or NEON; only the 8-bit-activation matmuls (sv_qlinear8, and the quantized Gemma-3 stack) use AVX-512 VNNI
 * intrinsics, compiled where the CPU has them. Built at first use by specviz/runtime/native/__init__.py. */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
#define PW (2 * VL) /* a packed panel's width in columns */
#define MR 8        /* rows that share each loaded weight vector */
#define MAXT 64
#define MAX_HD 512 /* the longest head (keys, queries) a pass takes */

typedef float vf __attribute__((vector_size(VL * sizeof(float)), aligned(sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(float)), aligned(sizeof(float))));

/* mask ? a : b lane by lane, for a mask from a comparison of vf (all bits set where true) */
static inline vf vsel(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }
static inline vf vmax(vf a, vf b) { return vsel(a > b, a, b); }

int sv_panel_width(void) { return PW; }
int sv_max_head_dim(void) { return MAX_HD; }

/* W_t (K, N) row-major -> panels: panel p holds columns [p PW, p PW + PW) as K rows of PW floats (zero-padded). */
void sv_pack(const float *w, int K, int N, float *out) {
    int panels = (N + PW - 1) / PW;
    for (int p = 0; p < panels; p++)
        for (int k = 0; k < K; k++)
            for (int c = 0; c < PW; c++) {
                int col = p * PW + c;
                out[((size_t)p * K + k) * PW + c] = col < N ? w[(size_t)k * N + col] : 0.0f;
            }
}

/* y[r, cols of panel p] = res[r, .] + x[r, :] @ W[:, .] + b[.] for R rows (R <= MR, a constant where inlined). */
static inline __attribute__((always_inline)) void tile(const int R, const float *x, int ldx, const float *panel,
                                                       int K, int col0, int ncols, const float *b, const float *res,
                                                       float *y, int ldy) {
    vf acc[MR][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = (vf){0};
    for (int k = 0; k < K; k++) {
        vf w0 = *(const vf *)(panel + (size_t)k * PW), w1 = *(const vf *)(panel + (size_t)k * PW + VL);
        for (int r = 0; r < R; r++) {
            float xv = x[(size_t)r * ldx + k];
            acc[r][0] += xv * w0;
            acc[r][1] += xv * w1;
        }
    }
    for (int r = 0; r < R; r++) {
        float out[PW];
        memcpy(out, &acc[r][0], sizeof(vf));
        memcpy(out + VL, &acc[r][1], sizeof(vf));
        float *yr = y + (size_t)r * ldy + col0;
        const float *rr = res ? res + (size_t)r * ldy + col0 : NULL;
        for (int c = 0; c < ncols; c++) {
            float v = out[c];
            if (b) v += b[col0 + c];
            if (rr) v += rr[c];
            yr[c] = v;
        }
    }
}

/* Panels [p0, p1) of y (M, N) = res + x (M, K) @ W + b; res may be y itself (each element read, then written). */
static void panels(const float *x, int M, int K, const float *wp, int N, const float *b, const float *res, float *y,
                   int p0, int p1) {
    for (int p = p0; p < p1; p++) {
        const float *panel = wp + (size_t)p * K * PW;
        int col0 = p * PW, ncols = N - col0 < PW ? N - col0 : PW;
        for (int r0 = 0; r0 < M; r0 += MR) {
            int R = M - r0 < MR ? M - r0 : MR;
            const float *xr = x + (size_t)r0 * K;
            const float *rr = res ? res + (size_t)r0 * N : NULL;
            float *yr = y + (size_t)r0 * N;
            switch (R) {
            case 1: tile(1, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            case 2: tile(2, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            case 3: tile(3, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            case 4: tile(4, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            case 5: tile(5, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            case 6: tile(6, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            case 7: tile(7, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            default: tile(8, xr, K, panel, K, col0, ncols, b, rr, yr, N); break;
            }
        }
    }
}

/* -- threads: OpenMP, built against the runtime torch itself loaded, so that torch's operators and these passes take
 * turns on one pool of threads instead of two pools spinning against each other on the same cores ------------------ */
typedef void (*job_fn)(void *ctx, int tid, int nt);

static void barrier(int nt) {
    if (nt > 1) {
#pragma omp barrier
    }
}

/* A worker thread goes on a core of its own, the calling (Python) thread stays free: unpinned, the scheduler moved the
 * two between the two cores often enough to slow the bundled target's verify passes by a quarter (2026-12-03). */
static int pin_workers = 1;
void sv_set_pin(int on) { pin_workers = on; }
static _Thread_local int pinned = 0;
static void pin(int tid) {
    if (pinned || !pin_workers || tid == 0) return;
    pinned = 1;
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    int seen = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed) && seen++ == tid) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            sched_setaffinity(0, sizeof one, &one);
            return;
        }
}

static void run(job_fn fn, void *ctx, int nt) {
    if (nt <= 1) { fn(ctx, 0, 1); return; }
#pragma omp parallel num_threads(nt)
    {
        pin(omp_get_thread_num());
        fn(ctx, omp_get_thread_num(), omp_get_num_threads());
    }
}

static void share(int tid, int nt, int n, int *lo, int *hi) {
    *lo = (int)((long)n * tid / nt);
    *hi = (int)((long)n * (tid + 1) / nt);
}

/* -- one matmul, its panels shared among the threads ------------------------------------------------------------- */
struct linear_job { const float *x, *wp, *b, *res; float *y; int M, K, N; };

static void linear_job(void *ctx, int tid, int nt) {
    struct linear_job *j = ctx;
    int lo, hi;
    share(tid, nt, (j->N + PW - 1) / PW, &lo, &hi);
    panels(j->x, j->M, j->K, j->wp, j->N, j->b, j->res, j->y, lo, hi);
}

/* y (M, N) = res + x (M, K) @ W + b, W packed by sv_pack; b and res may be NULL. */
void sv_linear(const float *x, int M, int K, const float *wp, int N, const float *b, const float *res, float *y,
               int nt) {
    struct linear_job j = {x, wp, b, res, y, M, K, N};
    run(linear_job, &j, nt);
}

/* -- the layer stack ---------------------------------------------------------------------------------------------- */
typedef struct {
    const float *ln1, *qkv, *qkv_b, *o, *o_b, *ln2, *gate, *gate_b, *up, *up_b, *down, *down_b, *q_norm, *k_norm;
} sv_layer; /* weights packed by sv_pack except the norms; any bias or q/k norm may be NULL */

typedef struct {
    int d, nh, nkv, hd, inter, rot; /* rot: rotary dims of each head (hd, or fewer: partial rotary) */
    float eps, scale;
} sv_dims;

typedef struct {
    const float *norm, *w, *b; /* the final RMSNorm's weight, the LM head packed by sv_pack, its bias or NULL */
    int vocab, first;          /* the head's width; logits for rows [first, n) only */
    float *h;                  /* (n, d) out: every row normed (what the head reads, a feature draft's input) */
    float *logits;             /* (n - first, vocab) out */
    double seconds;            /* out: the final norm's and the head's wall time in this call */
} sv_head;

/* The structs' sizes, so that the ctypes side is checked against them when the library loads. */
size_t sv_sizeof_dims(void) { return sizeof(sv_dims); }
size_t sv_sizeof_layer(void) { return sizeof(sv_layer); }
size_t sv_sizeof_head(void) { return sizeof(sv_head); }

struct stack_job {
    const sv_dims *m;
    const sv_head *head;
    const sv_layer *const *layers;
    float *const *kv; /* per layer (2 nkv, cap, hd): keys of each kv head, then values */
    int nlayers, n, start, cap;
    float *x;                    /* (n, d), in and out */
    const float *cos, *sin;      /* (positions, rot): cos and signed sin by position */
    const int64_t *positions;    /* (n,) each row's position, or NULL: start + row */
    const uint8_t *visible;      /* (n, start + n) the slots each row attends to, or NULL: causal */
    const int64_t *slots, *first; /* (n,) each row's slot and the first slot it sees (sv_layers_rows), or NULL */
    int nblocks, *block_p0, *block_np; /* the attention's blocks of (row, query head) pairs (plan_blocks) */
    float *h[MAXT], *qkv, *attn, *act, *scores[MAXT];
    double head_t0; /* when every thread had left the last layer (thread 0's clock): the head's start */
    int window;     /* > 0: a row sees only the last `window` positions (Gemma-3's sliding layers) */
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* e^x to within about 2 ulp (Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, a degree-6 polynomial in r, times
 * 2^n), branch-free so that the loops calling it vectorize (libm's expf does not); 0 below -87.3, so exp(-inf) = 0. */
static inline float vexp(float x) {
    float c = x < -88.0f ? -88.0f : (x > 88.0f ? 88.0f : x); /* 2^n stays a float's exponent: no int overflow */
    float n = rintf(c * 1.44269504088896341f);
    float r = c - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.3f ? 0.0f : (x > 88.7f ? INFINITY : p * scale);
}

/* y[i] = vexp(x[i] * inv_t - m) over n lanes: where AVX-512 is built, 16 lanes at a time with the same operations
 * as vexp's for every argument the sampling loops give it (at most a rounding above 0: their m is the row's largest
 * logit times inv_t), its power of two made by vscalefps, which rounds as vexp's product by the exact power does;
 * without vexp's clamps and selects, a third fewer instructions. The tail, lane by lane, through vexp itself. */
static void exp_row(const float *x, int n, float inv_t, float m, float *y) {
    int i = 0;
#if defined(__AVX512F__)
    const __m512 it = _mm512_set1_ps(inv_t), mv = _mm512_set1_ps(m), lo = _mm512_set1_ps(-87.3f);
    const __m512 l2e = _mm512_set1_ps(1.44269504088896341f), a = _mm512_set1_ps(0.693359375f);
    const __m512 b = _mm512_set1_ps(2.12194440e-4f), one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_fmsub_ps(_mm512_loadu_ps(x + i), it, mv);
        __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(v, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fmadd_ps(k, b, _mm512_fnmadd_ps(k, a, v));
        __m512 p = _mm512_set1_ps(1.9875691500e-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
        p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), one);
        _mm512_storeu_ps(y + i, _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ), p, k));
    }
#endif
    for (; i < n; i++) y[i] = vexp(x[i] * inv_t - m);
}

static void rms_norm(const float *x, const float *w, int n, float eps, float *out) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

/* out (n, d) = RMSNorm of each row of x (n, d) with weight w, as a pass's last norm before the LM head */
void sv_rms_norm(const float *x, int n, int d, const float *w, float eps, float *out) {
    for (int i = 0; i < n; i++) rms_norm(x + (size_t)i * d, w, d, eps, out + (size_t)i * d);
}

/* x cos + rotate_half(x) sin_signed over the first rot dims (in place), as lean_common.rope_ does. */
static void rope(float *x, const float *cos, const float *sin, int rot) {
    float t[MAX_HD];
    int half = rot / 2;
    for (int i = 0; i < rot; i++) t[i] = x[i];
    for (int i = 0; i < rot; i++) x[i] = t[i] * cos[i] + t[(i + half) % rot] * sin[i];
}

/* Row i's new keys and values roped and written to the cache, its queries roped in place (heads split by thread). */
static void prepare_head(struct stack_job *j, const sv_layer *L, float *kv, int i, int head) {
    const sv_dims *m = j->m;
    float *v = j->qkv + (size_t)i * (m->nh + 2 * m->nkv) * m->hd + (size_t)head * m->hd;
    int64_t pos = j->positions ? j->positions[i] : j->start + i;
    int slot = j->slots ? (int)j->slots[i] : j->start + i;
    const float *nw = head < m->nh ? L->q_norm : L->k_norm;
    if (nw) rms_norm(v, nw, m->hd, m->eps, v);
    rope(v, j->cos + pos * m->rot, j->sin + pos * m->rot, m->rot);
    if (head >= m->nh) { /* a key head g and its value head */
        int g = head - m->nh;
        memcpy(kv + ((size_t)g * j->cap + slot) * m->hd, v, sizeof(float) * m->hd);
        memcpy(kv + ((size_t)(m->nkv + g) * j->cap + slot) * m->hd, v + (size_t)m->nkv * m->hd, sizeof(float) * m->hd);
    }
}

static void prepare_heads(struct stack_job *j, const sv_layer *L, float *kv, int tid, int nt) {
    const sv_dims *m = j->m;
    int lo, hi;
    share(tid, nt, j->n * (m->nh + m->nkv), &lo, &hi);
    for (int t = lo; t < hi; t++) prepare_head(j, L, kv, t / (m->nh + m->nkv), t % (m->nh + m->nkv));
}

/* Attention of one block of up to VL (query head, row) pairs that share key/value head g, one pair per vector lane:
 * the scores of a slot for every lane come from hd broadcasts of its key against the lanes' queries (no horizontal
 * sums), the softmax runs lane-wise, and the values are summed the same way. The slots read run from the block's
 * first (0, or its rows' sequence's first slot in sv_layers_rows) to its last row's; S is scratch of VL floats a slot. */
static void attend_block(struct stack_job *j, const float *kv, int g, int p0, int np, float *S) {
    const sv_dims *m = j->m;
    int hd = m->hd, group = m->nh / m->nkv, width = (m->nh + 2 * m->nkv) * hd, total = j->start + j->n;
    const float *keys = kv + (size_t)g * j->cap * hd, *vals = kv + (size_t)(m->nkv + g) * j->cap * hd;
    float qt[MAX_HD * VL], last[VL], top[VL], sum[VL];
    int lastmax = 0, lastmin = 1 << 30, from = j->first ? (int)j->first[p0 / group] : 0; /* rows share a first */
    for (int lane = 0; lane < VL; lane++) { /* lane -> pair p0 + lane: row (p / group), head g group + p % group */
        int p = p0 + lane, i = p / group, head = g * group + p % group;
        const float *q = j->qkv + (size_t)i * width + (size_t)head * hd;
        for (int e = 0; e < hd; e++) qt[e * VL + lane] = lane < np ? q[e] * m->scale : 0.0f;
        int seen_last = lane >= np ? -1 : j->slots ? (int)j->slots[i] : j->visible ? total - 1 : j->start + i;
        last[lane] = (float)seen_last;
        lastmax = seen_last > lastmax ? seen_last : lastmax;
        if (lane < np) lastmin = seen_last < lastmin ? seen_last : lastmin;
    }
    if (j->window > 0 && lastmin - j->window + 1 > from) from = lastmin - j->window + 1; /* no lane sees before */
    vf lastv = *(const vf *)last, slotv, neg = (vf){0} - INFINITY, topv = neg;
    for (int slot = from; slot <= lastmax; slot++) {
        const float *k = keys + (size_t)slot * hd;
        vf acc = (vf){0};
        for (int e = 0; e < hd; e++) acc += k[e] * *(const vf *)(qt + e * VL);
        slotv = (vf){0} + (float)slot;
        acc = vsel(slotv > lastv, neg, acc); /* past a lane's row (causal) or an unused lane */
        if (j->window > 0) acc = vsel(slotv <= lastv - (float)j->window, neg, acc); /* out of its window */
        *(vf *)(S + (size_t)(slot - from) * VL) = acc;
        topv = vmax(acc, topv);
    }
    if (j->visible) /* a token tree: each row sees its own slots */
        for (int lane = 0; lane < np; lane++) {
            const uint8_t *seen = j->visible + (size_t)((p0 + lane) / group) * total;
            for (int slot = 0; slot <= lastmax; slot++)
                if (!seen[slot]) S[(size_t)slot * VL + lane] = -INFINITY;
        }
    if (j->visible) {
        topv = neg;
        for (int slot = 0; slot <= lastmax; slot++) {
            vf v = *(const vf *)(S + (size_t)slot * VL);
            topv = vmax(v, topv);
        }
    }
    memcpy(top, &topv, sizeof top);
    for (int lane = 0; lane < VL; lane++) sum[lane] = 0.0f;
    for (int slot = from; slot <= lastmax; slot++) {
        float *row = S + (size_t)(slot - from) * VL;
#pragma omp simd
        for (int lane = 0; lane < VL; lane++) {
            row[lane] = vexp(row[lane] - top[lane]); /* a slot a lane does not see: exp(-inf) = 0 */
            sum[lane] += row[lane];
        }
    }
    for (int e0 = 0; e0 < hd; e0 += 8) { /* the values, eight dimensions at a time */
        int ec = hd - e0 < 8 ? hd - e0 : 8;
        vf acc[8] = {0};
        for (int slot = from; slot <= lastmax; slot++) {
            vf pr = *(const vf *)(S + (size_t)(slot - from) * VL);
            const float *v = vals + (size_t)slot * hd + e0;
            if (ec == 8)
                for (int c = 0; c < 8; c++) acc[c] += v[c] * pr;
            else
                for (int c = 0; c < ec; c++) acc[c] += v[c] * pr;
        }
        for (int c = 0; c < ec; c++) {
            float out[VL];
            memcpy(out, &acc[c], sizeof out);
            for (int lane = 0; lane < np; lane++) {
                int p = p0 + lane, i = p / group, head = g * group + p % group;
                j->attn[(size_t)i * m->nh * hd + (size_t)head * hd + e0 + c] = out[lane] / sum[lane];
            }
        }
    }
}

/* Every (row, query head)'s attention over the slots it sees, softmax(q k / sqrt(hd)) v, in blocks of VL pairs that
 * share a key/value head, the blocks split among the threads. */
static void attend(struct stack_job *j, const float *kv, int tid, int nt) {
    const sv_dims *m = j->m;
    int per = j->nblocks, lo, hi;
    share(tid, nt, m->nkv * per, &lo, &hi);
    for (int t = lo; t < hi; t++) {
        int g = t / per, b = t % per;
        attend_block(j, kv, g, j->block_p0[b], j->block_np[b], j->scores[tid]);
    }
}

/* The attention's blocks: runs of up to VL consecutive (row, query head) pairs, never two sequences in one block
 * (rows of sv_layers_rows with other first slots), so a block reads its own sequence's slots only; their count. */
static int plan_blocks(const struct stack_job *j, int group, int *p0, int *np) {
    int count = 0;
    for (int i = 0, end; i < j->n; i = end) {
        for (end = i + 1; end < j->n && j->first && j->first[end] == j->first[i]; end++) {}
        if (!j->first) end = j->n;
        for (int p = i * group; p < end * group; p += VL, count++) {
            p0[count] = p;
            np[count] = end * group - p < VL ? end * group - p : VL;
        }
    }
    return count;
}

/* Where each key/value head's (query head, row) pairs fit one block (n group <= VL: a verify pass, a draft's step),
 * the thread that attends a group also ropes its queries and writes its keys and values: no barrier between. */
static void prepare_and_attend(struct stack_job *j, const sv_layer *L, float *kv, int tid, int nt) {
    const sv_dims *m = j->m;
    int group = m->nh / m->nkv, lo, hi;
    share(tid, nt, m->nkv, &lo, &hi);
    for (int g = lo; g < hi; g++) {
        for (int i = 0; i < j->n; i++) {
            for (int q = 0; q < group; q++) prepare_head(j, L, kv, i, g * group + q);
            prepare_head(j, L, kv, i, m->nh + g);
        }
        attend_block(j, kv, g, 0, j->n * group, j->scores[tid]);
    }
}

static void stack_job(void *ctx, int tid, int nt) {
    struct stack_job *j = ctx;
    const sv_dims *m = j->m;
    int n = j->n, d = m->d, I = m->inter, width = (m->nh + 2 * m->nkv) * m->hd, lo, hi;
    float *h = j->h[tid];
    for (int l = 0; l < j->nlayers; l++) {
        const sv_layer *L = j->layers[l];
        for (int i = 0; i < n; i++) rms_norm(j->x + (size_t)i * d, L->ln1, d, m->eps, h + (size_t)i * d);
        share(tid, nt, (width + PW - 1) / PW, &lo, &hi);
        panels(h, n, d, L->qkv, width, L->qkv_b, NULL, j->qkv, lo, hi);
        barrier(nt);
        if (n * (m->nh / m->nkv) <= VL && !j->first) {
            prepare_and_attend(j, L, j->kv[l], tid, nt);
        } else {
            prepare_heads(j, L, j->kv[l], tid, nt);
            barrier(nt);
            attend(j, j->kv[l], tid, nt);
        }
        barrier(nt);
        share(tid, nt, (d + PW - 1) / PW, &lo, &hi);
        panels(j->attn, n, m->nh * m->hd, L->o, d, L->o_b, j->x, j->x, lo, hi);
        barrier(nt);
        for (int i = 0; i < n; i++) rms_norm(j->x + (size_t)i * d, L->ln2, d, m->eps, h + (size_t)i * d);
        share(tid, nt, (I + PW - 1) / PW, &lo, &hi); /* gate and up panel by panel: SiLU(gate) * up in place */
        panels(h, n, d, L->gate, I, L->gate_b, NULL, j->act, lo, hi);
        panels(h, n, d, L->up, I, L->up_b, NULL, j->act + (size_t)n * I, lo, hi);
        for (int i = 0; i < n; i++) {
            float *g = j->act + (size_t)i * I, *u = j->act + (size_t)(n + i) * I;
            int c1 = hi * PW < I ? hi * PW : I;
#pragma omp simd
            for (int c = lo * PW; c < c1; c++) g[c] = g[c] / (1.0f + vexp(-g[c])) * u[c];
        }
        barrier(nt);
        share(tid, nt, (d + PW - 1) / PW, &lo, &hi);
        panels(j->act, n, I, L->down, d, L->down_b, j->x, j->x, lo, hi);
        barrier(nt);
    }
    const sv_head *H = j->head;
    if (H) { /* the final norm (each thread its own copy of the rows), then the head's panels shared */
        if (tid == 0) j->head_t0 = now(); /* every thread is past the last layer's barrier */
        for (int i = 0; i < n; i++) rms_norm(j->x + (size_t)i * d, H->norm, d, m->eps, h + (size_t)i * d);
        if (tid == 0) memcpy(H->h, h, sizeof(float) * (size_t)n * d);
        share(tid, nt, (H->vocab + PW - 1) / PW, &lo, &hi);
        panels(h + (size_t)H->first * d, n - H->first, d, H->w, H->vocab, H->b, NULL, H->logits, lo, hi);
    }
}

static int run_stack(struct stack_job *j, int span, int nt);

/* Rows x (n, d) at cache slots start..start+n-1 through the layers, each writing its keys and values there, then
 * (head not NULL) the final norm and the LM head. Returns 0, -1 where scratch memory could not be had, or -2 where
 * the arguments cannot be right (the Python side checks each first; this is the last line before a stray write). */
int sv_layers(const sv_dims *m, const sv_layer *const *layers, float *const *kv, int nlayers, float *x, int n,
              int start, int cap, const float *cos, const float *sin, const int64_t *positions,
              const uint8_t *visible, const sv_head *head, int nt) {
    if (n < 1 || start < 0 || (long)start + n > cap || m->hd < 1 || m->hd > MAX_HD || m->rot % 2 || m->rot > m->hd ||
        m->nkv < 1 || m->nh % m->nkv || (head && (head->first < 0 || head->first >= n)))
        return -2;
    if (positions)
        for (int i = 0; i < n; i++)
            if (positions[i] < 0 || positions[i] >= cap) return -2;
    struct stack_job j = {m, head, layers, kv, nlayers, n, start, cap, x, cos, sin, positions, visible};
    return run_stack(&j, start + n, nt);
}

/* The longest run of slots a row of several sequences sees (first[i]..slots[i]), or -1 where a row's slot is outside
 * [0, cap), its first slot past it, or a sequence's rows (consecutive, one first) do not ascend. */
static int rows_span(int n, const int64_t *slots, const int64_t *first, int cap) {
    int span = 1;
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= cap || first[i] < 0 || first[i] > slots[i] ||
            (i && first[i] == first[i - 1] && slots[i] <= slots[i - 1]))
            return -1;
        span = slots[i] - first[i] + 1 > span ? (int)(slots[i] - first[i] + 1) : span;
    }
    return span;
}

/* Rows of several sequences through the layers in one call: row i writes its keys and values at slot slots[i] and
 * attends to slots first[i]..slots[i] (its sequence's own, causally), at its position positions[i]; a sequence's rows
 * are consecutive, with their slots in order. Then (head not NULL) the final norm and the LM head. Returns as
 * sv_layers. */
int sv_layers_rows(const sv_dims *m, const sv_layer *const *layers, float *const *kv, int nlayers, float *x, int n,
                   const int64_t *slots, const int64_t *first, int cap, const float *cos, const float *sin,
                   const int64_t *positions, const sv_head *head, int nt) {
    if (n < 1 || !slots || !first || !positions || m->hd < 1 || m->hd > MAX_HD || m->rot % 2 || m->rot > m->hd ||
        m->nkv < 1 || m->nh % m->nkv || (head && (head->first < 0 || head->first >= n)))
        return -2;
    int span = rows_span(n, slots, first, cap);
    for (int i = 0; i < n && span > 0; i++)
        if (positions[i] < 0 || positions[i] >= cap) return -2;
    if (span < 1) return -2;
    struct stack_job j = {m, head, layers, kv, nlayers, n, 0, cap, x, cos, sin, positions, NULL, slots, first};
    return run_stack(&j, span, nt);
}

/* A pass's scratch floats and the attention's blocks for `pairs` (row, query head) pairs: 0, or -1 (nothing held)
 * where the memory could not be had. */
static int scratch(size_t floats, int pairs, float **buf, int **blocks) {
    *buf = malloc(sizeof(float) * floats);
    *blocks = malloc(sizeof(int) * 2 * ((size_t)pairs + 1));
    if (*buf && *blocks) return 0;
    free(*buf);
    free(*blocks);
    return -1;
}

/* A pass's scratch (scores for ``span`` slots a thread) and its blocks, then the pass on nt threads. */
static int run_stack(struct stack_job *j, int span, int nt) {
    const sv_dims *m = j->m;
    int n = j->n, width = (m->nh + 2 * m->nkv) * m->hd, group = m->nh / m->nkv;
    size_t floats = (size_t)n * width + (size_t)n * m->nh * m->hd + 2 * (size_t)n * m->inter;
    size_t per_thread = (size_t)n * m->d + (size_t)span * VL;
    if (nt < 1) nt = 1;
    if (nt > MAXT) nt = MAXT;
    float *buf;
    int *blocks;
    if (scratch(floats + nt * per_thread, n * group, &buf, &blocks)) return -1;
    j->qkv = buf;
    j->attn = j->qkv + (size_t)n * width;
    j->act = j->attn + (size_t)n * m->nh * m->hd;
    for (int t = 0; t < nt; t++) {
        j->h[t] = buf + floats + t * per_thread;
        j->scores[t] = j->h[t] + (size_t)n * m->d;
    }
    j->block_p0 = blocks;
    j->block_np = blocks + (size_t)n * group + 1;
    j->nblocks = plan_blocks(j, group, j->block_p0, j->block_np);
    run(stack_job, j, nt);
    if (j->head) ((sv_head *)j->head)->seconds = now() - j->head_t0; /* the threads have joined: the head is done */
    free(buf);
    free(blocks);
    return 0;
}

/* -- weights kept quantized as a GGUF stores them: llama.cpp's block layouts (ggml-common.h), read in place ---------
 * A matrix is N rows of K weights, each row a run of blocks along K. A matmul streams the quantized bytes once: each
 * chunk of up to 256 weights of a row is expanded into floats in L1 (dequantize_row_* of ggml-quants.c, the same
 * arithmetic) and dotted with every row of x (float32), so the weights used are exactly the file's and only the
 * order of additions differs from x @ dequantize(W).T. */
enum { SV_F32 = 0, SV_F16 = 1, SV_Q4_0 = 2, SV_Q5_0 = 6, SV_Q8_0 = 8, SV_Q4_K = 12, SV_Q6_K = 14 }; /* GGML ids */
/* specviz's own: Q5_0, Q8_0, Q4_K and Q6_K regrouped by 16 rows (sv_repack_*_r16), read by the 8-bit path alone */
enum { SV_Q5_0_R16 = 1006, SV_Q8_0_R16 = 1008, SV_Q4_K_R16 = 1012, SV_Q6_K_R16 = 1014 };
#define QCHUNK 256

/* (elements, bytes) of one block of a type; 0 elements for a type not read here */
void sv_quant_block(int type, int *elements, int *bytes) {
    int e = 0, b = 0;
    switch (type) {
    case SV_F32: e = 1, b = 4; break;
    case SV_F16: e = 1, b = 2; break;
    case SV_Q4_0: e = 32, b = 18; break;
    case SV_Q5_0: e = 32, b = 22; break;
    case SV_Q8_0: e = 32, b = 34; break;
    case SV_Q4_K: e = 256, b = 144; break;
    case SV_Q6_K: e = 256, b = 210; break;
    }
    *elements = e, *bytes = b;
}

/* Q8_0 rows (rows, K / 32 blocks of 34 bytes) into SV_Q8_0_R16's layout, 576 bytes per group of 16 rows and block:
 * the 16 scales (f16), the 16 sums of the block's weights (int16), then 8 runs of 4 columns x 16 rows. 0, or -2 where
 * rows is not whole groups of 16 or K not whole chunks of 64. */
int sv_repack_q8_0_r16(const uint8_t *src, int rows, int K, uint8_t *dst) {
    if (!src || !dst || rows < 16 || rows % 16 || K < 64 || K % 64) return -2;
    int nb = K / 32;
    for (int g = 0; g < rows / 16; g++)
        for (int b = 0; b < nb; b++) {
            uint8_t *out = dst + ((size_t)g * nb + b) * 576;
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = src + ((size_t)(16 * g + r) * nb + b) * 34;
                int16_t sum = 0;
                for (int i = 0; i < 32; i++) sum += (int8_t)blk[2 + i];
                memcpy(out + 2 * r, blk, 2);
                memcpy(out + 32 + 2 * r, &sum, 2);
                for (int i = 0; i < 8; i++) memcpy(out + 64 + 64 * i + 4 * r, blk + 2 + 4 * i, 4);
            }
        }
    return 0;
}

/* Q5_0 rows (rows, K / 32 blocks of 22 bytes: d, 32 high bits, 16 bytes of nibbles) into SV_Q5_0_R16's layout, 352
 * bytes per group of 16 rows and block: the 16 scales (f16); for each run i of 4 columns (i < 8) a 64-bit mask whose bit
 * 4r + c is the high bit of column 4i + c of row r; then 4 loads of 64 bytes, byte 4r + c of load i being byte 4i + c
 * of row r's nibbles (its low nibble column 4i + c, its high nibble column 16 + 4i + c: runs i and i + 4). 0, or -2
 * where rows is not whole groups of 16 or K not whole chunks of 64. */
int sv_repack_q5_0_r16(const uint8_t *src, int rows, int K, uint8_t *dst) {
    if (!src || !dst || rows < 16 || rows % 16 || K < 64 || K % 64) return -2;
    int nb = K / 32;
    for (int g = 0; g < rows / 16; g++)
        for (int b = 0; b < nb; b++) {
            uint8_t *out = dst + ((size_t)g * nb + b) * 352;
            uint64_t masks[8] = {0};
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = src + ((size_t)(16 * g + r) * nb + b) * 22;
                uint32_t qh;
                memcpy(&qh, blk + 2, 4);
                memcpy(out + 2 * r, blk, 2);
                for (int i = 0; i < 8; i++) masks[i] |= (uint64_t)((qh >> (4 * i)) & 0xF) << (4 * r);
                for (int i = 0; i < 4; i++) memcpy(out + 96 + 64 * i + 4 * r, blk + 6 + 4 * i, 4);
            }
            memcpy(out + 32, masks, sizeof masks);
        }
    return 0;
}

static inline float half(const uint8_t *p) { /* IEEE binary16 (little-endian) -> float */
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 31, man = h & 0x3ff, bits;
    if (exp == 31) bits = sign | 0x7f800000 | man << 13;
    else if (exp) bits = sign | (exp + 112) << 23 | man << 13;
    else if (!man) bits = sign;
    else { /* subnormal: normalise */
        exp = 113;
        while (!(man & 0x400)) man <<= 1, exp--;
        bits = sign | exp << 23 | (man & 0x3ff) << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void deq_q8_0(const uint8_t *b, float *y) { /* d (f16), 32 int8 */
    float d = half(b);
    const int8_t *q = (const int8_t *)(b + 2);
#pragma omp simd
    for (int l = 0; l < 32; l++) y[l] = q[l] * d;
}

static void deq_q4_0(const uint8_t *b, float *y) { /* d (f16), 16 bytes of nibbles: low ones first */
    float d = half(b);
    const uint8_t *qs = b + 2;
#pragma omp simd
    for (int j = 0; j < 16; j++) y[j] = ((qs[j] & 0x0F) - 8) * d, y[j + 16] = ((qs[j] >> 4) - 8) * d;
}

static void deq_q5_0(const uint8_t *b, float *y) { /* d (f16), 32 high bits, 16 bytes of low nibbles */
    float d = half(b);
    uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
    const uint8_t *qs = b + 6;
#pragma omp simd
    for (int j = 0; j < 16; j++) {
        int x0 = ((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16, x1 = ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
        y[j] = x0 * d, y[j + 16] = x1 * d;
    }
}

static inline void scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) *d = q[j] & 63, *m = q[j + 4] & 63;
    else *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
}

/* Q4_K rows (rows, K / 256 super-blocks of 144 bytes) into SV_Q4_K_R16's layout, 2,368 bytes per group of 16 rows
 * and super-block: the 16 d then the 16 dmin (f16), the 16 rows' 6-bit scales of each of the 8 sub-blocks (a byte
 * each) then their mins, then for each pair of sub-blocks 8 runs of 64 bytes, run i holding byte 4i..4i+3 of the
 * pair's 32 bytes of nibbles for each of the 16 rows (low nibbles: the pair's first sub-block, high: its second).
 * 0, or -2 where rows is not whole groups of 16 or K not whole super-blocks. */
int sv_repack_q4_k_r16(const uint8_t *src, int rows, int K, uint8_t *dst) {
    if (!src || !dst || rows < 16 || rows % 16 || K < 256 || K % 256) return -2;
    int ns = K / 256;
    for (int g = 0; g < rows / 16; g++)
        for (int sb = 0; sb < ns; sb++) {
            uint8_t *out = dst + ((size_t)g * ns + sb) * 2368;
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = src + ((size_t)(16 * g + r) * ns + sb) * 144;
                memcpy(out + 2 * r, blk, 2), memcpy(out + 32 + 2 * r, blk + 2, 2);
                for (int sub = 0; sub < 8; sub++) {
                    int sc, m;
                    scale_min_k4(sub, blk + 4, &sc, &m);
                    out[64 + 16 * sub + r] = (uint8_t)sc, out[192 + 16 * sub + r] = (uint8_t)m;
                }
                for (int pair = 0; pair < 4; pair++)
                    for (int i = 0; i < 8; i++) memcpy(out + 320 + 512 * pair + 64 * i + 4 * r, blk + 16 + 32 * pair + 4 * i, 4);
            }
        }
    return 0;
}

/* A Q6_K super-block's 256 weights as the integers q - 32 (-32..31), column by column; weight c is d sc[c / 16] q[c] */
static void q6_k_values(const uint8_t *b, int8_t *q) { /* 128 low nibbles, 64 bytes of high bit pairs, scales, d */
    const uint8_t *ql = b, *qh = b + 128;
    for (int n = 0; n < 256; n += 128, q += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
            q[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
}

/* Q6_K rows (rows, K / 256 super-blocks of 210 bytes) into SV_Q6_K_R16's layout, 4,896 bytes per group of 16 rows
 * and super-block: the 16 d (f16), then per block of 32 columns (608 bytes) the 16 rows' int8 scales of its first
 * 16 columns, those of its last 16, the 16 rows' sums of the weights of each half (int16, first halves then second),
 * then 8 runs of 64 bytes, run i holding columns 4i..4i+3 of each of the 16 rows as int8 (q - 32: the 6-bit values
 * widened to bytes, so no unpacking is left to the kernel). 0, or -2 where rows is not whole groups of 16 or K not
 * whole super-blocks. */
#define R16Q6_SUPER 4896
#define R16Q6_BLOCK 608
int sv_repack_q6_k_r16(const uint8_t *src, int rows, int K, uint8_t *dst) {
    if (!src || !dst || rows < 16 || rows % 16 || K < 256 || K % 256) return -2;
    int ns = K / 256;
    for (int g = 0; g < rows / 16; g++)
        for (int sb = 0; sb < ns; sb++) {
            uint8_t *out = dst + ((size_t)g * ns + sb) * R16Q6_SUPER;
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = src + ((size_t)(16 * g + r) * ns + sb) * 210;
                const int8_t *sc = (const int8_t *)(blk + 192);
                int8_t q[256];
                q6_k_values(blk, q);
                memcpy(out + 2 * r, blk + 208, 2);
                for (int b = 0; b < 8; b++) {
                    uint8_t *ob = out + 32 + (size_t)b * R16Q6_BLOCK;
                    for (int h = 0; h < 2; h++) {
                        int16_t sum = 0;
                        for (int i = 0; i < 16; i++) sum += q[32 * b + 16 * h + i];
                        ob[16 * h + r] = (uint8_t)sc[2 * b + h];
                        memcpy(ob + 32 + 32 * h + 2 * r, &sum, 2);
                    }
                    for (int i = 0; i < 8; i++) memcpy(ob + 96 + 64 * i + 4 * r, q + 32 * b + 4 * i, 4);
                }
            }
        }
    return 0;
}

static void deq_q4_k(const uint8_t *b, float *y) { /* d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 nibbles */
    float d = half(b), dmin = half(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
        int sc, m;
        scale_min_k4(is, scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
#pragma omp simd
        for (int l = 0; l < 32; l++) y[j + l] = d1 * (q[l] & 0xF) - m1, y[j + 32 + l] = d2 * (q[l] >> 4) - m2;
    }
}

static void deq_q6_k(const uint8_t *b, float *y) { /* 128 low nibbles, 64 bytes of high bit pairs, 16 int8 scales, d */
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = half(b + 208);
    int8_t q[256];
    q6_k_values(b, q);
    for (int c = 0; c < 256; c++) y[c] = d * sc[c / 16] * q[c];
}

/* weights [k0, k0 + len) of a row (len <= QCHUNK, k0 and len whole blocks) as floats */
static void dequantize(int type, const uint8_t *row, int k0, int len, float *y) {
    int e, bytes;
    sv_quant_block(type, &e, &bytes);
    const uint8_t *b = row + (size_t)(k0 / e) * bytes;
    switch (type) {
    case SV_F32: memcpy(y, b, sizeof(float) * len); break;
    case SV_F16: for (int i = 0; i < len; i++) y[i] = half(b + 2 * i); break;
    case SV_Q8_0: for (int i = 0; i < len; i += 32, b += 34) deq_q8_0(b, y + i); break;
    case SV_Q4_0: for (int i = 0; i < len; i += 32, b += 18) deq_q4_0(b, y + i); break;
    case SV_Q5_0: for (int i = 0; i < len; i += 32, b += 22) deq_q5_0(b, y + i); break;
    case SV_Q4_K: deq_q4_k(b, y); break;
    case SV_Q6_K: deq_q6_k(b, y); break;
    }
}

typedef struct {
    const uint8_t *data; /* rows of blocks, as the GGUF stores them */
    int type, rows;      /* GGML type id, rows (output features) */
} sv_qmat;

size_t sv_sizeof_qmat(void) { return sizeof(sv_qmat); }

struct qlinear_job { const float *x, *b, *res; const sv_qmat *parts; float *y; int M, K, nparts, N; };

/* y[r, n] for rows r0..r0+R-1 (R <= MR, a constant where inlined) and output columns [lo, hi) of one part starting
 * at column c0 of y: each chunk of a weight row expanded once into w, then dotted with the R rows of x */
static inline __attribute__((always_inline)) void qrows_r(const int R, const struct qlinear_job *j, const sv_qmat *p,
                                                          int c0, int lo, int hi, int r0) {
    int K = j->K, e, bytes;
    sv_quant_block(p->type, &e, &bytes);
    size_t row_bytes = (size_t)(K / e) * bytes;
    const float *x = j->x + (size_t)r0 * K;
    float w[QCHUNK] __attribute__((aligned(64)));
    for (int n = lo; n < hi; n++) {
        const uint8_t *row = p->data + (size_t)n * row_bytes;
        vf acc[MR][2];
        float tail[MR];
        for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = (vf){0}, tail[r] = 0.0f;
        for (int k0 = 0; k0 < K; k0 += QCHUNK) {
            int len = K - k0 < QCHUNK ? K - k0 : QCHUNK; /* whole blocks: K is a multiple of the block */
            dequantize(p->type, row, k0, len, w);
            int k = 0;
            for (; k + PW <= len; k += PW) {
                vf w0 = *(const vf *)(w + k), w1 = *(const vf *)(w + k + VL);
                for (int r = 0; r < R; r++) {
                    const float *xr = x + (size_t)r * K + k0 + k;
                    acc[r][0] += w0 * *(const vf *)xr;
                    acc[r][1] += w1 * *(const vf *)(xr + VL);
                }
            }
            for (; k < len; k++) /* a tail shorter than a panel (F32/F16 rows of odd length) */
                for (int r = 0; r < R; r++) tail[r] += w[k] * x[(size_t)r * K + k0 + k];
        }
        for (int r = 0; r < R; r++) {
            vf s = acc[r][0] + acc[r][1];
            float v = tail[r];
            for (int l = 0; l < VL; l++) v += s[l];
            size_t at = (size_t)(r0 + r) * j->N + c0 + n;
            if (j->b) v += j->b[c0 + n];
            if (j->res) v += j->res[at];
            j->y[at] = v;
        }
    }
}

static void qrows(const struct qlinear_job *j, const sv_qmat *p, int c0, int lo, int hi, int r0, int R) {
    switch (R) {
    case 1: qrows_r(1, j, p, c0, lo, hi, r0); break;
    case 2: qrows_r(2, j, p, c0, lo, hi, r0); break;
    case 3: qrows_r(3, j, p, c0, lo, hi, r0); break;
    case 4: qrows_r(4, j, p, c0, lo, hi, r0); break;
    case 5: qrows_r(5, j, p, c0, lo, hi, r0); break;
    case 6: qrows_r(6, j, p, c0, lo, hi, r0); break;
    case 7: qrows_r(7, j, p, c0, lo, hi, r0); break;
    default: qrows_r(8, j, p, c0, lo, hi, r0); break;
    }
}

static void qlinear_job(void *ctx, int tid, int nt) {
    const struct qlinear_job *j = ctx;
    int lo, hi;
    share(tid, nt, j->N, &lo, &hi); /* output columns, across the parts laid side by side */
    for (int pi = 0, c0 = 0; pi < j->nparts; c0 += j->parts[pi].rows, pi++) {
        int a = lo > c0 ? lo - c0 : 0, z = hi - c0 < j->parts[pi].rows ? hi - c0 : j->parts[pi].rows;
        for (int r0 = 0; a < z && r0 < j->M; r0 += MR)
            qrows(j, &j->parts[pi], c0, a, z, r0, j->M - r0 < MR ? j->M - r0 : MR);
    }
}

/* y (M, N) = res + x (M, K) @ [parts side by side].T + b: each part a quantized matrix of rows x K (N the sum of its
 * rows); b and res may be NULL. Returns 0, or -2 where a part's type is not read here or K is not whole blocks. */
int sv_qlinear(const float *x, int M, int K, const sv_qmat *parts, int nparts, const float *b, const float *res,
               float *y, int nt) {
    int N = 0, e, bytes;
    if (M < 1 || K < 1 || nparts < 1) return -2;
    for (int i = 0; i < nparts; i++) {
        sv_quant_block(parts[i].type, &e, &bytes);
        if (!e || K % e || (e > 1 && QCHUNK % e) || parts[i].rows < 1 || !parts[i].data) return -2;
        N += parts[i].rows;
    }
    struct qlinear_job j = {x, b, res, parts, y, M, K, nparts, N};
    run(qlinear_job, &j, nt < 1 ? 1 : nt > MAXT ? MAXT : nt);
    return 0;
}

/* out (n, K) = rows ids (n,) of a quantized matrix of `rows` rows x K (an embedding lookup); -2 for a bad argument */
/* whether sv_qrows reads rows of this type K wide */
static int qrows_fit(int type, int K) {
    int e, bytes;
    sv_quant_block(type, &e, &bytes);
    return e && !(K % e) && (e == 1 || !(QCHUNK % e));
}

int sv_qrows(const uint8_t *data, int type, int rows, int K, const int64_t *ids, int n, float *out) {
    int e, bytes;
    sv_quant_block(type, &e, &bytes);
    if (!qrows_fit(type, K)) return -2;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= rows) return -2;
    size_t row_bytes = (size_t)(K / e) * bytes;
    for (int i = 0; i < n; i++)
        for (int k0 = 0; k0 < K; k0 += QCHUNK)
            dequantize(type, data + (size_t)ids[i] * row_bytes, k0, K - k0 < QCHUNK ? K - k0 : QCHUNK,
                       out + (size_t)i * K + k0);
    return 0;
}

/* -- the same matmuls on 8-bit activations, as llama.cpp computes them: each row of x rounded to int8 per block of
 * 32 with its own scale (quantize_row_q8_0's rule), each chunk of 64 weights unpacked once to int8 in registers with
 * its per-lane scales, and dotted with up to MR rows by AVX-512 VNNI (u8 x s8 -> int32, exact), then scaled in float.
 * Where the CPU lacks VNNI, sv_qlinear8_available() is 0 and the float path above is the one used. A row's result
 * does not depend on the other rows of the call (the same additions in the same order), so a verify pass of k + 1
 * rows gives each row what a one-row pass gives it. */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__F16C__)
#include <immintrin.h>
#define QX 1
#else
#define QX 0
#endif

int sv_qlinear8_available(void) { return QX; }

/* How far ahead the 8-bit kernels ask for the weights they will read (prefetch_ahead), in bytes, 0 for not at all:
 * set to measure settings side by side; returns the setting it replaced. */
static size_t pf_ahead = 12288;
/* And how far ahead they ask for them into L2 alone (_MM_HINT_T1), 0 for not at all, at most 4 MiB: a request to L2
 * holds none of L1's few fill buffers, so more of the stream is in flight while the extra rows of a verify pass
 * compute. Gemma-3 270M on 2 threads, a Xeon (2026-12-06, scripts/measure/gemma_prefetch.py --prefetch-l2 0 49152):
 * a pass of 1, 3 and 6 rows 8.04, 9.12 and 10.91 ms against 8.13, 10.05 and 11.80 without; its head 5.77 ms for 6
 * rows against 6.56. Returns the setting it replaced. */
static size_t pf_l2 = 49152;
int sv_set_prefetch_l2(int bytes) {
    int before = (int)pf_l2;
    pf_l2 = bytes > 0 && bytes <= (1 << 22) ? (size_t)bytes : 0;
    return before;
}
int sv_set_prefetch(int bytes) {
    int before = (int)pf_ahead;
    pf_ahead = bytes > 0 && bytes <= (1 << 20) ? (size_t)bytes : 0;
    return before;
}

#if QX
/* The rows of quantized parts side by side that the 8-bit kernels read (each of a type unpack() reads, with rows
 * and data, K whole chunks of 64 and whole blocks), or 0 where any is not. */
/* a type of stack.c's own layouts regrouped by 16 rows; those of K-quants take whole super-blocks of 256 columns */
static inline int regrouped_type(int t) {
    return t == SV_Q8_0_R16 || t == SV_Q5_0_R16 || t == SV_Q4_K_R16 || t == SV_Q6_K_R16;
}

static int int8_rows(const sv_qmat *parts, int nparts, int K) {
    int total = 0, e, bytes;
    if (!parts || nparts < 1 || K < 64 || K % 64) return 0;
    for (int i = 0; i < nparts; i++) {
        int t = parts[i].type;
        sv_quant_block(t, &e, &bytes);
        if (regrouped_type(t) ? parts[i].rows % 16 != 0 || ((t == SV_Q4_K_R16 || t == SV_Q6_K_R16) && K % 256)
            : (t != SV_Q4_0 && t != SV_Q5_0 && t != SV_Q8_0 && t != SV_Q4_K && t != SV_Q6_K) || K % e)
            return 0;
        if (parts[i].rows < 1 || !parts[i].data) return 0;
        total += parts[i].rows;
    }
    return total;
}

/* x rounded: u = q + 128 (K bytes a row); per row and chunk of 64 columns, 16 lanes (a lane is 4 columns) of the
 * block's scale d and of d times the lane's sum of q (for the K-quants' mins) */
#define MR8 16 /* rows that share each unpacked chunk: 16 accumulators of the 32 registers */
struct q8_job { const uint8_t *u; const float *d, *s, *b, *res; const sv_qmat *parts; float *y; int M, K, nparts, N; };

/* Per row and block of 32: amax, d = amax / 127, q = roundf(x / d) (half away from zero) clamped to +-127, stored
 * as u = q + 128; per lane of 4 columns d and d times the lane's sum of q. In AVX-512 (no call into libm): v - trunc(v)
 * is exact for every float, and a NaN is passed over by the max as fmaxf passes it over. */
static void quantize_rows(const float *x, int ldx, int M, int K, uint8_t *u, float *d, float *s) {
    int C = K / 64;
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
    const __m512i lim = _mm512_set1_epi32(127), off = _mm512_set1_epi32(128);
    for (int r = 0; r < M; r++)
        for (int blk = 0; blk < K / 32; blk++) {
            const float *xb = x + (size_t)r * ldx + blk * 32;
            __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
            __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, b), _mm512_andnot_ps(sign, a)); /* NaN: the other */
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(m, _mm512_setzero_ps()));
            float dd = amax / 127.0f, id = dd > 0.0f ? 1.0f / dd : 0.0f;
            float *dl = d + ((size_t)r * C + blk / 2) * 16 + (blk % 2) * 8, *sl = s + (dl - d);
            _mm256_storeu_ps(dl, _mm256_set1_ps(dd));
            for (int i = 0; i < 2; i++) {
                __m512 v = _mm512_mul_ps(i ? b : a, _mm512_set1_ps(id));
                __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                __mmask16 up = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
                t = _mm512_mask_add_ps(t, up, t, _mm512_or_ps(one, _mm512_and_ps(sign, v)));
                __m512i qi = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvttps_epi32(t), lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
                _mm_storeu_si128((void *)(u + (size_t)r * K + blk * 32 + 16 * i), _mm512_cvtepi32_epi8(_mm512_add_epi32(qi, off)));
                /* each 128-bit lane holds one lane's 4 q: their sum, in float (exact: |sum| <= 508), times d */
                __m512 f = _mm512_cvtepi32_ps(qi);
                f = _mm512_add_ps(f, _mm512_permute_ps(f, _MM_SHUFFLE(2, 3, 0, 1)));
                f = _mm512_add_ps(f, _mm512_permute_ps(f, _MM_SHUFFLE(1, 0, 3, 2)));
                __m512 sums = _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), f);
                _mm_storeu_ps(sl + 4 * i, _mm_mul_ps(_mm512_castps512_ps128(sums), _mm_set1_ps(dd)));
            }
        }
}

static inline float f16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }

/* chunk c (64 weights) of a row as int8 values w with per-lane scale sc and offset off: weight = sc * w - off */
static inline __attribute__((always_inline)) int unpack(const int type, const uint8_t *row, int c, __m512i *w,
                                                        __m512 *sc, __m512 *off) {
    const __m512i nib = _mm512_set1_epi8(0x0F);
    if (type == SV_Q8_0) { /* two blocks: d (f16), 32 int8 */
        const uint8_t *b = row + (size_t)2 * c * 34;
        *w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const void *)(b + 2))),
                                _mm256_loadu_si256((const void *)(b + 36)), 1);
        *sc = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16(b)), _mm512_set1_ps(f16(b + 34)));
        return 0;
    }
    if (type == SV_Q4_0) { /* two blocks: d (f16), 16 bytes of nibbles (low ones first); weight d (q - 8) */
        const uint8_t *b = row + (size_t)2 * c * 18;
        __m256i half[2];
        for (int i = 0; i < 2; i++) {
            __m128i qs = _mm_loadu_si128((const void *)(b + 18 * i + 2)), m = _mm_set1_epi8(0x0F);
            __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m)),
                                                _mm_and_si128(_mm_srli_epi16(qs, 4), m), 1);
            half[i] = _mm256_sub_epi8(v, _mm256_set1_epi8(8));
        }
        *w = _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
        *sc = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16(b)), _mm512_set1_ps(f16(b + 18)));
        return 0;
    }
    if (type == SV_Q5_0) { /* two blocks: d (f16), 32 high bits, 16 bytes of low nibbles; weight d (q - 16) */
        const uint8_t *b = row + (size_t)2 * c * 22;
        __m256i half[2];
        for (int i = 0; i < 2; i++, b += 22) {
            uint32_t qh;
            memcpy(&qh, b + 2, 4);
            __m128i qs = _mm_loadu_si128((const void *)(b + 6)), m = _mm_set1_epi8(0x0F);
            __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m)),
                                                _mm_and_si128(_mm_srli_epi16(qs, 4), m), 1);
            v = _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(0x10)); /* bit 4: nibbles are < 16 */
            half[i] = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
        }
        *w = _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
        b = row + (size_t)2 * c * 22;
        *sc = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16(b)), _mm512_set1_ps(f16(b + 22)));
        return 0;
    }
    if (type == SV_Q4_K) { /* group c % 4 of a super-block: 32 bytes of nibbles, low then high, two sub-blocks */
        const uint8_t *b = row + (size_t)(c / 4) * 144;
        int j = c % 4, s1, m1, s2, m2;
        __m256i q = _mm256_loadu_si256((const void *)(b + 16 + 32 * j)), m = _mm256_set1_epi8(0x0F);
        *w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m)),
                                _mm256_and_si256(_mm256_srli_epi16(q, 4), m), 1);
        scale_min_k4(2 * j, b + 4, &s1, &m1);
        scale_min_k4(2 * j + 1, b + 4, &s2, &m2);
        float d = f16(b), dmin = f16(b + 2);
        *sc = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d * s1), _mm512_set1_ps(d * s2));
        *off = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(dmin * m1), _mm512_set1_ps(dmin * m2));
        return 1;
    }
    /* SV_Q6_K: chunk c % 4 of a super-block: half h of ql/qh/scales, low (sub 0) or high (sub 1) nibbles */
    const uint8_t *b = row + (size_t)(c / 4) * 210;
    int h = (c % 4) / 2, sub = c % 2;
    __m512i ql = _mm512_loadu_si512((const void *)(b + 64 * h));
    __m512i low = sub ? _mm512_and_si512(_mm512_srli_epi16(ql, 4), nib) : _mm512_and_si512(ql, nib);
    __m256i qh = _mm256_loadu_si256((const void *)(b + 128 + 32 * h));
    __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
    __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(sub ? 4 : 0), _mm256_set1_epi16(sub ? 6 : 2), 1);
    __m512i high = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh2, shift), _mm512_set1_epi8(3)), 4);
    *w = _mm512_sub_epi8(_mm512_or_si512(low, high), _mm512_set1_epi8(32));
    int32_t four;
    memcpy(&four, b + 192 + 8 * h + 4 * sub, 4);
    __m512 scales = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_cvtsi32_si128(four)));
    const __m512i lane4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    *sc = _mm512_mul_ps(_mm512_set1_ps(f16(b + 208)), _mm512_permutexvar_ps(lane4, scales));
    return 0;
}

/* The weights a kernel will read some 12 KB on, asked for now (and some 48 KB on into L2: pf_l2). Without it, a pass of several rows cost about the
 * time to stream the weights plus the time to compute on them (likely: the out-of-order window fills with the
 * arithmetic and holds too few loads in flight to keep memory busy). Asked for ahead, the extra rows' arithmetic
 * runs under the stream (Gemma-3 270M on 2 threads, a Xeon, 2026-12-06, scripts/measure/gemma_prefetch.py: its 262,144-row head
 * 8.2 ms for one row and 9.4 for four, against 8.6 and 12.3 without; the whole pass 13.7 and 17.0 against 15.2 and
 * 21.2). */
static inline __attribute__((always_inline)) void prefetch_ahead(const uint8_t *at, size_t bytes) {
    if (pf_ahead)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)at + pf_ahead + o, _MM_HINT_T0);
    if (pf_l2)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)at + pf_l2 + o, _MM_HINT_T1);
}

/* y[r, n] for rows r0..r0+R-1 and output columns [lo, hi) of one part starting at column c0 of y */
static inline __attribute__((always_inline)) void q8rows_r(const int R, const int type, const struct q8_job *j,
                                                           const sv_qmat *p, int c0, int lo, int hi, int r0) {
    int K = j->K, C = K / 64, e, bytes;
    sv_quant_block(type, &e, &bytes);
    size_t row_bytes = (size_t)(K / e) * bytes;
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int n = lo; n < hi; n++) {
        const uint8_t *row = p->data + (size_t)n * row_bytes;
        prefetch_ahead(row, row_bytes);
        __m512 acc[MR8];
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
        for (int c = 0; c < C; c++) {
            __m512i w;
            __m512 sc, off = _mm512_setzero_ps();
            int has_off = unpack(type, row, c, &w, &sc, &off);
            /* u = q + 128, so u . w = q . w + 128 sum(w): start each lane at -128 sum(w) */
            __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, w));
            for (int r = 0; r < R; r++) {
                size_t at = (size_t)(r0 + r) * C + c;
                __m512i dot = _mm512_dpbusd_epi32(start, _mm512_loadu_si512((const void *)(j->u + at * 64)), w);
                __m512 scale = _mm512_mul_ps(sc, _mm512_loadu_ps(j->d + at * 16));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
                if (has_off) acc[r] = _mm512_fnmadd_ps(off, _mm512_loadu_ps(j->s + at * 16), acc[r]);
            }
        }
        for (int r = 0; r < R; r++) {
            float v = _mm512_reduce_add_ps(acc[r]);
            size_t at = (size_t)(r0 + r) * j->N + c0 + n;
            if (j->b) v += j->b[c0 + n];
            if (j->res) v += j->res[at];
            j->y[at] = v;
        }
    }
}

#define Q8_ROWS(T) \
    switch (R) { \
    case 1: q8rows_r(1, T, j, p, c0, lo, hi, r0); break; \
    case 2: q8rows_r(2, T, j, p, c0, lo, hi, r0); break; \
    case 3: q8rows_r(3, T, j, p, c0, lo, hi, r0); break; \
    case 4: q8rows_r(4, T, j, p, c0, lo, hi, r0); break; \
    case 5: q8rows_r(5, T, j, p, c0, lo, hi, r0); break; \
    case 6: q8rows_r(6, T, j, p, c0, lo, hi, r0); break; \
    case 7: q8rows_r(7, T, j, p, c0, lo, hi, r0); break; \
    case 8: q8rows_r(8, T, j, p, c0, lo, hi, r0); break; \
    case 9: q8rows_r(9, T, j, p, c0, lo, hi, r0); break; \
    case 10: q8rows_r(10, T, j, p, c0, lo, hi, r0); break; \
    case 11: q8rows_r(11, T, j, p, c0, lo, hi, r0); break; \
    case 12: q8rows_r(12, T, j, p, c0, lo, hi, r0); break; \
    case 13: q8rows_r(13, T, j, p, c0, lo, hi, r0); break; \
    case 14: q8rows_r(14, T, j, p, c0, lo, hi, r0); break; \
    case 15: q8rows_r(15, T, j, p, c0, lo, hi, r0); break; \
    default: q8rows_r(MR8, T, j, p, c0, lo, hi, r0); break; \
    }

/* Q8_0 repacked by groups of 16 rows (sv_repack_q8_0_r16): per group and block of 32 columns, the 16 rows' scales
 * (f16), their sums of weights (int16), then 8 runs of 64 bytes, run i holding columns 4i..4i+3 of each of the 16
 * rows. One vpdpbusd then takes 4 columns of 16 rows against 4 bytes of x broadcast, so a block's 16 dot products
 * come whole in the lanes, in integers, scaled once: about 12 vector operations per 512 products of a row where the
 * row-major kernel spends 32, in two independent chains. */
typedef int32_t __attribute__((may_alias, aligned(1))) int32_any;
static inline __m512i bcast4(const uint8_t *p) { /* vpbroadcastd from memory: a load, no shuffle */
    return _mm512_set1_epi32(*(const int32_any *)p);
}

/* a row of x's 8 runs of 4 bytes (one block) against a group's 8 runs of weights, in two chains, from start */
static inline __attribute__((always_inline)) __m512i r16_dot(__m512i start, const uint8_t *ux, const __m512i *w) {
    __m512i even = start, odd = _mm512_setzero_si512();
    for (int i = 0; i < 8; i += 2) { /* 4 bytes of x broadcast straight from memory */
        even = _mm512_dpbusd_epi32(even, bcast4(ux + 4 * i), w[i]);
        odd = _mm512_dpbusd_epi32(odd, bcast4(ux + 4 * i + 4), w[i + 1]);
    }
    return _mm512_add_epi32(even, odd);
}

/* a group's 16 outputs of each row of x, bias and residual added */
static inline __attribute__((always_inline)) void r16_store(const int R, const struct q8_job *j, const __m512 *acc,
                                                            int c0, int g, int r0) {
    for (int r = 0; r < R; r++) {
        size_t at = (size_t)(r0 + r) * j->N + c0 + 16 * g;
        __m512 v = acc[r];
        if (j->b) v = _mm512_add_ps(v, _mm512_loadu_ps(j->b + c0 + 16 * g));
        if (j->res) v = _mm512_add_ps(v, _mm512_loadu_ps(j->res + at));
        _mm512_storeu_ps(j->y + at, v);
    }
}

#define R16_BLOCK 576 /* a regrouped Q8_0 block of 16 rows: scales, sums of weights, 8 runs of 64 bytes */
#define R16_Q5 352    /* a regrouped Q5_0 block of 16 rows: scales, high-bit masks, 4 loads of nibbles */
#define MR16 8

/* A regrouped block of 16 rows, Q8_0 or Q5_0: its 8 runs of int8 weights into w, and each lane's start, -128 sum(w)
 * (x is taken as u = q + 128). Q8_0 reads its runs and stored sums; Q5_0 unpacks its 5-bit weights (nibble, plus 16
 * where the high bit is set, minus 16) and sums them. */
static inline __attribute__((always_inline)) __m512i r16_block(const int type, const uint8_t *blk, __m512i *w) {
    const __m512i zero = _mm512_setzero_si512();
    if (type == SV_Q8_0_R16) {
        for (int i = 0; i < 8; i++) w[i] = _mm512_loadu_si512((const void *)(blk + 64 + 64 * i));
        return _mm512_sub_epi32(zero, _mm512_slli_epi32(
            _mm512_cvtepi16_epi32(_mm256_loadu_si256((const void *)(blk + 32))), 7));
    }
    const __m512i nib = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16), c128 = _mm512_set1_epi8((char)0x80);
    uint64_t masks[8];
    memcpy(masks, blk + 32, sizeof masks);
    __m512i ca = zero, cb = zero;
    for (int i = 0; i < 4; i++) {
        __m512i raw = _mm512_loadu_si512((const void *)(blk + 96 + 64 * i));
        w[i] = _mm512_and_si512(raw, nib), w[i + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nib);
    }
    for (int i = 0; i < 8; i++) w[i] = _mm512_sub_epi8(_mm512_mask_add_epi8(w[i], masks[i], w[i], c16), c16);
    for (int i = 0; i < 8; i += 2)
        ca = _mm512_dpbusd_epi32(ca, c128, w[i]), cb = _mm512_dpbusd_epi32(cb, c128, w[i + 1]);
    return _mm512_sub_epi32(zero, _mm512_add_epi32(ca, cb));
}

/* Q8_0 or Q5_0 regrouped by 16 rows (sv_repack_q8_0_r16, sv_repack_q5_0_r16): per block the 16 rows' weights made
 * once for every row of x, the block's 16 dot products whole in the lanes, scaled once. */
static inline __attribute__((always_inline)) void blk32_r(const int R, const int type, const struct q8_job *j,
                                                          const sv_qmat *p, int c0, int g0, int g1, int r0) {
    int K = j->K, nb = K / 32, C = K / 64, bytes = type == SV_Q8_0_R16 ? R16_BLOCK : R16_Q5;
    for (int g = g0; g < g1; g++) {
        const uint8_t *gb = p->data + (size_t)g * nb * bytes;
        __m512 acc[MR16];
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = gb + (size_t)b * bytes;
            prefetch_ahead(blk, bytes);
            __m512 sc = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)blk));
            __m512i w[8], start = r16_block(type, blk, w);
            for (int r = 0; r < R; r++) {
                __m512i dot = r16_dot(start, j->u + (size_t)(r0 + r) * K + 32 * b, w);
                float dx = j->d[((size_t)(r0 + r) * C + b / 2) * 16 + (b % 2) * 8];
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sc, _mm512_set1_ps(dx)), acc[r]);
            }
        }
        r16_store(R, j, acc, c0, g, r0);
    }
}

/* Q4_K regrouped by 16 rows (sv_repack_q4_k_r16): per sub-block of 32 columns the 16 rows' nibbles unpacked once
 * for every row of x, their scales (d sc) and offsets (dmin m) made once per group; a row's dot products come whole
 * in the lanes. weight = d sc q - dmin m, so w . x = d sc dx (u . q - 128 sum q) - dmin m (dx sum qx). */
#define R16K_SUPER 2368

static inline __attribute__((always_inline)) void q4k16_r(const int R, const struct q8_job *j, const sv_qmat *p,
                                                          int c0, int g0, int g1, int r0) {
    int K = j->K, ns = K / 256, nb = K / 32, C = K / 64;
    float dxb[MR16][nb], sxb[MR16][nb];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < nb; b++) {
            const float *at = j->d + ((size_t)(r0 + r) * C + b / 2) * 16 + (b % 2) * 8, *st = j->s + (at - j->d);
            dxb[r][b] = at[0], sxb[r][b] = st[0] + st[1] + st[2] + st[3] + st[4] + st[5] + st[6] + st[7];
        }
    const __m512i nib = _mm512_set1_epi8(0x0F), c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int g = g0; g < g1; g++) {
        __m512 acc[MR16];
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
        for (int sb = 0; sb < ns; sb++) {
            const uint8_t *blk = p->data + ((size_t)g * ns + sb) * R16K_SUPER;
            prefetch_ahead(blk, R16K_SUPER);
            __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)blk));
            __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(blk + 32)));
            for (int pair = 0; pair < 4; pair++) {
                __m512i raw[8];
                for (int i = 0; i < 8; i++) raw[i] = _mm512_loadu_si512((const void *)(blk + 320 + 512 * pair + 64 * i));
                for (int h = 0; h < 2; h++) {
                    int sub = 2 * pair + h, b = 8 * sb + sub;
                    __m512 scv = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                        _mm_loadu_si128((const void *)(blk + 64 + 16 * sub)))));
                    __m512 mnv = _mm512_mul_ps(mv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                        _mm_loadu_si128((const void *)(blk + 192 + 16 * sub)))));
                    __m512i w[8], ca = zero, cb = zero;
                    for (int i = 0; i < 8; i++)
                        w[i] = h ? _mm512_and_si512(_mm512_srli_epi16(raw[i], 4), nib) : _mm512_and_si512(raw[i], nib);
                    for (int i = 0; i < 8; i += 2)
                        ca = _mm512_dpbusd_epi32(ca, c128, w[i]), cb = _mm512_dpbusd_epi32(cb, c128, w[i + 1]);
                    __m512i start = _mm512_sub_epi32(zero, _mm512_add_epi32(ca, cb)); /* -128 sum(q) */
                    for (int r = 0; r < R; r++) {
                        __m512i dot = r16_dot(start, j->u + (size_t)(r0 + r) * K + 32 * b, w);
                        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(scv, _mm512_set1_ps(dxb[r][b])),
                                                 acc[r]);
                        acc[r] = _mm512_fnmadd_ps(mnv, _mm512_set1_ps(sxb[r][b]), acc[r]);
                    }
                }
            }
        }
        r16_store(R, j, acc, c0, g, r0);
    }
}

/* Q6_K regrouped by 16 rows (sv_repack_q6_k_r16): per block of 32 columns the 16 rows' int8 weights read as they
 * are, each half's 16 dot products whole in the lanes from its stored sums, scaled by d times the half's scale. */
static inline __attribute__((always_inline)) void q6k16_r(const int R, const struct q8_job *j, const sv_qmat *p,
                                                          int c0, int g0, int g1, int r0) {
    int K = j->K, ns = K / 256, C = K / 64;
    const __m512i zero = _mm512_setzero_si512();
    for (int g = g0; g < g1; g++) {
        __m512 acc[MR16];
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
        for (int sb = 0; sb < ns; sb++) {
            const uint8_t *sup = p->data + ((size_t)g * ns + sb) * R16Q6_SUPER;
            __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)sup));
            for (int k = 0; k < 8; k++) {
                const uint8_t *blk = sup + 32 + (size_t)k * R16Q6_BLOCK;
                int b = 8 * sb + k;
                prefetch_ahead(blk, R16Q6_BLOCK);
                __m512 s0 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)blk))));
                __m512 s1 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                    _mm_loadu_si128((const void *)(blk + 16)))));
                __m512i st0 = _mm512_sub_epi32(zero, _mm512_slli_epi32(
                    _mm512_cvtepi16_epi32(_mm256_loadu_si256((const void *)(blk + 32))), 7));
                __m512i st1 = _mm512_sub_epi32(zero, _mm512_slli_epi32(
                    _mm512_cvtepi16_epi32(_mm256_loadu_si256((const void *)(blk + 64))), 7));
                __m512i w[8];
                for (int i = 0; i < 8; i++) w[i] = _mm512_loadu_si512((const void *)(blk + 96 + 64 * i));
                for (int r = 0; r < R; r++) {
                    const uint8_t *ux = j->u + (size_t)(r0 + r) * K + 32 * b;
                    __m512i h0 = st0, h1 = st1;
                    for (int i = 0; i < 4; i++) {
                        h0 = _mm512_dpbusd_epi32(h0, bcast4(ux + 4 * i), w[i]);
                        h1 = _mm512_dpbusd_epi32(h1, bcast4(ux + 16 + 4 * i), w[i + 4]);
                    }
                    __m512 dx = _mm512_set1_ps(j->d[((size_t)(r0 + r) * C + b / 2) * 16 + (b % 2) * 8]);
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h0), _mm512_mul_ps(s0, dx), acc[r]);
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h1), _mm512_mul_ps(s1, dx), acc[r]);
                }
            }
        }
        r16_store(R, j, acc, c0, g, r0);
    }
}

static void r16_rows(const struct q8_job *j, const sv_qmat *p, int c0, int g0, int g1, int r0, int R) {
#define R16_CASE(n) \
    case n: \
        if (p->type == SV_Q4_K_R16) q4k16_r(n, j, p, c0, g0, g1, r0); \
        else if (p->type == SV_Q6_K_R16) q6k16_r(n, j, p, c0, g0, g1, r0); \
        else if (p->type == SV_Q5_0_R16) blk32_r(n, SV_Q5_0_R16, j, p, c0, g0, g1, r0); \
        else blk32_r(n, SV_Q8_0_R16, j, p, c0, g0, g1, r0); \
        break;
    switch (R) { /* R a constant in each copy: the accumulators stay in registers */
    R16_CASE(1) R16_CASE(2) R16_CASE(3) R16_CASE(4) R16_CASE(5) R16_CASE(6) R16_CASE(7) R16_CASE(MR16)
    }
#undef R16_CASE
}

static void q8rows(const struct q8_job *j, const sv_qmat *p, int c0, int lo, int hi, int r0, int R) {
    switch (p->type) {
    case SV_Q8_0: Q8_ROWS(SV_Q8_0) break;
    case SV_Q4_0: Q8_ROWS(SV_Q4_0) break;
    case SV_Q5_0: Q8_ROWS(SV_Q5_0) break;
    case SV_Q4_K: Q8_ROWS(SV_Q4_K) break;
    default: Q8_ROWS(SV_Q6_K) break;
    }
}

static void q8_job_fn(void *ctx, int tid, int nt) {
    const struct q8_job *j = ctx;
    int lo, hi;
    share(tid, nt, j->N, &lo, &hi);
    for (int pi = 0, c0 = 0; pi < j->nparts; c0 += j->parts[pi].rows, pi++) {
        int a = lo > c0 ? lo - c0 : 0, z = hi - c0 < j->parts[pi].rows ? hi - c0 : j->parts[pi].rows;
        if (regrouped_type(j->parts[pi].type)) {
            /* whole groups of 16: each one this thread's whose first row it has */
            for (int r0 = 0; a < z && r0 < j->M; r0 += MR16)
                r16_rows(j, &j->parts[pi], c0, (a + 15) / 16, (z + 15) / 16, r0, j->M - r0 < MR16 ? j->M - r0 : MR16);
            continue;
        }
        for (int r0 = 0; a < z && r0 < j->M; r0 += MR8)
            q8rows(j, &j->parts[pi], c0, a, z, r0, j->M - r0 < MR8 ? j->M - r0 : MR8);
    }
}
#endif

/* sv_qlinear's y on 8-bit activations. Returns 0, or -2 where the CPU lacks VNNI, K is not whole chunks of 64, or a
 * part is not Q4_0, Q5_0, Q8_0, Q4_K or Q6_K (of whole blocks). */
int sv_qlinear8(const float *x, int M, int K, const sv_qmat *parts, int nparts, const float *b, const float *res,
                float *y, int nt) {
#if QX
    int N = int8_rows(parts, nparts, K);
    if (M < 1 || !N) return -2;
    size_t lanes = (size_t)M * (K / 64) * 16;
    uint8_t *u = aligned_alloc(64, ((size_t)M * K + 63) / 64 * 64);
    float *d = aligned_alloc(64, lanes * sizeof(float)), *s = aligned_alloc(64, lanes * sizeof(float));
    if (!u || !d || !s) { free(u), free(d), free(s); return -1; }
    quantize_rows(x, K, M, K, u, d, s);
    struct q8_job j = {u, d, s, b, res, parts, y, M, K, nparts, N};
    run(q8_job_fn, &j, nt < 1 ? 1 : nt > MAXT ? MAXT : nt);
    free(u), free(d), free(s);
    return 0;
#else
    (void)x, (void)M, (void)K, (void)parts, (void)nparts, (void)b, (void)res, (void)y, (void)nt;
    return -2;
#endif
}

/* -- Gemma-3's layer stack on quantized weights and 8-bit activations: one call runs every layer of a pass and its
 * head, as specviz.runtime.lean_gemma computes them (transformers' modeling_gemma3): RMSNorms scaling by (1 + w)
 * (the caller passes 1 + w), q/k norms before RoPE, attention scaled by query_pre_attn_scalar^-1/2, sliding layers
 * seeing the last `window` positions with their own RoPE tables, the attention's and the MLP's outputs normed before
 * their residual adds, GELU-tanh(gate) * up. Each matmul's input is rounded by each thread into its own buffers (a
 * few KB), so no thread waits for another to round it. */
typedef struct {
    const float *ln_in, *q_norm, *k_norm, *ln_post_attn, *ln_pre_mlp, *ln_post_mlp; /* (1 + w) each */
    const sv_qmat *qkv, *o, *gu, *down; /* quantized parts side by side: q, k, v | o | gate, up | down */
    int nqkv, no, ngu, ndown, sliding;
} sv_glayer;

typedef struct {
    const sv_qmat *parts; /* the LM head (Gemma's: the embedding table, tied), quantized */
    const float *norm;    /* the final norm's (1 + w) */
    int nparts, vocab, first;
    float *h, *logits; /* out: (n, d) every row normed; (n - first, vocab) */
    double seconds;    /* out: the final norm's and the head's wall time */
    const int *taps;   /* layers (ascending) whose output, the residual stream after them, the pass also writes */
    int ntaps;         /* 0..SV_MAX_TAPS */
    float *tapped;     /* out: (n, ntaps, d) where ntaps > 0 */
} sv_ghead;
#define SV_MAX_TAPS 8

size_t sv_sizeof_glayer(void) { return sizeof(sv_glayer); }
size_t sv_sizeof_ghead(void) { return sizeof(sv_ghead); }

#if QX
struct gemma_job {
    struct stack_job full, slide; /* the attention's view of the pass: the same buffers, each kind its RoPE and window */
    const sv_glayer *layers;
    sv_ghead *head;
    float *tmp;                                    /* (n, d): a projection before its norm */
    uint8_t *u[MAXT];                              /* each thread's rounded copy of a matmul's input */
    float *qd[MAXT], *qs[MAXT];
};

/* This thread's columns of y (M, N) = res + x (M, K; rows ldx apart) @ [parts].T, x rounded into its own buffers */
static void gmatmul(struct gemma_job *g, int tid, int nt, const float *x, int ldx, int M, int K, const sv_qmat *parts,
                    int nparts, const float *res, float *y, int N) {
    quantize_rows(x, ldx, M, K, g->u[tid], g->qd[tid], g->qs[tid]);
    struct q8_job j = {g->u[tid], g->qd[tid], g->qs[tid], NULL, res, parts, y, M, K, nparts, N};
    q8_job_fn(&j, tid, nt);
}

/* x[i] += norm(t[i]) for this thread's share of the rows */
static void add_normed(float *x, float *t, int n, int d, const float *w, float eps, int tid, int nt) {
    int lo, hi;
    share(tid, nt, n, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        float *ti = t + (size_t)i * d, *xi = x + (size_t)i * d;
        rms_norm(ti, w, d, eps, ti);
        for (int c = 0; c < d; c++) xi[c] += ti[c];
    }
}

static inline float gelu_tanh(float v) { /* 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))) */
    float z = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + (1.0f - 2.0f / (1.0f + vexp(2.0f * z))));
}

static void gemma_layer(struct gemma_job *g, const sv_glayer *L, float *kv, int tid, int nt) {
    struct stack_job *a = L->sliding ? &g->slide : &g->full;
    const sv_dims *m = a->m;
    int n = a->n, d = m->d, I = m->inter, width = (m->nh + 2 * m->nkv) * m->hd, lo, hi;
    float *h = a->h[tid];
    sv_layer qk = {0};
    qk.q_norm = L->q_norm, qk.k_norm = L->k_norm;
    for (int i = 0; i < n; i++) rms_norm(a->x + (size_t)i * d, L->ln_in, d, m->eps, h + (size_t)i * d);
    gmatmul(g, tid, nt, h, d, n, d, L->qkv, L->nqkv, NULL, a->qkv, width);
    barrier(nt);
    if (n * (m->nh / m->nkv) <= VL && !a->first) {
        prepare_and_attend(a, &qk, kv, tid, nt);
    } else {
        prepare_heads(a, &qk, kv, tid, nt);
        barrier(nt);
        attend(a, kv, tid, nt);
    }
    barrier(nt);
    gmatmul(g, tid, nt, a->attn, m->nh * m->hd, n, m->nh * m->hd, L->o, L->no, NULL, g->tmp, d);
    barrier(nt);
    add_normed(a->x, g->tmp, n, d, L->ln_post_attn, m->eps, tid, nt);
    barrier(nt);
    for (int i = 0; i < n; i++) rms_norm(a->x + (size_t)i * d, L->ln_pre_mlp, d, m->eps, h + (size_t)i * d);
    gmatmul(g, tid, nt, h, d, n, d, L->gu, L->ngu, NULL, a->act, 2 * I);
    barrier(nt);
    share(tid, nt, n * I, &lo, &hi); /* GELU-tanh(gate) * up, into the gate's columns, a row's run at a time */
    for (int t = lo, end; t < hi; t = end) {
        end = (t / I + 1) * I < hi ? (t / I + 1) * I : hi;
        float *gate = a->act + (size_t)(t / I) * 2 * I + t % I;
        for (int c = 0; c < end - t; c++) gate[c] = gelu_tanh(gate[c]) * gate[I + c];
    }
    barrier(nt);
    gmatmul(g, tid, nt, a->act, 2 * I, n, I, L->down, L->ndown, NULL, g->tmp, d);
    barrier(nt);
    add_normed(a->x, g->tmp, n, d, L->ln_post_mlp, m->eps, tid, nt);
    barrier(nt);
}

static void gemma_job_fn(void *ctx, int tid, int nt) {
    struct gemma_job *g = ctx;
    struct stack_job *a = &g->full;
    sv_ghead *H = g->head;
    int n = a->n, d = a->m->d;
    for (int l = 0, t = 0; l < a->nlayers; l++) {
        gemma_layer(g, &g->layers[l], a->kv[l], tid, nt);
        if (H && t < H->ntaps && H->taps[t] == l) { /* every thread is past the layer's last barrier; x is not */
            if (tid == 0) /* written again before the next layer's barriers, which this thread joins after */
                for (int i = 0; i < n; i++)
                    memcpy(H->tapped + ((size_t)i * H->ntaps + t) * d, a->x + (size_t)i * d, sizeof(float) * d);
            t++;
        }
    }
    if (!H) return;
    float *h = a->h[tid];
    if (tid == 0) a->head_t0 = now(); /* every thread is past the last layer's barrier */
    for (int i = 0; i < n; i++) rms_norm(a->x + (size_t)i * d, H->norm, d, a->m->eps, h + (size_t)i * d);
    if (tid == 0) memcpy(H->h, h, sizeof(float) * (size_t)n * d);
    gmatmul(g, tid, nt, h + (size_t)H->first * d, d, n - H->first, d, H->parts, H->nparts, NULL, H->logits, H->vocab);
}

static int int8_parts(const sv_qmat *parts, int nparts, int K, int rows) { /* read by the kernels, these rows */
    return int8_rows(parts, nparts, K) == rows;
}

static int gemma_fits(const sv_dims *m, const sv_glayer *layers, int nlayers, const sv_ghead *head, int n) {
    int width = (m->nh + 2 * m->nkv) * m->hd;
    if (m->hd < 1 || m->hd > MAX_HD || m->rot != m->hd || m->rot % 2 || m->nkv < 1 || m->nh % m->nkv || nlayers < 1)
        return 0;
    for (int l = 0; l < nlayers; l++) {
        const sv_glayer *L = &layers[l];
        if (!int8_parts(L->qkv, L->nqkv, m->d, width) || !int8_parts(L->o, L->no, m->nh * m->hd, m->d) ||
            !int8_parts(L->gu, L->ngu, m->d, 2 * m->inter) || !int8_parts(L->down, L->ndown, m->inter, m->d) ||
            !L->ln_in || !L->q_norm || !L->k_norm || !L->ln_post_attn || !L->ln_pre_mlp || !L->ln_post_mlp)
            return 0;
    }
    if (head && (head->ntaps < 0 || head->ntaps > SV_MAX_TAPS || (head->ntaps && (!head->taps || !head->tapped))))
        return 0;
    for (int t = 0; head && t < head->ntaps; t++)
        if (head->taps[t] < 0 || head->taps[t] >= nlayers || (t && head->taps[t] <= head->taps[t - 1])) return 0;
    return !head || (head->first >= 0 && head->first < n && head->norm && head->h && head->logits &&
                     int8_parts(head->parts, head->nparts, m->d, head->vocab));
}
#endif

/* Rows x (n, d), already embedded and scaled, at cache slots start..start+n-1 through Gemma-3's layers (each writing
 * its keys and values there: kv[l] is (2 nkv, cap, hd)), then (head not NULL) the final norm and the head. cos/sin:
 * the full layers' RoPE tables, cos_s/sin_s the sliding layers' ((cap, hd) each, sin signed). Returns 0, -1 where
 * scratch memory could not be had, -2 where the arguments cannot be right or the CPU lacks VNNI. */
/* -- a feature draft's own Llama layer (specviz.slim.FeatureDraft), one call a draft step: fc over [f, e], RMSNorm, q k v,
 * RoPE (rotate-half, the caller's tables), causal attention over its own cache (heads = kv heads), o plus the
 * residual, RMSNorm, SiLU(gate) * up, down plus the residual, the final RMSNorm; its matrices on the 8-bit kernels. */
typedef struct {
    const sv_qmat *fc, *qkv, *o, *gu, *down; /* one part each: q, k, v side by side; gate, up side by side */
    const float *ln_in, *ln_post, *norm;     /* RMSNorm weights (x * w) */
} sv_dlayer;

size_t sv_sizeof_dlayer(void) { return sizeof(sv_dlayer); }

#if QX
struct draft_job {
    const sv_dims *m;
    const sv_dlayer *L;
    const float *x, *cos, *sin; /* x (n, 2d): [f, e] a row */
    float *kv, *h, *a, *b, *qkv, *attn, *act;
    int n, start, cap;
    float *own[MAXT], *scores[MAXT];
    uint8_t *u[MAXT];
    float *qd[MAXT], *qs[MAXT];
};

static void dmatmul(struct draft_job *g, int tid, int nt, const float *x, int ldx, int K, const sv_qmat *p,
                    const float *res, float *y, int N) {
    quantize_rows(x, ldx, g->n, K, g->u[tid], g->qd[tid], g->qs[tid]);
    struct q8_job j = {g->u[tid], g->qd[tid], g->qs[tid], NULL, res, p, y, g->n, K, 1, N};
    q8_job_fn(&j, tid, nt);
}

static void rope_half(float *v, const float *cos, const float *sin, int hd) { /* v cos + rotate_half(v) sin */
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float a = v[i], b = v[i + half];
        v[i] = a * cos[i] - b * sin[i], v[i + half] = b * cos[i + half] + a * sin[i + half];
    }
}

/* this thread's heads: RoPE on q and k, k and v into the cache, softmax(q k / sqrt(hd)) v over positions <= each row's */
static void draft_attend(struct draft_job *g, int tid, int nt) {
    const sv_dims *m = g->m;
    int nh = m->nh, hd = m->hd, w = nh * hd, lo, hi;
    share(tid, nt, nh, &lo, &hi);
    float *sc = g->scores[tid];
    for (int hh = lo; hh < hi; hh++) {
        float *K = g->kv + (size_t)hh * g->cap * hd, *V = g->kv + ((size_t)nh + hh) * g->cap * hd;
        for (int i = 0; i < g->n; i++) {
            int pos = g->start + i;
            float *row = g->qkv + (size_t)i * 3 * w, *q = row + hh * hd;
            rope_half(q, g->cos + (size_t)pos * hd, g->sin + (size_t)pos * hd, hd);
            memcpy(K + (size_t)pos * hd, row + w + hh * hd, sizeof(float) * hd);
            rope_half(K + (size_t)pos * hd, g->cos + (size_t)pos * hd, g->sin + (size_t)pos * hd, hd);
            memcpy(V + (size_t)pos * hd, row + 2 * w + hh * hd, sizeof(float) * hd);
        }
        for (int i = 0; i < g->n; i++) {
            int span = g->start + i + 1;
            const float *q = g->qkv + (size_t)i * 3 * w + hh * hd;
            float top = -INFINITY, total = 0.0f, *out = g->attn + (size_t)i * w + hh * hd;
            for (int t = 0; t < span; t++) {
                float dot = 0.0f;
                for (int c = 0; c < hd; c++) dot += q[c] * K[(size_t)t * hd + c];
                sc[t] = dot * m->scale, top = sc[t] > top ? sc[t] : top;
            }
            for (int t = 0; t < span; t++) sc[t] = vexp(sc[t] - top), total += sc[t];
            for (int c = 0; c < hd; c++) out[c] = 0.0f;
            for (int t = 0; t < span; t++)
                for (int c = 0; c < hd; c++) out[c] += sc[t] / total * V[(size_t)t * hd + c];
        }
    }
}

static void draft_job_fn(void *ctx, int tid, int nt) {
    struct draft_job *g = ctx;
    const sv_dims *m = g->m;
    const sv_dlayer *L = g->L;
    int n = g->n, d = m->d, I = m->inter, w = m->nh * m->hd, lo, hi;
    float *own = g->own[tid];
    dmatmul(g, tid, nt, g->x, 2 * d, 2 * d, L->fc, NULL, g->a, d);
    barrier(nt);
    for (int i = 0; i < n; i++) rms_norm(g->a + (size_t)i * d, L->ln_in, d, m->eps, own + (size_t)i * d);
    dmatmul(g, tid, nt, own, d, d, L->qkv, NULL, g->qkv, 3 * w);
    barrier(nt);
    draft_attend(g, tid, nt);
    barrier(nt);
    dmatmul(g, tid, nt, g->attn, w, w, L->o, g->a, g->b, d);
    barrier(nt);
    for (int i = 0; i < n; i++) rms_norm(g->b + (size_t)i * d, L->ln_post, d, m->eps, own + (size_t)i * d);
    dmatmul(g, tid, nt, own, d, d, L->gu, NULL, g->act, 2 * I);
    barrier(nt);
    share(tid, nt, n, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        float *gate = g->act + (size_t)i * 2 * I;
        for (int c = 0; c < I; c++) gate[c] = gate[c] / (1.0f + vexp(-gate[c])) * gate[I + c];
    }
    barrier(nt);
    dmatmul(g, tid, nt, g->act, 2 * I, I, L->down, g->b, g->a, d);
    barrier(nt);
    for (int i = lo; i < hi; i++) rms_norm(g->a + (size_t)i * d, L->norm, d, m->eps, g->h + (size_t)i * d);
}

static int draft_fits(const sv_dims *m, const sv_dlayer *L) {
    int d = m->d, w = m->nh * m->hd;
    return L && m->nh == m->nkv && m->hd % 2 == 0 && m->hd <= MAX_HD && L->ln_in && L->ln_post && L->norm &&
           int8_parts(L->fc, 1, 2 * d, d) && int8_parts(L->qkv, 1, d, 3 * w) && int8_parts(L->o, 1, w, d) &&
           int8_parts(L->gu, 1, d, 2 * m->inter) && int8_parts(L->down, 1, m->inter, d);
}
#endif

/* h (n, d) of the draft's rows at positions start..start + n - 1, their keys and values written into kv (2, heads,
 * cap, hd); x (n, 2d) each row's [feature, embedding]. 0; -2 where a shape, part or pointer does not fit (nothing
 * written) or the CPU lacks VNNI; -1 where scratch memory could not be had. */
int sv_draft_layer(const sv_dims *m, const sv_dlayer *L, const float *x, int n, int start, float *kv, int cap,
                   const float *cos, const float *sin, float *h, int nt) {
#if QX
    if (!m || !x || !kv || !cos || !sin || !h || n < 1 || start < 0 || (long)start + n > cap || !draft_fits(m, L))
        return -2;
    nt = nt < 1 ? 1 : nt > MAXT ? MAXT : nt;
    int d = m->d, I = m->inter, w = m->nh * m->hd, K = 2 * d > I ? 2 * d : I;
    K = w > K ? w : K;
    size_t shared = (size_t)n * (2 * d + 4 * w + 2 * I), per = (size_t)n * d + cap + 2 * (size_t)n * (K / 64) * 16 +
                    ((size_t)n * K + 3) / 4;
    float *buf = malloc(sizeof(float) * (shared + nt * per));
    if (!buf) return -1;
    struct draft_job g = {.m = m, .L = L, .x = x, .cos = cos, .sin = sin, .kv = kv, .h = h, .n = n, .start = start,
                          .cap = cap};
    g.a = buf, g.b = g.a + (size_t)n * d, g.qkv = g.b + (size_t)n * d, g.attn = g.qkv + (size_t)n * 3 * w;
    g.act = g.attn + (size_t)n * w;
    for (int t = 0; t < nt; t++) {
        g.own[t] = buf + shared + t * per, g.scores[t] = g.own[t] + (size_t)n * d, g.qd[t] = g.scores[t] + cap;
        g.qs[t] = g.qd[t] + (size_t)n * (K / 64) * 16, g.u[t] = (uint8_t *)(g.qs[t] + (size_t)n * (K / 64) * 16);
    }
    run(draft_job_fn, &g, nt);
    free(buf);
    return 0;
#else
    (void)m, (void)L, (void)x, (void)n, (void)start, (void)kv, (void)cap, (void)cos, (void)sin, (void)h, (void)nt;
    return -2;
#endif
}

#if QX
/* A Gemma pass's scratch and blocks for rows whose attention spans at most `span` slots, then the pass on nt threads:
 * a->m ... a->first set by the caller. */
static int run_gemma(struct stack_job *a, const sv_glayer *layers, sv_ghead *head, const float *cos_s,
                     const float *sin_s, int window, int span, int nt) {
    const sv_dims *m = a->m;
    int n = a->n, width = (m->nh + 2 * m->nkv) * m->hd, group = m->nh / m->nkv;
    int K = m->inter > m->d ? m->inter : m->d;
    K = m->nh * m->hd > K ? m->nh * m->hd : K;
    if (nt < 1) nt = 1;
    if (nt > MAXT) nt = MAXT;
    size_t floats = (size_t)n * width + (size_t)n * m->nh * m->hd + 2 * (size_t)n * m->inter + (size_t)n * m->d;
    size_t per_thread = (size_t)n * m->d + (size_t)span * VL + 2 * (size_t)n * (K / 64) * 16 + ((size_t)n * K + 3) / 4;
    float *buf;
    int *blocks;
    if (scratch(floats + nt * per_thread, n * group, &buf, &blocks)) return -1;
    struct gemma_job g = {.full = *a, .layers = layers, .head = head};
    a = &g.full;
    a->qkv = buf;
    a->attn = a->qkv + (size_t)n * width;
    a->act = a->attn + (size_t)n * m->nh * m->hd;
    g.tmp = a->act + 2 * (size_t)n * m->inter;
    for (int t = 0; t < nt; t++) {
        a->h[t] = buf + floats + t * per_thread;
        a->scores[t] = a->h[t] + (size_t)n * m->d;
        g.qd[t] = a->scores[t] + (size_t)span * VL;
        g.qs[t] = g.qd[t] + (size_t)n * (K / 64) * 16;
        g.u[t] = (uint8_t *)(g.qs[t] + (size_t)n * (K / 64) * 16);
    }
    a->block_p0 = blocks;
    a->block_np = blocks + (size_t)n * group + 1;
    a->nblocks = plan_blocks(a, group, a->block_p0, a->block_np);
    g.slide = g.full;
    g.slide.cos = cos_s, g.slide.sin = sin_s, g.slide.window = window;
    run(gemma_job_fn, &g, nt);
    if (head) head->seconds = now() - a->head_t0;
    free(buf);
    free(blocks);
    return 0;
}
#endif

int sv_gemma_layers(const sv_dims *m, const sv_glayer *layers, float *const *kv, int nlayers, float *x, int n, int start,
                    int cap, const float *cos, const float *sin, const float *cos_s, const float *sin_s, int window,
                    sv_ghead *head, int nt) {
#if QX
    if (n < 1 || start < 0 || (long)start + n > cap || window < 1 || !x || !kv || !cos || !sin || !cos_s || !sin_s ||
        !gemma_fits(m, layers, nlayers, head, n))
        return -2;
    for (int l = 0; l < nlayers; l++)
        if (!kv[l]) return -2;
    struct stack_job a = {m, NULL, NULL, kv, nlayers, n, start, cap, x, cos, sin, NULL, NULL};
    return run_gemma(&a, layers, head, cos_s, sin_s, window, start + n, nt);
#else
    (void)m, (void)layers, (void)kv, (void)nlayers, (void)x, (void)n, (void)start, (void)cap, (void)cos, (void)sin;
    (void)cos_s, (void)sin_s, (void)window, (void)head, (void)nt;
    return -2;
#endif
}

/* sv_gemma_layers over rows of several sequences in one pass (sv_layers_rows' form): row i at cache slot slots[i],
 * seeing the slots first[i]..slots[i] of its own sequence, at position slots[i] - first[i] (a sequence's slots run
 * on from its first, one a position, so that the sliding layers' window counts slots as positions); a sequence's rows
 * consecutive, their slots ascending. The logits of rows head->first.. as sv_gemma_layers gives them: a row's
 * floats whatever other rows share its pass. */
int sv_gemma_layers_rows(const sv_dims *m, const sv_glayer *layers, float *const *kv, int nlayers, float *x, int n,
                         const int64_t *slots, const int64_t *first, const int64_t *positions, int cap, const float *cos,
                         const float *sin, const float *cos_s, const float *sin_s, int window, sv_ghead *head, int nt) {
#if QX
    if (n < 1 || window < 1 || !x || !kv || !slots || !first || !positions || !cos || !sin || !cos_s || !sin_s ||
        !gemma_fits(m, layers, nlayers, head, n))
        return -2;
    for (int l = 0; l < nlayers; l++)
        if (!kv[l]) return -2;
    int span = rows_span(n, slots, first, cap);
    for (int i = 0; i < n && span > 0; i++)
        if (positions[i] != slots[i] - first[i]) return -2;
    if (span < 1) return -2;
    struct stack_job a = {m, NULL, NULL, kv, nlayers, n, 0, cap, x, cos, sin, positions, NULL, slots, first};
    return run_gemma(&a, layers, head, cos_s, sin_s, window, span, nt);
#else
    (void)m, (void)layers, (void)kv, (void)nlayers, (void)x, (void)n, (void)slots, (void)first, (void)positions;
    (void)cap, (void)cos, (void)sin, (void)cos_s, (void)sin_s, (void)window, (void)head, (void)nt;
    return -2;
#endif
}

/* Sampling over a vocabulary, one row at a time (specviz.slim.sampling's softmax at a temperature, residual and
 * inverse CDF, whose numpy forms stay the reference): each a pass or two over the row, vectorized, with sums kept
 * per block of SB ids in double lanes. Over Gemma-3's 262,144 ids the softmax takes 0.15 ms on an EPYC core
 * against numpy's 0.29 (several passes and temporaries), the inverse CDF 0.05 ms against 0.10 (2026-12-05). */
#define SB 1024

/* the sum of w[0..n) (n <= SB), in double lanes (held in registers: the compiler's reduction kept its lanes on the
 * stack, a store and a load an iteration) */
static double block_sum(const float *w, int n) {
    int i = 0;
#if defined(__AVX512F__)
    __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(w + i);
        a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v), 1))));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(a, b));
#else
    double s = 0.0;
#endif
    for (; i < n; i++) s += w[i];
    return s;
}

/* The largest of x[0..n) and whether any is NaN or +inf (*bad), in vector lanes held in registers. */
static float row_max(const float *x, int n, int *bad) {
    vf top;
    vi flag = {0};
    for (int l = 0; l < VL; l++) top[l] = -INFINITY;
    int i = 0;
    for (; i + VL <= n; i += VL) {
        vf v;
        memcpy(&v, x + i, sizeof v);
        flag |= (v != v) | (v == INFINITY);
        top = vmax(top, v);
    }
    float m = -INFINITY;
    int b = 0;
    for (int l = 0; l < VL; l++) m = top[l] > m ? top[l] : m, b |= flag[l];
    for (; i < n; i++) b |= (x[i] != x[i]) | (x[i] == INFINITY), m = x[i] > m ? x[i] : m;
    *bad = b != 0;
    return m;
}

/* p = softmax(logits * inv_t) over n ids, float32 (entries of -inf: 0). -2 for n < 1, inv_t not positive and finite,
 * or logits with a NaN, +inf or no finite entry (torch's softmax would give NaN: nothing to sample from). */
int sv_softmax_t(const float *logits, int n, float inv_t, float *p) {
    if (n < 1 || !(inv_t > 0.0f) || isinf(inv_t)) return -2;
    int bad;
    float top = row_max(logits, n, &bad);
    if (bad || top == -INFINITY) return -2;
    const float m = top * inv_t;
    double total = 0.0;
    for (int b = 0; b < n; b += SB) {
        int e = b + SB < n ? b + SB : n;
        exp_row(logits + b, e - b, inv_t, m, p + b);
        total += block_sum(p + b, e - b);
    }
    const float scale = (float)(1.0 / total);
#pragma omp simd
    for (int i = 0; i < n; i++) p[i] *= scale;
    return 0;
}

/* p at k ids (sv_softmax_norm's m and scale = (float)(1 / sum)): the floats sv_softmax_t writes there. -1 where an
 * id is outside [0, n), k < 0, or inv_t, m or scale is not what sv_softmax_norm gives. */
int sv_softmax_at(const float *logits, int n, float inv_t, float m, float scale, const int *ids, int k, float *out) {
    if (n < 1 || k < 0 || !(inv_t > 0.0f) || isinf(inv_t) || !(scale > 0.0f) || isinf(scale) || !isfinite(m)) return -1;
    int bad = 0;
#pragma omp simd reduction(| : bad)
    for (int j = 0; j < k; j++) bad |= (ids[j] < 0) | (ids[j] >= n);
    if (bad) return -1;
    for (int j = 0; j < k; j++) out[j] = logits[ids[j]]; /* gathered, then exponentiated a vector at a time */
    exp_row(out, k, inv_t, m, out);
#pragma omp simd
    for (int j = 0; j < k; j++) out[j] *= scale;
    return 0;
}

/* The whole row p from sv_softmax_norm's m and scale: the floats sv_softmax_t writes, in one pass. -1 where n < 1 or
 * inv_t, m or scale is not what sv_softmax_norm gives (positive and finite; m finite). */
int sv_softmax_from(const float *logits, int n, float inv_t, float m, float scale, float *p) {
    if (n < 1 || !(inv_t > 0.0f) || isinf(inv_t) || !(scale > 0.0f) || isinf(scale) || !isfinite(m)) return -1;
    exp_row(logits, n, inv_t, m, p);
#pragma omp simd
    for (int i = 0; i < n; i++) p[i] *= scale;
    return 0;
}

/* sv_softmax_norm of rows rows of n logits each (row r at logits + r * n) on nt threads, each a share of every
 * row's blocks: m_out[r] and total_out[r] the float and double sv_softmax_norm gives row by row (the blocks' sums kept
 * apart, then added in order); where e is not NULL, each row's vexp(logits * inv_t - m) written there (rows x n), so
 * that e times (float)(1 / total) is the row sv_softmax_t writes. 0; -2 where a row is refused (as sv_softmax_norm),
 * -1 where scratch memory fails. */
struct norms_job { const float *x; int rows, n, nb; float inv_t; float *tmax; int *bad; double *sums; float *e; };

/* row r's largest logit over the nt threads' shares, and whether any share held a NaN or +inf (*bad) */
static float row_top(const struct norms_job *j, int nt, int r, int *bad) {
    float top = -INFINITY;
    *bad = 0;
    for (int t = 0; t < nt; t++)
        top = j->tmax[t * j->rows + r] > top ? j->tmax[t * j->rows + r] : top, *bad |= j->bad[t * j->rows + r];
    return top;
}

static void norms_job(void *ctx, int tid, int nt) {
    struct norms_job *j = ctx;
    int lo, hi;
    share(tid, nt, j->nb, &lo, &hi);
    for (int r = 0; r < j->rows; r++) {
        const float *x = j->x + (size_t)r * j->n;
        int a = lo * SB, z = hi * SB < j->n ? hi * SB : j->n, bad = 0;
        j->tmax[tid * j->rows + r] = a < z ? row_max(x + a, z - a, &bad) : -INFINITY;
        j->bad[tid * j->rows + r] = bad;
    }
    barrier(nt);
    float scratch[SB];
    for (int r = 0; r < j->rows; r++) {
        int bad;
        float top = row_top(j, nt, r, &bad);
        if (bad || top == -INFINITY) continue;
        const float *x = j->x + (size_t)r * j->n;
        const float m = top * j->inv_t;
        for (int b = lo; b < hi; b++) {
            int len = (b + 1) * SB < j->n ? SB : j->n - b * SB;
            float *e = j->e ? j->e + (size_t)r * j->n + (size_t)b * SB : scratch;
            exp_row(x + (size_t)b * SB, len, j->inv_t, m, e);
            j->sums[(size_t)r * j->nb + b] = block_sum(e, len);
        }
    }
}

int sv_softmax_norms(const float *logits, int rows, int n, float inv_t, float *m_out, double *total_out, float *e,
                     int nt) {
    if (rows < 1 || n < 1 || !(inv_t > 0.0f) || isinf(inv_t) || !m_out || !total_out) return -2;
    nt = nt < 1 ? 1 : (nt > MAXT ? MAXT : nt);
    int nb = (n + SB - 1) / SB;
    struct norms_job j = {logits, rows, n, nb, inv_t, malloc(sizeof(float) * nt * rows), malloc(sizeof(int) * nt * rows),
                          malloc(sizeof(double) * (size_t)rows * nb), e};
    if (!j.tmax || !j.bad || !j.sums) return free(j.tmax), free(j.bad), free(j.sums), -1;
    for (int t = 0; t < nt * rows; t++) j.tmax[t] = -INFINITY, j.bad[t] = 0; /* a thread the pool did not give */
    run(norms_job, &j, nt);
    int refused = 0;
    for (int r = 0; r < rows; r++) {
        int bad;
        float top = row_top(&j, nt, r, &bad);
        if (bad || top == -INFINITY) { refused = 1; break; }
        double total = 0.0;
        for (int b = 0; b < nb; b++) total += j.sums[(size_t)r * nb + b];
        m_out[r] = top * inv_t, total_out[r] = total;
    }
    free(j.tmax), free(j.bad), free(j.sums);
    return refused ? -2 : 0;
}

/* sv_softmax_t's normaliser without writing p: *m_out = max(logits) * inv_t, and the sum of vexp(logits * inv_t - m)
 * added block by block as sv_softmax_t adds it, so that p[i] = vexp(logits[i] * inv_t - m) * (float)(1 / sum)
 * (sv_softmax_at) is the float sv_softmax_t writes: sv_softmax_norms of one row on one thread. -2 where sv_softmax_t
 * refuses, -1 where scratch memory fails. */
double sv_softmax_norm(const float *logits, int n, float inv_t, float *m_out) {
    double total;
    int done = sv_softmax_norms(logits, 1, n, inv_t, m_out, &total, NULL, 1);
    return done ? (double)done : total;
}

/* r = max(p - q, 0) over n ids (not normalized); its sum, or -1 for n < 1 */
double sv_residual(const float *p, const float *q, int n, float *r) {
    if (n < 1) return -1.0;
    double total = 0.0;
    for (int b = 0; b < n; b += SB) {
        int e = b + SB < n ? b + SB : n;
#pragma omp simd
        for (int i = b; i < e; i++) r[i] = p[i] > q[i] ? p[i] - q[i] : 0.0f;
        total += block_sum(r + b, e - b);
    }
    return total;
}

/* sv_residual's r and sum where q is zero off m ascending ids (q_ids, their q in q_vals): the same floats as the dense
 * q would give, without one (p copied block by block, the ids' entries made max(p - q, 0)). -1 where n < 1, m < 0,
 * or the ids are not ascending within [0, n). */
double sv_residual_over(const float *p, int n, const int *q_ids, const float *q_vals, int m, float *r) {
    if (n < 1 || m < 0) return -1.0;
    for (int j = 0; j < m; j++)
        if (q_ids[j] < 0 || q_ids[j] >= n || (j && q_ids[j] <= q_ids[j - 1])) return -1.0;
    double total = 0.0;
    for (int b = 0, j = 0; b < n; b += SB) {
        int e = b + SB < n ? b + SB : n;
        memcpy(r + b, p + b, sizeof(float) * (size_t)(e - b));
        for (; j < m && q_ids[j] < e; j++) {
            int i = q_ids[j];
            r[i] = p[i] > q_vals[j] ? p[i] - q_vals[j] : 0.0f;
        }
        total += block_sum(r + b, e - b);
    }
    return total;
}

/* The inverse CDF's two steps over weights kept in blocks of SB: the block whose running sum (before it, *before)
 * passes target, by the blocks' sums (never past the last block with mass); then, within that block's weights w
 * (len, its first id base), the first id whose running sum passes target, or its last id with mass where rounding
 * carries past the end. */
static int cdf_block(const double *sums, int last, double target, double *before) {
    int b = 0;
    while (b < last && *before + sums[b] <= target) *before += sums[b++];
    return b;
}

static int cdf_within(const float *w, int len, int base, double target, double before) {
    int found = -1;
    for (int i = 0; i < len; i++) {
        if (w[i] > 0.0f) found = base + i;
        before += w[i];
        if (before > target && w[i] > 0.0f) return base + i;
    }
    return found;
}

/* One block of the residual sv_residual_over writes for p * w where p = e * scale (sv_softmax_norms' exponentials;
 * w = 1: p itself): ids from *j on that fall in [b0, b0 + len) made max(p - q, 0); times s where s is not 1. */
static void residual_block(const float *e, float scale, float w, const int *ids, const float *qv, int k, int *j, int b0,
                           int len, float s, float *r) {
#pragma omp simd
    for (int i = 0; i < len; i++) {
        float p = e[b0 + i] * scale;
        r[i] = w < 1.0f ? p * w : p;
    }
    for (; *j < k && ids[*j] < b0 + len; (*j)++) {
        int i = ids[*j] - b0;
        r[i] = r[i] > qv[*j] ? r[i] - qv[*j] : 0.0f;
    }
    if (s != 1.0f) {
#pragma omp simd
        for (int i = 0; i < len; i++) r[i] *= s;
    }
}

/* The id block verification draws after keeping some drafts: sv_invert_cdf(u) over norm(max(0, w p - q)), p = e *
 * scale, q zero off k ascending ids (qv their q), as specviz.slim.sampling.block_residual writes that row (the
 * residual's floats, times the reciprocal of its sum), without writing it; where it has no mass, or k is -1 (the
 * bonus token), over p itself. -1 where the ids are not ascending in [0, n), u is not in [0, 1), or nothing has mass. */
int sv_residual_draw(const float *e, int n, float scale, float w, const int *ids, const float *qv, int k, double u) {
    if (n < 1 || k < -1 || !(u >= 0.0 && u < 1.0) || !(w >= 0.0f) || !(scale > 0.0f) || isinf(scale)) return -1;
    for (int j = 0; j < k; j++)
        if (ids[j] < 0 || ids[j] >= n || (j && ids[j] <= ids[j - 1])) return -1;
    int nb = (n + SB - 1) / SB, j = 0, last = -1;
    double *sums = malloc(sizeof(double) * nb), total = 0.0;
    float r[SB];
    if (!sums) return -1;
    for (int b = 0; b < nb && k >= 0; b++) {
        int len = (b + 1) * SB < n ? SB : n - b * SB;
        residual_block(e, scale, w, ids, qv, k, &j, b * SB, len, 1.0f, r);
        total += block_sum(r, len);
    }
    int bare = !(total > 0.0); /* no residual mass, or k = -1 (the bonus): p itself */
    float s = bare ? 1.0f : (float)(1.0 / total);
    double all = 0.0;
    for (int b = 0, jj = 0; b < nb; b++) {
        int len = (b + 1) * SB < n ? SB : n - b * SB;
        residual_block(e, scale, bare ? 1.0f : w, ids, qv, bare ? 0 : k, &jj, b * SB, len, s, r);
        sums[b] = block_sum(r, len);
        all += sums[b];
        if (sums[b] > 0.0) last = b;
    }
    if (last < 0 || !(all > 0.0)) return free(sums), -1;
    double target = u * all, before = 0.0;
    int b = cdf_block(sums, last, target, &before);
    free(sums);
    int at = 0, len = (b + 1) * SB < n ? SB : n - b * SB;
    while (!bare && at < k && ids[at] < b * SB) at++;
    residual_block(e, scale, bare ? 1.0f : w, ids, qv, bare ? 0 : k, &at, b * SB, len, s, r);
    return cdf_within(r, len, b * SB, target, before);
}

/* sum over n ids of min(p, q): beta, the chance a draft drawn from q is accepted against p (float sums per block,
 * added in double); -1 for n < 1 */
double sv_overlap(const float *p, const float *q, int n) {
    if (n < 1) return -1.0;
    double total = 0.0;
    for (int b = 0; b < n; b += SB) {
        int e = b + SB < n ? b + SB : n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int i = b; i < e; i++) s += p[i] < q[i] ? p[i] : q[i];
        total += s;
    }
    return total;
}

/* The ids of the k largest of x (n floats, none NaN), largest first, equal values by lower id first, written to
 * out: their count, min(k, n); -1 where n < 1 or k is not in 1..64. One pass: an id enters only above the k-th kept. */
int sv_top_k(const float *x, int n, int k, int *out) {
    if (n < 1 || k < 1 || k > 64) return -1;
    float v[64];
    int m = 0;
    for (int i = 0; i < n; i++) {
        float xi = x[i];
        if (m == k && !(xi > v[k - 1])) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && xi > v[j - 1]) {
            v[j] = v[j - 1];
            out[j] = out[j - 1];
            j--;
        }
        v[j] = xi;
        out[j] = i;
    }
    return m;
}

/* The first id of w (n non-negative weights, not necessarily normalized) whose running sum exceeds u times their
 * total: the blocks' sums first, then within the one block in double; never an id of zero weight. -1 where u is not
 * in [0, 1), n < 1, or the weights hold no mass or a negative or non-finite one. */
int sv_invert_cdf(const float *w, int n, double u) {
    if (n < 1 || !(u >= 0.0 && u < 1.0)) return -1;
    int nb = (n + SB - 1) / SB, last = -1;
    double *sums = malloc(sizeof(double) * nb), total = 0.0;
    if (!sums) return -1;
    for (int b = 0; b < nb; b++) {
        int lo = b * SB, hi = lo + SB < n ? lo + SB : n, neg = 0;
#pragma omp simd reduction(| : neg)
        for (int i = lo; i < hi; i++) neg |= !(w[i] >= 0.0f) | (w[i] == INFINITY);
        if (neg) return free(sums), -1;
        sums[b] = block_sum(w + lo, hi - lo);
        total += sums[b];
        if (sums[b] > 0.0) last = b;
    }
    if (last < 0 || !(total > 0.0)) return free(sums), -1;
    double target = u * total, before = 0.0;
    int b = cdf_block(sums, last, target, &before);
    free(sums);
    int lo = b * SB, hi = lo + SB < n ? lo + SB : n;
    return cdf_within(w + lo, hi - lo, lo, target, before);
}

/* A feature draft's chain (specviz.slim.FeatureDraft.propose's loop, one call instead of a few a step): from h0 (d),
 * each step the pruned head's logits over its V ids (head: one part, its rows the draft's ids), then the id: the
 * argmax where greedy, else the one u[i] draws from q = softmax(logits * inv_t) (sv_invert_cdf); q is written to
 * q + i * V (where q is not NULL) as sv_softmax_t gives it. The chain ends at k ids, or after an id whose q falls
 * below stop (stop > 0 needs q); else that id's input embedding (its row of emb, V rows of emb_type, times scale)
 * beside h goes through sv_draft_layer at position start + i for the next h. The same calls, in the same order, as
 * the loop: the same floats. idx gets the ids' indices; head_s the head's seconds. Returns the ids written (1..k);
 * -2 where a shape, pointer or setting does not fit (nothing drawn), -3 where a q row held no distribution or a draw
 * failed, -1 for scratch memory. */
int sv_draft_chain(const sv_dims *m, const sv_dlayer *L, const sv_qmat *head, const uint8_t *emb, int emb_type,
                   float scale, int V, const float *h0, int start, float *kv, int cap, const float *cos,
                   const float *sin, int k, int greedy, float inv_t, float stop, const double *u, int *idx, float *q,
                   double *head_s, int nt) {
#if QX
    if (!m || !L || !head || !emb || !h0 || !idx || !head_s || k < 1 || V < 1 || head->rows != V ||
        start < 0 || (long)start + k - 1 > cap || !(inv_t > 0.0f) || isinf(inv_t) || !(stop >= 0.0f && stop < 1.0f) ||
        (!greedy && !u) || ((stop > 0.0f || !greedy) && !q) || !draft_fits(m, L))
        return -2;
    for (int i = 0; i < k && !greedy; i++)
        if (!(u[i] >= 0.0 && u[i] < 1.0)) return -2;
    int d = m->d, n = 0;
    if (!qrows_fit(emb_type, d)) return -2;
    float *h = malloc(sizeof(float) * (size_t)(3 * d + V));
    if (!h) return -1;
    float *x = h + d, *logits = x + 2 * d;
    memcpy(h, h0, sizeof(float) * (size_t)d);
    *head_s = 0.0;
    for (int i = 0; i < k; i++) {
        double t0 = now();
        int done = sv_qlinear8(h, 1, d, head, 1, NULL, NULL, logits, nt);
        *head_s += now() - t0;
        if (done) return free(h), done;
        float *qi = q ? q + (size_t)i * V : NULL;
        if (qi && sv_softmax_t(logits, V, inv_t, qi)) return free(h), -3;
        int j = 0;
        if (greedy) {
            for (int c = 1; c < V; c++) j = logits[c] > logits[j] ? c : j;
        } else if ((j = sv_invert_cdf(qi, V, u[i])) < 0) {
            return free(h), -3;
        }
        idx[n++] = j;
        if ((qi && qi[j] < stop) || i == k - 1) break;
        int64_t at = j;
        if (sv_qrows(emb, emb_type, V, d, &at, 1, x + d)) return free(h), -2;
        for (int c = 0; c < d; c++) x[d + c] *= scale;
        memcpy(x, h, sizeof(float) * (size_t)d);
        if ((done = sv_draft_layer(m, L, x, 1, start + i, kv, cap, cos, sin, h, nt))) return free(h), done;
    }
    free(h);
    return n;
#else
    (void)m, (void)L, (void)head, (void)emb, (void)emb_type, (void)scale, (void)V, (void)h0, (void)start, (void)kv;
    (void)cap, (void)cos, (void)sin, (void)k, (void)greedy, (void)inv_t, (void)stop, (void)u, (void)idx, (void)q;
    (void)head_s, (void)nt;
    return -2;
#endif
}
