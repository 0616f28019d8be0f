"""Drafts made of the target itself (specviz.drafts.self_drafts): an early exit in the target's own cache, and the feature
draft (specviz.drafts.eagle) over the target's hidden states."""
import functools

import pytest
import torch

from specviz import DecodeConfig, TreeConfig, speculative_generate
from specviz.drafts.drafter import draft_q
from specviz.drafts.eagle import FeatureHead, target_features, unroll, unroll_mask
from specviz.drafts.early_exit import early_exit, new_adapter
from specviz.drafts.self_drafts import ExitDrafter, FeatureDrafter
from specviz.runtime.lm import CachedLM
from tests.helpers.models import reference_greedy, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two
from tests.helpers.tree_seeds import first_two_of_seeds


def exits(target):
    adapter = new_adapter(target, 1)
    with torch.no_grad():
        for p in adapter.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return [early_exit(target, 1), early_exit(target, 2), early_exit(target, 1, adapter)]


@pytest.mark.slow
@pytest.mark.parametrize("which", [0, 1, 2])
def test_an_exit_sharing_the_targets_cache_drafts_what_its_own_cache_drafts(which):
    """Same proposals, token for token, round for round, as the exit with a cache of its own; greedy output is the
    target's own; and the shared exit holds no key/value cache but its adapter's."""
    target = tiny_llama(seed=3, layers=3, sharpen=30)
    draft = exits(target)[which]
    prompt = torch.tensor([list(range(5, 17))])
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=40)
    shared = speculative_generate(target, ExitDrafter(draft), prompt, cfg)
    own = speculative_generate(target, ExitDrafter(draft, shared=False), prompt, cfg)
    assert [r.drafted for r in shared.rounds] == [r.drafted for r in own.rounds]
    assert shared.new_tokens == own.new_tokens == reference_greedy(target, prompt, 40)
    sampled = DecodeConfig(k=3, temperature=1.0, max_new_tokens=30, seed=5)
    a = speculative_generate(target, ExitDrafter(draft), prompt, sampled)
    b = speculative_generate(target, ExitDrafter(draft, shared=False), prompt, sampled)
    assert a.new_tokens == b.new_tokens and [r.drafted for r in a.rounds] == [r.drafted for r in b.rounds]
    for x, y in zip(a.rounds, b.rounds):
        torch.testing.assert_close(torch.tensor(x.q), torch.tensor(y.q))


@pytest.mark.slow
def test_a_shared_exit_keeps_only_its_adapters_cache():
    from specviz.decoder import Decoding

    target = tiny_llama(seed=3, layers=3, sharpen=30)
    plain, _, adapted = exits(target)
    prompt = torch.tensor([list(range(5, 17))])
    sizes = {}
    for name, draft, shared in [("plain", plain, True), ("adapted", adapted, True), ("own", plain, False)]:
        run = Decoding(target, ExitDrafter(draft, shared=shared), prompt, DecodeConfig(k=3, max_new_tokens=8))
        run.run()
        sizes[name] = run.drafter.cache_bytes()
    lean = CachedLM(target).cache
    layer = lean.kv[0].numel() * lean.kv.element_size()
    assert sizes == {"plain": 0, "adapted": layer, "own": layer}  # one layer's worth each (the exit at 1)
    run = Decoding(target, plain, prompt, DecodeConfig(k=3, max_new_tokens=8))  # the exit model itself, as the app
    run.run()  # passes it: it drafts in the target's cache
    assert isinstance(run.drafter, ExitDrafter) and run.drafter.cache_bytes() == 0


@pytest.mark.slow
def test_an_exit_falls_back_to_its_own_cache_off_the_lean_path(monkeypatch):
    import specviz.runtime.lm as lm

    monkeypatch.setattr(lm, "DEFAULT_PATH", "dynamic")
    target = tiny_llama(seed=3, layers=3, sharpen=30)
    prompt = torch.tensor([list(range(5, 17))])
    trace = speculative_generate(target, early_exit(target, 1), prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=20))
    assert trace.new_tokens == reference_greedy(target, prompt, 20)


def head_for(target, seed=0):
    torch.manual_seed(seed)
    head = FeatureHead(target.config)
    with torch.no_grad():  # a random but confident head
        head.fc.weight.mul_(3.0)
    return head.eval()


def test_the_unroll_mask_is_each_chains_view():
    m = unroll_mask(3, 5)
    # step 2 at position 4: a chain after position 2, its step-1 entry at 3 and itself
    row = m[2 * 5 + 4].view(3, 5)
    assert row[0].tolist() == [True, True, True, False, False]
    assert row[1].tolist() == [False, False, False, True, False] and row[2].tolist() == [False] * 4 + [True]


def test_a_feature_draft_drafts_what_its_training_unroll_computes():
    """Round 1's q_1..q_3 are the unroll's steps 1..3 on the same tokens; after a verify that rejects a draft, round
    2's q_1 is step 1 again from the target's true features (the positions it drafted over, fed again)."""
    target = tiny_llama(seed=3, layers=2, sharpen=5)
    head = head_for(target)
    cfg = DecodeConfig(k=3, temperature=1.0)
    lm = CachedLM(target)
    prompt = list(range(5, 17))
    lm.feed(prompt)  # before attach: start feeds it again, keeping the features
    drafter = FeatureDrafter(head, target)
    drafter.attach(lm)
    drafter.start(prompt, cfg, 64, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    first = drafter.propose(prompt, 3, g)
    tokens = torch.tensor([prompt + first.tokens.tolist()])
    with torch.no_grad():
        f, _ = target_features(target, tokens)
        steps = unroll(head, target, tokens, f, 3)
    n = len(prompt) - 1
    for s in range(len(first.tokens)):
        torch.testing.assert_close(first.q[s], draft_q(steps[s][0, n + s], cfg, 64), atol=1e-5, rtol=1e-4)
    lm.extend(prompt, first.tokens.tolist())  # the verify pass
    committed = prompt + first.tokens.tolist()[:1] + [7]  # one draft accepted, then another token
    second = drafter.propose(committed, 3, g)
    tokens = torch.tensor([committed])
    with torch.no_grad():
        f, _ = target_features(target, tokens)
        step1 = unroll(head, target, tokens, f, 1)[0]
    torch.testing.assert_close(second.q[0], draft_q(step1[0, -1], cfg, 64), atol=1e-5, rtol=1e-4)


@pytest.mark.law
@pytest.mark.slow
def test_feature_draft_greedy_is_the_targets_greedy_and_sampling_keeps_its_law():
    target = tiny_llama(vocab=8, seed=11, sharpen=5)
    drafter = FeatureDrafter(head_for(target), target)
    prompt = torch.tensor([[1, 2, 3, 4]])
    greedy = speculative_generate(target, drafter, prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=30))
    assert greedy.new_tokens == reference_greedy(target, prompt, 30)
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=1.0)
    counts, _ = first_two_of_seeds(target, drafter, prompt, cfg, 1500)  # each seed's run replayed, the first pinned
    assert chi2_pvalue(counts, exact_first_two(target, prompt, cfg)) > 1e-3


def two_started_drafters():
    """(prompt, two feature drafters of one head, each started on the prompt beside its own target cache)."""
    target = tiny_llama(seed=3, layers=2, sharpen=5)
    head, prompt, cfg = head_for(target), list(range(5, 17)), DecodeConfig(k=4, temperature=1.0)
    drafters = []
    for _ in range(2):
        lm = CachedLM(target)
        drafter = FeatureDrafter(head, target)
        drafter.attach(lm)
        drafter.start(prompt, cfg, 64, torch.device("cpu"))
        lm.feed(prompt)
        drafters.append(drafter)
    return prompt, *drafters


def test_a_feature_drafts_stepper_catches_up_on_tokens_another_draft_proposed():
    """Tokens a hybrid's n-gram drafted reach the feature draft in one call; its logits then equal those of the
    same tokens drafted one call at a time (each input is the draft's own h at the position before)."""
    prompt, a, b = two_started_drafters()
    at_once, one_by_one = a.stepper(prompt), b.stepper(prompt)
    for n in range(4):
        one_by_one([3, 9, 21, 40][:n])
    torch.testing.assert_close(at_once([3, 9, 21, 40]), one_by_one([3, 9, 21, 40]), atol=1e-6, rtol=1e-5)


@pytest.mark.slow
def test_a_hybrid_of_the_feature_draft_is_the_targets_greedy():
    """The n-gram of the target's greedy text drafts where it is sure, the feature draft elsewhere (after the
    n-gram's tokens, within one round): the output is the target's own greedy decode."""
    from specviz.drafts.hybrid import HybridDrafter
    from specviz.drafts.ngram import NGramModel

    target = tiny_llama(vocab=16, seed=11, sharpen=8)
    ids = torch.tensor([[1, 2, 3, 1, 2, 3]])
    text = target.generate(ids, do_sample=False, max_new_tokens=120, min_new_tokens=120)[0]
    table = NGramModel.fit(text[:60], 16, order=3, min_count=1)  # knows part of the greedy text only
    hybrid = HybridDrafter(table, FeatureDrafter(head_for(target), target), confidence=0.6)
    trace = speculative_generate(target, hybrid, ids, DecodeConfig(k=4, temperature=0, max_new_tokens=60))
    assert trace.new_tokens == reference_greedy(target, ids, 60)
    assert any(r.n_accepted for r in trace.rounds)


@pytest.mark.parametrize("tree", [TreeConfig(shape=(2, 2, 1, 1)), TreeConfig(budget=10, depth=6, width=2),
                                  TreeConfig(budget=12, depth=8, width=2, threshold=0.2)])
@pytest.mark.slow
def test_a_hybrid_of_the_feature_draft_drafts_trees_from_both(tree, monkeypatch):
    """Token trees of the hybrid: a node's children from the n-gram where it is sure, else from the feature draft,
    which first takes (a level per pass) the nodes on the way that the n-gram drafted; greedy output is the
    target's own greedy decode, and both drafts proposed nodes."""
    from specviz.drafts.hybrid import HybridDrafter
    from specviz.drafts.ngram import NGramModel

    target, head = trained_pair(7)
    ids = torch.tensor([[1, 2, 3, 1, 2, 3]])
    text = target.generate(ids, do_sample=False, max_new_tokens=60, min_new_tokens=60)[0]
    table = NGramModel.fit(text[:22], 16, order=3)  # knows the greedy text's start, not the loop it ends in
    hybrid = HybridDrafter(table, FeatureDrafter(head, target), confidence=0.6)
    calls = {"feature levels": 0, "table": 0}
    levels, lookups = FeatureDrafter.tree_logits, NGramModel.log_distribution

    def count(name, fn):
        def counted(*args):
            calls[name] += 1
            return fn(*args)
        return counted

    monkeypatch.setattr(FeatureDrafter, "tree_logits", count("feature levels", levels))
    monkeypatch.setattr(NGramModel, "log_distribution", count("table", lookups))
    trace = speculative_generate(target, hybrid, ids, DecodeConfig(temperature=0, max_new_tokens=50, tree=tree))
    assert trace.new_tokens == reference_greedy(target, ids, 50)
    assert all(r.tree is not None for r in trace.rounds) and any(r.n_accepted for r in trace.rounds)
    assert calls["feature levels"] > 0 and calls["table"] > 0


@pytest.mark.law
@pytest.mark.slow
def test_a_hybrid_tree_that_mixes_n_gram_and_feature_nodes_keeps_the_targets_law():
    """Sampled trees with the n-gram on (greedy_only=False): each node's children are drawn from the q of the
    draft that drafted there, and the first two tokens keep the target's exact law."""
    from specviz.drafts.hybrid import HybridDrafter
    from specviz.drafts.ngram import NGramModel

    target = tiny_llama(vocab=8, seed=11, sharpen=5)
    table = NGramModel.fit(torch.tensor([1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3, 4, 5]), 8, order=2)
    hybrid = HybridDrafter(table, FeatureDrafter(head_for(target), target), confidence=0.5, greedy_only=False)
    assert sampled_trees_keep_the_law(target, hybrid)


def test_a_feature_draft_needs_its_own_target_on_the_lean_path():
    target, other = tiny_llama(seed=3), tiny_llama(seed=4)
    drafter = FeatureDrafter(head_for(target), target)
    with pytest.raises(ValueError, match="its own target"):
        speculative_generate(other, drafter, torch.tensor([[1, 2, 3]]), DecodeConfig(max_new_tokens=4))
    from specviz import speculative_generate_batch

    with pytest.raises(ValueError, match="not in batches"):
        speculative_generate_batch(target, drafter, [torch.tensor([[1, 2, 3]])] * 2, DecodeConfig(max_new_tokens=4))


def test_a_feature_drafts_tree_nodes_get_the_q_their_path_drafted_as_a_chain_gets():
    """One level per pass, each node from its parent's h: a node's q is the chain's q after the same tokens."""
    prompt, tree, chain = two_started_drafters()
    cfg = chain.cfg
    root = tree.tree_start(prompt)
    level1 = tree.tree_expand([0, 1, 2], [3, 9, 30], [-1, -1, -1])
    level2 = tree.tree_expand([3, 4], [21, 7], [1, 2])  # under 9 and under 30
    step = chain.stepper(prompt)
    q = lambda drafted: draft_q(step(drafted), cfg, 64)
    for got, drafted in [(root, []), (level1[1], [9]), (level2[0], [9, 21])]:
        torch.testing.assert_close(got, q(drafted), atol=1e-6, rtol=1e-5)
    step = chain.stepper(prompt)  # a new round on the same prompt: the path under 30 as a chain
    torch.testing.assert_close(level2[1], q([30, 7]), atol=1e-6, rtol=1e-5)


@functools.cache
def trained_pair(seed: int) -> tuple:
    """(tiny_llama(vocab=16, seed=seed, sharpen=5), its trained_head): trained once for the module's tests (the
    training is seeded, so every test gets the head it would train itself; the decoder never changes a head)."""
    target = tiny_llama(vocab=16, seed=seed, sharpen=5)
    return target, trained_head(target)


def trained_head(target, steps=150):
    """A feature head fitted for a few seconds to the target's own sampled text (two unrolled steps, forward KL):
    it drafts well enough that trees accept."""
    torch.manual_seed(0)
    head = FeatureHead(target.config).to(target.dtype)
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    with torch.no_grad():
        text = target.generate(torch.tensor([[1, 2, 3, 4]] * 8), do_sample=True, max_new_tokens=60, min_new_tokens=60)
        f, p = target_features(target, text)
    for _ in range(steps):
        loss = sum(torch.nn.functional.kl_div(q[:, s:].log_softmax(-1), p[:, s:].log_softmax(-1), log_target=True,
                                              reduction="batchmean") for s, q in enumerate(unroll(head, target, text, f, 2)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.eval()


@pytest.mark.slow
@pytest.mark.parametrize("tree", [TreeConfig(shape=(3, 2, 2, 1)), TreeConfig(shape=(1,), budget=8, depth=4, width=2)])
def test_feature_draft_trees_decode_the_targets_greedy(tree):
    target, head = trained_pair(11)
    drafter = FeatureDrafter(head, target)
    prompt = torch.tensor([[1, 2, 3, 4]])
    trace = speculative_generate(target, drafter, prompt, DecodeConfig(temperature=0, max_new_tokens=40, tree=tree))
    assert trace.new_tokens == reference_greedy(target, prompt, 40)
    assert all(r.tree is not None for r in trace.rounds) and any(r.n_accepted for r in trace.rounds)


@pytest.mark.law
@pytest.mark.slow
def test_feature_draft_trees_keep_the_targets_law():
    target = tiny_llama(vocab=8, seed=11, sharpen=5)
    drafter = FeatureDrafter(head_for(target), target)
    assert sampled_trees_keep_the_law(target, drafter)


@pytest.mark.slow
def test_a_saved_feature_draft_loads_and_drafts_for_a_copy_of_its_target(tmp_path):
    import copy

    from specviz.drafts import eagle

    target = tiny_llama(seed=3, sharpen=5)
    head = head_for(target)
    eagle.save(head, tmp_path, {"test": True})
    assert eagle.names(tmp_path, "t") == ["t+eagle"] and eagle.parse("t+eagle") == "t" and eagle.parse("t") is None
    assert eagle.param_count(tmp_path) == sum(p.numel() for p in eagle.extra_parameters(head))
    drafter = eagle.drafter(copy.deepcopy(target), tmp_path, "t+eagle")  # bound to a copy: the same weights
    for (name, got), want in zip(drafter.head.state_dict().items(), head.state_dict().values()):
        torch.testing.assert_close(got, want.to(got.dtype), atol=0.02 * float(want.abs().max()) + 1e-3, rtol=0, msg=name)
    prompt = torch.tensor([list(range(5, 17))])
    trace = speculative_generate(target, drafter, prompt, DecodeConfig(k=4, temperature=0, max_new_tokens=30))
    assert trace.new_tokens == reference_greedy(target, prompt, 30)
    from specviz.views.summary import draft_note

    assert trace.draft_name == "t+eagle" and "Feature draft" in draft_note(trace)
    with pytest.raises(ValueError, match="no feature draft"):
        eagle.load(target, tmp_path / "elsewhere")


@pytest.mark.slow
def test_the_bundled_feature_draft_is_listed_and_sized():
    from specviz import models
    from specviz.app.store import load_bytes, model_free
    from specviz.drafts import eagle

    if "target+eagle" not in models.list_drafters():
        pytest.skip("no bundled feature draft")
    own = eagle.param_count(models.ASSETS / "target")
    assert own > 1_000_000 and load_bytes("target+eagle") == 4 * own and load_bytes("target+eagle", "mps") == 2 * own
    assert model_free("target+eagle") and models.self_draft_base("target+eagle") == "target"
    hybrid = "target+eagle+ngram-target"
    if hybrid in models.list_drafters():  # the feature draft, and the n-gram of the target's greedy text where sure
        assert model_free(hybrid) and models.self_draft_base(hybrid) == "target" and load_bytes(hybrid) == 4 * own
        target, drafter, _ = models.load_pair("target", hybrid)
        assert drafter.model_draft.target_model is target  # on the very target loaded
        assert (drafter.model_steps, drafter.lookup) == (5, 4)


@pytest.mark.slow
def test_a_hybrid_tree_drafts_the_runs_own_loops_from_the_lookup():
    """With ``lookup`` on, a tree node whose path repeats an earlier stretch of the run gets one child, what followed
    that stretch (a point mass, q = 1), before the n-gram or the feature draft is asked; output stays greedy's."""
    from specviz.drafts.hybrid import HybridDrafter
    from specviz.drafts.ngram import NGramModel

    target, head = trained_pair(7)  # its greedy text ends in a loop
    ids = torch.tensor([[1, 2, 3, 1, 2, 3]])
    never_sure = NGramModel.fit(torch.arange(16), 16, order=2)
    tree = TreeConfig(budget=10, depth=6, width=2)
    for lookup, expect_point_masses in ((2, True), (0, False)):
        hybrid = HybridDrafter(never_sure, FeatureDrafter(head, target), confidence=0.99, lookup=lookup)
        trace = speculative_generate(target, hybrid, ids, DecodeConfig(temperature=0, max_new_tokens=50, tree=tree))
        assert trace.new_tokens == reference_greedy(target, ids, 50)
        point_masses = [n for r in trace.rounds for n in r.tree.nodes if n.q == 1.0]
        assert bool(point_masses) == expect_point_masses


def sampled_trees_keep_the_law(target, drafter) -> bool:
    """Chi-square of the first two tokens of 1,500 sampled (2, 2)-tree runs against the target's exact law (each
    seed's run replayed from the models' answers, the first seeds pinned to their full runs)."""
    prompt = torch.tensor([[1, 2, 3, 4]])
    cfg = DecodeConfig(max_new_tokens=3, temperature=1.0, tree=TreeConfig(shape=(2, 2)))
    counts, _ = first_two_of_seeds(target, drafter, prompt, cfg, 1500)
    return chi2_pvalue(counts, exact_first_two(target, prompt, DecodeConfig(max_new_tokens=3, temperature=1.0))) > 1e-3
