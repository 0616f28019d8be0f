"""The benchmark runs every method on the same work (no timing assertions: timings are printed, not tested)."""
from dataclasses import replace

import pytest
import torch

from specviz import DecodeConfig, PromptLookupDrafter
from specviz.labs.bench import measure, methods, report, run_bench
from specviz.runtime import llamacpp
from tests.helpers.models import gqa_llama, perturbed, tiny_llama


@pytest.mark.slow
def test_every_method_generates_the_same_number_of_tokens(prompt):
    target = tiny_llama(seed=3, sharpen=30)
    for draft in (perturbed(target, 0.3), PromptLookupDrafter()):
        tallies = run_bench(target, draft, [prompt, prompt[:, :2]], DecodeConfig(k=3, temperature=0, max_new_tokens=10),
                            repeats=1)
        also = {"ours-ar-llamacpp"} if llamacpp.supports(target) is None else set()  # llama-cpp-python installed
        assert set(tallies) == {"ours-ar", "ours-spec", "ours-norecord", "hf-plain", "hf-assisted"} | also
        twice = {"ours-spec", "ours-norecord"}  # run A B B A each prompt: the recording pair
        assert {t.tokens for name, t in tallies.items() if name not in twice} == {20}
        assert {tallies[name].tokens for name in twice} == {40} and len(tallies["ours-spec"].per_call) == 4
        text = report(tallies)
        assert "speedup of ours-spec over ours-ar" in text and "recording overhead" in text
        spec = tallies["ours-spec"].counts  # the decoder's own counts travel with the tallies
        assert spec.new_tokens == 40 and spec.drafted > 0 and tallies["ours-ar"].counts.drafted == 0
        m = measure(tallies)
        assert m.acceptance_rate == spec.acceptance_rate and m.c > 0 and m.v > 0 and m.predicted > 0


@pytest.mark.slow
@pytest.mark.parametrize("stop", [0.0, 0.6])
def test_hf_assisted_drafts_the_same_k_as_ours(prompt, stop):
    """Greedy, same pair, same k: transformers' assisted generation and ours make the same rounds, so the
    target verifies the same number of tokens in each forward pass, with and without the confidence stop
    (draft_stop == transformers' assistant_confidence_threshold). With transformers' default assistant
    settings it would draft up to 20 tokens and stop below confidence 0.4: a different algorithm."""
    target = tiny_llama(seed=3, sharpen=30)
    draft = perturbed(target, 0.3)
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=12, draft_stop=stop)
    sizes = []  # tokens fed to the target in each forward pass
    forward = target.forward
    target.forward = lambda input_ids=None, **kw: sizes.append(input_ids.shape[1]) or forward(input_ids=input_ids, **kw)
    fns = methods(target, draft, cfg)
    passes = {}
    for name in ("ours-spec", "hf-assisted"):
        sizes.clear()
        out = fns[name](prompt, 0)
        assert (len(out.new_tokens) if name == "ours-spec" else out) == 12
        passes[name] = list(sizes)
    ours, hf = passes["ours-spec"], passes["hf-assisted"]
    # ours prefills the prompt in a pass of its own (round times exclude it) whose last logits serve the
    # first round; transformers prefills the prompt inside its first verify pass
    assert ours[0] == prompt.shape[1] and ours[0] + ours[1] == hf[0]
    assert ours[2:] == hf[1:]
    # without the stop rounds verify k drafts (the budget cuts the last ones); with it these drafts stop early
    assert any(n == 1 + cfg.k for n in hf[1:]) == (stop == 0)
    assert draft.generation_config.num_assistant_tokens is None  # the assistant's settings are restored


def test_the_floor_checks_acceptance_at_k_4_whatever_the_explorers_k():
    """With the explorer's k at 6, the default pair is measured for speed at k = 6 and for acceptance at k = 4
    (the floor's acceptance lines) over many seeds, without timing; a missed speed line fails the verdict."""
    from specviz.labs.bench import Measured
    from specviz.labs.floor import settings, verdicts

    at6 = settings("d", 6, "best", [6])
    assert [(s.k, s.temperature, s.floor, s.acceptance_floor) for s in at6] == [
        (6, 0.0, 2.0, None), (6, 0.8, 2.0, None), (4, 0.0, None, 0.65), (4, 0.8, None, 0.6), (6, 0.0, 2.5, None)]
    assert [s.k for s in settings("d", 4, None, [6])] == [4, 4, 4, 4]
    assert [s.k for s in settings("d", 6, "best", [8, 12])][-2:] == [8, 12]
    m = Measured(speedup=1.9, acceptance_rate=0.62, alpha=0.8, tau=3.5, c=0.05, v=1.5, predicted=2.1,
                 vs_assisted=1.4, recording_overhead=0.01)
    assert [ok for _, ok in verdicts(at6[0], m)] == [False, True, True, True]  # 1.9x < 2.0x
    assert verdicts(at6[2], m) == []  # acceptance lines are measured by floor.acceptance
    exact, inexact = replace(m, speedup=2.2, compared=40), replace(m, speedup=2.2, compared=40, differing=1)
    assert [ok for _, ok in verdicts(at6[0], exact)] == [True] * 5  # greedy runs compared: one line more
    assert [ok for _, ok in verdicts(at6[0], inexact)] == [True, True, True, False, True]  # one run differed


@pytest.mark.slow
def test_the_bench_compares_every_greedy_run_with_the_targets_own_greedy_text(prompt, monkeypatch):
    from specviz.labs import bench

    target = tiny_llama(seed=3, sharpen=30)
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=10)
    m = measure(run_bench(target, perturbed(target, 0.3), [prompt, prompt[:, :2]], cfg, repeats=1))
    assert (m.compared, m.differing) == (2 * 4, 0)  # 2 prompts x (ours-spec, ours-norecord twice each)
    real = bench.speculative_generate

    def one_token_short(target, draft, ids, cfg):  # a decoder whose text is not the target's greedy text
        return real(target, draft, ids, replace(cfg, max_new_tokens=cfg.max_new_tokens - 1))

    monkeypatch.setattr(bench, "speculative_generate", one_token_short)
    m = measure(run_bench(target, perturbed(target, 0.3), [prompt], cfg, repeats=1))
    assert (m.compared, m.differing) == (4, 4)
    sampled = measure(run_bench(target, perturbed(target, 0.3), [prompt], DecodeConfig(k=3, temperature=0.8,
                                                                                       max_new_tokens=10), repeats=1))
    assert sampled.compared == 0  # sampled text is not the greedy text: nothing to compare


def test_the_floor_judges_the_fastest_of_the_best_ks(monkeypatch, capsys):
    """With --best-k 8,12 both are measured and printed; the best lines are read off the faster one only, so a
    slow candidate does not fail the floor and a fast one that misses another line does."""
    from specviz.labs import floor
    from specviz.labs.bench import Measured

    def fake_measure(tallies):
        speedup, ratio = tallies
        return Measured(speedup=speedup, acceptance_rate=0.7, alpha=0.9, tau=5, c=0.03, v=1.5, predicted=speedup / ratio,
                        vs_assisted=None, recording_overhead=0.01)

    def fake_bench(target, draft, prompts, cfg, repeats):  # the default lines (k = 6) 2.2x; k 8 slow, k 12 fast
        return {8: (2.1, 0.95), 12: (2.7, per_k12)}.get(cfg.k, (2.2, 0.95))

    monkeypatch.setattr(floor, "target_and_prompts", lambda args: (None, None, []))
    monkeypatch.setattr(floor, "drafter_for", lambda *a, **kw: None)
    monkeypatch.setattr(floor, "run_bench", fake_bench)
    monkeypatch.setattr(floor, "measure", fake_measure)
    monkeypatch.setattr(floor, "acceptance", lambda *a: (0.7, 0.0))
    argv = ["--best-draft", "d", "--best-k", "8,12", "--lengths", "64"]
    per_k12 = 0.95
    assert floor.main(argv)
    assert "k=8" in capsys.readouterr().out
    per_k12 = 0.5  # the fastest k misses measured / predicted
    assert not floor.main(argv)
    with pytest.raises(SystemExit):
        floor.main(["--best-k", "8,x"])


def test_the_floors_acceptance_is_the_rate_over_every_seed_and_prompt(monkeypatch):
    """floor.acceptance pools each seed's runs (accepted / drafted over the prompts), averages the seeds and gives
    their standard error; a greedy run draws nothing, so it runs one seed."""
    import statistics

    from specviz.labs import floor
    from specviz.trace import Counts

    seen = []

    def fake(target, draft, ids, cfg):  # seed s, prompt i: accepts s + i of 10 drafted
        seen.append((cfg.seed, int(ids)))
        c = Counts(rounds=1, new_tokens=1, drafted=10, accepted=cfg.seed + int(ids))
        return type("T", (), {"counts": lambda self: c})()

    monkeypatch.setattr(floor, "speculative_generate", fake)
    rate, se = floor.acceptance(None, None, [0, 2], DecodeConfig(k=4, temperature=0.8), seeds=3)
    per_seed = [(2 * s + 2) / 20 for s in range(3)]  # (s + 0 + s + 2) / 20
    assert rate == pytest.approx(statistics.fmean(per_seed)) and se == pytest.approx(statistics.stdev(per_seed) / 3 ** 0.5)
    assert sorted(seen) == [(s, i) for s in range(3) for i in (0, 2)]
    seen.clear()
    assert floor.acceptance(None, None, [1], DecodeConfig(k=4, temperature=0.0), seeds=3) == (0.1, 0.0)
    assert seen == [(0, 1)]


def test_run_order_keeps_the_recording_pair_side_by_side_and_rotates():
    from specviz.labs.bench import run_order

    names = ["ours-ar", "ours-spec", "ours-norecord", "hf-plain", "hf-assisted"]
    orders = [run_order(names, turn) for turn in range(8)]
    for order in orders:
        assert sorted(order) == sorted(names + ["ours-spec", "ours-norecord"])  # the pair twice, the rest once
        i = order.index("ours-spec") if order.index("ours-spec") < order.index("ours-norecord") else order.index("ours-norecord")
        assert order[i: i + 4] in (["ours-spec", "ours-norecord", "ours-norecord", "ours-spec"],
                                   ["ours-norecord", "ours-spec", "ours-spec", "ours-norecord"])  # A B B A
    assert {o.index("ours-spec") < o.index("ours-norecord") for o in orders} == {True, False}  # both orders
    assert {o[0] for o in orders} >= {"ours-ar", "hf-plain", "hf-assisted"}  # no method always first
    assert run_order(["ours-ar", "hf-plain"], 1) == ["hf-plain", "ours-ar"]  # without the pair: a plain rotation


@pytest.mark.slow
def test_bench_measures_the_plain_matmul_path_beside_the_packed_one(prompt):
    from specviz.runtime import packed_linear

    target = gqa_llama(seed=3, dtype=torch.float32, tied=True, sharpen=3.0)
    tallies = run_bench(target, perturbed(target, 0.05), [prompt], DecodeConfig(k=3, temperature=0, max_new_tokens=8),
                        repeats=1, plain_too=True)
    assert tallies["ours-spec-plain"].tokens == tallies["ours-spec"].tokens // 2 == 8
    assert packed_linear.enabled()  # switched back on after the plain runs
    assert "packed matmuls (ours-norecord) vs plain (ours-spec-plain)" in report(tallies)


# -- the batch benchmark: checked between measurements ------------------------------------------------------------
@pytest.mark.slow
def test_the_batch_benchmark_checks_before_every_measurement_and_stops_where_the_check_raises(prompt, monkeypatch):
    """A caller's budget (or its visitor's leaving) stops the benchmark between measurements: 2 warm-ups and
    2 methods x 3 sizes checked, and once a check raises no further batch runs."""
    from specviz.labs import batch_bench

    target = tiny_llama(seed=3, sharpen=30)
    cfg = DecodeConfig(k=2, temperature=0, max_new_tokens=3, record=False)
    batches, checks = [], []
    for name in ("speculative_generate_batch", "autoregressive_generate_batch"):
        real = getattr(batch_bench, name)
        monkeypatch.setattr(batch_bench, name, lambda *a, real=real, **k: batches.append(1) or real(*a, **k))
    frame = batch_bench.run_batch_bench(target, perturbed(target, 0.3), [prompt], cfg, sizes=(1, 2, 4), repeats=1,
                                        check=lambda: checks.append(len(batches)))
    assert checks == list(range(2 + 2 * 3)) and len(batches) == 8  # each check before its own measurement
    assert len(frame) == 6 and (frame.tokens == 3 * frame.batch_size).all()

    def stop_at_fifth():
        if len(checks) == 4:
            raise ValueError("stopped: the visitor who asked for this run has left")
        checks.append(1)

    batches.clear(), checks.clear()
    with pytest.raises(ValueError, match="has left"):
        batch_bench.run_batch_bench(target, perturbed(target, 0.3), [prompt], cfg, sizes=(1, 2, 4), repeats=1,
                                    check=stop_at_fifth)
    assert len(batches) == 4  # the two warm-ups and two timed batches; the other four never ran
