"""What a layout must hold: every tensor's name and shape (from its config), its tapped target layers and its
switches, each with the value specviz runs and, where the engines read a missing key differently, what each does.

Sources (read for this module): speculators' ``models/eagle3/{config,core,model_definitions}.py`` and
``model.py`` (``DraftVocabMixin``), vllm-project/speculators@c05b95b; vLLM's
``model_executor/models/llama_eagle3.py`` (@00bd149) and ``transformers_utils/configs/speculators/algos.py``
(@cfb173a); FasterDecoding/Medusa's ``medusa/model/medusa_model.py`` (ResBlock, ``medusa_head``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .formats import Layout

SWITCHES = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")  # EAGLE-3 and its 3.1 flags
RUNS = ("eagle3", "eagle3-midlayer", "eagle3-vllm", "eagle1", "medusa")  # the kinds specviz drafts with; the rest are checked


@dataclass(frozen=True)
class Eagle3Spec:
    """An EAGLE-3 draft's sizes and switches, read from its config (speculators' ``transformer_layer_config`` or a
    flat Llama-style config)."""

    hidden: int
    target_hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    layers: int
    vocab: int  # the target vocabulary the draft was trained for (t2d's length)
    draft_vocab: int
    tapped: tuple[int, ...] | None  # target layer ids (the input of each layer, vLLM's reading); None: the default
    switches: dict  # name -> value specviz runs
    notes: tuple[str, ...]  # each switch and default in words
    model_type: str
    eps: float
    bias: bool
    mlp_bias: bool
    layer_config: dict


def layer_config(layout: Layout) -> dict:
    """The decoder layer's settings: speculators' ``transformer_layer_config``, else the flat config itself."""
    c = layout.config
    return c.get("transformer_layer_config") or c


def _switch(name: str, config: dict, speculators: bool) -> tuple[bool, str]:
    if name in config:
        return bool(config[name]), f"{name} = {bool(config[name])} (set in config.json)"
    if name == "norm_before_residual" and speculators:
        return False, ("norm_before_residual absent: specviz runs False, speculators' own default (Eagle3SpeculatorConfig);"
                       " vLLM reads a speculators config without it as True (configs/speculators/algos.py), so this "
                       "draft runs differently there")
    if name == "norm_before_residual":
        return False, "norm_before_residual absent: False, as vLLM's llama_eagle3.py reads a config without it"
    return False, (f"{name} absent: False (speculators' default); vLLM's llama_eagle3.py reads no {name} at all, so a "
                   "draft trained with it on drafts differently there")


def eagle3_spec(layout: Layout) -> Eagle3Spec:
    c, tl = layout.config, layer_config(layout)
    speculators = "speculators_model_type" in c
    need = [k for k in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size") if k not in tl]
    if need:
        raise ValueError(f"config.json lacks {', '.join(need)} (the draft layer's sizes)")
    hidden, heads = int(tl["hidden_size"]), int(tl["num_attention_heads"])
    tapped = c.get("eagle_aux_hidden_state_layer_ids") or (c.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    switches, notes = {}, []
    for name in SWITCHES:
        switches[name], note = _switch(name, c, speculators)
        notes.append(note)
    if switches["norm_before_fc"] and switches["fc_norm"]:
        notes.append("norm_before_fc and fc_norm are both on: speculators refuses that pair")
    return Eagle3Spec(
        hidden=hidden, target_hidden=int(c.get("target_hidden_size") or hidden), heads=heads,
        kv_heads=int(tl.get("num_key_value_heads") or heads), head_dim=int(tl.get("head_dim") or hidden // heads),
        intermediate=int(tl["intermediate_size"]), layers=int(tl.get("num_hidden_layers") or 1),
        vocab=int(tl["vocab_size"]), draft_vocab=int(c.get("draft_vocab_size") or tl["vocab_size"]),
        tapped=None if tapped is None else tuple(int(i) for i in tapped), switches=switches, notes=tuple(notes),
        model_type=str(tl.get("model_type", "llama")), eps=float(tl.get("rms_norm_eps", 1e-6)),
        bias=bool(tl.get("attention_bias", False)), mlp_bias=bool(tl.get("mlp_bias", False)), layer_config=dict(tl))


def layer_tensors(prefix: str, s: Eagle3Spec, d_in: int, first: bool) -> dict[str, tuple[int, ...]]:
    """A Llama (or Qwen3: q/k norms) decoder layer's tensors; the first EAGLE-3 layer takes 2H and has hidden_norm."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    out = {f"{prefix}self_attn.q_proj.weight": (q, d_in), f"{prefix}self_attn.k_proj.weight": (kv, d_in),
           f"{prefix}self_attn.v_proj.weight": (kv, d_in), f"{prefix}self_attn.o_proj.weight": (s.hidden, q),
           f"{prefix}mlp.gate_proj.weight": (s.intermediate, s.hidden),
           f"{prefix}mlp.up_proj.weight": (s.intermediate, s.hidden),
           f"{prefix}mlp.down_proj.weight": (s.hidden, s.intermediate),
           f"{prefix}input_layernorm.weight": (s.hidden,), f"{prefix}post_attention_layernorm.weight": (s.hidden,)}
    if first:
        out[f"{prefix}hidden_norm.weight"] = (s.hidden,)
    if s.bias:
        out |= {f"{prefix}self_attn.q_proj.bias": (q,), f"{prefix}self_attn.k_proj.bias": (kv,),
                f"{prefix}self_attn.v_proj.bias": (kv,), f"{prefix}self_attn.o_proj.bias": (s.hidden,)}
    if s.mlp_bias:
        out |= {f"{prefix}mlp.gate_proj.bias": (s.intermediate,), f"{prefix}mlp.up_proj.bias": (s.intermediate,),
                f"{prefix}mlp.down_proj.bias": (s.hidden,)}
    if s.model_type == "qwen3":
        out |= {f"{prefix}self_attn.q_norm.weight": (s.head_dim,), f"{prefix}self_attn.k_norm.weight": (s.head_dim,)}
    return out


def eagle3_tensors(layout: Layout, s: Eagle3Spec) -> tuple[dict, dict]:
    """(required, optional) name -> shape for an EAGLE-3 draft in this layout (``midlayer.`` for layer 0 where the
    checkpoint names it so)."""
    n_aux = len(s.tapped) if s.tapped else 3
    first = "midlayer." if layout.kind == "eagle3-midlayer" else "layers.0."
    required = {"fc.weight": (s.hidden, n_aux * s.target_hidden), "norm.weight": (s.hidden,),
                "lm_head.weight": (s.draft_vocab, s.hidden)}
    required |= layer_tensors(first, s, 2 * s.hidden, True)
    for i in range(1, s.layers):
        required |= layer_tensors(f"layers.{i}.", s, s.hidden, False)
    if s.switches["norm_before_fc"]:
        required["input_norm.weight"] = (n_aux * s.target_hidden,)
    if s.switches["fc_norm"]:
        required |= {f"fc_norm.{j}.weight": (s.target_hidden,) for j in range(n_aux)}
    maps = {"d2t": (s.draft_vocab,), "t2d": (s.vocab,)}
    if s.draft_vocab != s.vocab:
        required |= maps
    optional = {"embed_tokens.weight": (s.vocab, s.hidden)} | ({} if s.draft_vocab != s.vocab else maps)
    if layout.kind == "peagle":
        optional["mask_hidden"] = (1, n_aux * s.target_hidden)
    return required, optional


def eagle1_tensors(s: Eagle3Spec) -> tuple[dict, dict]:
    """(required, optional) for an EAGLE-1 / HASS checkpoint (``cnets1.py``): fc over [embedding; feature] with its
    bias, layer 0 without an input norm, no final norm and no LM head (the target's is used)."""
    required = {"fc.weight": (s.hidden, 2 * s.hidden)}
    for i in range(s.layers):
        layer = layer_tensors(f"layers.{i}.", s, s.hidden, False)
        if i == 0:
            del layer["layers.0.input_layernorm.weight"]
        required |= layer
    return required, {"fc.bias": (s.hidden,), "embed_tokens.weight": (s.vocab, s.hidden)}


@dataclass(frozen=True)
class MedusaSpec:
    heads: int
    layers: int  # ResBlocks per head
    choices: tuple[tuple[int, ...], ...] | None  # medusa_choices: each a path of top-k ranks, one per head


def medusa_spec(layout: Layout) -> MedusaSpec:
    c = layout.config
    heads = c.get("medusa_num_heads")
    if heads is None:  # no config: count the heads in the file
        heads = len({n.split(".")[0] for n in layout.tensors if n.split(".")[0].isdigit()})
    layers = c.get("medusa_num_layers", 1)
    choices = c.get("medusa_choices")
    return MedusaSpec(int(heads), int(layers), None if choices is None else tuple(tuple(int(r) for r in p)
                                                                               for p in choices))


def medusa_tensors(s: MedusaSpec, hidden: int, vocab: int) -> dict[str, tuple[int, ...]]:
    """Medusa's ``medusa_head``: head h is nn.Sequential(ResBlock * layers, Linear(hidden, vocab, bias=False)), so
    ``{h}.{l}.linear.weight/bias`` for its ResBlocks and ``{h}.{layers}.weight`` for its LM head."""
    out = {}
    for h in range(s.heads):
        for j in range(s.layers):
            out |= {f"{h}.{j}.linear.weight": (hidden, hidden), f"{h}.{j}.linear.bias": (hidden,)}
        out[f"{h}.{s.layers}.weight"] = (vocab, hidden)
    return out
