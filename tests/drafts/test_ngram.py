"""The n-gram draft: hand-computed smoothing, a proper distribution, storage, and it drives the decoder."""
import pytest
import torch

from specviz import DecodeConfig, NGramDrafter, NGramModel, speculative_generate
from specviz.models import ASSETS
from tests.helpers.models import tiny_llama


def toy():
    return NGramModel.fit(torch.tensor([0, 1, 0, 1, 0, 2]), vocab_size=3, order=2, discount=0.5)


def test_distribution_by_hand():
    # unigram add-one: (4, 3, 2) / 9; after 0: c(0,1) = 2, c(0,2) = 1 -> total 3, 2 distinct
    q = toy().distribution([0]).double()
    lam = 0.5 * 2 / 3
    expected = [lam * 4 / 9, 1.5 / 3 + lam * 3 / 9, 0.5 / 3 + lam * 2 / 9]
    assert q.tolist() == pytest.approx(expected)
    assert toy().distribution([]).tolist() == pytest.approx([4 / 9, 3 / 9, 2 / 9])
    assert toy().distribution([2]).tolist() == pytest.approx([4 / 9, 3 / 9, 2 / 9])  # unseen context: lower order


def test_q_sums_to_one_everywhere():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 50, (5000,), generator=g)
    model = NGramModel.fit(tokens, 64, order=3, min_count=2)
    for ctx in ([], [3], [3, 7], tokens[:10].tolist(), [63, 63, 63]):
        q = model.distribution(ctx)
        assert q.shape == (64,) and (q > 0).all() and q.sum().item() == pytest.approx(1.0, abs=1e-6)


def test_save_load_round_trip(tmp_path):
    model = NGramModel.fit(torch.randint(0, 40, (3000,), generator=torch.Generator().manual_seed(1)), 40, order=3)
    model.save(tmp_path / "ng")
    back = NGramModel.load(tmp_path / "ng")
    for ctx in ([], [1], [4, 5], [7, 7, 7]):
        assert torch.equal(back.distribution(ctx), model.distribution(ctx))


def test_counts_are_stored_in_16_bits_where_they_fit_and_load_exactly(tmp_path):
    from safetensors import safe_open

    model = NGramModel.fit(torch.randint(0, 40, (3000,), generator=torch.Generator().manual_seed(1)), 40, order=2)
    model.counts = [torch.tensor([5, 40000, 7] + [1] * (len(model.counts[0]) - 3), dtype=torch.int32),
                    model.counts[1], ]  # a unigram count past int16, within uint16
    model.save(tmp_path / "ng")
    with safe_open(str(tmp_path / "ng" / "ngram.safetensors"), "pt") as f:
        assert [f.get_slice(f"counts_{n}").get_dtype() for n in (1, 2)] == ["U16", "I16"]
    back = NGramModel.load(tmp_path / "ng")
    assert all(torch.equal(a.long(), b.long()) and b.dtype == torch.int32 for a, b in zip(model.counts, back.counts))


@pytest.mark.slow
def test_drives_the_decoder_exactly(prompt):
    target = tiny_llama(seed=3, sharpen=30)
    corpus = target.generate(prompt, do_sample=True, max_new_tokens=200)[0]  # text the target likes
    drafter = NGramDrafter(NGramModel.fit(corpus, 64, order=3))
    ref = target.generate(prompt, do_sample=False, max_new_tokens=40, min_new_tokens=40)[0, 5:].tolist()
    greedy = speculative_generate(target, drafter, prompt, DecodeConfig(k=4, temperature=0, max_new_tokens=40))
    assert greedy.new_tokens == ref
    sampled = speculative_generate(target, drafter, prompt, DecodeConfig(k=4, max_new_tokens=40))
    assert len(sampled.new_tokens) == 40 and all(0 < q <= 1 for r in sampled.rounds for q in r.q)


@pytest.mark.skipif(not (ASSETS / "ngram" / "ngram.json").is_file(), reason="bundled n-gram not built")
def test_bundled_ngram_loads_through_the_registry():
    import specviz
    drafter = specviz.load_drafter("ngram")
    assert isinstance(drafter, NGramDrafter) and "ngram" in specviz.list_drafters()
    assert drafter.model.distribution([0, 100]).sum().item() == pytest.approx(1.0, abs=1e-5)


def test_memoised_log_distribution_equals_the_distribution():
    """log q is memoised on the last order - 1 tokens: equal to the fresh distribution for long, short and
    repeated contexts, and contexts that differ only before those tokens share it."""
    g = torch.Generator().manual_seed(0)
    model = NGramModel.fit(torch.randint(0, 16, (3000,), generator=g), 16, order=3)
    for context in ([], [3], [3, 5], [1, 2, 3, 5], [9, 9, 3, 5], [3, 5]):
        assert torch.equal(model.log_distribution(context), model.distribution(context).log())
    assert model.log_distribution([1, 2, 3, 5]) is model.log_distribution([7, 3, 5])  # one entry per context
    assert len(model._memo) == 3  # (), (3,), (3, 5), and nothing else


def _hybrid_setup():
    from tests.helpers.models import perturbed, tiny_llama

    target = tiny_llama(vocab=16, seed=11, sharpen=8)
    draft = perturbed(target, 0.5)
    ids = torch.tensor([[1, 2, 3, 1, 2, 3]])
    text = target.generate(ids, do_sample=False, max_new_tokens=200, min_new_tokens=200)[0]  # its greedy loop
    return target, draft, ids, NGramModel.fit(text, 16, order=3, min_count=1)


@pytest.mark.slow
@pytest.mark.parametrize("confidence", [0.0, 0.6, 1.01])  # always the table, mixed, never the table
def test_hybrid_greedy_equals_the_targets_greedy(confidence):
    from specviz.drafts.hybrid import HybridDrafter
    from tests.helpers.models import reference_greedy

    target, draft, ids, table = _hybrid_setup()
    hybrid = HybridDrafter(table, draft, confidence)
    trace = speculative_generate(target, hybrid, ids, DecodeConfig(k=3, temperature=0, max_new_tokens=30))
    assert trace.new_tokens == reference_greedy(target, ids, 30)
    assert any(r.n_accepted for r in trace.rounds)


@pytest.mark.slow
def test_a_model_drafts_stepper_feeds_tokens_another_draft_proposed_in_one_pass():
    from specviz.drafts.drafter import ModelDrafter

    target, draft, ids, _ = _hybrid_setup()
    steps = []
    for _ in range(2):
        md = ModelDrafter(draft)
        md.start(ids[0].tolist(), DecodeConfig(k=4), 16, torch.device("cpu"))
        md.prefill(ids[0].tolist())
        steps.append(md.stepper(ids[0].tolist()))
    at_once, one_by_one = steps
    for n in range(3):
        one_by_one([4, 7, 2][:n])
    torch.testing.assert_close(at_once([4, 7, 2]), one_by_one([4, 7, 2]), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        full = draft(torch.tensor([ids[0].tolist() + [4, 7, 2]])).logits[0, -1]
    torch.testing.assert_close(at_once([4, 7, 2]), full, atol=1e-4, rtol=1e-4)


@pytest.mark.law
@pytest.mark.slow
def test_hybrid_sampling_is_exact_with_the_table_in_use():
    """greedy_only=False: sampled drafts come from the n-gram where it is confident, the model elsewhere; the law
    of the first two tokens is still the target's (chi-square over 600 seeds), and the table did draft."""
    from specviz.drafts.hybrid import HybridDrafter
    from tests.helpers.stats import chi2_pvalue, exact_first_two, first_two_counts, seeded_runs

    target, draft, ids, table = _hybrid_setup()
    hybrid = HybridDrafter(table, draft, confidence=0.3, greedy_only=False)
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=1.0)
    traces = seeded_runs(target, hybrid, ids, cfg, 600)  # seeds 0..599
    exact, counts, q1 = exact_first_two(target, ids, cfg), first_two_counts(traces, 16), table.distribution(ids[0].tolist())
    from_table = sum(abs(t.rounds[0].q[0] - float(q1[t.rounds[0].drafted[0]])) < 1e-6 for t in traces)
    assert from_table > 50  # the first draft came from the table in many runs (its q is the table's)
    assert chi2_pvalue(counts, exact) > 1e-3


@pytest.mark.slow
def test_a_hybrid_spends_at_most_model_steps_model_drafts_a_round():
    """model_steps caps the model's drafts per round, not the n-gram's: never the table -> at most 2 drafts a round;
    always the table -> k drafts a round; greedy output is the target's either way."""
    from specviz.drafts.hybrid import HybridDrafter
    from tests.helpers.models import reference_greedy

    target, draft, ids, table = _hybrid_setup()
    for confidence, most in ((1.01, 2), (0.0, 5)):
        hybrid = HybridDrafter(table, draft, confidence, model_steps=2)
        trace = speculative_generate(target, hybrid, ids, DecodeConfig(k=5, temperature=0, max_new_tokens=30))
        assert trace.new_tokens == reference_greedy(target, ids, 30)
        assert max(len(r.drafted) for r in trace.rounds) == most


@pytest.mark.slow
def test_a_sampled_hybrid_drafts_up_to_k_and_the_limit_says_why():
    """Sampled (no n-gram in the run), the model is the hybrid's only draft and k is what it drafts: a round of k = 5
    with model_steps=2 drafts more than 2, so k = 3 and k = 5 are different runs; draft_limit says which case is on."""
    from specviz.drafts.hybrid import HybridDrafter, draft_limit

    target, draft, ids, table = _hybrid_setup()
    hybrid = HybridDrafter(table, draft, 0.0, model_steps=2)
    runs = {k: speculative_generate(target, hybrid, ids, DecodeConfig(k=k, temperature=0.8, max_new_tokens=30, seed=3))
            for k in (3, 5)}
    assert max(len(r.drafted) for r in runs[5].rounds) > 3 > 2
    assert [len(r.drafted) for r in runs[3].rounds] != [len(r.drafted) for r in runs[5].rounds]
    assert draft_limit(hybrid, 5, 0.8)[0] == 5 and "(sampled: no n-gram)" in draft_limit(hybrid, 5, 0.8)[1]
    assert "at most 2 of them from" in draft_limit(hybrid, 5, 0.0)[1]
    assert draft_limit(hybrid, 2, 0.0) == (2, "up to k = 2 drafts a round")
    assert draft_limit(draft, 7, 0.8) == (7, "up to k = 7 drafts a round")


@pytest.mark.slow
def test_lookup_proposes_what_followed_the_latest_earlier_match():
    """By hand: the last 2 tokens of committed + drafted, their latest earlier occurrence in committed, the token
    after it; none without a match; a different text is indexed anew."""
    from specviz.drafts.hybrid import HybridDrafter

    _, draft, _, table = _hybrid_setup()
    hybrid = HybridDrafter(table, draft, lookup=2)
    text = [5, 6, 7, 9, 5, 6, 8, 1, 5]
    assert hybrid._lookup(text, [6]) == 8  # (5, 6) last seen at 4-5, then 8 (not the 7 after its first time)
    assert hybrid._lookup(text, [6, 8]) == 1
    assert hybrid._lookup(text, []) is None  # (1, 5): never before
    assert hybrid._lookup(text + [3, 1], [5]) == 3  # the same run's text, grown: (1, 5) at 7-8, then 3
    assert hybrid._lookup([2, 4, 2], [4]) == 2  # another text: the old index is dropped
    assert hybrid._lookup([2, 4, 9], []) is None
    with pytest.raises(ValueError, match="lookup"):
        HybridDrafter(table, draft, lookup=-1)


@pytest.mark.slow
@pytest.mark.parametrize("lookup", [1, 3])
def test_hybrid_with_lookup_is_the_targets_greedy_and_drafts_its_loops(lookup):
    """The target's greedy text loops; with a lookup the hybrid proposes the loop as point masses (q = 1) even
    where neither the table nor the model is asked, and the output is still the target's greedy decode."""
    from specviz.drafts.hybrid import HybridDrafter
    from tests.helpers.models import reference_greedy

    target, draft, ids, table = _hybrid_setup()
    hybrid = HybridDrafter(table, draft, confidence=1.01, model_steps=1, lookup=lookup)  # never the table
    trace = speculative_generate(target, hybrid, ids, DecodeConfig(k=6, temperature=0, max_new_tokens=60))
    assert trace.new_tokens == reference_greedy(target, ids, 60)
    late = trace.rounds[len(trace.rounds) // 2:]
    assert max(len(r.drafted) for r in late) == 6  # more than the one model draft a round: the lookup's
    assert sum(q == 1.0 for r in late for q in r.q) >= 10


def reference_q(tokens: list[int], V: int, order: int, context: list[int], min_count: int = 1, d: float = 0.75):
    """Absolute discounting by its recursive definition, over dicts of tuples (no keys at all)."""
    counts = {}
    for n in range(1, order + 1):
        for i in range(len(tokens) - n + 1):
            counts[tuple(tokens[i: i + n])] = counts.get(tuple(tokens[i: i + n]), 0) + 1
    counts = {g: c for g, c in counts.items() if len(g) == 1 or c >= min_count}
    q = {w: 1.0 + counts.get((w,), 0) for w in range(V)}
    total = sum(q.values())
    q = {w: v / total for w, v in q.items()}
    for n in range(2, order + 1):
        if len(context) < n - 1:
            break
        h = tuple(context[len(context) - n + 1:])
        after = {g[-1]: c for g, c in counts.items() if len(g) == n and g[:-1] == h}
        if after:
            c_h = sum(after.values())
            q = {w: max(after.get(w, 0) - d, 0) / c_h + d * len(after) / c_h * q[w] for w in range(V)}
    return q


@pytest.mark.slow
@pytest.mark.parametrize("order", [4, 5])
def test_a_big_vocabulary_keeps_every_order_exact(order):
    """V = 262,144 (Gemma-3's): base-V codes of an order-4 gram pass 2^63; the keys here stay exact."""
    V = 262_144
    g = torch.Generator().manual_seed(1)
    words = torch.tensor([5, 600, 70_000, 262_143, 131_072, 9])
    tokens = words[torch.randint(0, len(words), (3000,), generator=g)].tolist()
    tokens[100:110] = [262_143] * 10  # a context of the largest id
    model = NGramModel.fit(torch.tensor(tokens), V, order=order, min_count=2)
    assert all((k >= 0).all() for k in model.keys)
    for context in (tokens[200:210], [262_143] * 6, [70_000, 9, 5, 600], [600]):
        q = model.distribution(context).double()
        ref = reference_q(tokens, V, order, context, min_count=2)
        assert q.sum().item() == pytest.approx(1.0, abs=1e-6)
        for w in words.tolist():
            assert q[w].item() == pytest.approx(ref[w], rel=1e-5), (context, w)


def test_a_big_vocabulary_round_trips_and_drafts(tmp_path):
    V = 262_144
    tokens = torch.tensor([30_000, 200_000, 262_143, 7, 200_000] * 40)
    model = NGramModel.fit(tokens, V, order=5)
    model.save(tmp_path)
    back = NGramModel.load(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(model.keys, back.keys))
    q = back.distribution([30_000, 200_000, 262_143, 7])
    assert int(q.argmax()) == 200_000 and q[200_000] > 0.5


def test_files_with_base_v_codes_still_load(tmp_path):
    """An n-gram saved with whole-gram base-V codes (no "keys" field in its json) reads the same."""
    import json

    from safetensors.torch import save_file

    tokens = torch.randint(0, 30, (2000,), generator=torch.Generator().manual_seed(2))
    model = NGramModel.fit(tokens, 30, order=3, min_count=2)
    codes = []
    for n in range(1, 4):
        grams = tokens.unfold(0, n, 1).long()
        code = torch.zeros(len(grams), dtype=torch.long)
        for j in range(n):
            code = code * 30 + grams[:, j]
        k, c = torch.unique(code, sorted=True, return_counts=True)
        codes.append(k if n == 1 else k[c >= 2])
    save_file({f"keys_{n + 1}": k for n, k in enumerate(codes)} | {f"counts_{n + 1}": c for n, c in enumerate(model.counts)},
              tmp_path / "ngram.safetensors")
    (tmp_path / "ngram.json").write_text(json.dumps({"kind": "ngram", "vocab_size": 30, "order": 3, "discount": 0.75}))
    old = NGramModel.load(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(model.keys, old.keys))
    assert torch.equal(model.distribution([4, 5]), old.distribution([4, 5]))


@pytest.mark.slow
def test_fit_ngram_fits_any_models_own_greedy_text(tmp_path):
    """scripts/train/fit_ngram.py --target: a model of any vocabulary, its own greedy text, its tokenizer's digest;
    the table then drafts for that model with greedy output equal to the model's own."""
    import json
    import subprocess
    import sys

    from transformers import AutoTokenizer

    from specviz import load_model, speculative_generate
    from specviz.models import ASSETS
    from tests.helpers.models import tiny_llama

    tiny_llama(vocab=4096, seed=2, sharpen=20).save_pretrained(tmp_path / "m")
    AutoTokenizer.from_pretrained(ASSETS / "tokenizer").save_pretrained(tmp_path / "m")
    (tmp_path / "prompts.txt").write_text("ROMEO:\n\nTo be, or not to be")
    script = ASSETS.parents[1] / "scripts" / "train" / "fit_ngram.py"
    subprocess.run([sys.executable, str(script), "--target", str(tmp_path / "m"), "--prompts",
                    str(tmp_path / "prompts.txt"), "--minutes", "0", "--new-tokens", "24", "--order", "4",
                    "--min-count", "1", "--out", str(tmp_path / "table")], check=True, capture_output=True)
    info = json.loads((tmp_path / "table" / "ngram.json").read_text())
    target, tok = load_model(str(tmp_path / "m"))
    assert info["vocab_size"] == 4096 and info["tokenizer"] == target.specviz_vocab
    table = NGramModel.load(tmp_path / "table")
    ids = tok("ROMEO:", return_tensors="pt").input_ids
    cfg = DecodeConfig(k=4, temperature=0, max_new_tokens=24)
    trace = speculative_generate(target, NGramDrafter(table), ids, cfg)
    from specviz import autoregressive_generate

    assert trace.new_tokens == autoregressive_generate(target, ids, cfg).new_tokens
    assert trace.summary().acceptance_rate > 0.5  # its own greedy text: the table knows what comes next
