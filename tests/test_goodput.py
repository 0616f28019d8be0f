"""The goodput model against values worked by hand (each test's comment shows the arithmetic)."""
import pytest

from specviz import goodput as gp
from specviz.theory import expected_tokens

TARGET = gp.StepCost(fixed=10.0, per_token=1.0)  # a pass: 10 + n
FREE_NGRAM = gp.DraftCost("ngram")


def test_step_cost_is_fixed_plus_tokens_plus_kv_reads():
    cost = gp.StepCost(1.0, 0.5, 0.01)
    assert cost.seconds(4, 10) == pytest.approx(1 + 0.5 * 4 + 0.01 * 4 * 10)  # 3.4
    assert cost.v(4, 10) == pytest.approx(3.4 / (1 + 0.5 + 0.1))


def test_chain_tokens_per_position_and_equal_rates():
    assert gp.chain_tokens([0.8, 0.5]) == pytest.approx(1 + 0.8 + 0.8 * 0.5)  # 2.2
    assert gp.chain_tokens([0.5, 0.5]) == pytest.approx(expected_tokens(0.5, 2)) == pytest.approx(1.75)
    assert gp.rates_of([0.9, 0.7], 4) == [0.9, 0.7, 0.7, 0.7]


def test_draft_cost_by_kind():
    step = gp.StepCost(2.0, 0.5, 0.1)
    # sequential: k passes over the B newest tokens, context growing by one: (2 + 1 + 0.1*2*10) + (2 + 1 + 0.1*2*11)
    assert gp.DraftCost("sequential", step).seconds(2, 2, 10) == pytest.approx(5.0 + 5.2)
    assert gp.DraftCost("block", gp.StepCost(2.0, 0.5)).seconds(2, 3) == pytest.approx(2 + 0.5 * 6)  # one pass, B k
    assert gp.DraftCost("ngram", seconds_each=0.25).seconds(4, 2) == pytest.approx(4 * 2 * 0.25)
    assert gp.DraftCost("block", step).seconds(8, 0) == 0.0


def test_speedup_falls_with_batch_and_crosses_where_solved_by_hand():
    # speedup(B) = 1.75 (10 + B) / (10 + 3B) >= 1  <=>  7.5 >= 1.25 B  <=>  B <= 6
    assert gp.speedup(1, 0, 2, 0.5, TARGET, FREE_NGRAM) == pytest.approx(1.75 * 11 / 13)
    assert gp.speedup(4, 0, 2, 0.5, TARGET, FREE_NGRAM) == pytest.approx(1.75 * 14 / 22)
    assert gp.speedup(8, 0, 2, 0.5, TARGET, FREE_NGRAM) == pytest.approx(1.75 * 18 / 34)
    assert gp.goodput(8, 0, 0, 0.5, TARGET, FREE_NGRAM) == pytest.approx(8 / 18)
    batches = [1, 2, 4, 8, 16]
    cross = gp.crossover(batches, [gp.speedup(b, 0, 2, 0.5, TARGET, FREE_NGRAM) for b in batches])
    assert cross == gp.Crossover(8, "crosses", 4)


def test_context_makes_every_row_dearer():
    # per_kv 0.01 at L = 100: a pass is 10 + 2n; B = 2, k = 2: spec 2*1.75 / (10 + 12), AR 2 / (10 + 4)
    cost = gp.StepCost(10.0, 1.0, 0.01)
    assert gp.speedup(2, 100, 2, 0.5, cost, FREE_NGRAM) == pytest.approx((3.5 / 22) / (2 / 14))
    assert gp.speedup(2, 100, 2, 0.5, cost, FREE_NGRAM) < gp.speedup(2, 0, 2, 0.5, cost, FREE_NGRAM)


def test_overhead_per_request_counts_on_both_sides():
    # B = 2, k = 1, alpha 1: spec 2*2 / (10 + 4 + 2*3), AR 2 / (10 + 2 + 2*3)
    assert gp.speedup(2, 0, 1, 1.0, TARGET, FREE_NGRAM, overhead=3.0) == pytest.approx((4 / 20) / (2 / 18))


def test_best_k_falls_as_the_batch_grows():
    # alpha 0.8, a pass 10 + n. B = 1: tau_k / (11 + k) = .091, .15, .188, .211, .224 -> k = 4
    # B = 4: .286, 7.2/18, 9.76/22, 11.808/26 = .454, 13.446/30 = .448 -> k = 3
    # B = 16: .615, 28.8/42 = .686, 39.04/58 = .673 -> k = 1;  B = 64: 64/74 = .865 > 115.2/138 = .835 -> k = 0
    ks = [1, 2, 3, 4]
    assert gp.best_k(1, 0, ks, 0.8, TARGET, FREE_NGRAM) == 4
    assert gp.best_k_ranges([1, 2, 4, 16, 64], 0, ks, 0.8, TARGET, FREE_NGRAM) == [
        (1, 2, 4), (4, 4, 3), (16, 16, 1), (64, 64, 0)]


def test_a_chain_shaped_tree_prices_as_the_chain():
    rates = {(0, 0): (1, 2), (1, 0): (1, 2)}  # alpha 0.5 at both depths
    draft = gp.DraftCost("sequential", gp.StepCost(1.0, 0.25))
    chain = gp.speedup(4, 32, 2, 0.5, TARGET, draft)
    assert gp.tree_speedup(4, 32, [-1, 0], [0, 1], rates, TARGET, draft) == pytest.approx(chain)
    # two siblings at depth 0, each accepted half the time: tau = 1 + 0.5 + 0.5 = 2; target verifies B * 3 tokens
    wide = gp.tree_speedup(1, 0, [-1, -1], [0, 0], {(0, 0): (1, 2), (0, 1): (1, 2)}, TARGET, FREE_NGRAM)
    assert wide == pytest.approx((2 / 13) / (1 / 11))


def test_crossover_verdicts():
    assert gp.crossover([1, 2, 4], [0.9, 0.8, 0.7]) == gp.Crossover(None, "never pays", None)
    assert gp.crossover([1, 2, 4], [1.5, 1.2, 1.0]) == gp.Crossover(None, "pays throughout", 4)
    assert gp.crossover([1, 2, 4], [0.9, 1.1, 1.2]).verdict == "pays only at larger batches"
    with pytest.raises(ValueError, match="increasing"):
        gp.crossover([2, 1], [1.0, 1.0])


def test_fit_recovers_a_step_cost_and_folds_kv_into_tokens_at_one_context():
    true = gp.StepCost(0.002, 0.0005, 1e-6)
    samples = [(n, L, true.seconds(n, L)) for n in (1, 4, 16, 64) for L in (128, 1024)]
    fitted = gp.fit_step_cost(samples)
    assert (fitted.fixed, fitted.per_token, fitted.per_kv) == pytest.approx((0.002, 0.0005, 1e-6), rel=1e-6)
    one = gp.fit_step_cost([s for s in samples if s[1] == 128])
    assert (one.fixed, one.per_token, one.per_kv) == pytest.approx((0.002, 0.0005 + 128e-6, 0.0), rel=1e-6)


def test_the_fit_weighs_every_pass_by_its_relative_error():
    # a machine whose per-token cost doubles past 64 tokens (compute saturates): a straight line cannot follow it.
    # Fitted on absolute seconds the 256-token pass sets the line and a one-token pass comes out at 0.48x its cost
    # (a batch-1 speedup priced from it is wrong by 2x); on relative error every pass is within 25% of its own.
    def cost(n):
        return 0.001 + 0.00005 * min(n, 64) + 0.0001 * max(n - 64, 0)
    sizes = (1, 2, 4, 8, 64, 128, 256)
    fitted = gp.fit_step_cost([(n, 0, cost(n)) for n in sizes])
    assert all(0.75 < fitted.seconds(n) / cost(n) < 1.25 for n in sizes)
    assert fitted.seconds(1) / cost(1) == pytest.approx(0.953, abs=0.01)


def test_fit_from_an_engines_throughput():
    # 10, 18, 30 tokens/s at batch 1, 2, 4: steps of 0.1, 0.111, 0.1333 s
    samples = gp.passes_from_throughput([1, 2, 4], [10, 18, 30])
    assert [s for _, _, s in samples] == pytest.approx([0.1, 2 / 18, 4 / 30])
    fitted = gp.fit_step_cost(samples)
    assert fitted.seconds(2) == pytest.approx(2 / 18, rel=0.02)


@pytest.mark.parametrize("call, message", [
    (lambda: gp.StepCost(-1, 1), "finite and >= 0"),
    (lambda: gp.StepCost(0, 0), "costs nothing"),
    (lambda: gp.DraftCost("medusa"), "draft kind"),
    (lambda: gp.DraftCost("sequential"), "StepCost"),
    (lambda: gp.goodput(0, 0, 2, 0.5, TARGET, FREE_NGRAM), "batch of at least 1"),
    (lambda: gp.chain_tokens([1.5]), r"\[0, 1\]"),
    (lambda: gp.fit_step_cost([(1, 0, 0.1), (1, 0, 0.2)]), "at least 2 sizes"),
])
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
