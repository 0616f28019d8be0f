"""The gallery: ready runs of the bundled family, recorded by ``scripts/train/record_gallery.py`` into assets/gallery/
(each with its baseline and token texts) and replayed by the explorer with no model work. ``GALLERY`` is the
recipe: the same entry recorded again gives the same tokens (the seed fixes every draw)."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import DecodeConfig, TreeConfig
from ..decoder import autoregressive_generate, speculative_generate
from ..models import ASSETS, DEFAULT_MODEL_DRAFT, DEFAULT_TARGET, load_drafter, load_model

FOLDER = ASSETS.parent / "gallery"
# where the shipped files' speeds come from (docs/BENCHMARKS.md names the host): not the machine replaying them
RECORDED = "when recorded (2026-11-30, by scripts/train/record_gallery.py on a shared 2-core CPU, not this machine)"


@dataclass(frozen=True)
class Entry:
    name: str
    title: str  # what the dropdown says
    prompt: str
    draft: str
    cfg: DecodeConfig
    target: str = DEFAULT_TARGET


GALLERY = [
    Entry("romeo-greedy", "ROMEO, greedy, lite (k = 4)", "ROMEO:", "lite",
          DecodeConfig(k=4, temperature=0, max_new_tokens=64)),
    Entry("romeo-sampled", "ROMEO, sampled at T = 0.8, lite", "ROMEO:", "lite",
          DecodeConfig(k=4, temperature=0.8, max_new_tokens=64)),
    Entry("hamlet-lite-k8", "Hamlet, T = 0.8, lite with k = 8 (rejections late in the round)",
          "To be, or not to be, that is the question:", "lite", DecodeConfig(k=8, temperature=0.8, max_new_tokens=64)),
    Entry("milton-ce", "Milton, T = 0.8, a cross-entropy draft (no teacher): many rejections",
          "Of Man's first disobedience, and the fruit", "small-ce", DecodeConfig(k=4, temperature=0.8, max_new_tokens=64)),
    Entry("sonnet-ngram", "Sonnet, greedy, the target's own n-gram at k = 6", "Shall I compare thee to a summer's day?",
          "ngram-target", DecodeConfig(k=6, temperature=0, max_new_tokens=64)),
    Entry("henry-tree", "Henry V, greedy, a token tree 3,2,2,1", "KING HENRY:\nOnce more unto the breach, dear friends,",
          DEFAULT_MODEL_DRAFT, DecodeConfig(temperature=0, max_new_tokens=64, tree=TreeConfig(shape=(3, 2, 2, 1)))),
    Entry("juliet-own-tokenizer", "Juliet, greedy, a draft with its own tokenizer (replay: both tokenizations)",
          "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?", "lite-bpe2k",
          DecodeConfig(k=4, temperature=0, max_new_tokens=64)),
    Entry("lear-early-exit", "Lear, greedy, the target's first 4 layers and an exit adapter drafting for it",
          "KING LEAR:\nBlow, winds, and crack your cheeks!", "target@4+adapter",
          DecodeConfig(k=4, temperature=0, max_new_tokens=64)),
]


def record(entry: Entry):
    """(trace, baseline) of one gallery entry, token texts filled."""
    target, tok = load_model(entry.target)
    draft = load_drafter(entry.draft)
    ids = tok(entry.prompt, return_tensors="pt").input_ids
    trace = speculative_generate(target, draft, ids, entry.cfg, tokenizer=tok)
    trace.target_name, trace.draft_name = entry.target, entry.draft
    base = autoregressive_generate(target, ids, entry.cfg, tokenizer=tok)
    base.target_name = entry.target
    return trace, base


def entries() -> dict[str, Entry]:
    """The recorded entries (those whose file exists), by title."""
    return {e.title: e for e in GALLERY if (FOLDER / f"{e.name}.json").is_file()}
