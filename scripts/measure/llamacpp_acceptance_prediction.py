"""The acceptance llama.cpp reported in the recorded conformance run, against the rule lab's prediction of it.

    python scripts/measure/llamacpp_acceptance_prediction.py [--draws 2000] [--seed 0] [--threads 1]

The run (tests/conformance/fixtures/llamacpp, scripts/measure/conformance_llamacpp.sh): llama-server with the
bundled target and `lite` as its draft (--spec-type draft-simple --spec-draft-n-max 4), prompt p0, 4 tokens per
request, 500 requests at each setting; the samples carry each request's timings.draft_n / draft_n_accepted.

How llama.cpp drafts and counts (this build's source):
  - common/speculative.cpp, draft-simple: the draft's sampler chain is top-k 10 alone, and the drafted token is
    cur_p->data[0], the draft's argmax, whatever the request's temperature; p_min (default 0) never stops it early,
    n_min (default 0) never drops a draft.
  - tools/server/server-context.cpp: a round drafts n_draft_max = min(n_max, n_remaining - 1) tokens
    (get_n_draft_max), draft_n adds every drafted token, rejected or not, and draft_n_accepted adds the drafts kept;
    the target verifies with common_sampler_sample_and_accept_n: it samples its own token y from its full sampler
    chain at each drafted position and keeps the draft while y equals it (`exact_match` in specviz/rules.py).
So with 4 tokens a request: token 1 from the prefill, then a round of 2 drafts; one more round of 1 draft when the
first was rejected; the last token plain.

The prediction replays that schedule with specviz's models and sampling (specviz.sampling.process_logits): the
draft takes its argmax, the target samples from its processed law p, a draft x is kept when the target's y == x
(probability p(x)). It reports the simulated counts and the engine's, each with a Wilson interval, and the predicted rate as the
sum of p(x_draft) over the drafted positions the target reached over the drafts (the expectation, without the
draws' accept/reject noise). The verdict compares that with the engine's rate, each with its standard error over
requests (drafts within one request are not independent, so the binomial intervals are a little narrow).

Then the model is checked on the engine's own samples (--no-replay skips it): the schedule replayed over each
speculation-on request's tokens, with the draft's argmax, must give the draft_n and draft_n_accepted the engine
reported for that request; and at the drafted positions each run reached, the drafts kept are set against the sum
of the modelled p(x_draft) there (a z-score), which separates a wrong model of the target's law from the luck of
the engine's draws. The speculation-off samples, drawn independently from the same law, are replayed the same way.
"""
import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np
import torch
from hostline import host_line

from specviz.engines.fit import wilson
from specviz.models import load_model
from specviz.sampling import process_logits

FIXTURE = Path(__file__).resolve().parents[2] / "tests/conformance/fixtures/llamacpp"


def engine_counts(samples: Path) -> dict:
    """{setting label: (settings dict, prompt, n_predict, [(drafted, accepted) per request])}, speculation on."""
    out = {}
    with gzip.open(samples, "rt") as f:
        for line in f:
            row = json.loads(line)
            out.setdefault(row["setting"], (row["settings"], row["prompt"], row["n_predict"], []))[3].append(
                (row["draft_n"], row["draft_accepted"]))
    return out


def ratio(pairs: list) -> tuple[float, float]:
    """(sum a / sum d, its standard error over requests): the delta method for a ratio of sums, so the drafts of one
    request count as one correlated draw, not as independent trials."""
    d = np.array([x[0] for x in pairs], float)
    a = np.array([x[1] for x in pairs], float)
    r = a.sum() / d.sum()
    return r, float(np.sqrt(((a - r * d) ** 2).sum() * len(d) / (len(d) - 1)) / d.sum())


class Pair:
    """The target's processed law and the draft's argmax at a context, cached (contexts repeat a lot)."""

    def __init__(self, target, draft, settings: dict):
        self.target, self.draft, self.s = target, draft, settings
        self._p, self._x = {}, {}

    @torch.no_grad()
    def p(self, ctx: tuple) -> torch.Tensor:
        if ctx not in self._p:
            logits = self.target(torch.tensor([ctx])).logits[0, -1]
            self._p[ctx] = process_logits(logits, self.s["temperature"], self.s["top_k"], self.s["top_p"]).softmax(-1)
        return self._p[ctx]

    @torch.no_grad()
    def x(self, ctx: tuple) -> int:
        if ctx not in self._x:
            self._x[ctx] = int(self.draft(torch.tensor([ctx])).logits[0, -1].argmax())
        return self._x[ctx]


def one_request(pair: Pair, prompt: tuple, n_predict: int, k: int, gen: torch.Generator) -> tuple[int, int, float]:
    """(drafted, accepted, sum of p(x_draft) over the drafted positions the target reached) for one request."""
    sample = lambda ctx: int(torch.multinomial(pair.p(ctx), 1, generator=gen))  # noqa: E731
    ctx = prompt + (sample(prompt),)  # token 1: the prefill pass
    drafted = accepted = 0
    expected = 0.0
    while len(ctx) - len(prompt) < n_predict:
        n_draft = min(k, n_predict - (len(ctx) - len(prompt)) - 1)
        if n_draft <= 0:
            ctx += (sample(ctx),)
            continue
        xs = drafts(pair, ctx, n_draft)
        drafted += n_draft
        for x in xs:
            expected += float(pair.p(ctx)[x])
            y = sample(ctx)
            ctx += (y,)
            if y != x:
                break
            accepted += 1
        else:
            ctx += (sample(ctx),)  # all kept: the target's bonus token
    return drafted, accepted, expected


def drafts(pair: Pair, ctx: tuple, n: int) -> list:
    """The draft's n tokens after ``ctx``, each its argmax after the ones before (llama.cpp's draft-simple)."""
    xs = []
    for _ in range(n):
        xs.append(pair.x(ctx + tuple(xs)))
    return xs


def engine_samples(path: Path) -> dict:
    """{setting label: [(tokens, draft_n, draft_accepted) per request]} from a samples file (gzipped or not)."""
    out = {}
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
        for line in f:
            row = json.loads(line)
            out.setdefault(row["setting"], []).append((tuple(row["tokens"]), row["draft_n"], row["draft_accepted"]))
    return out


def replay(pair: Pair, prompt: tuple, tokens: tuple, k: int) -> tuple[int, int, list]:
    """llama.cpp's schedule run over tokens it emitted (or a plain run's): (drafted, accepted, [(context, draft,
    kept)] per drafted position the target reached). The target's draws are the tokens themselves, so over the
    speculation-on samples this gives the engine's own counts wherever the draft is modelled right."""
    ctx, i, drafted, accepted, events = prompt + tokens[:1], 1, 0, 0, []
    while i < len(tokens):
        n_draft = min(k, len(tokens) - i - 1)
        if n_draft <= 0:
            ctx, i = ctx + (tokens[i],), i + 1
            continue
        xs = drafts(pair, ctx, n_draft)
        drafted += n_draft
        for x in xs:
            y = tokens[i]
            events.append((ctx, x, y == x))
            ctx, i = ctx + (y,), i + 1
            if y != x:
                break
            accepted += 1
        else:
            ctx, i = ctx + (tokens[i],), i + 1  # all kept: the target's bonus token
    return drafted, accepted, events


def replay_report(pair: Pair, prompt: tuple, on: list, off: list, k: int) -> None:
    """The model of llama.cpp checked on its own samples. Over the speculation-on samples: the draft counts replayed
    against the reported ones, request by request. Over both runs' samples (the off run's tokens are the engine's
    own law, drawn independently): at the drafted positions reached, the drafts kept against the sum of the modelled
    p(x_draft) there, a martingale: z = (kept - sum p) / sqrt(sum p (1 - p)), by drafted position (every request
    reaches two: the first draft, then the second draft or the one redrafted after a rejection)."""
    for mode, rows in (("on", on), ("off", off)):
        runs = [replay(pair, prompt, t, k) for t, _, _ in rows]
        if mode == "on":
            same = sum((r[0], r[1]) == (d, a) for r, (_, d, a) in zip(runs, rows))
            print(f"  replay of the {len(rows)} speculation-on requests: {same} give the engine's own draft_n and "
                  f"draft_n_accepted")
        else:
            print(f"  replay of the {len(rows)} speculation-off requests (no model of the target): "
                  f"{fmt([r[:2] for r in runs])}")
        for which, pick in (("1st reached", 0), ("2nd reached", 1), ("all", None)):
            events = [e for r in runs for j, e in enumerate(r[2]) if pick is None or j == pick]
            kept, ps = sum(e[2] for e in events), np.array([float(pair.p(c)[x]) for c, x, _ in events])
            z = (kept - ps.sum()) / np.sqrt((ps * (1 - ps)).sum())
            print(f"    {mode:3s} {which:11s}: {len(events):4d} drafts, kept {kept:3d}, modelled sum of p(x_draft) "
                  f"{ps.sum():6.1f}, z = {z:+.2f}")


def fmt(rows: list) -> str:
    x, n = int(sum(r[1] for r in rows)), int(sum(r[0] for r in rows))
    low, high = wilson(x, n)
    return f"{x} of {n} = {x / n:.1%} (Wilson 95% [{low:.1%}, {high:.1%}])"


def report(sides: dict) -> None:
    """Both counts with their binomial intervals; the verdict from the expected rate against the engine's, each
    with its standard error over requests."""
    (r_e, se_e), (r_p, se_p) = ratio(sides["engine"]), ratio(sides["expected"])
    diff, half = r_p - r_e, 1.96 * float(np.hypot(se_e, se_p))
    print(f"  llama.cpp reported: {fmt(sides['engine'])}, +- {1.96 * se_e:.1%} over requests")
    print(f"  predicted, drawn  : {fmt(sides['drawn'])}")
    print(f"  predicted, E[p(x_draft)]: {r_p:.2%} +- {1.96 * se_p:.2%} over requests")
    print(f"  predicted - reported: {diff:+.2%} [{diff - half:+.2%}, {diff + half:+.2%}]"
          f" -> {'agree' if abs(diff) <= half else 'differ'}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=Path, default=FIXTURE / "samples-on.jsonl.gz")
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default="lite")
    ap.add_argument("--k", type=int, default=4, help="--spec-draft-n-max of the run")
    ap.add_argument("--draws", type=int, default=2000, help="simulated requests per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-replay", dest="replay", action="store_false",
                    help="skip replaying the recorded samples through the model of llama.cpp's schedule")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(host_line())
    print(f"pair {args.target} / {args.draft}, k = {args.k}, {args.draws} simulated requests per setting, "
          f"seed {args.seed}; engine: {args.samples}")
    target, tok = load_model(args.target)
    draft, _ = load_model(args.draft)
    start, every = time.perf_counter(), {"engine": [], "drawn": [], "expected": []}
    on_samples = engine_samples(args.samples)
    off_samples = engine_samples(args.samples.with_name(args.samples.name.replace("-on.", "-off.")))
    for label, (settings, prompt, n_predict, engine) in engine_counts(args.samples).items():
        pair, gen = Pair(target, draft, settings), torch.Generator().manual_seed(args.seed)
        ids = tuple(tok(prompt).input_ids)
        runs = [one_request(pair, ids, n_predict, args.k, gen) for _ in range(args.draws)]
        sides = {"engine": engine, "drawn": [r[:2] for r in runs], "expected": [(r[0], r[2]) for r in runs]}
        print(f"\n{label} (prompt {prompt!r}, {n_predict} tokens, {len(engine)} requests)")
        report(sides)
        if args.replay:
            replay_report(pair, ids, on_samples[label], off_samples[label], args.k)
        for key, rows in sides.items():
            every[key] += rows
    print("\nboth settings")
    report(every)
    print(f"simulation: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
