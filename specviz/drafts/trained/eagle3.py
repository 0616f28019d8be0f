"""An EAGLE-3 draft (Li et al. 2025) run from its trained weights, as speculators trains it and vLLM serves it.

At position t the draft reads the token x_t and g_{t-1}: where the target has verified t - 1, the fused features
fc([a_{t-1}; b_{t-1}; c_{t-1}]) of three tapped target layers (``tap``); where it has not (a drafted token), the
draft's own output at t - 1. Its first layer attends over [norm(e(x_t)); hidden_norm(g_{t-1})], 2H wide, with g as
the residual (or its norm: ``norm_before_residual``); further layers are plain decoder layers; ``norm`` and
``lm_head`` give logits over the pruned draft vocabulary, placed at target ids draft id + d2t[draft id] (-inf at
every other id, so q is zero there and the verify's full vocabulary keeps the law exact). The 3.1 switches:
``norm_before_fc`` (one RMSNorm over the concatenated taps), ``fc_norm`` (one per tap), ``norm_output`` (the normed
output, not the pre-norm one, is fed back as the next g). Sources: speculators ``models/eagle3/core.py`` and
``model_definitions.py`` (Eagle3FirstLayerMixin), vLLM ``model_executor/models/llama_eagle3.py``.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from ...runtime.lm import common_prefix
from ..drafter import draft_loop
from .expect import Eagle3Spec
from .tap import Tap, TappedDrafter


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as transformers computes it: normalised in float32, cast back, then scaled."""
    return w * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def linear(x, w: dict, name: str):
    return F.linear(x, w[name + ".weight"], w.get(name + ".bias"))


class Eagle3Model:
    """The draft's weights (target's embedding where it has none) and its key/value cache: ``forward`` appends."""

    def __init__(self, spec: Eagle3Spec, weights: dict[str, torch.Tensor], embed: torch.Tensor, rotary):
        self.s, self.w, self.embed, self.rotary = spec, weights, embed, rotary
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer (kv_heads, n, head_dim) each
        self.length = 0
        maps = weights.get("d2t")
        self.ids = torch.arange(spec.draft_vocab, device=embed.device) + (0 if maps is None else maps.long())

    def fresh(self) -> Eagle3Model:
        """The same weights with an empty cache of its own (one per run)."""
        out = copy.copy(self)
        out.kv, out.length = [], 0
        return out

    def truncate(self, n: int) -> None:
        self.kv = [(k[:, :n], v[:, :n]) for k, v in self.kv]
        self.length = min(self.length, n)

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """g from the target's tapped states (n, k * H_t): the 3.1 norms where switched on, then fc."""
        s, w = self.s, self.w
        if s.switches["norm_before_fc"]:
            taps = rms(taps, w["input_norm.weight"], s.eps)
        if s.switches["fc_norm"]:
            parts = taps.chunk(len(taps[0]) // s.target_hidden, dim=-1)
            taps = torch.cat([rms(p, w[f"fc_norm.{j}.weight"], s.eps) for j, p in enumerate(parts)], dim=-1)
        return F.linear(taps, w["fc.weight"])

    def forward(self, tokens: torch.Tensor, g: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Rows for tokens (n,) with g (n, H) at ``positions`` appended to the cache: (fed back (n, H), logits over
        the target's vocabulary (n, V)). ``mask`` (n, cached + n), True where a row may attend: causal by default
        (training's unrolled steps pass their own)."""
        s, w = self.s, self.w
        cos, sin = self.rotary(g[None], positions[None])
        x = g  # the residual stream
        for i in range(s.layers):
            p = f"layers.{i}."  # (a midlayer.* checkpoint's names were mapped to layers.0.* on loading)
            if i == 0:  # [norm(e(x_t)); hidden_norm(g)], 2H wide; the residual is g or its norm
                e = rms(F.embedding(tokens, self.embed), w[p + "input_layernorm.weight"], s.eps)
                gn = rms(g, w[p + "hidden_norm.weight"], s.eps)
                x = gn if s.switches["norm_before_residual"] else g
                h = torch.cat([e, gn], dim=-1)
            else:
                h = rms(x, w[p + "input_layernorm.weight"], s.eps)
            x = x + self.attend(i, p, h, cos[0], sin[0], mask)
            m = rms(x, w[p + "post_attention_layernorm.weight"], s.eps)
            x = x + linear(F.silu(linear(m, w, p + "mlp.gate_proj")) * linear(m, w, p + "mlp.up_proj"), w,
                           p + "mlp.down_proj")
        normed = rms(x, w["norm.weight"], s.eps)
        draft_logits = F.linear(normed, w["lm_head.weight"])  # (n, V_draft)
        logits = draft_logits.new_full((len(tokens), s.vocab), -math.inf)
        logits[:, self.ids] = draft_logits
        self.length += len(tokens)
        return (normed if s.switches["norm_output"] else x), logits

    def attend(self, i: int, p: str, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               mask: torch.Tensor | None = None) -> torch.Tensor:
        """Layer i's attention for n new rows over its cache and themselves (causal)."""
        s, w, n = self.s, self.w, len(h)
        q = linear(h, w, p + "self_attn.q_proj").view(n, s.heads, s.head_dim).transpose(0, 1)  # (nh, n, hd)
        k = linear(h, w, p + "self_attn.k_proj").view(n, s.kv_heads, s.head_dim).transpose(0, 1)
        v = linear(h, w, p + "self_attn.v_proj").view(n, s.kv_heads, s.head_dim).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3's per-head norms
            q, k = rms(q, w[p + "self_attn.q_norm.weight"], s.eps), rms(k, w[p + "self_attn.k_norm.weight"], s.eps)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if len(self.kv) <= i:
            self.kv.append((k, v))
        else:
            self.kv[i] = (torch.cat([self.kv[i][0], k], dim=1), torch.cat([self.kv[i][1], v], dim=1))
        keys, values = self.kv[i]
        past = keys.shape[1] - n
        if mask is None:
            mask = torch.arange(keys.shape[1], device=h.device)[None] <= past + torch.arange(n, device=h.device)[:, None]
        rep = s.heads // s.kv_heads
        out = F.scaled_dot_product_attention(q, keys.repeat_interleave(rep, 0), values.repeat_interleave(rep, 0),
                                             attn_mask=mask)
        return linear(out.transpose(0, 1).reshape(n, s.heads * s.head_dim), w, p + "self_attn.o_proj")


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (transformers' rotate_half layout); x (heads, n, hd), cos/sin (n, hd)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Eagle3Drafter(TappedDrafter):
    """An EAGLE-3 draft drafting chains in the decoder: each round it syncs the tap to the committed tokens, feeds
    again (from the target's true states) the positions it had drafted over, then drafts one token per pass."""

    def __init__(self, model: Eagle3Model, target, tapped: tuple[int, ...], name: str):
        super().__init__(target, name)
        self.model, self.tapped = model, tapped

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        self.tap = Tap(self.target_model, self.tapped)
        self.model = self.model.fresh()
        self.fed: list[int] = []  # tokens of the draft's cache rows: row r is position r + 1
        self.true = 0  # rows [0, true) were made from the target's states

    def propose(self, committed, k, generator):
        return draft_loop(self.stepper(committed), k, self.cfg, self.vocab_size, generator, self.device)

    @torch.inference_mode()
    def stepper(self, committed):
        T = len(committed)
        if T < 2:  # position 0 has no state before it: nothing to draft from
            return lambda drafted: None
        taps = self.tap.states(committed[:-1])  # (T - 1, k * H): states at positions 0..T-2
        keep = min(self.true, common_prefix(self.fed, committed[1:]), T - 2)  # rows still right (>= 1 refed)
        self.model.truncate(keep)
        del self.fed[keep:]
        g = self.model.fuse(taps[keep:])
        out, logits = self._rows(committed[keep + 1:], g, keep + 1)
        self.true, state = T - 1, {"h": out[-1:], "logits": logits[-1], "fed": 0}

        def next_logits(drafted: list[int]) -> torch.Tensor:
            for i in range(state["fed"], len(drafted)):  # x_i at position T + i, from the draft's own state
                h, lg = self._rows(drafted[i: i + 1], state["h"], T + i)
                state["h"], state["logits"] = h, lg[-1]
            state["fed"] = len(drafted)
            return state["logits"]

        return next_logits

    def _rows(self, tokens: list[int], g: torch.Tensor, start: int):
        ids = torch.tensor(tokens, dtype=torch.long, device=g.device)
        positions = torch.arange(start, start + len(tokens), device=g.device)
        self.fed += tokens
        return self.model.forward(ids, g.to(self.model.embed.dtype), positions)
