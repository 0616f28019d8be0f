"""The accept rules' math (specviz.rules) on small hand-made distributions: each closed-form acceptance against its
Monte Carlo rate, each closed-form law against the emitted tokens (chi-square), lossless rules keeping p exactly and
lossy ones off p by their closed-form TV; then the rules in the decoder (greedy equals the target's greedy decode,
the law of the first two tokens at T = 0.5 and 1), the config's validation and the trace's refusal of bad rules."""
import json

import numpy as np
import pytest
import torch

from specviz import DecodeConfig, Trace, TreeConfig, autoregressive_generate, speculative_generate
from specviz.config import LOSSY, RULES
from specviz.labs.lossless import chi2_pvalue  # the losslessness lab's harness
from specviz.rules import (
    ExactMatch,
    Lenient,
    Leviathan,
    Optimistic,
    PointMass,
    Typical,
    emit_many,
    entropy,
    onehot_like,
    rule_of,
    total_variation,
    verify_rule,
)
from tests.helpers.models import perturbed, reference_greedy, tiny_gpt2, tiny_llama
from tests.helpers.stats import chi2_pvalue as chi2_table
from tests.helpers.stats import exact_first_two, first_two_counts, seeded_runs

P = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)
QS = {"close": torch.tensor([0.3, 0.3, 0.2, 0.15, 0.05], dtype=torch.float64),
      "far": torch.tensor([0.05, 0.5, 0.05, 0.1, 0.3], dtype=torch.float64),
      "point": onehot_like(P, torch.tensor(1))}
RULE_OBJECTS = [Leviathan(), PointMass(), ExactMatch(), Typical(0.15, 0.4), Optimistic(), Lenient(0.6)]
IDS = [r.name for r in RULE_OBJECTS]
N = 20000


def draws(q, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(q, N, replacement=True, generator=g), torch.rand(N, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("q", list(QS))
@pytest.mark.parametrize("rule", RULE_OBJECTS, ids=IDS)
def test_closed_form_acceptance_matches_monte_carlo(rule, q):
    x, u = draws(QS[q])
    rate = float(rule.decide(P[None], QS[q][None], x[None], u[None]).double().mean())
    a = float(rule.acceptance(P[None], QS[q][None])[0])
    assert abs(rate - a) <= 4.5 * max(np.sqrt(a * (1 - a) / N), 1 / N)


@pytest.mark.law
@pytest.mark.parametrize("q", list(QS))
@pytest.mark.parametrize("rule", RULE_OBJECTS, ids=IDS)
def test_closed_form_law_matches_the_emitted_tokens(rule, q):
    law = rule.law(P[None], QS[q][None])[0]
    assert torch.all(law >= 0) and float(law.sum()) == pytest.approx(1.0, abs=1e-12)
    counts = np.bincount(emit_many(rule, P, QS[q], N, torch.Generator().manual_seed(1)).numpy(), minlength=len(P))
    assert chi2_pvalue(counts, law.numpy()) > 1e-3
    tv = float(total_variation(law, P))
    if rule.lossless:
        assert torch.allclose(law, P, atol=1e-12) and chi2_pvalue(counts, P.numpy()) > 1e-3
    elif tv > 0.05:  # lossy and measurably so: the emitted tokens miss p by the closed form's TV
        assert chi2_pvalue(counts, P.numpy()) < 1e-6
        assert abs(float(total_variation(torch.from_numpy(counts / N), P)) - tv) < 0.02


def test_closed_forms_by_hand():
    q = QS["far"]
    assert float(PointMass().acceptance(P[None], q[None])) == pytest.approx(float((P * q).sum()))
    assert float(Leviathan().acceptance(P[None], q[None])) == pytest.approx(0.05 + 0.25 + 0.05 + 0.1 + 0.05)
    h = float(-(P * P.log()).sum())
    assert float(entropy(P[None])) == pytest.approx(h)
    typical = Typical(0.15, 0.4)  # threshold min(0.15, 0.4 e^-H) = 0.0966...: tokens 0, 1, 2, 3 pass
    assert float(typical.threshold(P[None])) == pytest.approx(min(0.15, 0.4 * np.exp(-h)))
    assert float(typical.acceptance(P[None], q[None])) == pytest.approx(0.05 + 0.5 + 0.05 + 0.1)
    assert torch.allclose(Lenient(1.0).law(P[None], q[None]), P[None]) and Lenient(1.0).lossless
    assert float(Lenient(0.5).acceptance(P[None], q[None])) == pytest.approx(float(torch.minimum(q, 2 * P).sum()))
    assert torch.allclose(Optimistic().law(P[None], q[None])[0], q)
    # a point-mass q: Leviathan's rule is the point-mass rule (what an engine without draft probabilities does)
    point = QS["point"]
    assert torch.allclose(Leviathan().law(P[None], point[None]), PointMass().law(P[None], point[None]))
    assert float(Leviathan().acceptance(P[None], point[None])) == pytest.approx(float(P[1]))


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("rule", RULE_OBJECTS, ids=IDS)
def test_verify_rule_emits_the_closed_form_law(rule):
    """The decoder's accept step with one draft: the token it emits at the position follows rule.law."""
    q, g = QS["close"], torch.Generator().manual_seed(2)
    p2 = torch.stack([P, P.flip(0)])  # p_1 and p_2 (the bonus row)
    counts = np.zeros(len(P))
    for _ in range(3000):
        x = torch.multinomial(q, 1, generator=g)
        v = verify_rule(rule, p2, q[None], x, g)
        counts[int(x[0]) if v.n_accepted else v.next_token] += 1
    assert chi2_pvalue(counts, rule.law(P[None], q[None])[0].numpy()) > 1e-3


def test_rules_are_named_and_labelled():
    assert RULES[0] == "leviathan" and {"typical", "optimistic", "lenient"} == LOSSY
    for name in RULES:
        rule = rule_of(DecodeConfig(rule=name))
        assert rule.name == name and rule.lossless == (name not in LOSSY) and rule.source


# -- the rules in the decoder --------------------------------------------------------------------------------
SHARP = tiny_llama(seed=3, sharpen=30)


@pytest.mark.slow
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("draft_greedy", [False, True])
def test_greedy_runs_equal_the_target_greedy_decode(rule, draft_greedy, prompt):
    cfg = DecodeConfig(k=3, max_new_tokens=30, temperature=0, rule=rule, draft_greedy=draft_greedy)
    trace = speculative_generate(SHARP, perturbed(SHARP, 0.3), prompt, cfg)
    if rule == "optimistic":  # lossy even at T = 0: every draft accepted
        assert trace.counts().acceptance_rate == 1.0 and trace.counts().accepted > 0
    else:
        assert trace.new_tokens == reference_greedy(SHARP, prompt, 30)


@pytest.mark.slow
def test_rounds_record_the_rule_and_replay_leviathan(prompt):
    draft = perturbed(SHARP, 0.5)
    cfg = DecodeConfig(k=3, max_new_tokens=20, temperature=1.0, rule="typical", seed=3)
    trace = speculative_generate(SHARP, draft, prompt, cfg)
    verified = [(r, i) for r in trace.rounds for i in range(min(r.n_accepted + 1, len(r.drafted)))]
    assert all(r.rule_accept[i] is not None and r.rule_tv[i] is not None for r, i in verified)
    assert Trace.from_json(trace.to_json()) == trace
    lev = speculative_generate(SHARP, draft, prompt, DecodeConfig(k=3, max_new_tokens=20, temperature=1.0, seed=3))
    assert lev.rounds[0].rule_accept == () and lev.rounds[0].rule_tv == ()
    argmax = speculative_generate(SHARP, draft, prompt, DecodeConfig(k=3, max_new_tokens=20, temperature=1.0,
                                                                     draft_greedy=True))
    assert all(q == 1.0 for r in argmax.rounds for q in r.q)  # the draft's argmax: q is a point mass at it
    base = autoregressive_generate(SHARP, prompt, cfg)  # nothing drafted: the target's own sample under any rule
    assert base.new_tokens == autoregressive_generate(SHARP, prompt, DecodeConfig(temperature=1.0, seed=3,
                                                                                  max_new_tokens=20)).new_tokens


V = 8
LOSSLESS_TARGET = tiny_llama(vocab=V, seed=11, sharpen=5)
LOSSLESS_DRAFT = tiny_gpt2(vocab=V, seed=12, sharpen=5)


def first_two(cfg, prompt, runs):
    return first_two_counts(seeded_runs(LOSSLESS_TARGET, LOSSLESS_DRAFT, prompt, cfg, runs), V)  # seeds 0..runs-1


@pytest.mark.law
@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.5, 1.0])
@pytest.mark.parametrize("rule", ["point_mass", "exact_match", "exact_match+argmax", "leviathan+argmax"])
def test_lossless_rules_keep_the_target_law(rule, temperature):
    prompt = torch.tensor([[1, 2, 3]])
    name, plus, _ = rule.partition("+")
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=temperature, rule=name, draft_greedy=bool(plus))
    assert chi2_table(first_two(cfg, prompt, 800), exact_first_two(LOSSLESS_TARGET, prompt, cfg)) > 1e-3


@pytest.mark.law
@pytest.mark.slow
def test_a_lossy_rule_misses_the_target_law():
    prompt = torch.tensor([[1, 2, 3]])
    cfg = DecodeConfig(k=2, max_new_tokens=3, temperature=1.0, rule="optimistic")
    assert chi2_table(first_two(cfg, prompt, 800), exact_first_two(LOSSLESS_TARGET, prompt, cfg)) < 1e-3


# -- settings ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    (dict(rule="medusa"), r"rule must be one of leviathan, point_mass, .*\(lossy: lenient, optimistic, typical\)$"),
    (dict(rule=["<b>"]), r"rule must be one of .*, got list"),
    (dict(rule="typical", typical_epsilon=1.0), r"typical_epsilon must be a number in \(0, 1\)"),
    (dict(typical_epsilon=0), r"typical_epsilon"),
    (dict(typical_delta=0.0), r"typical_delta must be a number > 0"),
    (dict(lenience=1.5), r"lenience must be a number in \(0, 1\]"),
    (dict(draft_greedy="yes"), r"draft_greedy must be True or False"),
    (dict(rule="typical", tree=TreeConfig()), r"a token tree is verified with Leviathan's rule"),
])
def test_bad_rule_settings_are_readable_errors(change, message):
    with pytest.raises(ValueError, match=message):
        DecodeConfig(**change)


def test_an_imported_trace_with_an_unknown_rule_is_refused(prompt):
    trace = speculative_generate(SHARP, perturbed(SHARP, 0.3), prompt, DecodeConfig(k=2, max_new_tokens=6,
                                                                                    rule="lenient"))
    data = json.loads(trace.to_json())
    assert data["config"]["rule"] == "lenient" and Trace.from_json(trace.to_json()).config.rule == "lenient"
    data["config"]["rule"] = "<script>"
    with pytest.raises(ValueError, match="rule must be one of") as e:
        Trace.from_json(json.dumps(data))
    assert "<script>" not in str(e.value)
    data["config"]["rule"] = "typical"
    data["rounds"][0]["rule_tv"] = [0.1]  # one entry for more drafts
    with pytest.raises(ValueError, match="rule_tv has 1 entries"):
        Trace.from_json(json.dumps(data))
