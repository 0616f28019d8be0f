"""The hardware lab: what a speculative step costs on this machine, measured (``specviz.engines.CostModel``).

    python -m specviz.labs.hardware --target target --draft lite [--repeats 7] [--context 64] [--max-rows 32]

v(n) = a target pass of n rows (the pending token and n - 1 drafts, on top of a cached context) over a one-row
pass, so v(1) = 1; c = one draft step over a one-row target pass. A draft model's step is one row through its own
cached forward (llama-bench's c, ``specviz.engines.llamabench``); any other drafter (n-gram, prompt lookup, a
hybrid, a draft made of the target) is timed inside a short greedy decode, its draft seconds per drafted token.
Each repeat times every row count once, in a shuffled order, then the draft, so load from other work falls on
all of them alike; v and c are medians of each repeat's own ratios, with their min and max. Leviathan's theorem
takes v = 1 for every n: the table says up to which n that holds here (``free_rows``).
"""
from __future__ import annotations

import argparse
import random
import statistics
from dataclasses import dataclass

import pandas as pd
import torch

from ..config import EXAMPLE_PROMPTS, DecodeConfig
from ..decoder import speculative_generate
from ..drafts.drafter import Drafter, ModelDrafter
from ..engines import CostModel
from ..models import load_model, load_pair
from ..runtime.lm import CachedLM, Stopwatch, context_window

ROWS = tuple(range(1, 33))
FREE = 0.10  # a pass within 10% of a one-row pass counts as free
COLUMNS = ["rows", "ms", "ms_min", "ms_max", "v", "v_min", "v_max"]


@dataclass(frozen=True)
class Hardware:
    table: pd.DataFrame  # one row per row count n (COLUMNS): a pass's ms and v(n), median, min and max
    cost: CostModel  # c and the measured v(n) points, source "measured here"
    c_range: tuple[float, float] | None  # c's min and max over the repeats (None: no draft timed)
    free_rows: int  # the most rows a pass takes for at most FREE more than one row (every smaller n too)


def context_ids(model, prompt: list[int], context: int, rows: int, seed: int = 0) -> list[int]:
    """The prompt, topped up with seeded random tokens to ``context`` tokens, leaving room for ``rows`` more."""
    window = context_window(model)
    size = max(len(prompt), context) if window is None else min(max(len(prompt), context), window - rows - 1)
    vocab = model.get_output_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(seed)
    extra = torch.randint(vocab, (max(0, size - len(prompt)),), generator=g).tolist()
    return (list(prompt) + extra)[:size]


def row_timer(model, ctx: list[int], rows: int, seed: int = 0):
    """``time(n)``: seconds of one pass of n rows after the cached context, rolled back (untimed) after."""
    lm, watch = CachedLM(model), Stopwatch(next(model.parameters()).device)
    lm.feed(ctx)
    g = torch.Generator().manual_seed(seed + 1)
    new = torch.randint(lm.vocab_size, (rows,), generator=g).tolist()

    def time(n: int) -> float:
        with watch.running():
            lm.feed(new[:n])
        lm.rollback(len(ctx))
        return watch.take()

    return time


def draft_timer(target, draft, ctx: list[int], prompt: list[int]):
    """``time()``: seconds of one draft step (see the module's docstring); None for no draft."""
    if draft is None:
        return None
    model = draft.model if isinstance(draft, ModelDrafter) else draft
    if not isinstance(model, Drafter):
        vocab = model.get_input_embeddings().weight.shape[0]
        step = row_timer(model, [t % vocab for t in ctx], 1)
        return lambda: step(1)
    ids = torch.tensor([prompt])
    cfg = DecodeConfig(k=4, k_policy="fixed", temperature=0.0, max_new_tokens=16)

    def decode_step() -> float:
        counts = speculative_generate(target, draft, ids, cfg).counts()
        return counts.draft_s / counts.drafted if counts.drafted else 0.0

    return decode_step


def measure(target, draft=None, prompt: list[int] | None = None, rows=ROWS, repeats: int = 7, context: int = 64,
            seed: int = 0, check=None) -> Hardware:
    """v(n) for n in ``rows`` (1 always among them) and c, each repeat interleaved; ``check()`` before each
    repeat (a request's budget)."""
    rows = sorted({1, *(int(n) for n in rows)})
    if rows[0] < 1 or repeats < 1:
        raise ValueError(f"need row counts >= 1 and repeats >= 1, got rows {rows}, repeats {repeats}")
    prompt = list(prompt or [0])
    ctx = context_ids(target, prompt, context, rows[-1], seed)
    time_rows, time_draft = row_timer(target, ctx, rows[-1], seed), draft_timer(target, draft, ctx, prompt)
    for n in rows:  # warm-up: allocators and caches, untimed
        time_rows(n)
    if time_draft:
        time_draft()
    order, samples, drafts = random.Random(seed), {n: [] for n in rows}, []
    for _ in range(repeats):
        if check is not None:
            check()
        for n in order.sample(rows, len(rows)):
            samples[n].append(time_rows(n))
        if time_draft:
            drafts.append(time_draft())
    return summarize(samples, drafts)


def summarize(samples: dict[int, list[float]], drafts: list[float]) -> Hardware:
    """Seconds per repeat -> the table, each ratio taken within a repeat (the same load on both) first."""
    ones = samples[1]
    out = []
    for n, times in samples.items():
        ratios = [t / one for t, one in zip(times, ones)]
        out.append(dict(rows=n, ms=1e3 * statistics.median(times), ms_min=1e3 * min(times), ms_max=1e3 * max(times),
                        v=statistics.median(ratios), v_min=min(ratios), v_max=max(ratios)))
    table = pd.DataFrame(out, columns=COLUMNS)
    free = free_rows(table)
    notes = [f"v(n) measured for n = {table.rows.min()}..{table.rows.max()}, {len(ones)} repeats (medians of "
             f"per-repeat ratios); one row: {table.ms.iloc[0]:.3g} ms", f"extra verify rows free (v <= {1 + FREE:g}) "
             f"up to n = {free}"]
    c, c_range = 0.0, None
    if drafts:
        ratios = [d / one for d, one in zip(drafts, ones)]
        c, c_range = statistics.median(ratios), (min(ratios), max(ratios))
        notes.append(f"c = {c:.3g} (min {c_range[0]:.3g}, max {c_range[1]:.3g}); a draft step "
                     f"{1e3 * statistics.median(drafts):.3g} ms")
    cost = CostModel(c=c, verify=tuple(zip(table.rows, table.v)), source="measured here", notes=tuple(notes))
    return Hardware(table=table, cost=cost, c_range=c_range, free_rows=free)


def free_rows(table: pd.DataFrame, tolerance: float = FREE) -> int:
    """The largest n such that every pass of 1..n rows costs at most 1 + tolerance one-row passes."""
    free = 0
    for n, v in zip(table.rows, table.v):
        if n != free + 1 or v > 1 + tolerance:
            break
        free = n
    return free


def pilot_seconds(target, prompt: list[int], rows=ROWS, repeats: int = 7, context: int = 64) -> float:
    """How long ``measure`` will take, from one untimed and one timed pass of one and of the most rows (the
    draft's step is cheaper than a one-row pass of the target; counted as one)."""
    rows = sorted({1, *rows})
    time = row_timer(target, context_ids(target, prompt, context, rows[-1]), rows[-1])
    time(1), time(rows[-1])
    one, most = time(1), time(rows[-1])
    per_repeat = sum(one + (most - one) * (n - 1) / max(1, rows[-1] - 1) for n in rows) + one
    return (repeats + 1) * per_repeat


def table_text(hw: Hardware) -> str:
    return hw.table.round(3).to_string(index=False)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specviz.labs.hardware", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default=None, help="a draft name (default: none, v(n) only)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--context", type=int, default=64, help="tokens cached before each timed pass")
    ap.add_argument("--max-rows", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.draft:
        target, draft, tok = load_pair(args.target, args.draft)
    else:
        (target, tok), draft = load_model(args.target), None
    hw = measure(target, draft, tok(EXAMPLE_PROMPTS[0]).input_ids, range(1, args.max_rows + 1), args.repeats,
                 args.context)
    print(f"{args.target} + {args.draft or 'no draft'}, {torch.get_num_threads()} threads\n{table_text(hw)}\n")
    print(f"CostModel(c={hw.cost.c:.4g}, verify=<{len(hw.cost.verify)} points>, source={hw.cost.source!r})")
    print("\n".join(f"  {n}" for n in hw.cost.notes))


if __name__ == "__main__":
    main()
