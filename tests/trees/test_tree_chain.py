"""Chains with siblings (``specviz.trees.chain``) against references: the target's own greedy decode, its exact
law, a full recompute of the committed prefix, and the chain the same draft drafts."""
import pytest
import torch

from specviz import DecodeConfig, Decoding, NGramModel, PromptLookupDrafter, speculative_generate
from specviz.config import TreeConfig
from specviz.drafts.hybrid import HybridDrafter
from tests.helpers.models import perturbed, reference_greedy, tiny_gpt2, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two
from tests.helpers.tree_seeds import first_two_of_seeds

SHARP = {"llama": tiny_llama(seed=3, sharpen=30), "gpt2": tiny_gpt2(seed=4, sharpen=30)}
CHAINS = [TreeConfig(depth=4, siblings=2), TreeConfig(depth=6, siblings=3, threshold=0.01),
          TreeConfig(depth=3, siblings=0), TreeConfig(depth=5, siblings=5)]


def _split(nodes) -> tuple[list, list]:
    """A chain-with-siblings round's nodes: the chain (node i at depth i under node i - 1), then the siblings."""
    m = 0
    while m < len(nodes) and nodes[m].depth == m and nodes[m].parent == m - 1:
        m += 1
    return list(nodes[:m]), list(nodes[m:])


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("tree", CHAINS, ids=lambda t: t.label)
def test_greedy_chain_with_siblings_equals_target_greedy(arch, tree, prompt):
    target = SHARP[arch]
    trace = speculative_generate(target, perturbed(target, 0.4), prompt,
                                 DecodeConfig(temperature=0, max_new_tokens=40, tree=tree))
    assert trace.new_tokens == reference_greedy(target, prompt, 40)
    for r in trace.rounds:
        chain, siblings = _split(r.tree.nodes)
        assert len(siblings) <= tree.siblings and len({s.depth for s in siblings}) == len(siblings)
        for s in siblings:  # a leaf beside a chain node: greedy, the draft's second choice there
            assert s.parent == s.depth - 1 and s.token != chain[s.depth].token and s.q <= chain[s.depth].q
    assert any(r.rejected for r in trace.rounds) and any(r.n_accepted >= 2 for r in trace.rounds)


@pytest.mark.slow
def test_siblings_rescue_rounds_the_chain_loses(prompt):
    """Greedy, the same draft: a sibling is accepted where the chain's token is not, so the chain with siblings
    needs fewer rounds than the bare chain of the same depth, and some round takes a sibling."""
    target = SHARP["llama"]
    draft = perturbed(target, 0.8)
    cfg = DecodeConfig(temperature=0, max_new_tokens=60, k=4)
    chain = speculative_generate(target, draft, prompt, cfg)
    tree = speculative_generate(target, draft, prompt, DecodeConfig(**{**cfg.to_dict(),
                                                                       "tree": TreeConfig(depth=4, siblings=4)}))
    bare = speculative_generate(target, draft, prompt, DecodeConfig(**{**cfg.to_dict(),
                                                                       "tree": TreeConfig(depth=4, siblings=0)}))
    assert [r.emitted for r in bare.rounds] == [r.emitted for r in chain.rounds]  # no siblings: the chain itself
    assert len(tree.rounds) < len(chain.rounds)
    assert any(n >= len(_split(r.tree.nodes)[0]) for r in tree.rounds for n in r.tree.path)  # a sibling taken


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ngram", "hybrid", "lookup"])
def test_chain_only_drafters_draft_chains_with_siblings(name, prompt):
    """A chain with siblings needs no tree drafting: an n-gram, a hybrid and prompt lookup (point masses: no
    siblings) all decode the target's greedy text."""
    target = SHARP["llama"]
    table = NGramModel.fit(torch.tensor(reference_greedy(target, prompt, 60)[:30]), 64, order=3)
    draft = {"ngram": lambda: HybridDrafter(table, perturbed(target, 0.6), confidence=0.0),
             "hybrid": lambda: HybridDrafter(table, perturbed(target, 0.6), confidence=0.5, lookup=2),
             "lookup": PromptLookupDrafter}[name]()
    trace = speculative_generate(target, draft, prompt,
                                 DecodeConfig(temperature=0, max_new_tokens=50, tree=TreeConfig(depth=5, siblings=2)))
    assert trace.new_tokens == reference_greedy(target, prompt, 50)


V = 8
LOSSLESS_TARGET = tiny_llama(vocab=V, seed=11, sharpen=5)
LOSSLESS_DRAFT = perturbed(LOSSLESS_TARGET, 0.7)


def _first_two(cfg: DecodeConfig, prompt) -> tuple[torch.Tensor, int]:
    """Counts of the first two tokens over 1500 seeds, and in how many runs a sibling was tried."""
    counts, firsts = first_two_of_seeds(LOSSLESS_TARGET, LOSSLESS_DRAFT, prompt, cfg, 1500)
    return counts, sum(any(n.status != "unvisited" for n in _split(r.tree.nodes)[1]) for r in firsts)


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("extra", [{}, {"top_k": 6, "top_p": 0.95, "temperature": 1.2}])
def test_sampled_chains_with_siblings_are_lossless(extra):
    """Siblings drawn from q without the chain's token, tried by recursive rejection sampling: the first two
    tokens keep the target's exact joint law (chi-square), with the sibling tried in many runs."""
    prompt = torch.tensor([[1, 2, 3]])
    cfg = DecodeConfig(max_new_tokens=3, tree=TreeConfig(depth=2, siblings=2), **extra)
    counts, tried = _first_two(cfg, prompt)
    assert tried > 50
    assert chi2_pvalue(counts, exact_first_two(LOSSLESS_TARGET, prompt, cfg)) > 1e-3


@pytest.mark.slow
def test_caches_equal_full_recompute_after_chain_rounds(prompt):
    target = SHARP["llama"]
    run = Decoding(target, perturbed(target, 0.5), prompt,
                   DecodeConfig(max_new_tokens=50, temperature=0.9, tree=TreeConfig(depth=4, siblings=3)))
    rounds = list(run)
    assert sum(r.rejected for r in rounds) >= 3 and any(r.n_accepted >= 2 for r in rounds)
    for lm in (run.target, run.drafter.lm):
        cached = lm.extend(run.committed, [])[-1]
        assert lm.ids == run.committed
        with torch.no_grad():
            full = lm.model(torch.tensor([run.committed])).logits[0, -1]
        torch.testing.assert_close(cached, full)


def test_chain_config_reads_and_refuses():
    tree = TreeConfig.parse("chain:12,2,0.05")
    assert (tree.depth, tree.siblings, tree.threshold, tree.nodes, tree.levels) == (12, 2, 0.05, 14, 12)
    assert TreeConfig.parse(tree.label) == tree and TreeConfig.parse("chain:6,0").label == "chain:6,0"
    for bad, match in [(dict(siblings=-1), "tree siblings"), (dict(siblings=2, budget=8), "no node budget"),
                       (dict(siblings=2, children="iid"), "without replacement")]:
        with pytest.raises(ValueError, match=match):
            TreeConfig(**bad)
    with pytest.raises(ValueError, match="unreadable tree"):
        TreeConfig.parse("chain:12")


@pytest.mark.law
@pytest.mark.slow
def test_trying_the_sibling_against_p_instead_of_the_adjusted_p_is_detected(monkeypatch):
    """The deliberate mistake: after the chain's token is rejected, try its sibling against p, not p'."""
    from specviz import sampling

    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    prompt = torch.tensor([[1, 2, 3]])
    cfg = DecodeConfig(max_new_tokens=3, tree=TreeConfig(depth=2, siblings=2))
    assert chi2_pvalue(_first_two(cfg, prompt)[0], exact_first_two(LOSSLESS_TARGET, prompt, cfg)) < 1e-3


class _Fixed:
    """A drafter whose every proposal is the same chain: tokens 1, 2, 3 with the given sources, q rows and
    second opinions."""

    vocab_size = 6

    def __init__(self, q, sources, others=()):
        from specviz.drafts.drafter import Proposal

        self.proposal = Proposal(torch.tensor([1, 2, 3]), torch.stack(q) if q is not None else None,
                                 sources=sources, others=others)

    def propose(self, committed, k, generator):
        return self.proposal


def test_greedy_siblings_go_where_the_learnt_estimate_says_they_win():
    """worth_i = reach_i * hit_i: a deep position whose source has won often beats a shallow one that never
    has; a point mass gets its sibling from the second opinion (the table's best other token)."""
    from specviz.trees.chain import grow_chain
    from specviz.trees.value import SiblingEstimate

    row = lambda x, alt, qa: torch.tensor([0.0] * 6).index_put_((torch.tensor([x, alt]),), torch.tensor([1 - qa, qa]))
    q = [row(1, 4, 0.4), row(2, 5, 0.3), row(3, 0, 0.01)]
    cfg = DecodeConfig(temperature=0, tree=TreeConfig(depth=3, siblings=1))
    est = SiblingEstimate()
    for _ in range(40):  # "table" positions: always accepted; "model" positions: rejected, alt taken, half the time
        est.observe([("table", 0.4 / 0.6, 0)], 1, None)
        est.observe([("model", 0.3 / 0.7, 5)], 0, 1.0)
        est.observe([("model", 0.3 / 0.7, 5)], 1, None)
    tree = grow_chain(_Fixed(q, ("table", "model", "model")), [0], cfg.tree, cfg, 3, None, est)
    assert [t for t, p in zip(tree.tokens, tree.parents)] == [1, 2, 3, 5]
    assert tree.parents[3] == 0 and tree.values[3] == pytest.approx(
        (1 - est.reject("table", 0.4 / 0.6)) * est.hit("model", 0.3 / 0.7))
    # a prompt lookup's point mass: its sibling is the second opinion's best other token
    opinion = row(4, 1, 0.3)  # the table prefers 4 to the lookup's 1
    tree = grow_chain(_Fixed(None, ("lookup", "table", "table"), (opinion.log(), None, None)), [0], cfg.tree, cfg, 3,
                      None, SiblingEstimate())
    assert tree.tokens[3:] == [4] and tree.parents[3] == -1 and tree.positions[0] == ("lookup", 1.0, 4)
    assert tree.q[3] == pytest.approx(0.7)


@pytest.mark.slow
def test_greedy_runs_teach_the_drafter_and_a_sampled_seed_replays_its_text(prompt):
    """Greedy runs of one drafter share what they learn of where siblings win (the text is the target's either
    way); a sampled run learns within itself, so the same seed gives the same text however many runs came before."""
    from specviz import ModelDrafter

    target = SHARP["llama"]
    drafter = ModelDrafter(perturbed(target, 0.6))
    tree = TreeConfig(depth=4, siblings=2)
    sampled = DecodeConfig(temperature=0.9, max_new_tokens=30, seed=5, tree=tree)
    first = speculative_generate(target, drafter, prompt, sampled).new_tokens
    speculative_generate(target, drafter, prompt, DecodeConfig(temperature=0, max_new_tokens=30, tree=tree))
    assert sum(drafter.sibling_estimate().reached.values()) > 0  # the greedy run taught the drafter
    assert speculative_generate(target, drafter, prompt, sampled).new_tokens == first
