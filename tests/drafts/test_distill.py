"""Tests for specviz.drafts.distill (p = target, q = draft) and the bundled tokenizer."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.drafts.distill import distill, forward_kl, kl_on_batch, make_windows

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_DIR = ROOT / "assets/models/tokenizer"
SAMPLE = ROOT / "assets/corpus_sample.txt"


def tiny_llama(vocab: int = 64, hidden: int = 32, layers: int = 1, init: float = 0.02, seed: int = 0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=2 * hidden, max_position_embeddings=64,
                      tie_word_embeddings=True, initializer_range=init)
    return LlamaForCausalLM(cfg).float()


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def _data(vocab: int = 64, n: int = 64, seq_len: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(seed))


def test_forward_kl_hand_checked():
    p = torch.log(torch.tensor([[0.5, 0.5]]))
    q = torch.log(torch.tensor([[0.25, 0.75]]))
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert forward_kl(p, q).item() == pytest.approx(expected, abs=1e-6)
    assert forward_kl(p, p).item() == 0.0
    assert forward_kl(q, p).item() != pytest.approx(expected)  # not symmetric


def test_kl_is_zero_when_draft_equals_target():
    target = tiny_llama(init=0.3)
    draft = copy.deepcopy(target)
    assert kl_on_batch(target, draft, _data()[:8]) == 0.0


@pytest.mark.slow
def test_distill_lowers_heldout_kl():
    target, draft = tiny_llama(init=0.3, seed=0), tiny_llama(seed=1)
    train, held = _data(seed=1), _data(n=8, seed=2)
    before = kl_on_batch(target, draft, held)
    result = distill(target, draft, train, steps=25, seq_len=16, batch_size=8, lr=1e-2, progress=False)
    after = kl_on_batch(target, draft, held)
    assert result.steps == 25 and all(math.isfinite(x) for x in result.losses)
    assert after < 0.95 * before, (before, after)  # ~1.18 -> ~1.03 with these seeds
    # the target is never updated
    assert kl_on_batch(target, copy.deepcopy(target), held) == 0.0


@pytest.mark.slow
def test_vocab_mismatch_uses_shared_range():
    target, draft = tiny_llama(vocab=64, init=0.3), tiny_llama(vocab=72, seed=1)  # padded draft vocab
    held = _data(n=8, seed=2)
    before = kl_on_batch(target, draft, held)
    result = distill(target, draft, _data(seed=1), steps=15, seq_len=16, batch_size=8, lr=1e-2, progress=False)
    assert result.steps == 15 and kl_on_batch(target, draft, held) < before
    # draft logits beyond the shared range are ignored
    p, q = torch.randn(3, 64), torch.randn(3, 72)
    assert forward_kl(p, q).item() == pytest.approx(forward_kl(p, q[:, :64]).item())


@pytest.mark.slow
def test_deterministic_and_callback_stops_early():
    target = tiny_llama(init=0.3)
    runs = []
    for _ in range(2):
        draft = tiny_llama(seed=1)
        runs.append(distill(target, draft, _data(), steps=4, seq_len=16, batch_size=4, progress=False).losses)
    assert runs[0] == runs[1]
    seen = []
    result = distill(target, tiny_llama(seed=1), _data(), steps=50, seq_len=16, batch_size=4, progress=False,
                     callback=lambda step, loss: seen.append((step, loss)) or step < 2)
    assert result.stopped_early and result.steps == 3 and [s for s, _ in seen] == [0, 1, 2]


@pytest.mark.slow
def test_generated_fraction_runs():
    target, draft = tiny_llama(init=0.3), tiny_llama(seed=1)
    result = distill(target, draft, _data(), steps=2, seq_len=16, batch_size=4, progress=False,
                     generated_fraction=0.5)
    assert result.steps == 2


@pytest.mark.skipif(not TOKENIZER_DIR.exists(), reason="assets/models/tokenizer missing")
def test_tokenizer_round_trip_and_windows():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)
    assert tok("ROMEO:")["input_ids"][0] == tok.bos_token_id
    texts = ["ROMEO:\nBut, soft! what light\n\n  through yonder window breaks?\n",
             "Ünïcödé — “quotes” 漢字 🎭\ttab   trailing  \n", SAMPLE.read_text()[:4000] if SAMPLE.exists() else "x"]
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
    windows = make_windows(texts, tok, seq_len=32)
    assert windows.dim() == 2 and windows.size(1) == 32 and windows[0, 0].item() == tok.bos_token_id


def test_total_variation_is_one_minus_the_acceptance_beta():
    """The TVD objective is what acceptance loses: TV(p, q) = 1 - sum min(p, q), position by position, at the
    distillation temperature (hand-checked on a 3-token vocabulary too)."""
    from specviz.drafts.distill import total_variation
    from specviz.sampling import beta

    torch.manual_seed(0)
    p_logits, q_logits = torch.randn(2, 5, 11), torch.randn(2, 5, 11)
    for t in (1.0, 0.8):
        p, q = torch.softmax(p_logits / t, -1), torch.softmax(q_logits / t, -1)
        want = (1 - beta(p.reshape(-1, 11), q.reshape(-1, 11))).mean()
        torch.testing.assert_close(total_variation(p_logits, q_logits, t), want)
    p3, q3 = torch.tensor([[0.5, 0.3, 0.2]]).log(), torch.tensor([[0.2, 0.3, 0.5]]).log()
    assert float(total_variation(p3, q3)) == pytest.approx(0.3)  # 0.5 * (0.3 + 0 + 0.3)
