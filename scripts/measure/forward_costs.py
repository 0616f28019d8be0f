"""Per-forward cost of each CachedLM path (dynamic, lean) for the bundled models, fp32 and bf16;
with --exactness, whether greedy decoding stays exact on each path and dtype; with --decode, the
end-to-end speedup of greedy speculative decoding on each path.

After a cached prefill of --context tokens, one timed call is a 1-token forward (a decoding step, a
draft step) or a 5-token forward (verifying k = 4 drafts), each rolled back (untimed) before the next.
The paths and both sizes are interleaved call by call (A, B, C, A, B, C, ...) so that load from other
jobs on a shared machine falls on all of them alike; the table gives medians in ms.

    python scripts/measure/forward_costs.py [--models target,tiny,small] [--dtypes float32,bfloat16]
                                    [--reps 200] [--context 128] [--threads 1]
    python scripts/measure/forward_costs.py --exactness [--dtypes ...] [--new-tokens 64]
    python scripts/measure/forward_costs.py --decode [--drafts tiny,small] [--dtypes float32] [--new-tokens 64] [--reps 2]

--exactness, for the bundled target and each path and dtype, over 10 prompts (the example prompts and
windows of the bundled corpus sample): (1) verify vs one at a time: the argmax of each row of a 5-token
forward (a verify pass of k = 4 drafts, at every offset of a greedy continuation) against the argmax of
the same position fed alone; (2) greedy speculative decoding (tiny draft, k = 4) against the same path's
autoregressive greedy and against transformers' generate(do_sample=False), token for token.

--decode: wall time of greedy autoregressive decoding and of speculative decoding (k = 4, each draft)
of the example prompts with the bundled target, on the dynamic and the lean path, interleaved prompt by
prompt; speedups against the same path's autoregressive run and against today's (dynamic) one.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

import specviz
from specviz.models import ASSETS, load_model
from specviz.runtime import lm as lm_module
from specviz.runtime.lm import CachedLM

PATHS = ("dynamic", "lean")
SIZES = (1, 5)


def time_paths(model, context: int, reps: int, seed: int = 0) -> dict[tuple[str, int], float]:
    """Median ms of an n-token forward on top of a cached context, for each path and n in SIZES."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.get_output_embeddings().weight.shape[0]
    prefix = torch.randint(vocab, (context,), generator=g).tolist()
    lms = {path: CachedLM(model, path) for path in PATHS}
    for lm in lms.values():
        lm.feed(prefix)
    times: dict[tuple[str, int], list[float]] = {(p, n): [] for p in PATHS for n in SIZES}
    for rep in range(reps + 5):  # the first 5 rounds warm up allocators and caches
        new = torch.randint(vocab, (max(SIZES),), generator=g).tolist()
        for (path, n), samples in times.items():
            lm = lms[path]
            t0 = time.perf_counter()
            lm.feed(new[:n])
            elapsed = time.perf_counter() - t0
            lm.rollback(context)
            if rep >= 5:
                samples.append(elapsed)
    return {key: 1000 * statistics.median(samples) for key, samples in times.items()}


def table(rows: list[dict]) -> str:
    head = "| model | dtype | n | " + " | ".join(f"{p} ms" for p in PATHS) + " | dynamic/lean |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        ms = [r[p] for p in PATHS]
        lines.append(f"| {r['model']} | {r['dtype']} | {r['n']} | " + " | ".join(f"{m:.2f}" for m in ms)
                     + f" | {r['dynamic'] / r['lean']:.2f}x |")
    return "\n".join(lines)


# -- exactness -----------------------------------------------------------------------------------
def exactness_prompts(tok, count: int = 10, length: int = 24) -> list[list[int]]:
    """The example prompts, then windows of ``length`` tokens spread evenly over the corpus sample."""
    ids = [tok(p).input_ids for p in specviz.EXAMPLE_PROMPTS][:count]
    corpus = tok((ASSETS.parent / "corpus_sample.txt").read_text(), verbose=False).input_ids
    extra = count - len(ids)
    step = len(corpus) // (extra + 1)
    return ids + [corpus[i * step: i * step + length] for i in range(1, extra + 1)]


def one_at_a_time(lm: CachedLM, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """n greedy tokens, one forward each, and the logits that chose them, (n, V): row i predicts token i."""
    rows, tokens = [lm.feed(prompt)[-1]], []
    for _ in range(n):
        tokens.append(int(rows[-1].argmax()))
        rows.append(lm.feed([tokens[-1]])[-1])
    return tokens, torch.stack(rows[:-1])


def verify_mismatches(lm: CachedLM, prompt: list[int], tokens: list[int], rows: torch.Tensor,
                      width: int = 5) -> tuple[int, int, int]:
    """Verify passes of ``width`` tokens (committed[-1] and width - 1 drafts) at every offset of the
    continuation: (rows whose argmax differs from one-at-a-time, rows not bitwise equal, rows compared)."""
    seq, first = prompt + tokens, len(prompt) - 1
    argmax_diff = inexact = total = 0
    for j in range(len(tokens)):
        lm.rollback(first + j)
        ref = rows[j: j + width]
        out = lm.feed(seq[first + j: first + j + width])[: len(ref)]  # row r predicts tokens[j + r]
        argmax_diff += int((out.argmax(-1) != ref.argmax(-1)).sum())
        inexact += int((out != ref).any(-1).sum())
        total += len(out)
    return argmax_diff, inexact, total


def greedy_runs(target, draft, prompt: list[int], n: int) -> tuple[list[int], list[int], list[int]]:
    """Greedy tokens of speculative decoding (k = 4), of autoregressive decoding (both on
    lm_module.DEFAULT_PATH) and of transformers' generate."""
    x = torch.tensor([prompt])
    cfg = specviz.DecodeConfig(k=4, max_new_tokens=n, temperature=0)
    spec = specviz.speculative_generate(target, draft, x, cfg).new_tokens
    auto = specviz.autoregressive_generate(target, x, cfg).new_tokens
    hf = target.generate(x, do_sample=False, max_new_tokens=n)[0, len(prompt):].tolist()
    return spec, auto, hf


def exactness(dtypes: list[str], n: int) -> list[dict]:
    rows = []
    for dtype in dtypes:
        target, tok = load_model("target", dtype=getattr(torch, dtype))
        draft, _ = load_model("tiny", dtype=getattr(torch, dtype))
        prompts = exactness_prompts(tok)
        for path in PATHS:
            lm_module.DEFAULT_PATH = path  # the decoder's CachedLMs take this path
            counts = [0, 0, 0]
            spec_vs_auto = spec_vs_hf = 0
            for prompt in prompts:
                lm = CachedLM(target, path)
                tokens, logits = one_at_a_time(lm, prompt, n)
                counts = [a + b for a, b in zip(counts, verify_mismatches(lm, prompt, tokens, logits))]
                spec, auto, hf = greedy_runs(target, draft, prompt, n)
                spec_vs_auto += spec != auto
                spec_vs_hf += spec != hf
            rows.append(dict(dtype=dtype, path=path, argmax_differs=counts[0], rows_not_bitwise=counts[1],
                             rows=counts[2], spec_ne_autoregressive=spec_vs_auto, spec_ne_transformers=spec_vs_hf,
                             prompts=len(prompts)))
            print(rows[-1], flush=True)
    lm_module.DEFAULT_PATH = "auto"
    return rows


def exactness_table(rows: list[dict]) -> str:
    head = ("| dtype | path | verify argmax != one-at-a-time | rows not bitwise equal | "
            "spec != own autoregressive (prompts) | spec != transformers generate (prompts) |")
    lines = [head, "|---" * 6 + "|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['path']} | {r['argmax_differs']} / {r['rows']} | {r['rows_not_bitwise']} / "
                     f"{r['rows']} | {r['spec_ne_autoregressive']} / {r['prompts']} | "
                     f"{r['spec_ne_transformers']} / {r['prompts']} |")
    return "\n".join(lines)


# -- end to end -----------------------------------------------------------------------------------
def decode_seconds(drafts: list[str], dtype, n: int, reps: int) -> tuple[dict, dict]:
    """Seconds and new tokens per (path, draft) ("none": autoregressive) over the example prompts."""
    target, tok = load_model("target", dtype=dtype)
    models = {"none": None} | {name: load_model(name, dtype=dtype)[0] for name in drafts}
    prompts = [tok(p, return_tensors="pt").input_ids for p in specviz.EXAMPLE_PROMPTS]
    cfg = specviz.DecodeConfig(k=4, max_new_tokens=n, temperature=0)
    seconds, tokens = defaultdict(float), defaultdict(int)
    for _ in range(reps):
        for x in prompts:
            for path in ("dynamic", "lean"):
                lm_module.DEFAULT_PATH = path  # the decoder's CachedLMs take this path
                for name, draft in models.items():
                    t0 = time.perf_counter()
                    trace = specviz.Decoding(target, draft, x, cfg).run()
                    seconds[path, name] += time.perf_counter() - t0
                    tokens[path, name] += len(trace.new_tokens)
    lm_module.DEFAULT_PATH = "auto"
    return seconds, tokens


def decode_table(seconds: dict, tokens: dict) -> str:
    lines = ["| path | draft | tokens/s | speedup vs same path autoregressive | vs dynamic autoregressive |",
             "|---|---|---|---|---|"]
    for (path, name), secs in seconds.items():
        rate = tokens[path, name] / secs
        same = rate / (tokens[path, "none"] / seconds[path, "none"])
        today = rate / (tokens["dynamic", "none"] / seconds["dynamic", "none"])
        lines.append(f"| {path} | {name} | {rate:.1f} | {same:.2f}x | {today:.2f}x |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="target,tiny,small")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--exactness", action="store_true")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--drafts", default="tiny,small")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.decode:
        dtype = args.dtypes.split(",")[0]
        seconds, tokens = decode_seconds(args.drafts.split(","), getattr(torch, dtype), args.new_tokens, args.reps)
        print(f"greedy, k = 4, {args.new_tokens} new tokens, {dtype}, {torch.get_num_threads()} thread(s)\n")
        print(decode_table(seconds, tokens))
        return
    if args.exactness:
        print(exactness_table(exactness(args.dtypes.split(","), args.new_tokens)))
        return
    rows = []
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            model, _ = load_model(name, dtype=getattr(torch, dtype))
            ms = time_paths(model, args.context, args.reps)
            rows += [dict(model=name, dtype=dtype, n=n, **{p: ms[p, n] for p in PATHS}) for n in SIZES]
            print("\n".join(table(rows[-len(SIZES):]).splitlines()[2:]), flush=True)
    print(f"\nmedian ms per forward, context {args.context}, {args.reps} interleaved reps, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
