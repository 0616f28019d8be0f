"""The Load lab: its requests, its timed passes rolled back exactly, its summaries against hand-built runs, and one
small run end to end on tiny models (no timing is asserted: the figures are the machine's)."""
import pandas as pd
import pytest
import torch

from specviz import goodput as gp
from specviz.labs import load
from specviz.runtime.batch_lm import BatchLM
from specviz.trace import Round, Trace
from tests.helpers.models import perturbed, tiny_llama


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(vocab=64, layers=2, hidden=32, window=256)
    return target, perturbed(target, scale=0.3)


def test_requests_end_with_their_prompt_after_the_other_prompts():
    rows = load.at_context([[1, 2], [3, 4, 5]], 7, 3, sep=[9])
    assert [r.tolist() for r in rows] == [[[5, 9, 1, 2, 9, 1, 2]], [[3, 4, 5, 9, 3, 4, 5]], [[5, 9, 1, 2, 9, 1, 2]]]
    assert [r.tolist() for r in load.at_context([[1, 2], [3, 4, 5]], 2, 2)] == [[[1, 2]], [[4, 5]]]


@pytest.mark.parametrize("change, message", [
    (dict(batches=[0, 2]), "batch sizes must lie"), (dict(batches=[]), "batch sizes must lie"),
    (dict(k=0), "k <= "), (dict(context=250), "window of 256"), (dict(repeats=0), "repeats >= 1"),
])
def test_a_setting_out_of_range_says_what_to_change(pair, change, message):
    setting = dict(batches=[1, 2], context=64, k=2, new_tokens=8, repeats=1) | change
    with pytest.raises(ValueError, match=message):
        load.check_setting(pair[0], **setting)


def test_a_timed_pass_is_rolled_back_exactly(pair):
    target = pair[0]
    lm = BatchLM(target, 2)
    lm.feed([[1, 2, 3], [4, 5, 6]])
    before = lm.feed([[7], [8]])[:, -1].clone()
    lm.drop_last(1)
    lm.feed([[9, 10, 11]] * 2)  # a timed pass of three rows, then undone
    lm.drop_last(3)
    assert torch.equal(lm.feed([[7], [8]])[:, -1], before)
    with pytest.raises(ValueError, match="newest"):
        lm.drop_last(99)


def test_summary_takes_each_repeats_own_ratio():
    runs = pd.DataFrame([  # batch 1: ratios 2.0 and 1.0 -> median 1.5; batch 2: 0.5 both times
        dict(batch=1, method="speculative", repeat=0, tokens=8, seconds=1, tokens_per_s=20.0, steps=2),
        dict(batch=1, method="autoregressive", repeat=0, tokens=8, seconds=1, tokens_per_s=10.0, steps=8),
        dict(batch=1, method="speculative", repeat=1, tokens=8, seconds=1, tokens_per_s=15.0, steps=2),
        dict(batch=1, method="autoregressive", repeat=1, tokens=8, seconds=1, tokens_per_s=15.0, steps=8),
        dict(batch=2, method="speculative", repeat=0, tokens=16, seconds=1, tokens_per_s=10.0, steps=4),
        dict(batch=2, method="autoregressive", repeat=0, tokens=16, seconds=1, tokens_per_s=20.0, steps=8),
        dict(batch=2, method="speculative", repeat=1, tokens=16, seconds=1, tokens_per_s=5.0, steps=4),
        dict(batch=2, method="autoregressive", repeat=1, tokens=16, seconds=1, tokens_per_s=10.0, steps=8),
    ])
    s = load.summarize(runs).set_index("batch")
    assert list(s.speedup) == [1.5, 0.5] and list(s.speedup_min) == [1.0, 0.5] and list(s.speedup_max) == [2.0, 0.5]
    assert list(s.spec_tps) == [17.5, 7.5]
    assert list(s.tokens_per_step) == [16 / 4, 32 / (8 * 2)]  # tokens / (steps x batch)
    assert gp.crossover([1, 2], list(s.speedup)) == gp.Crossover(2, "crosses", 1)


def round_of(drafted, accepted, draft_s=0.0, target_s=0.0, wall_s=0.0):
    return Round.unrecorded(index=0, k=len(drafted), drafted=tuple(drafted), n_accepted=accepted,
                            emitted=tuple(drafted[:accepted]) + (0,), resampled=accepted < len(drafted),
                            bonus=accepted == len(drafted), draft_s=draft_s, target_s=target_s, wall_s=wall_s)


def traces_of(*rounds_per_row):
    traces = []
    for rounds in rounds_per_row:
        trace = Trace.start([1], None, "t", "d", ())
        trace.rounds.extend(rounds)
        traces.append(trace)
    return traces


def test_rates_bookkeeping_and_lookups_from_a_batch_of_two():
    # row 0: accepts 2 of 2, then 0 of 2; row 1: 1 of 2 twice. Position 0: 3 of 4 reached; position 1: 1 of 3.
    # Every round: wall 10 ms, draft 2 ms, target 5 ms -> 3 ms per batch round, 1.5 ms per request.
    times = dict(draft_s=0.002, target_s=0.005, wall_s=0.010)
    traces = traces_of([round_of([5, 6], 2, **times), round_of([5, 6], 0, **times)],
                       [round_of([5, 6], 1, **times), round_of([5, 6], 1, **times)])
    assert load.acceptance_rates(traces, 2) == pytest.approx([3 / 4, 1 / 3])
    assert load.bookkeeping_s({"speculative": traces}, batch=2) == pytest.approx(0.0015)
    assert load.lookup_s(traces, batch=2) == pytest.approx(4 * 0.002 / 2 / 8)  # each round counted once over 2 rows


def test_the_runs_own_passes_are_what_the_model_is_fitted_on():
    """One batch-2 speculative run: round 0 is the prefill's (its pending token was fed with the prompt: its pass is
    not one of k + 1 tokens a row, so it is left out, whatever it took); round 1 both rows draft 2 (target 9 ms over
    2 x 3 tokens, draft 4 ms over 2 drafts: 2 ms a draft pass of 2 tokens); round 2 only row 0 is live, drafting 1
    (target 5 ms over 1 x 2, draft 1 ms). Two batch-1 autoregressive runs: round 0 feeds nothing (0.1 ms, left out),
    then passes of 1 token, 3 ms and 5 ms (median 4, range 3-5)."""
    first = dict(draft_s=0.0001, target_s=0.0001)
    spec = traces_of([round_of([5, 6], 2, **first), round_of([5, 6], 2, draft_s=0.004, target_s=0.009),
                      round_of([7], 0, draft_s=0.001, target_s=0.005)],
                     [round_of([5, 6], 1, **first), round_of([5, 6], 1, draft_s=0.004, target_s=0.009)])
    plain = (traces_of([round_of([], 0, **first), round_of([], 0, target_s=0.003)])
             + traces_of([round_of([], 0, **first), round_of([], 0, target_s=0.005)]))
    got = load.run_passes({(2, "speculative"): spec, (1, "autoregressive"): plain}, context=32)
    rows = {(r.model, r.batch, r.width, r.tokens): (round(r.ms, 6), round(r.ms_min, 6), round(r.ms_max, 6))
            for r in got.itertuples()}
    assert rows == {("target", 2, 3, 6): (9, 9, 9), ("target", 2, 2, 2): (5, 5, 5), ("draft", 2, 1, 2): (2, 2, 2),
                    ("draft", 2, 1, 1): (1, 1, 1), ("target", 1, 1, 1): (4, 3, 5)}
    assert set(got.context) == {32}
    assert set(load.run_passes({(2, "speculative"): spec}, 32, drafts=False).model) == {"target"}


def test_the_forward_named_is_the_class_batched_decoding_builds(pair):
    import specviz.batch

    probe = specviz.batch.BatchDecoding(pair[0], None, [torch.tensor([[1]])],
                                        load.DecodeConfig(k_policy="fixed", max_new_tokens=1, temperature=0.0))
    kind = type(probe.target)
    assert load.forward_used(pair[0]).startswith(f"{kind.__module__}.{kind.__qualname__}: ")


def test_the_prediction_is_the_goodput_models_on_the_fitted_costs():
    target, draft = gp.StepCost(0.010, 0.001), gp.StepCost(0.001, 0.0001)
    passes = pd.DataFrame(
        [dict(model="target", batch=b, width=w, tokens=b * w, context=64, ms=1e3 * target.seconds(b * w)) for b in
         (1, 2, 4, 8) for w in (1, 2, 3)] +
        [dict(model="draft", batch=b, width=w, tokens=b * w, context=64, ms=1e3 * draft.seconds(b * w)) for b in
         (1, 2, 4, 8) for w in (1, 2)])
    p = load.predict(passes, [0.6, 0.5], 0.0005, [1, 2, 4, 8], 64, 2)
    expected = [gp.speedup(b, 64, 2, [0.6, 0.5], target, gp.DraftCost("sequential", draft), 0.0005)
                for b in (1, 2, 4, 8)]
    assert p.speedups == pytest.approx(expected, rel=1e-6)
    assert p.crossover == gp.crossover([1, 2, 4, 8], expected)
    own = load.predict(passes, [0.6, 0.5], 0.0005, [1, 2, 4, 8], 64, 2, per_batch={1: [0.9, 0.9]})
    assert own.speedups[0] == pytest.approx(gp.speedup(1, 64, 2, 0.9, target, gp.DraftCost("sequential", draft), 0.0005))
    assert own.speedups[1:] == pytest.approx(expected[1:], rel=1e-6)  # the other batches at the pooled rates
    ngram = load.predict(passes[passes.model == "target"], [0.6, 0.5], 0.0, [1, 2], 64, 2, seconds_each=0.001)
    assert ngram.draft == gp.DraftCost("ngram", seconds_each=0.001)


@pytest.mark.slow
def test_a_small_run_end_to_end(pair):
    target, draft = pair
    prompts = [[3, 4, 5, 6], [7, 8, 9]]
    result = load.run_lab(target, draft, prompts, batches=[1, 2], context=16, k=2, new_tokens=6, repeats=1)
    runs = result.runs.set_index(["batch", "method"])
    assert runs.tokens.to_dict() == {(1, "speculative"): 6, (1, "autoregressive"): 6, (2, "speculative"): 12,
                                     (2, "autoregressive"): 12}
    assert runs.loc[(2, "autoregressive"), "steps"] == 6  # one target pass a token
    assert set(zip(result.passes.model, result.passes.width)) == {("target", 1), ("target", 2), ("target", 3),
                                                                  ("draft", 1), ("draft", 2)}
    assert list(result.summary.batch) == [1, 2] and len(result.prediction.speedups) == 2
    assert result.measured == gp.crossover([1, 2], list(result.summary.speedup))
    est = load.estimate(target, draft, prompts, [1, 2], 16, 2, 6, 1)
    assert 0 < est.low <= est.likely <= est.high


def prediction_of(target, draft, overhead=0.0):
    return load.Prediction(target, gp.DraftCost("sequential", draft), [0.5], overhead, [], gp.crossover([1], [1]), [])


def test_why_no_crossover_reads_the_round_from_the_fitted_costs():
    """Target 10 ms + 1 ms a token, draft 2 ms a pass, k = 2, batch 1: verify 13 ms (13/11 = 1.18 plain passes),
    drafting 2 x 2 = 4 ms (4/17 = 24%), round 17 ms, step 11 ms: 17/11 = 1.55 tokens a request pay; a request more
    adds 3 ms to a round and 1 ms to a step: the break-even rises toward 3.00. 1.40 tokens a round: lost."""
    p = prediction_of(gp.StepCost(0.010, 0.001), gp.StepCost(0.002, 0.0))
    e = load.break_even(p, 1, 0, 2)
    assert (e["verify"], e["drafting"], e["round"], e["plain"]) == pytest.approx((0.013, 0.004, 0.017, 0.011))
    assert (e["needed"], e["limit"]) == pytest.approx((17 / 11, 3.0))
    summary = pd.DataFrame(dict(batch=[1, 2], tokens_per_step=[1.4, 1.3]))
    words = load.why_none(gp.Crossover(None, "never pays", None), p, summary, 0, 2)
    assert words == ("Speculation lost even at batch 1, the smallest measured: a round took 17.0 ms (verifying 1 x 3 "
                     "tokens 13.0 ms, 1.18 times a plain pass of 1; drafting 4.0 ms, 24% of the round) and brought "
                     "1.40 tokens a request, where 1.55 would pay for it. Each request added to the batch raises that "
                     "break-even, toward 3.00 tokens a request (a verify pass grows by k + 1 tokens a request, a "
                     "plain step by one): larger batches only widen the gap.")
    assert load.why_none(gp.Crossover(2, "crosses", 1), p, summary, 0, 2) == ""


def test_why_it_paid_throughout_says_where_it_would_stop():
    """Target 10 ms + 0.1 ms a token, draft 1 ms, k = 2, at the largest batch, 4: verify 11.2 ms, drafting 2 ms,
    round 13.2 ms, step 10.4 ms: 1.27 tokens pay; a request more: 0.3 ms to a round, 0.1 to a step: toward 3.00,
    above the 2.50 a round brought: it stops paying at a larger batch. With 3.5 tokens a round it keeps paying."""
    p = prediction_of(gp.StepCost(0.010, 0.0001), gp.StepCost(0.001, 0.0))
    paid = gp.Crossover(None, "pays throughout", 4)
    words = load.why_none(paid, p, pd.DataFrame(dict(batch=[1, 4], tokens_per_step=[2.8, 2.5])), 0, 2)
    assert words.startswith("Speculation still paid at batch 4, the largest measured: a round took 13.2 ms")
    assert "where 1.27 would pay for it" in words and "raises that break-even, toward 3.00" in words
    assert words.endswith("it stops paying at a larger batch, once the break-even passes 2.50.")
    more = load.why_none(paid, p, pd.DataFrame(dict(batch=[1, 4], tokens_per_step=[3.6, 3.5])), 0, 2)
    assert more.endswith("at these rates it keeps paying at larger batches.")


def test_why_says_so_when_the_fitted_passes_disagree_with_the_clock():
    """The first case's costs (1.55 tokens a request pay at batch 1), but the round brought 1.60 and still lost."""
    p = prediction_of(gp.StepCost(0.010, 0.001), gp.StepCost(0.002, 0.0))
    summary = pd.DataFrame(dict(batch=[1, 2], tokens_per_step=[1.6, 1.6]))
    words = load.why_none(gp.Crossover(None, "never pays", None), p, summary, 0, 2)
    assert words.startswith("Speculation lost at batch 1: a round took 17.0 ms")
    assert "brought 1.60 tokens a request, where 1.55 would pay for it, so by the passes the runs timed it should " \
           "have paid: the runs' own rounds cost more than" in words
