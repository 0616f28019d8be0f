"""Sides of Gemma-3 270M on specviz.slim's C stack timed against each other in one run, interleaved: verify passes by
row count, then decodes of ordinary English with an optional feature draft. A side is a sequence and the call that
sets it up before each of its passes or decodes (``gemma_prefetch.py``: one sequence, a prefetch setting a side;
``gemma_layouts.py``: a sequence a layout)."""
from __future__ import annotations

import statistics
import time

import numpy as np
from gemma_drafts_vs_llamacpp import specviz_call
from gemma_vs_llamacpp import PROMPTS


def passes(sides: dict, rows, repeats: int) -> dict:
    """{(side, n): [(pass s, head s)]} after a 40-token context, every side and row count once per repeat, the order
    reversed each one. ``sides``: {name: (sequence, setup)}."""
    ids = np.arange(1000, 1040 + max(rows), dtype=np.int32)
    for seq, setup in sides.values():
        setup()
        seq.crop(0)
        seq.decode(ids[:40])
    order = [(name, n) for name in sides for n in rows]
    out = {key: [] for key in order}
    for rep in range(repeats):
        for name, n in order if rep % 2 else order[::-1]:
            seq, setup = sides[name]
            setup()
            seq.crop(40)
            t = time.perf_counter()
            seq.decode(ids[40: 40 + n])
            out[(name, n)].append((time.perf_counter() - t, seq.head_seconds))
    return out


def decodes(sides: dict, drafts: dict, tok, args) -> tuple[dict, dict]:
    """{(T, side and draft): [(tokens/s, tau, ratio to the same side's autoregressive call)]} over --prompts prompts at
    each of --temperatures, each call the benchmark's own (``gemma_drafts_vs_llamacpp.specviz_call``), the order of
    the calls rotated each prompt; and the greedy outputs, {(prompt, side): {texts}}. ``drafts``: {side: draft}, or
    empty for the autoregressive calls alone."""
    out, greedy = {}, {}
    for temp in args.temperatures:
        for i, text in enumerate(PROMPTS[: args.prompts]):
            calls = [(name, d) for name in sides for d in ((None, drafts[name]) if drafts else (None,))]
            turn, got = i % len(calls), {}
            for name, d in calls[turn:] + calls[:turn]:
                seq, setup = sides[name]
                setup()
                new, tps, tau = specviz_call(seq, tok, d, text, temp, 64, i, args.k, "slim-c", args.min_q if d else 0.0)
                got[(name, d is None)] = (tps, tau)
                if temp == 0:
                    greedy.setdefault((i, name), set()).add(tuple(new))
            for (name, ar), (tps, tau) in got.items():
                label = f"{name} " + ("autoregressive" if ar else f"feature draft k={args.k} min q={args.min_q}")
                out.setdefault((temp, label), []).append((tps, tau, tps / got[(name, True)][0]))
    return out, greedy


def report(sides: dict, drafts: dict, tok, args, width: int) -> None:
    """Both, printed: each side's median pass and head by row count, then each decode's median tokens/s, mean tau and
    median speedup over its side's autoregressive call, then per side whether the draft's greedy text was its
    autoregressive text (``width``: the sides' names padded to it)."""
    for (name, n), v in passes(sides, args.rows, args.repeats).items():
        w, h = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        print(f"{name:<{width}} rows {n}: pass {1e3 * w:6.2f} ms  head {1e3 * h:6.2f}  layers {1e3 * (w - h):6.2f}",
              flush=True)
    results, greedy = decodes(sides, drafts, tok, args)
    for (temp, label), v in results.items():
        print(f"T={temp:g} {label:<{width + 34}} {statistics.median(x[0] for x in v):6.1f} tok/s  tau "
              f"{statistics.mean(x[1] for x in v):.2f}  {statistics.median(x[2] for x in v):.2f}x its autoregressive")
    for name in sides if greedy and drafts else ():
        same = [len(outs) == 1 for (_, n), outs in greedy.items() if n == name]
        print(f"{name}: greedy draft == autoregressive on {sum(same)}/{len(same)} prompts")
