"""Benchmark: ours against transformers' generate(), side by side in one run.

    python -m specviz.labs.bench [--target target] [--draft small] [--k 4] [--temperature 0] [--repeats 3]

Methods, interleaved prompt by prompt and repeat by repeat so that machine noise hits all alike:
  ours-ar        autoregressive_generate (the baseline: one target forward per token)
  ours-spec      speculative_generate, recording the full trace
  ours-norecord  speculative_generate with DecodeConfig(record=False)
  hf-plain       target.generate()
  hf-assisted    target.generate(assistant_model=draft, same k, constant schedule, same confidence stop)
                 (a prompt-lookup draft is compared with generate(prompt_lookup_num_tokens=k))
Tokens/s is total generated tokens over total wall time per method; ratios are taken within the run.
"""
from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch

from ..config import EXAMPLE_PROMPTS, DecodeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..drafters import Drafter, PromptLookupDrafter
from ..models import DEFAULT_DRAFT, DEFAULT_TARGET, load_drafter, load_model


@dataclass
class Tally:
    tokens: int = 0
    seconds: float = 0.0
    per_call: list[float] = field(default_factory=list)

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens += tokens
        self.seconds += seconds
        self.per_call.append(tokens / seconds if seconds else 0.0)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def hf_kwargs(cfg: DecodeConfig, pad_id) -> dict:
    """generate() settings equal to ours: no length or EOS surprises, sampling transforms spelled out."""
    kw = dict(max_new_tokens=cfg.max_new_tokens, pad_token_id=pad_id)
    if cfg.greedy:
        return kw | dict(do_sample=False, temperature=None, top_k=None, top_p=None)
    return kw | dict(do_sample=True, temperature=cfg.temperature, top_k=cfg.top_k or None, top_p=cfg.top_p)


def methods(target, draft, cfg: DecodeConfig) -> dict:
    """name -> function(input_ids, seed) -> number of generated tokens."""
    pad = target.generation_config.pad_token_id or 0
    kw = hf_kwargs(cfg, pad)
    if isinstance(draft, PromptLookupDrafter):  # transformers' own prompt lookup
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
        "ours-ar": lambda ids, seed: len(autoregressive_generate(target, ids, replace(cfg, seed=seed)).new_tokens),
        "ours-spec": lambda ids, seed: len(speculative_generate(target, draft, ids, replace(cfg, seed=seed)).new_tokens),
        "ours-norecord": lambda ids, seed: len(
            speculative_generate(target, draft, ids, replace(cfg, seed=seed, record=False)).new_tokens),
        "hf-plain": hf({}),
    }
    return fns | ({"hf-assisted": hf(assisted)} if assisted is not None else {})


@contextmanager
def assistant_settings(draft, k: int, stop: float = 0.0):
    """Make transformers' assistant draft as ours does: k tokens a round, stopping early only where
    DecodeConfig.draft_stop does (its assistant_confidence_threshold; 0 = never).

    transformers reads these settings from the ASSISTANT's generation_config, not from generate()'s
    keyword arguments; its defaults (20 tokens, stop once the draft's probability of its token falls
    below 0.4) would compare a different drafting rule, not the same pair at the same k."""
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
def run_bench(target, draft, prompts: list[torch.Tensor], cfg: DecodeConfig, repeats: int = 3) -> dict[str, Tally]:
    fns = methods(target, draft, cfg)
    tallies = {name: Tally() for name in fns}
    for ids in prompts[:1]:  # warm-up: first calls allocate
        for fn in fns.values():
            fn(ids, 0)
    for rep in range(repeats):
        for i, ids in enumerate(prompts):
            names = list(fns)
            shift = (rep + i) % len(names)  # rotate the order so no method always runs first
            for name in names[shift:] + names[:shift]:
                t0 = time.perf_counter()
                n = fns[name](ids, rep)
                tallies[name].add(n, time.perf_counter() - t0)
    return tallies


def report(tallies: dict[str, Tally]) -> str:
    base, spec = tallies["ours-ar"].tokens_per_s, tallies["ours-spec"].tokens_per_s
    lines = [f"{'method':<15}{'tokens':>8}{'seconds':>9}{'tok/s':>9}{'median':>9}{'vs ours-ar':>12}"]
    for name, t in tallies.items():
        lines.append(f"{name:<15}{t.tokens:>8}{t.seconds:>9.2f}{t.tokens_per_s:>9.1f}"
                     f"{statistics.median(t.per_call):>9.1f}{t.tokens_per_s / base:>11.2f}x")
    norec, plain = tallies["ours-norecord"].tokens_per_s, tallies["hf-plain"].tokens_per_s
    lines.append(f"speedup of ours-spec over ours-ar: {spec / base:.2f}x")
    if "hf-assisted" in tallies:
        assisted = tallies["hf-assisted"].tokens_per_s
        lines += [f"ours-spec vs hf-assisted: {spec / assisted:.2f}x", f"hf-assisted vs hf-plain: {assisted / plain:.2f}x"]
    paired = statistics.median(n / s for s, n in zip(tallies["ours-spec"].per_call, tallies["ours-norecord"].per_call))
    lines += [f"ours-ar vs hf-plain: {base / plain:.2f}x",
              f"recording overhead (ours-spec time / ours-norecord time - 1): {100 * (norec / spec - 1):+.1f}% in total, "
              f"{100 * (paired - 1):+.1f}% median over paired runs (same prompt and repeat; robust to one-off stalls)"]
    return "\n".join(lines)


def common_args(ap: argparse.ArgumentParser, max_new_tokens: int, repeats: int, threads: int) -> None:
    """The options every benchmark takes (this one and batch_bench)."""
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--threads", type=int, default=threads, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu")


def target_and_prompts(args) -> tuple:
    """Sets the thread count, loads the target; (target, tokenizer, the example prompts as ids)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    target, tok = load_model(args.target, device=args.device)
    return target, tok, [tok(p, return_tensors="pt").input_ids.to(args.device) for p in EXAMPLE_PROMPTS]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, max_new_tokens=64, repeats=3, threads=0)
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--draft-stop", type=float, default=0.0,
                    help="stop drafting below this draft confidence (transformers' default is 0.4; 0 = off)")
    args = ap.parse_args(argv)
    target, tok, prompts = target_and_prompts(args)
    draft = load_drafter(args.draft, device=args.device)
    cfg = DecodeConfig(k=args.k, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                       draft_stop=args.draft_stop)
    print(f"target={args.target} draft={args.draft} k={args.k} draft_stop={args.draft_stop} temperature={args.temperature} "
          f"max_new_tokens={args.max_new_tokens} repeats={args.repeats} prompts={len(prompts)} "
          f"threads={torch.get_num_threads()} device={args.device}")
    print(report(run_bench(target, draft, prompts, cfg, args.repeats)))


if __name__ == "__main__":
    main()
