"""Benchmark: ours against transformers' generate(), side by side in one run.

    python -m specviz.labs.bench [--target target] [--draft small] [--k 4] [--temperature 0] [--repeats 3]

Methods, interleaved prompt by prompt and repeat by repeat so that machine noise hits all alike:
  ours-ar        autoregressive_generate (the baseline: one target forward per token)
  ours-spec      speculative_generate, recording the full trace
  ours-norecord  speculative_generate with DecodeConfig(record=False)
  hf-plain       target.generate()
  hf-assisted    target.generate(assistant_model=draft, same k, constant schedule, same confidence stop)
                 (a prompt-lookup draft is compared with generate(prompt_lookup_num_tokens=k))
  ours-ar-torch  (--forward llamacpp) and ours-ar-llamacpp (llama-cpp-python installed): the baseline on the other
                 forward too (the torch one; llama.cpp's). Tokens/s: all tokens over all wall time; ratios within the run.
"""
from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
from tqdm.auto import tqdm

from .. import theory
from ..config import EXAMPLE_PROMPTS, HELDOUT_PROMPTS, DecodeConfig, TreeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..drafts.drafter import Drafter, PromptLookupDrafter
from ..models import DEFAULT_DRAFT, DEFAULT_TARGET, drafter_for, load_model
from ..runtime import llamacpp, lm, packed_linear
from ..trace import Counts, Trace

PROMPT_SETS = {"example": EXAMPLE_PROMPTS, "heldout": HELDOUT_PROMPTS, "all": EXAMPLE_PROMPTS + HELDOUT_PROMPTS}


@dataclass
class Tally:
    """One method's runs: tokens and wall seconds, tokens/s per call, and (ours) what the decoder counted."""

    tokens: int = 0
    seconds: float = 0.0
    per_call: list[float] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    compared: int = 0  # greedy runs (ours) whose text was compared with ours-ar's on the same prompt and repeat
    differing: int = 0  # ... and differed from it

    def add(self, tokens: int, seconds: float, counts: Counts | None = None) -> None:
        self.tokens += tokens
        self.seconds += seconds
        self.per_call.append(tokens / seconds if seconds else 0.0)
        self.counts = self.counts + (counts or Counts())

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def hf_kwargs(cfg: DecodeConfig, pad_id) -> dict:
    """generate() settings equal to ours: no length or EOS surprises, sampling transforms spelled out."""
    kw = dict(max_new_tokens=cfg.max_new_tokens, pad_token_id=pad_id)
    if cfg.greedy:
        return kw | dict(do_sample=False, temperature=None, top_k=None, top_p=None)
    return kw | dict(do_sample=True, temperature=cfg.temperature, top_k=cfg.top_k or None, top_p=cfg.top_p)


def methods(target, draft, cfg: DecodeConfig, plain_too: bool = False) -> dict:
    """name -> function(input_ids, seed) -> the number of generated tokens (transformers) or the Trace (ours);
    ``plain_too``: also ours-spec with the lean path's several-row matmuls on MKL's GEMM (ours-spec-plain)."""
    pad = target.generation_config.pad_token_id or 0
    kw = hf_kwargs(cfg, pad)
    if cfg.tree is not None:  # transformers' assisted generation drafts chains only
        assisted = None
    elif isinstance(draft, PromptLookupDrafter):  # transformers' own prompt lookup
        assisted = dict(prompt_lookup_num_tokens=cfg.k, max_matching_ngram_size=draft.max_ngram)
    elif isinstance(draft, Drafter):  # no transformers counterpart (e.g. the n-gram draft)
        assisted = None
    else:
        assisted = dict(assistant_model=draft)

    def hf(extra):
        def run(ids, seed):
            torch.manual_seed(seed)
            with assistant_settings(extra.get("assistant_model"), cfg.k, cfg.draft_stop):
                return target.generate(ids, **kw, **extra).shape[1] - ids.shape[1]
        return run

    fns = {
        "ours-ar": lambda ids, seed: autoregressive_generate(target, ids, replace(cfg, seed=seed)),
        "ours-spec": lambda ids, seed: speculative_generate(target, draft, ids, replace(cfg, seed=seed)),
        "ours-norecord": lambda ids, seed: speculative_generate(target, draft, ids, replace(cfg, seed=seed, record=False)),
        "hf-plain": hf({}),
    }
    other = "auto" if lm.DEFAULT_PATH == "llamacpp" else "llamacpp" if llamacpp.supports(target) is None else None
    if other:
        fns[f"ours-ar-{'torch' if other == 'auto' else other}"] = lambda ids, seed: lm.on_path(
            other, autoregressive_generate, target, ids, replace(cfg, seed=seed))
    if plain_too:
        fns["ours-spec-plain"] = lambda ids, seed: packed_linear.without(
            speculative_generate, target, draft, ids, replace(cfg, seed=seed, record=False))
    return fns | ({"hf-assisted": hf(assisted)} if assisted is not None else {})


@contextmanager
def assistant_settings(draft, k: int, stop: float = 0.0):
    """Make transformers' assistant draft as ours does: k tokens a round, stopping early only where
    DecodeConfig.draft_stop does (its assistant_confidence_threshold; 0 = never). transformers reads these from the
    ASSISTANT's generation_config; its defaults (20 tokens, stop below 0.4) would compare a different rule."""
    if draft is None:
        yield
        return
    gc = draft.generation_config
    fixed = dict(num_assistant_tokens=k, num_assistant_tokens_schedule="constant", assistant_confidence_threshold=stop)
    saved = {name: getattr(gc, name, None) for name in fixed}
    for name, value in fixed.items():
        setattr(gc, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(gc, name, value)


@torch.inference_mode()
def run_bench(target, draft, prompts: list[torch.Tensor], cfg: DecodeConfig, repeats: int = 3,
              plain_too: bool = False) -> dict[str, Tally]:
    fns = methods(target, draft, cfg, plain_too)
    tallies = {name: Tally() for name in fns}
    t0 = time.perf_counter()
    for ids in prompts[:1]:  # warm-up: first calls allocate; it also times one call of each method
        for fn in fns.values():
            fn(ids, 0)
    pilot, per_prompt = time.perf_counter() - t0, len(run_order(list(fns), 0))  # the recording pair runs twice
    print(f"estimated ≈ {pilot * per_prompt / len(fns) * repeats * len(prompts):.0f} s for "
          f"{repeats * len(prompts) * per_prompt} runs (from the warm-up: {pilot:.1f} s for one prompt through every "
          "method)", flush=True)
    progress = tqdm(total=repeats * len(prompts), desc="bench", unit="prompt", leave=False)
    for rep in range(repeats):
        for i, ids in enumerate(prompts):
            progress.update()
            texts = {}
            for name in run_order(list(fns), rep + i):
                t0 = time.perf_counter()
                out = fns[name](ids, rep)
                seconds = time.perf_counter() - t0
                if isinstance(out, Trace):
                    tallies[name].add(len(out.new_tokens), seconds, out.counts())
                    texts.setdefault(name, []).append(out.new_tokens)
                else:
                    tallies[name].add(out, seconds)
            if cfg.greedy:  # exactness on the real models, every run: greedy text == the target's own greedy text
                for name, runs in texts.items():
                    if name.startswith("ours-ar"):  # the reference, or a baseline on another forward's kernels
                        continue
                    tallies[name].compared += len(runs)
                    tallies[name].differing += sum(t != texts["ours-ar"][0] for t in runs)
    return tallies


def run_order(names: list[str], turn: int) -> list[str]:
    """The methods' order for one prompt: rotated each turn so no method always runs first, with ours-spec and
    ours-norecord run twice each, side by side as A B B A (A alternating between them): the recording overhead is a
    median over adjacent pairs, so each pair shares the host's state of the moment and a drift falls on both alike."""
    pair = [n for n in ("ours-spec", "ours-norecord") if n in names]
    units = [[n] for n in names if n not in pair]
    a_b = pair[::-1] if turn % 2 else pair
    units.insert(min(1, len(units)), a_b + a_b[::-1] if len(pair) == 2 else pair)
    shift = turn % len(units)
    return [n for unit in units[shift:] + units[:shift] for n in unit]


@dataclass(frozen=True)
class Measured:
    """What one benchmark run measured, side by side: the speedup of ours-spec over the fastest of our baselines, the
    target passes per token (the hardware-free figure), the decoder's own
    figures (acceptance rate, alpha, tau, c and v against the baseline's forward), Leviathan's prediction from
    them, and the ratios against transformers' assisted generation and against not recording."""

    speedup: float
    acceptance_rate: float
    alpha: float
    tau: float
    c: float
    v: float
    predicted: float
    vs_assisted: float | None  # ours-spec tokens/s over hf-assisted's (None: no transformers counterpart)
    recording_overhead: float  # median over paired runs of (ours-spec time / ours-norecord time - 1)
    baseline: str = "ours-ar"  # the fastest of our baselines the speedup divides by (ours-ar-torch: the torch forward)
    passes_per_token: float = 0.0  # target passes per generated token of ours-spec: the hardware-free figure
    differing: int = 0  # greedy: runs of ours whose text differed from ours-ar's (the target's own greedy text)
    compared: int = 0  # greedy: runs of ours compared (0: sampled, nothing to compare)

    @property
    def of_predicted(self) -> float:
        return self.speedup / self.predicted if self.predicted else 0.0


def measure(tallies: dict[str, Tally]) -> Measured:
    spec, base = tallies["ours-spec"], tallies["ours-ar"]
    fastest = max((n for n in BASELINES if n in tallies and n != "hf-plain"), key=lambda n: tallies[n].tokens_per_s)
    c, v, k = theory.cost_ratio(spec.counts, base.counts), theory.verify_cost(spec.counts, base.counts), \
        theory.mean_k(spec.counts)
    assisted = tallies.get("hf-assisted")
    paired = statistics.median(n / s for s, n in zip(spec.per_call, tallies["ours-norecord"].per_call))
    return Measured(
        speedup=spec.tokens_per_s / tallies[fastest].tokens_per_s, baseline=fastest,
        passes_per_token=spec.counts.target_forwards_per_token, acceptance_rate=spec.counts.acceptance_rate,
        alpha=spec.counts.alpha, tau=spec.counts.tau, c=c, v=v,
        predicted=theory.expected_speedup(min(spec.counts.alpha, 1.0), k, c, v),
        vs_assisted=spec.tokens_per_s / assisted.tokens_per_s if assisted else None, recording_overhead=paired - 1,
        differing=sum(t.differing for t in tallies.values()), compared=sum(t.compared for t in tallies.values()))


def report(tallies: dict[str, Tally]) -> str:
    base, spec = tallies["ours-ar"].tokens_per_s, tallies["ours-spec"].tokens_per_s
    lines = [f"{'method':<15}{'tokens':>8}{'seconds':>9}{'tok/s':>9}{'median':>9}{'vs ours-ar':>12}"]
    for name, t in tallies.items():
        lines.append(f"{name:<15}{t.tokens:>8}{t.seconds:>9.2f}{t.tokens_per_s:>9.1f}"
                     f"{statistics.median(t.per_call):>9.1f}{t.tokens_per_s / base:>11.2f}x")
    m, norec, plain = measure(tallies), tallies["ours-norecord"].tokens_per_s, tallies["hf-plain"].tokens_per_s
    lines.append(f"target passes per token of ours-spec: {m.passes_per_token:.3f} (ours-ar: 1)")
    lines.append(f"speedup of ours-spec over {m.baseline}: {m.speedup:.2f}x (acceptance {m.acceptance_rate:.3f}, alpha "
                 f"{m.alpha:.3f}, tau {m.tau:.2f}, c {m.c:.3f}, verify v {m.v:.2f}: predicted {m.predicted:.2f}x, "
                 f"measured / predicted {m.of_predicted:.2f})")
    if m.vs_assisted is not None:
        assisted = tallies["hf-assisted"].tokens_per_s
        lines += [f"ours-spec vs hf-assisted: {m.vs_assisted:.2f}x", f"hf-assisted vs hf-plain: {assisted / plain:.2f}x"]
    if m.compared:
        lines.append(f"greedy text == ours-ar's (the target's own greedy text) in {m.compared - m.differing} of "
                     f"{m.compared} runs of ours")
    if "ours-spec-plain" in tallies:
        lines.append(f"packed matmuls (ours-norecord) vs plain (ours-spec-plain): "
                     f"{norec / tallies['ours-spec-plain'].tokens_per_s:.2f}x")
    fastest = max((n for n in BASELINES if n in tallies), key=lambda n: tallies[n].tokens_per_s)
    lines.append(f"speedup of ours-spec over the fastest baseline here ({fastest}, {BASELINES[fastest]}): "
                 f"{spec / tallies[fastest].tokens_per_s:.2f}x")
    lines += [f"ours-ar vs hf-plain: {base / plain:.2f}x",
              f"recording overhead (ours-spec time / ours-norecord time - 1): {100 * (norec / spec - 1):+.1f}% in total, "
              f"{100 * m.recording_overhead:+.1f}% median over paired runs (same prompt and repeat; robust to one-off "
              "stalls)"]
    return "\n".join(lines)


BASELINES = {"ours-ar": "the target alone, this run's forward", "ours-ar-torch": "the target alone, torch forward",
             "ours-ar-llamacpp": "the target alone, llama.cpp's forward", "hf-plain": "transformers' generate"}


def common_args(ap: argparse.ArgumentParser, max_new_tokens: int, repeats: int, threads: int) -> None:
    """The options every benchmark takes (this one and batch_bench)."""
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--threads", type=int, default=threads, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto", help="the models' precision")
    ap.add_argument("--prompts", choices=sorted(PROMPT_SETS), default="all", help="5 example, 5 held-out, or all 10")
    ap.add_argument("--matmul", choices=("packed", "plain", "both"), default="packed", help="several-row matmuls "
                    "of the lean path: oneDNN, packed; MKL's GEMM; or both side by side (the bench: ours-spec-plain)")
    ap.add_argument("--forward", choices=("auto", "llamacpp"), default="auto", help="the models' forward: torch "
                    "(lean or transformers) or llama.cpp's (llama-cpp-python), specviz keeping every decision")


def target_and_prompts(args) -> tuple:
    """Sets the thread count, loads the target; (target, tokenizer, the chosen prompts as ids)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    packed_linear.set_enabled(getattr(args, "matmul", "packed") != "plain")
    lm.DEFAULT_PATH = getattr(args, "forward", "auto")
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    target, tok = load_model(args.target, device=args.device, dtype=dtype)
    if lm.DEFAULT_PATH == "llamacpp" and (reason := llamacpp.supports(target)):
        raise SystemExit(f"--forward llamacpp: {reason}")
    texts = PROMPT_SETS[getattr(args, "prompts", "example")]
    return target, tok, [tok(p, return_tensors="pt").input_ids.to(args.device) for p in texts]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, max_new_tokens=64, repeats=3, threads=0)
    ap.add_argument("--draft", default=DEFAULT_DRAFT, help=f"default: {DEFAULT_DRAFT}")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--tree", type=TreeConfig.parse, default=None,
                    help='draft a token tree: a static shape ("3,2,2,1"), "dynamic:BUDGET,DEPTH,WIDTH[,THRESHOLD]" or '
                         '"chain:DEPTH,SIBLINGS[,THRESHOLD]" (k unused)')
    ap.add_argument("--draft-stop", type=float, default=0.0, help="stop drafting below this draft confidence (0 = off)")
    args = ap.parse_args(argv)
    target, tok, prompts = target_and_prompts(args)
    draft = drafter_for(target, args.target, args.draft, device=args.device)
    cfg = DecodeConfig(k=args.k, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                       draft_stop=args.draft_stop, tree=args.tree)
    print(f"target={args.target} draft={args.draft} k={args.k} tree={args.tree.label if args.tree else None} "
          f"draft_stop={args.draft_stop} temperature={args.temperature} "
          f"max_new_tokens={args.max_new_tokens} repeats={args.repeats} prompts={len(prompts)} "
          f"threads={torch.get_num_threads()} device={args.device} forward={args.forward}")
    print(report(run_bench(target, draft, prompts, cfg, args.repeats, plain_too=args.matmul == "both")))


if __name__ == "__main__":
    main()
