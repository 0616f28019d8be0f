"""Drafts over a pruned vocabulary (``runtime.pruned_head``). An early exit (``early_exit(..., vocab=ids)``): its
logits are the full exit's on its tokens and -inf elsewhere, on transformers' forward and the lean one; q is a real
distribution on its support; greedy decoding is the target's own greedy text and sampling keeps the target's exact
law. The feature draft over a pruned head: the target's greedy text, drafted from its tokens only."""
import pytest
import torch

from specviz import DecodeConfig, Decoding, speculative_generate
from specviz.drafts.early_exit import early_exit
from specviz.runtime.lm import CachedLM
from specviz.runtime.pruned_head import PrunedHead, frequent_tokens
from tests.helpers.models import reference_greedy, tiny_gpt2, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two, first_two_counts, seeded_runs


def test_frequent_tokens_are_the_most_seen_ids_and_the_ones_always_kept():
    texts = [[3, 3, 3, 1, 1, 7], torch.tensor([7, 7, 7, 7, 2])]
    assert frequent_tokens(texts, 2, vocab=10).tolist() == [3, 7]  # 7 seen 5 times, 3 three times
    assert frequent_tokens(texts, 3, vocab=10, always=[9]).tolist() == [1, 3, 7, 9]
    assert frequent_tokens(texts, 100, vocab=10).tolist() == [1, 2, 3, 7]  # never more than were seen
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 5\)"):
        frequent_tokens(texts, 2, vocab=5)
    with pytest.raises(ValueError, match="at least 1 token"):
        frequent_tokens(texts, 0, vocab=10)


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2])
def test_a_pruned_exit_scores_its_tokens_as_the_full_exit_and_none_else(make):
    target = make(seed=3, layers=3, sharpen=30)
    keep = torch.tensor([0, 4, 9, 17, 33, 40, 63])
    ids = list(range(5, 21))
    paths = ("dynamic", "lean") if make is tiny_llama else ("dynamic",)
    for path in paths:
        full = CachedLM(early_exit(target, 2), path=path).feed(ids)
        pruned = CachedLM(early_exit(target, 2, vocab=keep), path=path).feed(ids)
        torch.testing.assert_close(pruned[:, keep], full[:, keep])
        outside = torch.ones(64, dtype=torch.bool)
        outside[keep] = False
        assert torch.isneginf(pruned[:, outside]).all()
    pruned = early_exit(target, 2, vocab=keep)
    assert all(any(p is q for q in target.parameters()) for p in pruned.parameters())  # no parameter of its own
    assert target.get_output_embeddings() is not pruned.get_output_embeddings()  # the target keeps its full head
    assert "head of 7 tokens" in pruned.config._name_or_path
    with pytest.raises(ValueError, match=r"token ids in \[0, 64\)"):
        PrunedHead(target.get_output_embeddings(), [3, 64])


@pytest.mark.slow
def test_greedy_with_a_pruned_exit_is_the_targets_own_greedy_in_its_cache_and_its_own():
    """The support leaves out tokens the target emits: there the draft cannot propose them, the verify emits them."""
    target = tiny_llama(seed=3, layers=3, sharpen=30)
    prompt = torch.tensor([[5, 9, 11, 5, 9, 11, 3]])
    want = reference_greedy(target, prompt, 40)
    keep = frequent_tokens([want[:20]], 6, vocab=64)  # some of what the target says later is missing
    assert set(want) - set(keep.tolist())
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=40)
    exit_ = early_exit(target, 2, vocab=keep)
    run = Decoding(target, exit_, prompt, cfg)
    trace = run.run()
    assert trace.new_tokens == want and trace.counts().accepted > 0
    assert run.drafter.lean is not None  # drafted in the target's own cache, through its pruned head
    assert all(t in keep.tolist() for r in trace.rounds for t in r.drafted)
    from specviz.drafts.self_drafts import ExitDrafter

    own_cache = ExitDrafter(exit_, shared=False)  # an exit with a cache of its own: the same text
    assert speculative_generate(target, own_cache, prompt, cfg).new_tokens == want


def test_a_pruned_q_is_a_distribution_on_its_support():
    target = tiny_llama(seed=3, layers=3)
    keep = torch.tensor([1, 2, 30, 50])
    run = Decoding(target, early_exit(target, 1, vocab=keep), torch.tensor([[4, 5, 6]]),
                   DecodeConfig(k=3, temperature=1.0, max_new_tokens=4, seed=0))
    next(iter(run))  # the prefill and one round
    proposal = run.drafter.propose(run.committed, 3, torch.Generator().manual_seed(1))
    q = proposal.q_on(64)
    torch.testing.assert_close(q.sum(-1), torch.ones(len(q), dtype=q.dtype))
    outside = torch.ones(64, dtype=torch.bool)
    outside[keep] = False
    assert (q[:, keep] > 0).all() and (q[:, outside] == 0).all()


V = 8
LOSSLESS_TARGET = tiny_llama(vocab=V, seed=11, sharpen=5)


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("extra", [{}, {"temperature": 0.8, "top_k": 6}])
def test_sampling_with_a_pruned_exit_keeps_the_targets_exact_law(extra):
    """The first two tokens' law against the target's exact one (chi-square), with a support missing 3 of 8 tokens:
    the residual emits those."""
    prompt = torch.tensor([[1, 2, 1, 2, 1]])
    cfg = DecodeConfig(k=2, max_new_tokens=3, **extra)
    exact = exact_first_two(LOSSLESS_TARGET, prompt, cfg)
    drafter = early_exit(LOSSLESS_TARGET, 1, vocab=[0, 2, 3, 5, 6])
    traces = seeded_runs(LOSSLESS_TARGET, drafter, prompt, cfg, 1000)  # seeds 0..999 in one batch
    counts, rejections = first_two_counts(traces, V), sum(trace.rounds[0].rejected for trace in traces)
    assert 10 < rejections < 990
    assert counts[[1, 4, 7]].sum() > 0  # tokens the draft cannot propose were emitted, by the residual
    assert chi2_pvalue(counts, exact) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])  # float32: its step in C (runtime.native)
def test_a_feature_draft_over_a_pruned_head_keeps_the_targets_greedy_and_drafts_only_its_tokens(dtype):
    from specviz.drafts.eagle import FeatureHead
    from specviz.drafts.self_drafts import FeatureDrafter

    target = tiny_llama(seed=3, layers=2, sharpen=30).to(dtype)
    torch.manual_seed(0)
    head = FeatureHead(target.config).eval().to(dtype)
    prompt = torch.tensor([[5, 9, 11, 5, 9, 11, 3]])
    want = reference_greedy(target, prompt, 30)
    keep = frequent_tokens([want[:15]], 8, vocab=64)
    drafter = FeatureDrafter(head, target, vocab=keep)
    trace = speculative_generate(target, drafter, prompt, DecodeConfig(k=3, temperature=0, max_new_tokens=30))
    assert trace.new_tokens == want
    assert all(t in keep.tolist() for r in trace.rounds for t in r.drafted)
    with pytest.raises(ValueError, match=r"vocab ids must lie in \[0, 64\)"):
        speculative_generate(target, FeatureDrafter(head, target, vocab=[1, 99]), prompt, DecodeConfig(max_new_tokens=2))


@pytest.mark.slow
def test_load_drafter_prunes_an_exits_head_by_name_and_refuses_vocab_elsewhere():
    from specviz import load_drafter

    exit_ = load_drafter("target@2", vocab=range(100))
    assert isinstance(exit_.get_output_embeddings(), PrunedHead) and exit_.get_output_embeddings().ids.numel() == 100
    with pytest.raises(ValueError, match="prunes an early exit's head"):
        load_drafter("prompt-lookup", vocab=[1, 2])
