"""A feature draft (EAGLE, Li et al. 2024): one decoder layer that drafts from the target's own last hidden states.

The target's verify pass already computes f_t, its final (normed) hidden state at every position t; the LM head turns
f_t into p_{t+1}. A feature draft predicts the next one: its input at position t is fc([f_{t-1}, e(x_t)]) (the
feature before, the embedding of the token at t), one Llama decoder layer with its own KV cache and an RMSNorm give
h_t, and the target's own LM head gives q_{t+1} = softmax(head(h_t)). Drafting a chain, h_t stands in for the
feature f_t the target has not computed yet; each round the positions the target has verified are fed again with
their true features. Trained with "training-time test" (EAGLE-3): the draft is unrolled over its own h for a few
steps in one pass (``unroll``), each step's q matched to the target's p (forward KL), so it learns to draft from its
own features as it will have to.

The draft shares the target's embedding and LM head (only fc, the layer and the norm are its own), so it is a
draft OF one target: saved as ``eagle.safetensors`` beside it and named "TARGET+eagle".
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

SUFFIX = "+eagle"
FILE = "eagle.safetensors"


def parse(name: str) -> str | None:
    """The target a feature draft's name drafts for ("target" for "target+eagle"); None for other names."""
    name = str(name)
    return name.removesuffix(SUFFIX) or None if name.endswith(SUFFIX) else None


def names(folder: Path, name: str) -> list[str]:
    """The feature draft offered for a bundled model: "NAME+eagle" where one is saved beside it."""
    return [name + SUFFIX] if (Path(folder) / FILE).is_file() else []


def drafter(target, folder: Path, name: str):
    """The saved feature draft of ``target`` (a model loaded from ``folder``) as a drafter bound to it."""
    from .self_drafts import FeatureDrafter

    return FeatureDrafter(load(target, folder), target, name)


def param_count(folder: Path) -> int:
    """Parameters of the feature draft saved in folder (from its file's header; 0 where there is none)."""
    from safetensors import safe_open

    path = Path(folder) / FILE
    if not path.is_file():
        return 0
    from ..runtime.int8 import SCALE

    with safe_open(str(path), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys() if not k.endswith(SCALE))


def extra_parameters(head: FeatureHead) -> list:
    """The parameters a feature draft holds beside its target: fc, its layer and its norm (no rotary buffers)."""
    return [p for n, p in head.named_parameters() if not n.startswith("rotary")]


def layer_config(d: int, heads: int, intermediate: int, eps: float, theta: float = 10000.0) -> LlamaConfig:
    """The config of a feature draft's own Llama layer of width d (fc, the layer and its norm), for a target of any
    architecture whose features are d wide (a Gemma-3's, say)."""
    return LlamaConfig(hidden_size=d, intermediate_size=intermediate, num_attention_heads=heads,
                       num_key_value_heads=heads, head_dim=d // heads, num_hidden_layers=1, rms_norm_eps=eps,
                       hidden_act="silu", rope_parameters={"rope_type": "default", "rope_theta": theta},
                       max_position_embeddings=8192, vocab_size=1, bos_token_id=None, eos_token_id=None,
                       pad_token_id=None)


class FeatureHead(nn.Module):
    """fc([f_{t-1}, e(x_t)]) -> one decoder layer -> RMSNorm: h_t, whose logits are the target's head applied to it.
    ``taps`` > 0: f_{t-1} is first fused with that many more of the target's layers' outputs, each over its RMS
    (``fused``: fuse([taps..., f]), which starts as f alone), where the target's own steps stand; the draft's h stands
    in for it along a chain, as for f."""

    def __init__(self, config, taps: int = 0):
        super().__init__()
        cfg = copy.deepcopy(config)
        cfg.num_hidden_layers = 1
        cfg._attn_implementation = "sdpa"
        self.config = cfg
        d = cfg.hidden_size
        self.taps = int(taps)
        if self.taps:
            self.fuse = nn.Linear((self.taps + 1) * d, d, bias=False)
            with torch.no_grad():
                self.fuse.weight.zero_()
                self.fuse.weight[:, self.taps * d:] = torch.eye(d)
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.layer = LlamaDecoderLayer(cfg, layer_idx=0)
        self.norm = LlamaRMSNorm(d, eps=cfg.rms_norm_eps)
        self.rotary = LlamaRotaryEmbedding(cfg)

    def forward(self, features: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """h for rows (B, N) of inputs (features, embeds) (B, N, d) each at ``positions`` (1, N), attending as the
        boolean ``mask`` (N, N) says (True: attend)."""
        x = self.fc(torch.cat([features, embeds], dim=-1))
        additive = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill_(~mask, torch.finfo(x.dtype).min)
        x = self.layer(x, attention_mask=additive[None, None], position_ids=positions,
                       position_embeddings=self.rotary(x, positions))
        return self.norm(x)


def fused(head: FeatureHead, features: torch.Tensor, taps: torch.Tensor | None) -> torch.Tensor:
    """The features the draft reads where the target's stand: ``features`` (..., d) themselves, or fused with
    ``taps`` (..., head.taps, d), each row over its RMS, by ``head.fuse``."""
    if not head.taps:
        return features
    if taps is None or taps.shape[-2:] != (head.taps, features.shape[-1]):
        raise ValueError(f"this draft fuses {head.taps} taps of width {features.shape[-1]} with the features; got "
                         f"{None if taps is None else tuple(taps.shape)}")
    normed = taps * torch.rsqrt(taps.pow(2).mean(-1, keepdim=True).clamp_min(1e-30))
    return head.fuse(torch.cat([normed.flatten(-2), features], dim=-1))


def unroll_mask(steps: int, length: int, device=None) -> torch.Tensor:
    """Who sees whom when the draft is unrolled ``steps`` times over a window of ``length`` (rows step-major: row
    s * length + t is step s at position t). Step s at t is the s-th drafted token of a chain that starts after
    position t - s: it sees step 0 (true features) at positions <= t - s and step j at position t - s + j for
    1 <= j <= s (its own chain), as the draft's cache does at inference."""
    t = torch.arange(length, device=device)
    blocks = []
    for s in range(steps):
        row = []
        for j in range(steps):
            if j == 0:
                row.append(t[None, :] <= t[:, None] - s)
            elif j <= s:
                row.append(t[None, :] == t[:, None] - s + j)
            else:
                row.append(torch.zeros(length, length, dtype=torch.bool, device=device))
        blocks.append(torch.cat(row, dim=1))
    return torch.cat(blocks, dim=0)


def target_features(target, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's final normed hidden states f (B, T, d) and its logits (B, T, V) over a batch of windows."""
    hidden = target.model(input_ids=ids).last_hidden_state
    return hidden, target.lm_head(hidden)


def unroll(head: FeatureHead, target, ids: torch.Tensor, features: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The draft's logits at every step of the unroll, each (B, T, V): step s at t drafts token t + 1 from the chain
    started after t - s (rows t < s have no such chain; callers drop them)."""
    states = unroll_states(head, target.model.embed_tokens(ids), features, steps)
    return [target.lm_head(h) for h in states]


def unroll_states(head: FeatureHead, embeds: torch.Tensor, features: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The draft's h at every step of the unroll, each (B, T, d), from the tokens' input embeddings and the target's
    features (B, T, d) each: what ``unroll`` turns into logits with the target's head (or a pruned one). Step s's rows
    are computed once, attending to the keys and values of the steps before it as ``unroll_mask`` says (the draft's
    cache at inference), not recomputed with each later step."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    B, T, d = features.shape
    attn, layer = head.layer.self_attn, head.layer
    mask = unroll_mask(steps, T, features.device)
    cos, sin = head.rotary(features, torch.arange(T, device=features.device)[None])
    keys, values, out = [], [], []
    x_in = torch.cat([features.new_zeros(B, 1, d), features[:, :-1]], dim=1)  # f_{t-1}
    for s in range(steps):
        x = head.fc(torch.cat([x_in, embeds], dim=-1))
        h = layer.input_layernorm(x)
        q, k, v = (proj(h).view(B, T, -1, attn.head_dim).transpose(1, 2) for proj in
                   (attn.q_proj, attn.k_proj, attn.v_proj))
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys.append(k), values.append(v)
        groups = q.shape[1] // k.shape[1]
        K, V = (torch.cat(t, dim=2).repeat_interleave(groups, dim=1) for t in (keys, values))
        allowed = mask[s * T:(s + 1) * T, : (s + 1) * T]
        a = F.scaled_dot_product_attention(q, K, V, attn_mask=allowed[None, None], scale=attn.scaling)
        x = x + attn.o_proj(a.transpose(1, 2).reshape(B, T, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
        out.append(head.norm(x))
        x_in = torch.cat([features.new_zeros(B, 1, d), out[-1][:, :-1]], dim=1)
    return out


def save(head: FeatureHead, folder: Path, log: dict) -> Path:
    from safetensors.torch import save_file

    from ..runtime.int8 import pack

    state = {k: v for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    path = Path(folder) / FILE
    save_file(pack(state), str(path))
    (Path(folder) / "eagle.json").write_text(json.dumps(log, indent=2) + "\n")
    return path


def load(target, folder: Path) -> FeatureHead:
    from safetensors.torch import load_file

    from ..runtime.int8 import unpack

    path = Path(folder) / FILE
    if not path.is_file():
        raise ValueError(f"no feature draft beside this target (expected {path}; train one with scripts/train/train_eagle.py)")
    head = FeatureHead(target.config)
    dtype = next(target.parameters()).dtype
    head.load_state_dict(unpack(load_file(str(path)), dtype), strict=False)
    return head.to(dtype).eval()


def alpha_by_step(head: FeatureHead, target, ids: torch.Tensor, steps: int, temperature: float) -> list[dict]:
    """Held-out acceptance of each unrolled step: alpha = 1 - TV(p, q) at ``temperature`` and the greedy match
    rate (argmax q == argmax p), over the rows where the step's chain exists."""
    with torch.no_grad():
        features, p_logits = target_features(target, ids)
        out = []
        for s, q_logits in enumerate(unroll(head, target, ids, features, steps)):
            p, q = (F.softmax(x[:, s:].float() / temperature, -1) for x in (p_logits, q_logits))
            out.append({"step": s + 1, "alpha": float(torch.minimum(p, q).sum(-1).mean()),
                        "greedy": float((p.argmax(-1) == q.argmax(-1)).float().mean())})
        return out
