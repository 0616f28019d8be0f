"""A tiny Gemma-3 written as a GGUF of quantized matrices (the gguf package's writer), for the tests of the quantized
forward and of a GGUF's tokenizer."""
import torch

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
PIECES = ["▁", "a", "b", "c", "d", "e", "▁a", "▁b", "▁c", "▁the", "s", "t"]
D, INTER, NH, NKV, HD, LAYERS, WINDOW = 256, 256, 2, 1, 128, 6, 4  # layer 6 of 6 attends fully, the rest a window


def write_tiny_gemma(path, seed: int = 0, kinds=("Q8_0", "Q5_0"), pieces=None, piece_types=None):
    """A 6-layer Gemma-3 GGUF as llama.cpp's converter lays one out: norms stored as (1 + w) in F32, matrices in the
    given quantized types by turns, the embedding tied to the head, a SentencePiece vocabulary (16 pieces, or the
    four specials then ``pieces`` of GGUF token types ``piece_types``, normal by default)."""
    import gguf  # optional: the tests that write one skip without it

    g = torch.Generator().manual_seed(seed)
    pieces = PIECES if pieces is None else list(pieces)
    piece_types = [1] * len(pieces) if piece_types is None else list(piece_types)
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_context_length(256), w.add_embedding_length(D), w.add_block_count(LAYERS), w.add_feed_forward_length(INTER)
    w.add_head_count(NH), w.add_head_count_kv(NKV), w.add_key_length(HD), w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-6), w.add_rope_freq_base(10000.0), w.add_sliding_window(WINDOW)
    w.add_tokenizer_model("llama"), w.add_token_list(SPECIALS + pieces)
    w.add_token_scores([0.0] * 4 + [-float(i) for i in range(len(pieces))])
    w.add_token_types([3, 3, 3, 2] + piece_types)
    w.add_bos_token_id(2), w.add_eos_token_id(1), w.add_unk_token_id(3), w.add_pad_token_id(0)
    turn = iter(range(10 ** 6))

    def mat(name, rows, cols, scale=0.08):
        kind = getattr(gguf.GGMLQuantizationType, kinds[next(turn) % len(kinds)])
        if kind.name in K_QUANTS:  # the gguf package writes no K-quants: blocks of random codes, scaled to size
            w.add_tensor(name, k_quant_blocks(kind.name, rows, cols, scale, g), raw_dtype=kind)
            return
        data = (torch.randn(rows, cols, generator=g) * scale).numpy()
        w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)

    def norm(name, n):
        w.add_tensor(name, (1.0 + 0.1 * torch.randn(n, generator=g)).numpy())

    mat("token_embd.weight", len(SPECIALS + pieces), D, scale=0.02)  # logits of a few units: a spread law
    norm("output_norm.weight", D)
    for i in range(LAYERS):
        for name, n in (("attn_norm", D), ("post_attention_norm", D), ("ffn_norm", D), ("post_ffw_norm", D),
                        ("attn_q_norm", HD), ("attn_k_norm", HD)):
            norm(f"blk.{i}.{name}.weight", n)
        for name, rows, cols in (("attn_q", NH * HD, D), ("attn_k", NKV * HD, D), ("attn_v", NKV * HD, D),
                                 ("attn_output", D, NH * HD), ("ffn_gate", INTER, D), ("ffn_up", INTER, D),
                                 ("ffn_down", D, INTER)):
            mat(f"blk.{i}.{name}.weight", rows, cols)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
    w.close()
    return path


K_QUANTS = ("Q4_K", "Q6_K")


def k_quant_blocks(kind: str, rows: int, cols: int, scale: float, g: torch.Generator):
    """rows x cols weights as Q4_K or Q6_K blocks of random codes (256 weights a block) whose scales keep each weight
    within about +-scale: (rows, bytes) uint8, as a GGUF stores them."""
    import numpy as np

    nb = cols // 256
    if kind == "Q6_K":  # 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales (1-4), d (f16)
        codes = torch.randint(0, 256, (rows, nb, 192), generator=g, dtype=torch.uint8).numpy()
        scales = torch.randint(1, 5, (rows, nb, 16), generator=g, dtype=torch.uint8).numpy()
        d = np.full((rows, nb, 1), scale / (32 * 4), dtype=np.float16).view(np.uint8)
        return np.concatenate([codes, scales, d], -1).reshape(rows, nb * 210)
    # Q4_K: d and dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles: d sc q - dmin m
    d = np.full((rows, nb, 2), [scale / (63 * 15), scale / (63 * 2)], dtype=np.float16).view(np.uint8)
    rest = torch.randint(0, 256, (rows, nb, 140), generator=g, dtype=torch.uint8).numpy()
    return np.concatenate([d, rest], -1).reshape(rows, nb * 144)


FEATURE_D2T = [2, 4, 5, 6, 7, 9, 11, 12, 13, 14, 15]  # the tiny vocabulary's ids a tiny feature draft drafts


def write_tiny_feature_draft(folder, width: int = D, scale: float = 3.0, d2t=FEATURE_D2T, seed: int = 0,
                             taps: tuple[int, ...] = ()):
    """A feature draft for the tiny GGUF (``width`` its features'), random weights times ``scale`` (3: a spread q;
    0: h = 0, so its argmax is its first id), saved as the trainer saves one (``slim.feature_draft.save_draft``);
    ``taps``: the target's layers it fuses with the features (a random fuse). Returns (folder, the torch
    FeatureHead)."""
    from specviz.drafts.eagle import FeatureHead, layer_config
    from specviz.slim.feature_draft import save_draft

    torch.manual_seed(seed)
    cfg = layer_config(width, max(width // 128, 1), 128, 1e-6)
    head = FeatureHead(cfg, taps=len(taps))
    with torch.no_grad():
        for p in head.parameters():
            p.mul_(scale)
        if taps:
            head.fuse.weight.copy_(torch.randn_like(head.fuse.weight) / (width * (len(taps) + 1)) ** 0.5)
    save_draft(head, list(d2t), cfg, folder, {"command": "test"}, taps=tuple(taps))
    return folder, head


def served_tiny_gemma(root, monkeypatch, narrow: bool = False):
    """The tiny GGUF and a feature draft of its width written under ``root`` (and, ``narrow``, one 128 wide), named
    in the environment as an operator serves them (SPECVIZ_EXTRA_MODELS: tiny-gemma, tiny-feature, narrow-feature;
    the GGUF cache under root; no SPECVIZ_FORWARD; SPECVIZ_THREADS=1). Returns the GGUF's path."""
    from pathlib import Path

    root = Path(root)
    gguf = root / "shipped" / "tiny-gemma3.gguf"
    if not gguf.is_file():
        gguf.parent.mkdir(parents=True, exist_ok=True)
        write_tiny_gemma(gguf)
        write_tiny_feature_draft(root / "tiny-feature")
        write_tiny_feature_draft(root / "narrow-feature", width=128, scale=1.0)
    names = f"tiny-gemma={gguf},tiny-feature={root / 'tiny-feature'}"
    monkeypatch.setenv("SPECVIZ_GGUF_CACHE", str(root / "cache"))
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", names + (f",narrow-feature={root / 'narrow-feature'}" if narrow else ""))
    monkeypatch.delenv("SPECVIZ_FORWARD", raising=False)
    monkeypatch.setenv("SPECVIZ_THREADS", "1")  # the C stack's runs on one thread: tests share the host's cores
    return gguf
