"""A Llama model's weights written as a GGUF file that llama.cpp runs (``llamacpp.LlamaCppForward``), in float32.

The file carries no tokenizer (``tokenizer.ggml.model = "none"`` with the vocabulary's size): specviz tokenizes and
feeds token ids, and reads logits back, so llama.cpp never needs the text. The query and key projections are
permuted from transformers' rotate-half layout to the interleaved one llama.cpp's "llama" architecture rotates, as
llama.cpp's own ``convert_hf_to_gguf.py`` does. Written once per set of weights into a cache folder
(``SPECVIZ_GGUF_CACHE``, default ``~/.cache/specviz/gguf``), named by a hash of the weights and the config.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from .private_cache import GGUF_CACHE_ENV as CACHE_ENV  # noqa: F401 (where the cache is, for callers)
from .private_cache import cache_folder, private_folder, record, trusted


def supports(model) -> str | None:
    """None where ``model`` can be written for llama.cpp, else the reason it cannot."""
    cfg = model.config
    if getattr(cfg, "model_type", None) != "llama":
        return f"the llama.cpp forward runs Llama models; this one is {getattr(cfg, 'model_type', None)!r}"
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "attention_bias", False) \
            or getattr(cfg, "mlp_bias", False):
        return "the llama.cpp forward runs Llama blocks without biases and with SiLU"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"the llama.cpp forward takes the default RoPE, not {rope.get('rope_type')!r}"
    return None


def fingerprint(model) -> str:
    """A hash of the model's config and every weight: the GGUF's name in the cache."""
    h = hashlib.blake2b(digest_size=12)
    h.update(model.config.to_json_string(use_diff=False).encode())
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def gguf_for(model) -> Path:
    """The cached GGUF of model's weights, written first if it is not there yet."""
    reason = supports(model)
    if reason:
        raise ValueError(reason)
    path = private_folder(cache_folder()) / f"llama-{fingerprint(model)}-f32.gguf"
    if not trusted(path):  # written by this user and unchanged since, or written again now
        tmp = path.with_suffix(".part")
        write(model, tmp)
        tmp.replace(path)
        record(path)
    return path


def gguf_for_cached(model) -> Path:
    """gguf_for, remembered on the model until one of its weights changes in place (their version counters)."""
    versions = tuple(t._version for t in model.parameters())
    hit = getattr(model, "_specviz_gguf", None)
    if hit is None or hit[1] != versions or not hit[0].is_file():
        hit = (gguf_for(model), versions)
        model._specviz_gguf = hit
    return hit[0]


def permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a q or k projection (heads * hd, d) from rotate-half to interleaved pairs (convert_hf_to_gguf's)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write(model, path: Path) -> None:
    """Writes model (a transformers Llama) to path as an f32 GGUF without a tokenizer."""
    try:
        import gguf
    except ImportError:
        raise ValueError("writing a GGUF for llama.cpp needs the gguf package: pip install gguf") from None
    cfg = model.config
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
    rope = getattr(cfg, "rope_parameters", None) or {}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("none")
    for name, t in tensors(model, nh, nkv):
        w.add_tensor(name, t.detach().to(torch.float32).contiguous().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tensors(model, nh: int, nkv: int):
    """(GGUF name, tensor) for each weight, in llama.cpp's names."""
    m = model.model
    yield "token_embd.weight", m.embed_tokens.weight
    yield "output_norm.weight", m.norm.weight
    head = model.get_output_embeddings().weight
    if head.data_ptr() != m.embed_tokens.weight.data_ptr():
        yield "output.weight", head
    for i, layer in enumerate(m.layers):
        a, f = layer.self_attn, layer.mlp
        yield f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight
        yield f"blk.{i}.attn_q.weight", permute(a.q_proj.weight, nh)
        yield f"blk.{i}.attn_k.weight", permute(a.k_proj.weight, nkv)
        yield f"blk.{i}.attn_v.weight", a.v_proj.weight
        yield f"blk.{i}.attn_output.weight", a.o_proj.weight
        yield f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight
        yield f"blk.{i}.ffn_gate.weight", f.gate_proj.weight
        yield f"blk.{i}.ffn_up.weight", f.up_proj.weight
        yield f"blk.{i}.ffn_down.weight", f.down_proj.weight
