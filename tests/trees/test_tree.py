"""Token trees against references: a separate forward per path, the target's own greedy decode, its exact law,
a full recompute of the committed prefix, and hand-worked multi-candidate rules."""
import re

import pytest
import torch

from specviz import DecodeConfig, Decoding, NGramDrafter, NGramModel, PromptLookupDrafter, Trace, sampling, speculative_generate
from specviz.config import TreeConfig
from specviz.drafts.hybrid import HybridDrafter
from specviz.runtime.lm import CachedLM
from specviz.sampling import verify_candidates
from specviz.trees.tree import ROOT, choose_children
from tests.helpers.models import perturbed, reference_greedy, tiny_gpt2, tiny_llama
from tests.helpers.stats import chi2_pvalue, exact_first_two
from tests.helpers.tree_seeds import DraftRows, TargetRows, first_two_of_seeds, replay, untimed

SHARP = {"llama": tiny_llama(seed=3, sharpen=30), "gpt2": tiny_gpt2(seed=4, sharpen=30)}
SHAPES = [TreeConfig(shape=(3, 2, 2, 1)), TreeConfig(shape=(2, 2, 2)), TreeConfig(shape=(4,)),
          TreeConfig(budget=10, depth=4, width=3), TreeConfig(budget=6, depth=6, width=2),
          TreeConfig(budget=12, depth=8, width=2, threshold=0.2)]


# -- tree attention ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,path", [("llama", "lean"), ("llama", "dynamic"), ("gpt2", "dynamic")])
@pytest.mark.parametrize("parents", [[-1, -1, 0, 0, 1, 2, 5], [-1, 0, 1, 2], [-1, -1, -1]])
def test_every_node_sees_exactly_its_path(arch, path, parents):
    """The logits at each node of a tree fed in two calls (a level, then the rest) after a prefix fed in the
    same call equal a plain forward over the prefix and that node's path alone."""
    model, g = SHARP[arch], torch.Generator().manual_seed(len(parents))
    prefix = torch.randint(64, (6,), generator=g).tolist()
    tokens = torch.randint(64, (len(parents),), generator=g).tolist()
    lm = CachedLM(model, path)
    lm.feed(prefix[:3])
    split = parents.index(max(parents)) if max(parents) >= 0 else len(parents)
    first = lm.tree_forward(prefix[3:], tokens[:split], parents[:split])
    rest = lm.tree_forward([], tokens[split:], parents[split:])
    got = torch.cat([first[3:], rest])
    for i in range(len(tokens)):
        seq, node = [], i
        while node != ROOT:
            seq.insert(0, tokens[node])
            node = parents[node]
        with torch.no_grad():
            want = model(torch.tensor([prefix + seq])).logits[0, -1]
        torch.testing.assert_close(got[i], want)
    torch.testing.assert_close(first[2], model(torch.tensor([prefix])).logits[0, -1].detach())


# -- greedy: exactly the target's greedy decode ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("tree", SHAPES, ids=lambda t: f"b{t.budget}" if t.dynamic else "x".join(map(str, t.shape)))
def test_greedy_tree_equals_target_greedy(arch, tree, prompt):
    target = SHARP[arch]
    trace = speculative_generate(target, perturbed(target, 0.4), prompt, DecodeConfig(temperature=0, max_new_tokens=40,
                                                                                      tree=tree))
    assert trace.new_tokens == reference_greedy(target, prompt, 40)
    assert all(len(r.tree.nodes) <= tree.nodes for r in trace.rounds)
    assert any(r.n_accepted >= min(2, tree.levels) for r in trace.rounds) and any(r.rejected for r in trace.rounds)


@pytest.mark.parametrize("tree", [TreeConfig(shape=(2, 2, 1)), TreeConfig(budget=8, depth=5, width=2)],
                         ids=["static", "dynamic"])
@pytest.mark.slow
def test_greedy_tree_with_ngram_hybrid_and_foreign_drafts(tree, prompt):
    target = SHARP["llama"]
    table = NGramModel.fit(torch.tensor(reference_greedy(target, prompt, 60)[:30]), 64, order=3)
    drafts = {"ngram": NGramDrafter(table), "gpt2": tiny_gpt2(seed=5, layers=1, sharpen=30),
              "hybrid": HybridDrafter(table, perturbed(target, 0.6), confidence=0.5)}
    for name, draft in drafts.items():
        trace = speculative_generate(target, draft, prompt, DecodeConfig(temperature=0, max_new_tokens=50, tree=tree))
        assert trace.new_tokens == reference_greedy(target, prompt, 50), name


@pytest.mark.slow
def test_a_tree_beats_its_own_first_branch(prompt):
    """More branches can only add accepted tokens in greedy decoding: a (3, 3, 3) tree accepts at least what
    the chain of its first children (a k = 3 chain) accepts, round by round from the same prefix."""
    target = SHARP["llama"]
    draft = perturbed(target, 0.8)
    tree = speculative_generate(target, draft, prompt, DecodeConfig(temperature=0, max_new_tokens=40,
                                                                    tree=TreeConfig(shape=(3, 3, 3))))
    chain = speculative_generate(target, draft, prompt, DecodeConfig(temperature=0, max_new_tokens=40, k=3))
    assert tree.summary().tau > chain.summary().tau


# -- sampling: the multi-candidate rules by hand, then the law of whole runs ---------------------------------------
def test_multi_candidate_rule_by_hand():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    q = torch.tensor([0.1, 0.1, 0.4, 0.4], dtype=torch.float64)

    g = torch.Generator().manual_seed(0)
    v = verify_candidates(p, [3, 2], [q, q], g)  # p(3) = 0: rejected for sure; then p' = norm(max(0, p - q))
    assert v.accept_prob[0] == 0.0 and v.p_adj[0] == 0.0
    p1 = torch.clamp(p - q, min=0) / torch.clamp(p - q, min=0).sum()  # (0.4, 0.2, 0, 0) / 0.6
    assert v.p_adj[1] == pytest.approx(float(p1[2])) == 0.0 and v.accept_prob[1] == 0.0
    torch.testing.assert_close(v.residual, torch.clamp(p1 - q, min=0) / torch.clamp(p1 - q, min=0).sum())
    point = verify_candidates(p, [1, 0], [None, None], torch.Generator().manual_seed(1))
    assert point.accept_prob[0] == pytest.approx(0.3)  # a deterministic child: accepted with p'(x)
    if point.accepted != 0:
        assert point.p_adj[1] == pytest.approx(0.5 / 0.7)  # p without the rejected child, renormalised


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("rule", ["iid", "distinct"])
def test_sampled_children_follow_q(rule):
    q = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    g, firsts, seconds = torch.Generator().manual_seed(0), torch.zeros(4), torch.zeros(4)
    for _ in range(4000):
        (x1, q1), (x2, q2) = choose_children(q, 2, rule, g)
        firsts[x1] += 1
        seconds[x2] += 1
        if rule == "distinct":
            assert x1 != x2 and q2[x1] == 0 and q2.sum() == pytest.approx(1.0)
    assert chi2_pvalue(firsts, q) > 1e-3
    law2 = q if rule == "iid" else sum(q[a] * torch.where(torch.arange(4) == a, 0, q) / (1 - q[a]) for a in range(4))
    assert chi2_pvalue(seconds, law2) > 1e-3


V = 8
LOSSLESS_TARGET = tiny_llama(vocab=V, seed=11, sharpen=5)
LOSSLESS_DRAFT = perturbed(LOSSLESS_TARGET, 0.7)
N_RUNS = 1500


def _first_two_counts(cfg: DecodeConfig, prompt, drafter=LOSSLESS_DRAFT) -> tuple[torch.Tensor, int]:
    """Counts of the first two tokens over N_RUNS seeds, and in how many runs a second child was tried (each seed's
    run replayed from the models' answers, its first seeds checked against their full runs)."""
    counts, firsts = first_two_of_seeds(LOSSLESS_TARGET, drafter, prompt, cfg, N_RUNS)
    tried = [[n for n in r.tree.nodes if n.depth == 0 and n.status != "unvisited"] for r in firsts]
    return counts, sum(len(t) >= 2 for t in tried)


@pytest.mark.law
@pytest.mark.parametrize("rule,extra", [("iid", {}), ("distinct", {}), ("top", {}),
                                        ("iid", {"top_k": 5, "top_p": 0.9, "temperature": 0.8}),
                                        ("distinct", {"top_k": 6, "top_p": 0.95, "temperature": 1.2})])
@pytest.mark.slow
def test_sampled_trees_are_lossless(rule, extra):
    prompt = torch.tensor([[1, 2, 3]])
    cfg = DecodeConfig(max_new_tokens=3, tree=TreeConfig(shape=(3, 2), children=rule), **extra)
    counts, second_tries = _first_two_counts(cfg, prompt)
    assert second_tries > 50  # the second child was tried in many runs: the adjusted p' is exercised
    assert chi2_pvalue(counts, exact_first_two(LOSSLESS_TARGET, prompt, cfg)) > 1e-3


@pytest.mark.law
@pytest.mark.parametrize("draft,threshold,children", [("model", 0.0, "auto"), ("hybrid", 0.0, "auto"),
                                                      ("model", 0.05, "auto"), ("model", 0.0, "top")])
@pytest.mark.slow
def test_dynamic_sampled_tree_is_lossless(draft, threshold, children):
    """Sampled dynamic trees draw children without replacement ("auto") or take the top ones; with a threshold
    the tree a round drafts depends on the run's earlier verdicts (``tree_value``): the law must not."""
    prompt = torch.tensor([[4, 1, 6]])
    cfg = DecodeConfig(max_new_tokens=3, temperature=1.0,
                       tree=TreeConfig(budget=5, depth=2, width=3, threshold=threshold, children=children))
    table = NGramModel.fit(torch.tensor([4, 1, 6, 2, 4, 1, 6, 3, 4, 1, 6, 2, 5, 2, 7]), V, order=2)
    drafter = LOSSLESS_DRAFT if draft == "model" else HybridDrafter(table, LOSSLESS_DRAFT, 0.3, greedy_only=False)
    counts, second_tries = _first_two_counts(cfg, prompt, drafter)
    assert second_tries > 50  # later children were tried against the adjusted p' in many runs
    assert chi2_pvalue(counts, exact_first_two(LOSSLESS_TARGET, prompt, cfg)) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("case", ["static", "dynamic hybrid", "chain"])
def test_a_replayed_seed_is_the_decoders_own_run(case):
    """The law tests' replay (tests/helpers/tree_seeds.py) against the decoder: each of 60 seeds' rounds, up to its
    second token, equal the decoder's own run bit for bit (drafts, q, p, verdicts, u, every node), timings aside; the
    same replay under the next seed differs from the decoder's run in most seeds, so the comparison can fail."""
    table = NGramModel.fit(torch.tensor([4, 1, 6, 2, 4, 1, 6, 3, 4, 1, 6, 2, 5, 2, 7]), V, order=2)
    prompt, drafter, tree = {
        "static": (torch.tensor([[1, 2, 3]]), LOSSLESS_DRAFT, TreeConfig(shape=(3, 2), children="iid")),
        "dynamic hybrid": (torch.tensor([[4, 1, 6]]), HybridDrafter(table, LOSSLESS_DRAFT, 0.3, greedy_only=False),
                           TreeConfig(budget=5, depth=2, width=3, threshold=0.05)),
        "chain": (torch.tensor([[1, 2, 3]]), LOSSLESS_DRAFT, TreeConfig(depth=2, siblings=2))}[case]
    cfg, ids = DecodeConfig(max_new_tokens=3, temperature=0.9, tree=tree), prompt[0].tolist()
    models = TargetRows(LOSSLESS_TARGET, ids), DraftRows(drafter, LOSSLESS_TARGET, ids, cfg)
    same, shifted = 0, 0
    for seed in range(60):
        run = Decoding(LOSSLESS_TARGET, drafter, prompt, DecodeConfig(**{**cfg.to_dict(), "seed": seed}))
        for _ in run:
            if len(run.trace.new_tokens) >= 2:
                break
        same += untimed(replay(models, ids, cfg, seed)) == untimed(run.trace)
        shifted += untimed(replay(models, ids, cfg, seed + 1)) == untimed(run.trace)
    assert same == 60 and shifted < 30


@pytest.mark.law
@pytest.mark.slow
def test_reusing_p_for_the_second_child_is_detected(monkeypatch):
    """The deliberate mistake: after a rejected child, try the next against p instead of the adjusted p'."""
    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    prompt = torch.tensor([[1, 2, 3]])
    cfg = DecodeConfig(max_new_tokens=3, tree=TreeConfig(shape=(3, 2), children="iid"))
    counts, _ = _first_two_counts(cfg, prompt)
    assert chi2_pvalue(counts, exact_first_two(LOSSLESS_TARGET, prompt, cfg)) < 1e-3


# -- caches, records, settings --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_caches_equal_full_recompute_after_tree_rounds(arch, prompt):
    target = SHARP[arch]
    run = Decoding(target, perturbed(target, 0.5), prompt,
                   DecodeConfig(max_new_tokens=50, temperature=0.9, tree=TreeConfig(shape=(2, 2, 2))))
    rounds = list(run)
    assert sum(r.rejected for r in rounds) >= 3 and any(r.n_accepted >= 2 for r in rounds)
    for lm in (run.target, run.drafter.lm):
        cached = lm.extend(run.committed, [])[-1]
        assert lm.ids == run.committed and lm.cache.get_seq_length() == len(run.committed)
        with torch.no_grad():
            full = lm.model(torch.tensor([run.committed])).logits[0, -1]
        torch.testing.assert_close(cached, full)


@pytest.mark.slow
def test_tree_round_record_and_json_round_trip(prompt):
    target = SHARP["llama"]
    trace = speculative_generate(target, perturbed(target, 0.5), prompt,
                                 DecodeConfig(max_new_tokens=30, temperature=0.9, tree=TreeConfig(shape=(3, 2))))
    for r in trace.rounds:
        nodes = r.tree.nodes
        path = [nodes[n].token for n in r.tree.path]
        assert list(r.emitted[: len(path)]) == path and r.n_accepted == len(path)
        assert sum(n.status == "accepted" for n in nodes) == len(path) and r.k == len(nodes) == r.proposed
        assert all(n.status == "unvisited" or n.u is not None for n in nodes)
    assert trace.counts().drafted == sum(len(r.tree.nodes) for r in trace.rounds)
    back = Trace.from_json(trace.to_json())
    assert back.rounds == trace.rounds and back.config == trace.config
    df = trace.to_frame()
    assert (df.node.notna()).sum() == trace.counts().drafted


def test_tree_json_is_checked(prompt):
    import json

    target = SHARP["llama"]
    data = json.loads(speculative_generate(target, perturbed(target, 0.5), prompt, DecodeConfig(
        max_new_tokens=8, temperature=0, tree=TreeConfig(shape=(2, 2)))).to_json())
    data["rounds"][0]["tree"]["nodes"][0]["parent"] = 5
    with pytest.raises(ValueError, match="not a tree's"):
        Trace.from_json(json.dumps(data))
    data["rounds"][0]["tree"]["nodes"][0]["status"] = "<img src=x>"
    with pytest.raises(ValueError, match="status must be one of"):
        Trace.from_json(json.dumps(data))


@pytest.mark.parametrize("kwargs,match", [
    (dict(shape=()), "1-16 children counts"), (dict(shape=(0, 2)), "every tree shape entry"),
    (dict(shape=(8, 8, 8)), "at most 128"), (dict(budget=10, children="iid"), "top children"),
    (dict(children="best"), "tree children must be one of"), (dict(budget=-1), "tree budget"),
])
def test_tree_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TreeConfig(**kwargs)


def test_trees_refuse_policies_and_chain_only_drafters(prompt):
    with pytest.raises(ValueError, match="k_policy='fixed'"):
        DecodeConfig(tree=TreeConfig(), k_policy="heuristic")
    with pytest.raises(ValueError, match="drafts chains only"):
        speculative_generate(SHARP["llama"], PromptLookupDrafter(), prompt, DecodeConfig(tree=TreeConfig()))
    assert DecodeConfig(tree={"shape": [2, 1]}).tree == TreeConfig(shape=(2, 1))  # as the JSON holds it


# -- the tree lab: the table and its charts, through the app's handler ------------------------------------------
@pytest.mark.slow
def test_tree_lab_tab_measures_chains_and_trees(store):
    import gradio as gr

    from tests.helpers.app import handlers
    from tests.helpers.models import last

    h = handlers(store)
    note, table, per_pass, speed = last(h.run_tree_lab("tiny-target", "tiny", "ROMEO:\n\nTo be, or not", "2,4",
                                                       "3,2,1\ndynamic:6,4,2", 0.0, 0, 1.0, 16, 1, 0))
    assert list(table["setting"]) == ["autoregressive", "chain k=2", "chain k=4", "tree 3,2,1", "tree dynamic:6,4,2"]
    runs = table[table["setting"] != "autoregressive"]
    assert (runs["tau"] >= 1).all() and (abs(runs["tau"] - runs["tau predicted"]) < 0.3).all()
    assert runs["nodes per round"].iloc[2] > runs["nodes per round"].iloc[0]  # a tree verifies more per round
    chains = runs[runs["setting"].str.startswith("chain")]
    best = chains["setting"].iloc[int(chains["tokens/s"].argmax())]  # its paired ratio with itself is exactly 1
    assert (runs.loc[runs["setting"] == best, ["vs best chain", "vs best, 90% low", "vs best, 90% high"]] == 1).all(None)
    assert (runs["vs best, 90% low"] <= runs["vs best chain"]).all()
    assert (runs["vs best chain"] <= runs["vs best, 90% high"]).all()
    other = runs[runs["setting"] != best].iloc[0]  # its rows against the best chain's, by hand
    mine = runs[runs["setting"] == best].iloc[0]
    assert other["tokens per extra row"] == pytest.approx(
        (other["tau"] - mine["tau"]) / (other["nodes per round"] - mine["nodes per round"]), abs=1e-3)
    assert table.attrs["rows"]["rounds"] > 0 and table.attrs["rows"]["best chain"] == best
    assert (runs[["draft ms", "verify ms", "rest ms"]] > 0).all(None)  # every round drafts, verifies and records
    fastest = runs[runs["setting"].str.startswith("tree")].sort_values("tokens/s").iloc[-1]
    said = re.search(rf"\*{re.escape(fastest['setting'])}\* spent ([-+][0-9.]+) ms drafting", note)
    assert float(said[1]) == pytest.approx(fastest["draft ms"] - mine["draft ms"], abs=0.006)  # by hand, table rounded
    assert "10 runs" in note and len(per_pass.data) == 2 and len(speed.data[0].x) == 4
    for chains, trees, match in (("a,b", "", "whole numbers"), ("", "", "at least one"), ("1," * 11, "", "at most 10"),
                                 ("4", "3,x", "unreadable tree")):
        with pytest.raises(gr.Error, match=match):
            last(h.run_tree_lab("tiny-target", "tiny", "ROMEO:", chains, trees, 0.0, 0, 1.0, 16, 1, 0))


@pytest.mark.slow
def test_tree_figure_escapes_token_text_and_shows_every_fate(prompt):
    from specviz.views.tree_view import tree_figure

    target = SHARP["llama"]
    trace = speculative_generate(target, perturbed(target, 0.5), prompt,
                                 DecodeConfig(max_new_tokens=30, temperature=0.9, tree=TreeConfig(shape=(3, 2))))
    trace.token_text = {i: f'<a href="javascript:alert({i})">t{i}</a>' for i in range(64)}
    trace.token_bytes = {}
    r = next(r for r in trace.rounds if r.rejected and r.tree.path)
    fig = tree_figure(trace, r)
    texts = [t for d in fig.data for t in (d.text or ()) if t and t != "root"]
    hovers = [h for d in fig.data for h in (d.hovertext or ())]
    assert texts and all("<a" not in t and "&lt;a" in t for t in texts)
    assert all("<a" not in h for h in hovers) and any("&lt;a href" in h for h in hovers)
    names = {d.name for d in fig.data if d.name and len(d.x)}
    assert {"accepted", "rejected", "resampled"} <= names


def test_round_times_split_each_round_by_hand():
    """The tree lab's ms a round: the means of the rounds' draft and verify times, and of what the rest took."""
    from types import SimpleNamespace as R

    from specviz.labs.trees import round_times

    rounds = [R(draft_s=0.004, target_s=0.020, wall_s=0.025), R(draft_s=0.006, target_s=0.018, wall_s=0.0255)]
    assert round_times(rounds) == pytest.approx({"draft ms": 5.0, "verify ms": 19.0, "rest ms": 1.25})
    assert round_times([]) == {"draft ms": 0.0, "verify ms": 0.0, "rest ms": 0.0}
