"""specviz.slim's decoder: the target's own greedy text, speculative equal to autoregressive, the exact law of
speculative sampling, the records and their JSON, its refusals, and a process that never imports torch."""
import subprocess
import sys
from pathlib import Path

import pytest

from specviz import DecodeConfig, TreeConfig
from specviz.slim import Lookup, ModelDraft, SlimDecoding, autoregressive, speculative
from specviz.trace import Trace
from tests.helpers.numpy_lm import ToyForward
from tests.helpers.slim_law import LAW_SHARPEN, law_statistic

PROMPTS = ([1, 2, 3, 1, 2, 3, 1, 2], [5, 4, 9, 4, 9, 4], [7], [3, 8, 2, 11, 0, 6, 3, 8])


@pytest.mark.parametrize("record", [True, False])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_text_is_the_targets_own_and_speculation_does_not_change_it(prompt, record):
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=24, k=4, record=record)
    reference = ToyForward().greedy(prompt, 24)
    assert autoregressive(ToyForward(), prompt, cfg).new_tokens == reference
    fwd = ToyForward()
    trace = speculative(fwd, Lookup(), prompt, cfg)
    assert trace.new_tokens == reference
    assert fwd.passes == 1 + len(trace.rounds) - (len(trace.rounds[0].drafted) == 0)  # one pass a round
    assert fwd.length == len(prompt) + 24 - 1  # rolled back to the committed text (the last token still pending)


def test_a_run_with_accepted_drafts_records_each_decision():
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    trace = speculative(ToyForward(), Lookup(), prompt, DecodeConfig(temperature=0.0, max_new_tokens=24, k=4))
    accepted = [r for r in trace.rounds if r.n_accepted]
    assert accepted, "the toy's greedy text should repeat enough for lookup drafts to be kept"
    for r in trace.rounds:
        assert r.emitted == tuple(r.drafted[: r.n_accepted]) + ((r.resampled if r.rejected else r.bonus),)
        assert all(q == 1.0 for q in r.q) and len(r.p) == len(r.drafted)
        assert r.accept_prob[: r.n_accepted] == (1.0,) * r.n_accepted and r.accept_prob[r.n_accepted:][:1] in ((), (0.0,))
        assert r.beta[: r.n_accepted + 1] == r.accept_prob[: r.n_accepted + 1]  # greedy: did x match the argmax
    assert (trace.target_name, trace.draft_name, trace.mode) == ("ToyForward", "prompt-lookup (n=1..3)", "speculative")
    again = Trace.from_json(trace.to_json())
    assert again.rounds == trace.rounds and again.new_tokens == trace.new_tokens


def toy_draft():
    return ModelDraft(ToyForward(seed=1, sharpen=LAW_SHARPEN))


@pytest.mark.parametrize("temperature, top_k, draft, extra", [
    (1.0, 0, None, {}), (0.8, 4, None, {}),
    (1.0, 0, toy_draft, {}), (0.8, 4, toy_draft, {}), (1.0, 0, toy_draft, {"draft_greedy": True}),
    (1.0, 0, toy_draft, {"draft_stop": 0.3}), (0.8, 4, toy_draft, {"record": False}), (1.0, 0, None, {"record": False})])
def test_speculative_sampling_emits_the_targets_law(temperature, top_k, draft, extra):
    """Prompt lookup (a point mass) and a draft model (a real q, its residual over the whole vocabulary, the bonus
    token after an accepted draft), its argmax drafted, its drafting cut by a confidence threshold, or a run that keeps
    no record (each row's p computed only when the walk reaches it)."""
    chi2, bound = law_statistic(temperature, top_k, draft=draft, **extra)
    assert chi2 < bound, (chi2, bound)


@pytest.mark.parametrize("draft", [None, toy_draft])
def test_the_law_test_refuses_a_rejection_that_resamples_from_p_itself(monkeypatch, draft):
    """The same statistic on a decoder whose rejection draws from p instead of norm(max(0, p - q)): the drafted token
    comes out too often, and the test sees it."""
    from specviz.slim import sampling as S

    monkeypatch.setattr(S, "residual", lambda p, q: p)
    chi2, bound = law_statistic(1.0, 0, draft=draft)
    assert chi2 > bound, (chi2, bound)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_a_draft_model_keeps_the_targets_greedy_text_and_its_cache_in_step(prompt):
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=30, k=4)
    reference = ToyForward().greedy(prompt, 30)
    for draft_fwd in (ToyForward(seed=1), ToyForward(seed=0), ToyForward(seed=2, vocab=14)):  # the last padded
        draft = ModelDraft(draft_fwd)
        trace = speculative(ToyForward(), draft, prompt, cfg)
        assert trace.new_tokens == reference
        assert draft.ids == draft_fwd.ids and len(draft.ids) <= len(prompt) + 30  # what it holds, it knows
        shared = (list(prompt) + reference)[: len(draft_fwd.ids)]
        assert draft_fwd.ids[: len(prompt)] == list(prompt) and (draft_fwd.ids == shared or trace.rounds[-1].rejected)
    same = speculative(ToyForward(), ModelDraft(ToyForward(seed=0)), prompt, cfg)
    assert all(not r.rejected for r in same.rounds)  # the target as its own draft: every draft accepted


def test_draft_stop_ends_a_rounds_drafting_below_the_drafts_confidence():
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    cfg = DecodeConfig(temperature=1.0, max_new_tokens=40, k=6, draft_stop=0.6, seed=3)
    trace = speculative(ToyForward(sharpen=1.0), ModelDraft(ToyForward(seed=1, sharpen=1.0)), prompt, cfg)
    for r in trace.rounds:
        assert all(q >= 0.6 for q in r.q[:-1])  # every draft but the last was sure enough to go on
        assert len(r.drafted) == r.k or r.q[-1] < 0.6
    assert any(len(r.drafted) < r.k for r in trace.rounds)


def test_what_slim_does_not_run_is_refused_before_any_work():
    fwd = ToyForward()
    with pytest.raises(ValueError, match="slim.Lookup, slim.ModelDraft, slim.FeatureDraft or slim.Hybrid"):
        SlimDecoding(fwd, [1, 2], DecodeConfig(), draft="a model")
    with pytest.raises(ValueError, match="vocabulary of 300 tokens and the target 12"):
        SlimDecoding(fwd, [1, 2], DecodeConfig(), ModelDraft(ToyForward(vocab=300)))
    with pytest.raises(ValueError, match="token tree or another rule"):
        SlimDecoding(fwd, [1, 2], DecodeConfig(tree=TreeConfig()), Lookup())
    with pytest.raises(ValueError, match="token tree or another rule"):
        SlimDecoding(fwd, [1, 2], DecodeConfig(rule="typical"), Lookup())
    for prompt in ([], [1, 12], [-1], [1.5]):
        with pytest.raises(ValueError, match="non-empty list of token ids in \\[0, 12\\)"):
            SlimDecoding(fwd, prompt)
    with pytest.raises(ValueError, match="exceeds the target's 256 positions"):
        SlimDecoding(fwd, [1] * 200, DecodeConfig(max_new_tokens=64))
    with pytest.raises(ValueError, match="exceeds the draft's 64 positions"):
        SlimDecoding(fwd, [1] * 20, DecodeConfig(max_new_tokens=64), ModelDraft(ToyForward(seed=1, limit=64)))
    with pytest.raises(ValueError, match="DecodeConfig"):
        SlimDecoding(fwd, [1], {"temperature": 0})
    with pytest.raises(ValueError, match="min_ngram"):
        Lookup(2, 3)
    assert fwd.passes == 0


def test_eos_ends_the_run_and_the_budget_is_kept():
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    text = ToyForward().greedy(prompt, 24)
    stop = text[5]
    trace = speculative(ToyForward(), Lookup(), prompt, DecodeConfig(temperature=0.0, max_new_tokens=24, k=4),
                        eos=[stop])
    assert trace.stop_reason == "eos" and trace.new_tokens == text[: text.index(stop) + 1]
    for k in (1, 3, 8):
        trace = speculative(ToyForward(), Lookup(), prompt, DecodeConfig(temperature=1.0, max_new_tokens=7, k=k))
        assert len(trace.new_tokens) == 7 and trace.stop_reason == "length"


def test_a_slim_process_never_imports_torch():
    root = Path(__file__).resolve().parents[2]
    code = (f"import sys; sys.path.insert(0, {str(root)!r})\n"
            "from specviz.slim import Lookup, speculative; from specviz.config import DecodeConfig\n"
            "from specviz.runtime import llamacpp_seq\n"
            "from tests.helpers.numpy_lm import ToyForward\n"
            "t = speculative(ToyForward(), Lookup(), [1, 2, 3, 1, 2], DecodeConfig(temperature=0.8, max_new_tokens=9))\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'pandas',"
            " 'tokenizers'))\n"
            "print(len(t.new_tokens), heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["9", "[]"]
