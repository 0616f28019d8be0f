"""CachedLM's fast path (the lean Llama forward) against its DynamicCache path
and against full recomputes: logits after random feeds, rollbacks and syncs; greedy decoding."""
import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz import DecodeConfig, Decoding, autoregressive_generate, speculative_generate
from specviz.runtime import lean_llama
from specviz.runtime import lm as lm_module
from specviz.runtime.lm import CachedLM
from tests.helpers.models import (
    DEVICE,
    assert_greedy_speculative_equals_autoregressive,
    finish,
    gqa_llama,
    perturbed,
    reference_greedy,
    tiny_gpt2,
    tiny_llama,
)

FAST = ["lean"]


MODELS = {"mha-f64": lambda: tiny_llama(seed=2), "gqa-f64": gqa_llama,
          "gqa-tied-f32": lambda: gqa_llama(dtype=torch.float32, tied=True)}
TOL = {torch.float64: dict(rtol=1e-7, atol=1e-7), torch.float32: dict(rtol=1e-5, atol=1e-5)}


@pytest.fixture
def small_capacity(monkeypatch):
    """Start the lean cache at 8 positions, so the random walks below also reallocate it."""
    monkeypatch.setattr(lean_llama, "FIRST_CAPACITY", 8)


def full_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], device=DEVICE)).logits[0]


WALKS = [(path, model) for path in FAST for model in MODELS]


@pytest.mark.slow
@pytest.mark.parametrize(("path", "model"), WALKS)
def test_fast_path_equals_dynamic_after_random_feeds_rollbacks_syncs(path, model, small_capacity):
    model = MODELS[model]()
    fast, ref = CachedLM(model, path), CachedLM(model, "dynamic")
    assert (fast.path, ref.path) == (path, "dynamic")
    rng, committed = random.Random(0), [1, 2, 3]
    for step in range(60):
        op = rng.choice(["feed", "rollback", "extend"])
        if op == "feed":
            new = [rng.randrange(64) for _ in range(rng.randint(1, 6))]
            a, b = fast.feed(new), ref.feed(new)
        elif op == "rollback" and fast.ids:
            keep = rng.randrange(len(fast.ids))
            fast.rollback(keep), ref.rollback(keep)
            continue
        else:  # a decoding round: the committed sequence grows, then the cache syncs to it and verifies drafts
            committed += [rng.randrange(64) for _ in range(rng.randint(0, 6))]
            drafts = [rng.randrange(64) for _ in range(rng.randint(0, 5))]
            a, b = fast.extend(committed, drafts), ref.extend(committed, drafts)
        torch.testing.assert_close(a, b, **TOL[a.dtype])
        assert fast.ids == ref.ids and fast.cache.get_seq_length() == len(fast.ids)
    assert fast.cache.capacity >= 32  # the cache was reallocated (twice or more) with its positions kept


@pytest.mark.parametrize("path", FAST)
def test_cached_logits_after_rollback_equal_full_recompute(path, small_capacity):
    model = gqa_llama(seed=1)
    lm, ids = CachedLM(model, path), list(range(1, 40))
    lm.feed(ids[:30])
    lm.rollback(12)  # positions 12..29 hold stale keys/values that must be overwritten, never read
    out = lm.extend(ids[:25], ids[25:30])  # sync feeds ids[12:25] and verifies 5 more in one pass
    torch.testing.assert_close(out, full_logits(model, ids[:30])[24:], **TOL[torch.float64])
    lm.rollback(3)
    torch.testing.assert_close(lm.feed(ids[3:40]), full_logits(model, ids)[3:], **TOL[torch.float64])


@pytest.mark.parametrize("path", ["dynamic"] + FAST)
def test_a_sync_to_another_sequence_rolls_back_to_what_the_two_share(path):
    """One CachedLM synced to one row's text, then to another's that is not its extension (a drafter shared by a
    batch's rows): the cache keeps only the shared prefix, and the logits are the other sequence's own."""
    model = gqa_llama(seed=1)
    lm, a, b = CachedLM(model, path), [5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12]
    lm.extend(a, [])
    lm.extend(a, [])  # synced: the cache holds all of a
    out = lm.extend(b, [13])
    assert lm.ids == b + [13]
    torch.testing.assert_close(out, full_logits(model, b + [13])[-2:], **TOL[torch.float64])


@pytest.mark.slow
@pytest.mark.parametrize("path", ["dynamic"] + FAST)
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_speculative_equals_target_greedy(path, k, prompt, monkeypatch):
    """Decoding picks the path through lm.DEFAULT_PATH (the decoder builds its CachedLMs itself)."""
    monkeypatch.setattr(lm_module, "DEFAULT_PATH", path)
    target = gqa_llama(seed=3, sharpen=30)
    run = Decoding(target, perturbed(target, 0.5), prompt, DecodeConfig(k=k, max_new_tokens=50, temperature=0))
    trace = run.run()
    assert run.target.path == path and run.drafter.lm.path == path
    assert sum(r.rejected for r in trace.rounds) >= 3  # rollbacks happened
    assert trace.new_tokens == reference_greedy(target, prompt, 50)


@pytest.mark.slow
@pytest.mark.parametrize("path", FAST)
def test_autoregressive_equals_target_greedy(path, prompt, monkeypatch):
    monkeypatch.setattr(lm_module, "DEFAULT_PATH", path)
    target = tiny_llama(seed=4, sharpen=30)
    cfg = DecodeConfig(max_new_tokens=30, temperature=0)
    assert autoregressive_generate(target, prompt, cfg).new_tokens == reference_greedy(target, prompt, 30)


def test_auto_takes_lean_for_llama_only():
    llama, gpt2 = tiny_llama(), tiny_gpt2()
    assert CachedLM(llama).path == "lean" and CachedLM(llama, "auto").path == "lean"
    assert CachedLM(gpt2).path == "dynamic"
    assert CachedLM(gpt2, "lean").path == "dynamic"  # unsupported: falls back, no error
    for unknown in ("fast", "static"):  # transformers' StaticCache is no path of ours
        with pytest.raises(ValueError, match="path must be one of"):
            CachedLM(llama, unknown)


@pytest.mark.slow
def test_gpt2_greedy_with_fast_default(prompt):
    """A model the lean path cannot run still decodes exactly (through DynamicCache) under the default."""
    target = tiny_gpt2(seed=4, sharpen=30)
    cfg = DecodeConfig(k=3, max_new_tokens=30, temperature=0)
    assert speculative_generate(target, perturbed(target, 0.3), prompt, cfg).new_tokens == \
        reference_greedy(target, prompt, 30)


def test_lean_weights_follow_parameter_updates():
    """The re-laid-out weights are cached per model, and rebuilt after an in-place update (a training step)."""
    model = gqa_llama(seed=5, tied=True)
    ids = [3, 1, 4, 1, 5]
    before = CachedLM(model, "lean").feed(ids)
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.mul_(1.5)
    after = CachedLM(model, "lean").feed(ids)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, full_logits(model, ids), **TOL[torch.float64])


def test_instrumented_models_keep_transformers_forward():
    """Hooks or a patched forward would be skipped by the lean path: such models take the DynamicCache one,
    while transformers' own (inert) output-capture hooks do not count."""
    hooked, patched = tiny_llama(), tiny_llama()
    hooked(torch.tensor([[1, 2]], device=DEVICE), output_hidden_states=True)  # installs the capture hooks
    assert CachedLM(hooked).path == "lean"
    handle = hooked.model.layers[0].register_forward_hook(lambda *args: None)
    assert CachedLM(hooked).path == "dynamic"
    handle.remove()
    calls, forward = [], patched.forward

    def counted(input_ids=None, cache=None, **kw):
        calls.append(input_ids.shape[1])
        return forward(input_ids=input_ids, cache=cache, **kw)

    patched.forward = counted
    CachedLM(patched).feed([1, 2, 3])
    assert calls == [3]


def test_model_built_in_inference_mode():
    """Parameters made in inference mode have no version counter: the lean path still runs, re-laid out."""
    with torch.inference_mode():
        model = gqa_llama(seed=6)
    ids = [5, 4, 3, 2, 1]
    torch.testing.assert_close(CachedLM(model, "lean").feed(ids), CachedLM(model, "dynamic").feed(ids),
                               **TOL[torch.float64])


def bf16_llama(seed):
    """A tiny bf16 Llama whose matmul shapes (and so row-exactness) resemble the bundled target's."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=320, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=True)
    return finish(LlamaForCausalLM(cfg), 0.3).to(torch.bfloat16)


def bf16_matmuls_row_exact(model) -> bool:
    """Whether this CPU's bf16 matmuls give a row the same bits alone or among others, at the model's shapes:
    what the lean path's bf16 exactness rests on (true of the bundled target's shapes with AVX512-BF16; not of
    every shape or CPU), so the tests below check the attention only where it holds."""
    if DEVICE.type != "cpu":
        return False
    w = lean_llama.lean_weights(model)
    mats = [w.head_t] + [m for b in w.blocks for m in (b.qkv_t, b.o_t, b.gu_t, b.down_t)]
    x = torch.randn(11, max(m.shape[0] for m in mats), dtype=torch.bfloat16,
                    generator=torch.Generator().manual_seed(0))
    return all(torch.equal((x[:, : m.shape[0]] @ m)[r], (x[r: r + 1, : m.shape[0]] @ m)[0])
               for m in mats for r in range(11))


@pytest.mark.slow
def test_lean_bf16_rows_are_bit_identical_however_many_a_pass_holds():
    """In bf16 a verify pass must give each row exactly the logits a one-token pass gives it (greedy == the target's
    greedy in bf16); sdpa's fused CPU kernel did not (1 vs 11 rows rounded differently past ~200 keys)."""
    model = bf16_llama(seed=3)
    if not bf16_matmuls_row_exact(model):
        pytest.skip("this CPU's bf16 matmuls are not row-exact at these shapes")
    lean, ids = lean_llama.LeanLlama(model), torch.randint(0, 256, (430,), generator=torch.Generator().manual_seed(0))
    lean.forward(ids[:6])
    one = torch.cat([lean.forward(ids[i: i + 1]) for i in range(6, 420)])
    for n in (2, 7, 11):
        lean.crop(6)
        many = torch.cat([lean.forward(ids[i: i + n]) for i in range(6, 420, n)])[: len(one)]
        assert torch.equal(many, one), (n, [i + 6 for i in range(len(one)) if not torch.equal(many[i], one[i])][:5])


@pytest.mark.slow
@pytest.mark.parametrize("tree", [None, "2,2,1"])
def test_lean_bf16_greedy_speculative_equals_autoregressive(tree):
    target = bf16_llama(seed=4)
    if not bf16_matmuls_row_exact(target):
        pytest.skip("this CPU's bf16 matmuls are not row-exact at these shapes")
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(1))
    assert_greedy_speculative_equals_autoregressive(target, perturbed(target, 0.05, seed=5), ids, 5, tree, 300)
