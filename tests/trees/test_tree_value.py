"""The acceptance a dynamic tree ranks its nodes by, learnt from the run's verdicts: hand-computed estimates, and
trees that follow what the verifier did rather than what the draft's q says."""
import copy

import pytest
import torch

from specviz import DecodeConfig, Decoding
from specviz.config import TreeConfig
from specviz.trees.value import AcceptanceEstimate
from tests.helpers.models import reference_greedy, tiny_llama

TARGET = tiny_llama(seed=3, sharpen=30)


def test_estimate_starts_from_the_prior_and_counts_tries():
    est = AcceptanceEstimate()
    assert est(0, 0.03) == 1.0 and est(1, 0.03) == pytest.approx(0.03)  # top child: sure; others: their q
    est.observe(0, 0.03, 1.0)
    est.observe(0, 0.04, 0.0)  # the same q bin, [0.02, 0.05)
    est.observe(0, 0.06, 0.0)  # the next bin
    assert est(0, 0.021) == pytest.approx((1 + 2 * 1.0) / (2 + 2))
    assert est(0, 0.09) == pytest.approx((0 + 2 * 1.0) / (1 + 2))
    est.observe(2, 0.5, 0.25)  # ranks 2 and up share a bin; sampled tries count their acceptance probability
    assert est(5, 0.6) == pytest.approx((0.25 + 2 * 0.6) / (1 + 2))
    assert est(1, 0.6) == pytest.approx(0.6)


def test_threshold_spec_round_trips_and_bad_ones_are_refused():
    tree = TreeConfig.parse("dynamic:12,10,2,0.25")
    assert (tree.budget, tree.depth, tree.width, tree.threshold) == (12, 10, 2, 0.25)
    assert TreeConfig.parse(tree.label) == tree and tree.label == "dynamic:12,10,2,0.25"
    assert TreeConfig.parse("dynamic:12,10,2").threshold == 0.0
    for bad in ("dynamic:12,10,2,1.5", "dynamic:12,10,2,x", "3,2,1,0.5", "dynamic:12,10,2,nan"):
        with pytest.raises(ValueError):
            TreeConfig.parse(bad)
    with pytest.raises(ValueError, match="dynamic"):
        TreeConfig(shape=(2, 1), threshold=0.2)


def _flattened(model, by):
    """The target with every logit divided by ``by``: the same argmax, a q near uniform."""
    flat = copy.deepcopy(model)
    with torch.no_grad():
        flat.get_output_embeddings().weight.div_(by)
    return flat


@pytest.mark.slow
def test_a_draft_with_tiny_q_but_the_right_argmax_gets_deep_trees(prompt):
    """q ~ 1/64 at every node, and every top child accepted at greedy: ranked by q, a threshold of 0.3 would keep
    no node at all; learnt from the verdicts, each round drafts the full depth and the walk accepts all of it."""
    draft = _flattened(TARGET, 40)
    tree = TreeConfig(budget=8, depth=6, width=2, threshold=0.3)
    run = Decoding(TARGET, draft, prompt, DecodeConfig(temperature=0, max_new_tokens=42, tree=tree))
    rounds = list(run)
    assert run.trace.new_tokens == reference_greedy(TARGET, prompt, 42)
    assert max(n.q for r in rounds for n in r.tree.nodes) < 0.3
    assert all(r.n_accepted == 6 and len(r.tree.nodes) == 6 for r in rounds)  # second children pruned
    assert run.tree_value(0, 0.02) > 0.9 and run.tree_value(1, 0.02) < 0.05


@pytest.mark.slow
def test_a_draft_the_target_rejects_gets_smaller_trees(prompt):
    """An unrelated draft: its first tree goes the full depth on the prior, then the learnt estimate shrinks them."""
    draft = tiny_llama(seed=9, sharpen=30)
    tree = TreeConfig(budget=8, depth=6, width=2, threshold=0.3)
    rounds = list(Decoding(TARGET, draft, prompt, DecodeConfig(temperature=0, max_new_tokens=60, tree=tree)))
    assert len(rounds[0].tree.nodes) == 6
    late = rounds[len(rounds) // 2:]
    assert sum(len(r.tree.nodes) for r in late) / len(late) < 2.5


@pytest.mark.slow
def test_each_node_records_its_value_and_traces_round_trip(prompt):
    """The first round's values follow from the prior alone: a top child is sure (value 1 along a path of top
    children), a second child is worth its q times its parent's value. They survive JSON, show in the hover, and
    traces written before nodes had values still read."""
    import json

    from specviz import Trace
    from specviz.views.tree_view import tree_figure

    tree = TreeConfig(budget=6, depth=3, width=2)
    trace = Decoding(TARGET, tiny_llama(seed=9, sharpen=30), prompt,
                     DecodeConfig(temperature=0, max_new_tokens=12, tree=tree)).run()
    nodes = trace.rounds[0].tree.nodes
    for n in nodes:
        parent = 1.0 if n.parent < 0 else nodes[n.parent].value
        siblings = sorted((m.q for m in nodes if m.parent == n.parent), reverse=True)
        assert n.value == pytest.approx(parent * (1.0 if n.q == siblings[0] else n.q))
    back = Trace.from_json(trace.to_json())
    assert back.rounds == trace.rounds
    data = json.loads(trace.to_json())
    for r in data["rounds"]:
        for node in r["tree"]["nodes"]:
            del node["value"]
    assert Trace.from_json(json.dumps(data)).rounds[0].tree.nodes[0].value is None
    hovers = [h for d in tree_figure(trace, trace.rounds[0]).data for h in (d.hovertext or ())]
    assert any("likely to be reached and accepted" in h for h in hovers)


def test_sibling_estimate_counts_reached_rejected_and_hits_by_source_and_doubt():
    from specviz.trees.value import SiblingEstimate

    est = SiblingEstimate()
    assert est.reject("model", 0.6) == pytest.approx(0.6 / 1.6)  # the prior: two-candidate odds
    positions = [("table", 0.01, 7), ("model", 0.9, 4), ("model", 0.92, 5), ("lookup", 0.3, 2)]
    est.observe(positions, 1, 1.0)  # the table token accepted, the model's rejected: the target took alt 4
    est.observe(positions, 2, 0.0)  # rejected at position 2 (same bin as 1): the target took 9, not alt 5
    est.observe(positions, 4, None)  # every token accepted
    # ("model", bin of 0.9) reached 1 + 2 + 2 = 5 times (positions 1 and 2), rejected twice, one hit
    assert est.reject("model", 0.88) == pytest.approx((2 + 2 * 0.88 / 1.88) / (5 + 2))
    assert est.hit("model", 0.99) == pytest.approx((1 + 2 * 0.99 / 1.99) / (5 + 2))
    assert est.reject("table", 0.02) == pytest.approx((0 + 2 * 0.02 / 1.02) / (3 + 2))
    assert est.hit("lookup", 0.3) == pytest.approx((0 + 2 * 0.3 / 1.3) / (1 + 2))  # reached once, never rejected
    assert est.reject("model", 0.1) == pytest.approx(0.1 / 1.1)  # another bin: still the prior


def test_sibling_estimate_reads_a_tree_verdict():
    from specviz.trees.tree import DraftTree, TreeVerdict
    from specviz.trees.value import SiblingEstimate

    tree = DraftTree(positions=[("model", 0.9, 4), ("model", 0.9, 5)])
    for token, parent in [(1, -1), (2, 0), (4, -1)]:  # chain nodes 0 and 1, a sibling (node 2) of node 0
        tree.add(token, parent, 0.5)
    cases = [(TreeVerdict((2,), 8, False, {}, None), 1),  # the sibling taken: a rejection and a hit
             (TreeVerdict((0,), 9, True, {}, None), 0),  # node 1 rejected, the target took 9, not alt 5
             (TreeVerdict((0, 1), 3, False, {}, None), 0)]  # the whole chain accepted
    for verdict, hits in cases:
        est = SiblingEstimate()
        est.observe_round(tree, verdict)
        assert sum(est.hits.values()) == hits
        assert sum(est.rejected.values()) == (verdict.path != (0, 1))
        assert sum(est.reached.values()) == (1 if verdict.path == (2,) else 2)


def test_the_lab_reads_what_a_drafter_has_learnt_about_its_siblings():
    from specviz import PromptLookupDrafter
    from specviz.labs.trees import sibling_table

    drafter = PromptLookupDrafter()
    est = drafter.sibling_estimate()
    assert drafter.fresh().sibling_estimate() is est  # a run's copy learns into the drafter's own estimate
    est.observe([("model", 0.9, 4), ("lookup", 0.01, 2)], 0, 1.0)  # rejected at the model's token, the other right
    est.observe([("model", 0.95, 4), ("lookup", 0.01, 2)], 1, 0.0)  # rejected at the lookup, the other wrong
    table = sibling_table(drafter)
    assert list(table["source"]) == ["lookup", "model"] and list(table["doubt"]) == ["[0, 0.05)", "[0.875, 1]"]
    assert list(table["reached"]) == [1, 2] and list(table["rejected"]) == [1, 1]
    assert list(table["other choice right"]) == [0, 1] and list(table["P(reject | reached)"]) == [1.0, 0.5]


def test_a_sampled_siblings_chance_is_the_overlap_of_q_without_x_and_the_residual():
    from specviz.sampling import sibling_acceptance

    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.6, 0.2])
    # residual max(0, p - q) = (0.3, 0, 0) -> p' = (1, 0, 0); q without x = 1: (0.5, 0, 0.5); overlap 0.5
    assert sibling_acceptance(p, q, 1) == pytest.approx(0.5)
    assert sibling_acceptance(p, torch.tensor([0.0, 1.0, 0.0]), 1) == 0.0  # a point mass leaves no sibling
    assert sibling_acceptance(q, q, 0) == 0.0  # p == q: nothing is ever rejected, no residual
