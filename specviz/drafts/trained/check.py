"""The check a trained draft passes before any work: every problem with it against its target, in words.

A draft that loads with a missing tensor zero-filled, an unexpected one skipped, the wrong tapped layers or a
wrong vocabulary map runs: it only drafts badly, with acceptance near zero and no message. So every name and shape
is compared with what its layout needs (``expect``), the sizes with the target's, the tapped layers with the
target's depth and the vocabulary maps with each other; one ``ValueError`` lists every problem found.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .expect import RUNS, eagle1_tensors, eagle3_spec, eagle3_tensors, medusa_spec, medusa_tensors
from .formats import Layout, detect

FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


@dataclass(frozen=True)
class Checked:
    """A draft that passed: its layout, whether specviz runs it, and what was read (switches, defaults) in words."""

    layout: Layout
    runs: bool
    notes: tuple[str, ...]


def target_sizes(target) -> dict:
    """The target's hidden size, vocabulary (its LM head's rows) and depth."""
    cfg = getattr(target.config, "text_config", None) or target.config
    return {"hidden": int(cfg.hidden_size), "vocab": int(target.get_output_embeddings().weight.shape[0]),
            "layers": int(cfg.num_hidden_layers)}


def compare_tensors(layout: Layout, required: dict, optional: dict) -> list[str]:
    """Missing, misshapen and unknown tensors, each named."""
    problems, found = [], layout.tensors
    for name, shape in required.items():
        if name not in found:
            problems.append(f"tensor {name} is missing (expected shape {list(shape)})")
    for name, (shape, dtype) in found.items():
        want = required.get(name, optional.get(name))
        if want is None:
            problems.append(f"tensor {name} {list(shape)} is not part of a {layout.title} draft (an unknown key: "
                            "renamed, or from another layout; it would be ignored silently elsewhere)")
        elif tuple(shape) != tuple(want):
            problems.append(f"tensor {name} has shape {list(shape)}, expected {list(want)}")
        elif name not in ("d2t", "t2d") and dtype not in FLOAT_DTYPES:
            problems.append(f"tensor {name} is {dtype}, expected floating point")
    return problems


def read_tensor(layout: Layout, name: str) -> torch.Tensor:
    from safetensors import safe_open

    with safe_open(str(layout.files[name]), "pt") as f:
        return f.get_tensor(name)


def check_vocab_maps(layout: Layout, draft_vocab: int, vocab: int) -> list[str]:
    """d2t (an offset: target id = draft id + d2t[draft id]) and t2d (True at the target ids the draft can say)
    consistent with each other and within the target's vocabulary."""
    if "d2t" not in layout.tensors or "t2d" not in layout.tensors:
        return []
    d2t, t2d = read_tensor(layout, "d2t"), read_tensor(layout, "t2d")
    if d2t.dtype.is_floating_point:
        return [f"d2t is {d2t.dtype}, expected integer offsets"]
    ids = torch.arange(len(d2t)) + d2t.long()
    problems = []
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        bad = int(((ids < 0) | (ids >= vocab)).nonzero()[0])
        return [f"d2t maps draft id {bad} to target id {int(ids[bad])}, outside the target's {vocab} ids"]
    if len(ids.unique()) != len(ids):
        problems.append(f"d2t maps {len(ids) - len(ids.unique())} draft ids onto target ids already taken")
    mask = t2d.bool() if t2d.dtype == torch.bool or not t2d.dtype.is_floating_point else None
    if mask is None:
        return problems + [f"t2d is {t2d.dtype}, expected a boolean mask over the target's ids"]
    if int(mask.sum()) != draft_vocab:
        problems.append(f"t2d marks {int(mask.sum())} target ids, but the draft vocabulary has {draft_vocab}")
    outside = (~mask[ids.clamp(0, len(mask) - 1)]).nonzero().flatten()
    if len(outside):
        i = int(outside[0])
        problems.append(f"d2t and t2d disagree: draft id {i} maps to target id {int(ids[i])} (draft id + d2t), which "
                        f"t2d does not mark ({len(outside)} such ids)")
    return problems


def check_eagle3(layout: Layout, sizes: dict) -> tuple[list[str], list[str]]:
    s = eagle3_spec(layout)
    problems, notes = [], list(s.notes)
    if s.target_hidden != sizes["hidden"]:
        problems.append(f"the draft reads target hidden states of size {s.target_hidden}, the target's are "
                        f"{sizes['hidden']}")
    if s.vocab != sizes["vocab"]:
        problems.append(f"the draft was trained for a target vocabulary of {s.vocab}, the target has {sizes['vocab']}")
    if s.tapped is None:
        n = sizes["layers"]
        notes.append(f"eagle_aux_hidden_state_layer_ids absent: the default [2, {n // 2}, {n - 3}] of a "
                     f"{n}-layer target (speculators' and vLLM's)")
    else:
        wrong = [i for i in s.tapped if not 0 <= i < sizes["layers"]]
        if wrong:
            problems.append(f"tapped layer ids {wrong} are outside the target's {sizes['layers']} layers "
                            f"(0..{sizes['layers'] - 1})")
        notes.append(f"tapped target layers {list(s.tapped)}: each layer's input, as vLLM reads them (SGLang "
                     "reads the same ids as layer outputs, one layer later)")
    if "embed_tokens.weight" not in layout.tensors:
        notes.append("no embed_tokens in the draft: the target's embedding is used")
        if s.hidden != sizes["hidden"]:
            problems.append(f"the draft has no embedding of its own and its hidden size {s.hidden} is not the "
                            f"target's {sizes['hidden']}, so the target's cannot stand in")
    required, optional = eagle3_tensors(layout, s)
    problems += compare_tensors(layout, required, optional)
    if not problems:  # shapes right: the maps can be read
        problems += check_vocab_maps(layout, s.draft_vocab, s.vocab)
    notes.append(f"draft vocabulary: {s.draft_vocab} of the target's {s.vocab} ids")
    return problems, notes


def check_eagle1(layout: Layout, sizes: dict) -> tuple[list[str], list[str]]:
    s = eagle3_spec(layout)
    problems = []
    if s.hidden != sizes["hidden"]:
        problems.append(f"the draft's hidden size is {s.hidden}, the target's {sizes['hidden']} (EAGLE-1 reads the "
                        "target's final state and feeds its output to the target's LM head)")
    if s.vocab != sizes["vocab"]:
        problems.append(f"the draft was trained for a target vocabulary of {s.vocab}, the target has {sizes['vocab']}")
    problems += compare_tensors(layout, *eagle1_tensors(s))
    notes = ["EAGLE-1 / HASS: fc over [embedding; the target's final normed state], the target's LM head"]
    if "embed_tokens.weight" not in layout.tensors:
        notes.append("no embed_tokens in the draft: the target's embedding is used")
    return problems, notes


def check_medusa(layout: Layout, sizes: dict) -> tuple[list[str], list[str]]:
    s = medusa_spec(layout)
    problems = compare_tensors(layout, medusa_tensors(s, sizes["hidden"], sizes["vocab"]), {})
    notes = [f"{s.heads} heads of {s.layers} ResBlock(s) each over the target's last hidden state"]
    if s.choices is not None:
        bad = [list(p) for p in s.choices if not 1 <= len(p) <= s.heads or min(p) < 0]
        if bad:
            problems.append(f"medusa_choices {bad[:3]} are not paths of at most {s.heads} ranks (one per head)")
        notes.append(f"medusa_choices: {len(s.choices)} nodes read; they run as a token tree with "
                     "TreeConfig(choices=...) (specviz.drafts.trained.load.medusa_tree(path))")
    return problems, notes


def check_config_only(layout: Layout, sizes: dict) -> tuple[list[str], list[str]]:
    """DFlash / DSpark / EAGLE-1 / MTP in speculators format: sizes, tapped layers and vocabulary maps."""
    c = layout.config
    tl = c.get("transformer_layer_config") or c
    problems = []
    hidden = c.get("target_hidden_size") or tl.get("hidden_size")
    if hidden is not None and int(hidden) != sizes["hidden"]:
        problems.append(f"the draft reads target hidden states of size {hidden}, the target's are {sizes['hidden']}")
    if tl.get("vocab_size") is not None and int(tl["vocab_size"]) != sizes["vocab"]:
        problems.append(f"the draft was trained for a target vocabulary of {tl['vocab_size']}, the target has "
                        f"{sizes['vocab']}")
    tapped = c.get("aux_hidden_state_layer_ids") or c.get("target_layer_ids") or []
    wrong = [i for i in tapped if not 0 <= int(i) < sizes["layers"]]
    if wrong:
        problems.append(f"tapped layer ids {wrong} are outside the target's {sizes['layers']} layers")
    draft_vocab = int(c.get("draft_vocab_size") or tl.get("vocab_size") or sizes["vocab"])
    for name, length in (("d2t", draft_vocab), ("t2d", sizes["vocab"])):
        if name in layout.tensors and layout.tensors[name][0] != (length,):
            problems.append(f"tensor {name} has shape {list(layout.tensors[name][0])}, expected [{length}]")
    if not problems:
        problems += check_vocab_maps(layout, draft_vocab, sizes["vocab"])
    return problems, [f"{layout.title}: sizes, tapped layers and vocabulary maps checked; its tensors' names are "
                      "not (specviz does not run this kind)"]


def check_trained_draft(path_or_layout, target) -> Checked:
    """Check a trained draft (a folder, or its ``Layout``) against ``target`` (a transformers causal LM) before any
    work; a ValueError lists every problem found."""
    layout = path_or_layout if isinstance(path_or_layout, Layout) else detect(path_or_layout)
    if layout is None:
        raise ValueError(f"{Path(path_or_layout).name}: not a trained draft specviz reads (a speculators config.json, "
                         "a midlayer.* or EAGLE checkpoint, or medusa_lm_head.safetensors)")
    sizes = target_sizes(target)
    if layout.kind in ("eagle3", "peagle", "eagle3-midlayer", "eagle3-vllm"):
        problems, notes = check_eagle3(layout, sizes)
    elif layout.kind == "medusa":
        problems, notes = check_medusa(layout, sizes)
    elif layout.kind == "eagle1":
        problems, notes = check_eagle1(layout, sizes)
    else:
        problems, notes = check_config_only(layout, sizes)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ValueError(f"{layout.folder.name} ({layout.title}) does not fit this target: {len(problems)} "
                         f"problem(s)\n{listed}")
    return Checked(layout, layout.kind in RUNS, tuple(notes))
