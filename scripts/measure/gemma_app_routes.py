"""Gemma-3 270M as shipped, served by the app (``SPECVIZ_EXTRA_MODELS``): the explorer's runs and their baselines
through the app's own code (``app.runs.generate`` and ``runs.baseline``, every decision recorded), on the slim route
(``app.slim_route``: the C stack, ``gemma-c``) and on the torch decoder's route (``SPECVIZ_FORWARD=lean``: the lean
forward, its layers in C), interleaved prompt by prompt.

    python scripts/measure/gemma_app_routes.py --drafts prompt-lookup gemma-3-270m-feature-draft --k 2

``--draft-stop`` is the explorer's "stop drafting below draft confidence q(x)" (``DecodeConfig.draft_stop``; 0 off).

Prints the host line, the process's resident memory (``gemma_memory.status``) once the target is loaded and after
a first run of each route (the slim route reads the file's weights again for the C stack, beside the torch model's),
each run's tokens/s, then per temperature, route and draft the median tokens/s, the median speedup over its own
baseline and the median tokens a round.
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_args import gemma_parser, shipped  # noqa: E402
from gemma_memory import KEYS, status  # noqa: E402
from gemma_vs_llamacpp import PROMPTS  # noqa: E402
from hostline import host_line  # noqa: E402

ROUTES = {"slim (gemma-c)": None, "torch (lean)": "lean"}


def one(store, prompt, draft, cfg, route):
    from specviz.app import runs

    os.environ.pop("SPECVIZ_FORWARD", None)
    if ROUTES[route]:
        os.environ["SPECVIZ_FORWARD"] = ROUTES[route]
    trace = runs.generate(store, prompt, "gemma-3-270m", draft, cfg)
    base = runs.baseline(store, trace)
    s, b = trace.summary(), base.summary()
    return dict(forward=trace.forward, tok_s=s.tokens_per_s, base_tok_s=b.tokens_per_s,
                speedup=s.tokens_per_s / b.tokens_per_s, tau=len(trace.new_tokens) / max(len(trace.rounds), 1))


def memory(step: str) -> None:
    s = status()
    print(f"# memory, {step}: " + ", ".join(f"{k} {s[k]:.0f} MB" for k in KEYS), flush=True)


def main(argv=None) -> None:
    ap = gemma_parser(__doc__, feature_draft=False)
    ap.add_argument("--drafts", nargs="+", default=["prompt-lookup", "gemma-3-270m-feature-draft"])
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--draft-stop", type=float, default=0.0, help="stop drafting below this draft confidence (0: off)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    args.gguf = shipped(args.gguf)
    os.environ["SPECVIZ_EXTRA_MODELS"] = f"gemma-3-270m={args.gguf}"
    from specviz.app.store import ModelStore
    from specviz.config import DecodeConfig

    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    store = ModelStore()
    store.target("gemma-3-270m")
    memory("the target loaded (the torch model)")
    for route in ROUTES:  # a first run of each route, for its memory
        for draft in args.drafts if not ROUTES[route] else ["prompt-lookup"]:
            one(store, PROMPTS[0], draft, DecodeConfig(k=args.k, draft_stop=args.draft_stop, max_new_tokens=8), route)
            memory(f"after a first run: {route}, {draft}")
    rows = []
    for t in args.temperatures:
        for i, prompt in enumerate(PROMPTS[: args.prompts]):
            cfg = DecodeConfig(k=args.k, draft_stop=args.draft_stop, temperature=t, max_new_tokens=args.max_new_tokens, seed=i)
            for route in ROUTES:
                for draft in args.drafts:
                    if draft != "prompt-lookup" and ROUTES[route]:
                        continue  # a feature draft of the C stack runs on the slim route only
                    r = one(store, prompt, draft, cfg, route) | dict(T=t, prompt=i, route=route, draft=draft)
                    rows.append(r)
                    print(f"T={t:g} prompt {i} {route:<15} {draft:<28} {r['forward']:<8} {r['tok_s']:6.1f} tok/s, "
                          f"baseline {r['base_tok_s']:6.1f}, {r['speedup']:.2f}x, tau {r['tau']:.2f}", flush=True)
    print()
    for t in args.temperatures:
        for route in ROUTES:
            for draft in args.drafts:
                sel = [r for r in rows if r["T"] == t and r["route"] == route and r["draft"] == draft]
                if sel:
                    med = {k: statistics.median(r[k] for r in sel) for k in ("tok_s", "base_tok_s", "speedup", "tau")}
                    print(f"T={t:g} {route:<15} {draft:<28} median {med['tok_s']:6.1f} tok/s, baseline "
                          f"{med['base_tok_s']:6.1f}, speedup {med['speedup']:.2f}x, tau {med['tau']:.2f}")


if __name__ == "__main__":
    main()
