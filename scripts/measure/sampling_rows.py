"""What the accept step's work over a vocabulary costs in specviz.slim's sampling, by piece, on rows of Gemma-3's
262,144 ids: numpy's softmax at a temperature against the C stack's (sv_softmax_t), a row's normaliser alone
(sv_softmax_norm), several rows' on one and two threads (sv_softmax_norms), p at a draft's 8,192 ids
(sv_softmax_at), and a block verification's draw after a rejection from the kept exponentials (sv_residual_draw)
against the residual written and then drawn from (residual_over and invert_cdf).

    python scripts/measure/sampling_rows.py --repeats 300

Prints the host line, then each piece's median ms over the repeats (the pieces interleaved, each repeat in turn).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from hostline import host_line  # noqa: E402


def pieces(so, rows: int, vocab: int):
    """{name: a call}: each piece once over the same random rows."""
    from specviz.slim import sampling as S

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, vocab)) * 4).astype(np.float32)
    ids = np.sort(rng.choice(vocab, 8192, replace=False)).astype(np.int32)
    q = S.DraftQ(ids.astype(np.int64), S.softmax(rng.standard_normal((1, 8192)).astype(np.float32) * 3), vocab)
    out, m, ms, tot = np.empty(vocab, np.float32), ctypes.c_float(), np.empty(rows, np.float32), np.empty(rows)
    e, at = np.empty((rows, vocab), np.float32), np.empty(8192, np.float32)
    so.sv_softmax_norms(x.ctypes.data, rows, vocab, 1.25, ms.ctypes.data, tot.ctypes.data, e.ctypes.data, 1)
    p, vals, scale = e[0] * np.float32(1 / tot[0]), np.ascontiguousarray(q.values[0]), np.float32(1 / tot[0])
    return {
        "softmax, numpy": lambda: S.softmax(S.process_logits(x[:1], 0.8)),
        "softmax, C (sv_softmax_t)": lambda: so.sv_softmax_t(x[0].ctypes.data, vocab, 1.25, out.ctypes.data),
        "a row's normaliser (sv_softmax_norm)": lambda: so.sv_softmax_norm(x[0].ctypes.data, vocab, 1.25,
                                                                            ctypes.byref(m)),
        f"{rows} rows' normalisers, 1 thread": lambda: so.sv_softmax_norms(
            x.ctypes.data, rows, vocab, 1.25, ms.ctypes.data, tot.ctypes.data, e.ctypes.data, 1),
        f"{rows} rows' normalisers, 2 threads": lambda: so.sv_softmax_norms(
            x.ctypes.data, rows, vocab, 1.25, ms.ctypes.data, tot.ctypes.data, e.ctypes.data, 2),
        "p at 8,192 ids (sv_softmax_at)": lambda: so.sv_softmax_at(x[0].ctypes.data, vocab, 1.25, ms[0], scale,
                                                                  ids.ctypes.data, 8192, at.ctypes.data),
        "residual written, then drawn": lambda: S.invert_cdf(S.residual_over(p, q, 0), 0.5),
        "residual drawn from the exponentials": lambda: so.sv_residual_draw(
            e[0].ctypes.data, vocab, scale, 1.0, ids.ctypes.data, vals.ctypes.data, 8192, 0.5),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--rows", type=int, default=3, help="rows whose normalisers one call takes")
    ap.add_argument("--vocab", type=int, default=262_144)
    args = ap.parse_args(argv)
    from specviz.runtime.native import build

    so = build.lib()
    if so is None:
        raise SystemExit(f"no C stack here: {build.unavailable()}")
    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    calls, times = pieces(so, args.rows, args.vocab), {}
    for _ in range(args.repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times.setdefault(name, []).append(time.perf_counter() - t0)
    for name, seen in times.items():
        print(f"{name:<40} {1e3 * statistics.median(seen):7.3f} ms")


if __name__ == "__main__":
    main()
