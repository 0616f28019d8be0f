"""The model object a quantized Gemma-3 GGUF loads into (``quant_gguf.gemma_model``), without transformers.

The lean forward (``lean_gemma.LeanGemma3``) computes on ``model.quantized``; everything else reads the model
through a few attributes: its config, its generation defaults (the EOS id), ``model.model.layers`` (an early exit
cuts that stack), ``model.model.rotary_emb`` (RoPE tables, computed as transformers' ``Gemma3RotaryEmbedding``
computes them), the head's weight (its shape: the vocabulary; its device and dtype: the forward's). Building
transformers' ``Gemma3ForCausalLM`` for that, even on the meta device, imported its modelling stack: about 100 MB
resident (2026-12-04, docs/benchmarks/2026-12-04-gemma-memory.log) for a model whose transformers forward cannot
run (its layers hold no weights). ``QuantGemma`` holds the same attributes and no tensor beyond the RoPE
frequencies: the head's weight is one zero-stride placeholder (shape, dtype and device only).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

NEEDED = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "intermediate_size", "vocab_size", "layer_types", "rope_parameters", "max_position_embeddings")


class TextConfig:
    """A text model's config.json as attributes, read where transformers' config classes read it (``config.x``,
    ``get_text_config()``, ``to_json_string``, ``save_pretrained``), without importing transformers."""

    def __init__(self, values: dict, name_or_path: str = ""):
        if not isinstance(values, dict):
            raise ValueError(f"a config is a JSON object, not {type(values).__name__}")
        missing = [k for k in NEEDED if k not in values]
        if missing:
            raise ValueError(f"the config lacks {', '.join(missing)}")
        self.__dict__.update(values)
        self._name_or_path = name_or_path

    @classmethod
    def from_folder(cls, folder: Path) -> TextConfig:
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise ValueError(f"{str(folder)!r} holds no config.json")
        try:
            values = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path.name} is not JSON ({e.msg})") from e
        return cls(values, str(folder))

    def get_text_config(self, *args, **kwargs) -> TextConfig:
        """Itself (a text model's config), whatever transformers' keywords (decoder=, encoder=) ask."""
        return self

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def to_json_string(self, *args, **kwargs) -> str:
        """Every value, sorted (use_diff= is taken and ignored: there are no defaults to diff against)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def transformers_config(self):
        """The same values as transformers' config class of this model type (transformers imported here: for what
        reads transformers' own config, a DynamicCache's layer kinds say)."""
        from transformers import AutoConfig

        values = self.to_dict()
        config = AutoConfig.for_model(values.pop("model_type"), **values)
        config._name_or_path = self._name_or_path
        return config

    def save_pretrained(self, out) -> None:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "config.json").write_text(self.to_json_string())


class GenerationDefaults:
    """The generation defaults transformers derives from such a config (its BOS, EOS and pad ids)."""

    def __init__(self, config: TextConfig):
        self.bos_token_id = getattr(config, "bos_token_id", None)
        self.eos_token_id = getattr(config, "eos_token_id", None)
        self.pad_token_id = getattr(config, "pad_token_id", None)


class GemmaRope(torch.nn.Module):
    """Gemma-3's default RoPE per layer kind, as transformers' ``Gemma3RotaryEmbedding`` computes it (the same
    float32 operations): ``forward(x, position_ids, layer_type)`` gives (cos, sin) in x's dtype."""

    def __init__(self, config: TextConfig):
        super().__init__()
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        for kind in sorted(set(config.layer_types)):
            params = config.rope_parameters.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"RoPE of type {params.get('rope_type')!r} is not computed here (default only)")
            base = params["rope_theta"]
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
            self.register_buffer(f"{kind}_inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str):
        inv_freq = getattr(self, f"{layer_type}_inv_freq")
        freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)  # transformers' scaling: 1.0


class Holder(torch.nn.Module):
    """A module holding one weight (the tied embedding and head's placeholder)."""

    def __init__(self, weight: torch.nn.Parameter):
        super().__init__()
        self.weight = weight


class Stack(torch.nn.Module):
    """``model.model``: a layer stack of empty modules (one per layer: its length is what an early exit reads), the
    embedding's placeholder and the RoPE."""

    def __init__(self, config: TextConfig, placeholder: torch.nn.Parameter):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Module() for _ in range(config.num_hidden_layers))
        self.embed_tokens = Holder(placeholder)
        self.rotary_emb = GemmaRope(config)


class QuantGemma(torch.nn.Module):
    """A Gemma-3 causal LM whose weights are a GGUF's quantized matrices (``quantized``), run by the lean forward
    only: calling it raises a ValueError."""

    def __init__(self, config: TextConfig, weights, path: Path):
        super().__init__()
        if getattr(config, "model_type", None) != "gemma3_text":
            raise ValueError(f"a quantized Gemma-3 needs a gemma3_text config, not {config.model_type!r}")
        placeholder = torch.nn.Parameter(torch.zeros((), dtype=torch.float32).expand(weights.embed.rows,
                                                                                   config.hidden_size),
                                         requires_grad=False)  # no memory: shape, dtype and device only
        self.config, self.generation_config = config, GenerationDefaults(config)
        self.model = Stack(config, placeholder)
        self.lm_head = Holder(placeholder)
        self.quantized, self.gguf_path = weights, Path(path)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.lm_head

    def set_output_embeddings(self, head: torch.nn.Module) -> None:
        self.lm_head = head

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def name_or_path(self) -> str:
        return self.config._name_or_path

    def forward(self, input_ids=None, past_key_values=None, **kwargs):
        raise ValueError("a GGUF loaded quantized runs on the lean forward only (CachedLM picks it); load it with "
                         "SPECVIZ_GGUF=dequantize to run transformers' forward")
