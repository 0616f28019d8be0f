"""A legacy EAGLE-1 / HASS draft (Li et al. 2024; HASS trains the same network) run from its checkpoint, as the EAGLE
authors' ``eagle/model/cnets1.py`` (SafeAILab/EAGLE @c929291, ``Model`` and ``LlamaDecoderLayer``) computes it: at
position t, fc([e(x_t); f_{t-1}]) with a bias, f the target's final normed hidden state (or the draft's own output
for a drafted token); layer 0 has no input norm, later layers are plain decoder layers; no final norm: the target's
own LM head reads the output directly. The draft vocabulary is the target's.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .eagle3 import Eagle3Model, linear, rms


class Eagle1Model(Eagle3Model):
    """The same cache and attention as the EAGLE-3 model; its own input, first layer and head."""

    def __init__(self, spec, weights, embed, rotary, head_weight: torch.Tensor, head_bias: torch.Tensor | None):
        super().__init__(spec, weights, embed, rotary)
        self.head_weight, self.head_bias = head_weight, head_bias

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        return taps  # the target's final state, as it is: fc takes it with the token's embedding in ``forward``

    def forward(self, tokens: torch.Tensor, g: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Rows for tokens (n,) with the features before them g (n, H): (their outputs (n, H), logits (n, V))."""
        s, w = self.s, self.w
        cos, sin = self.rotary(g[None], positions[None])
        x = linear(torch.cat([F.embedding(tokens, self.embed), g], dim=-1), w, "fc")
        for i in range(s.layers):
            p = f"layers.{i}."
            h = x if i == 0 else rms(x, w[p + "input_layernorm.weight"], s.eps)
            x = x + self.attend(i, p, h, cos[0], sin[0])
            m = rms(x, w[p + "post_attention_layernorm.weight"], s.eps)
            x = x + linear(F.silu(linear(m, w, p + "mlp.gate_proj")) * linear(m, w, p + "mlp.up_proj"), w,
                           p + "mlp.down_proj")
        self.length += len(tokens)
        return x, F.linear(x, self.head_weight, self.head_bias)
