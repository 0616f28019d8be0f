"""Lines of concurrent producers (the engines of a data-parallel vLLM server, several API servers, SGLang's DP ranks)
interleave in one log: each interval keeps the producer that printed it, the totals sum them all, and drift is judged
within each producer's own lines, never across two producers' lines as if one followed the other."""
from __future__ import annotations

from pathlib import Path

import pytest

from specviz.engines import diagnose, read_engine_run
from specviz.engines.load_doctor import load_frame
from specviz.engines.producers import moment_of, producer_of
from specviz.engines.read import read_reported
from specviz.engines.run import EngineRun, coarsened
from specviz.engines.trends import drift

WILD = Path(__file__).parent / "fixtures" / "wild"
TICKS = 24


def stamp(t: int) -> str:
    return f"05-04 01:{t // 60:02d}:{t % 60:02d}"


def throughput(pid: int, t: int, engine: int | None, running: int = 8) -> str:
    who = f"Engine {engine:03d}" if engine is not None else "1 Engines Aggregated"
    return (f"(APIServer pid={pid}) INFO {stamp(t)} [loggers.py:271] {who}: Avg prompt throughput: 0.0 tokens/s, Avg "
            f"generation throughput: 50.0 tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: "
            "5.0%, Prefix cache hit rate: 0.0%\n")


def spec(pid: int, t: int, accepted: int, steps: int = 100, k: int = 4) -> str:
    """A V1 SpecDecoding line of ``steps`` drafts of k, ``accepted`` of them accepted (spread over the positions)."""
    base, extra = divmod(accepted, k)
    rates = ", ".join(f"{(base + (i < extra)) / steps:.3f}" for i in range(k))
    return (f"(APIServer pid={pid}) INFO {stamp(t)} [metrics.py:101] SpecDecoding metrics: Mean acceptance length: "
            f"{1 + accepted / steps:.2f}, Accepted throughput: {accepted / 10:.2f} tokens/s, Drafted throughput: "
            f"{steps * k / 10:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: {steps * k} tokens, Per-position "
            f"acceptance rate: {rates}, Avg Draft acceptance rate: {100 * accepted / (steps * k):.1f}%\n")


def two_engines(second, ticks_a=range(TICKS), ticks_b=range(TICKS), with_throughput=True) -> str:
    """One server, two data-parallel engines: engine 0 accepts 320 of 400 (0.8) every tick it logs, engine 1
    ``second(t)`` of 400; each engine prints its throughput line and then its SpecDecoding line."""
    out = []
    for t in range(TICKS):
        for engine, ticks, accepted in ((0, ticks_a, 320), (1, ticks_b, second(t))):
            if t in ticks:
                out.append((throughput(1, 10 * t, engine) if with_throughput else "") + spec(1, 10 * t, accepted))
    return "".join(out)


def drift_of(text: str):
    return next((f for f in diagnose(read_engine_run(text)) if f.code == "drift"), None)


def test_two_engines_at_constant_rates_do_not_drift():
    """0.8 and 0.5 interleaved, each constant: no drift, whether both log every tick or the traffic moves from
    engine 0 (ticks 0-15) to engine 1 (ticks 8-23), which read as one series fell from 0.77 to 0.53."""
    for a, b in ((range(TICKS), range(TICKS)), (range(0, 16), range(8, 24))):
        text = two_engines(lambda t: 200, a, b)
        run = read_engine_run(text)
        assert (run.accepted, run.drafted) == (320 * len(a) + 200 * len(b), 400 * (len(a) + len(b)))
        assert {r.producer for r in run.series} == {"APIServer pid=1 engine 0", "APIServer pid=1 engine 1"}
        assert any(n.startswith("lines of 2 producers (APIServer pid=1 engine 0, APIServer pid=1 engine 1)")
                   for n in run.notes)
        assert drift_of(text) is None


def test_one_engine_falling_drifts_and_is_named():
    """Engine 1 falls from 240 to 102 accepted of 400 over ticks 8-23 while engine 0 stays at 0.8: a drift of
    engine 1's own 16 intervals (its first third pooled 0.57, its last 0.28)."""
    text = two_engines(lambda t: 240 - 9 * (t - 8), range(0, 16), range(8, 24))
    found = drift_of(text)
    assert found is not None and found.severity == "warning"
    assert found.numbers["producer"] == "APIServer pid=1 engine 1" and found.numbers["producers"] == 2
    assert found.numbers["intervals"] == 16 and found.numbers["tau"] == pytest.approx(-1.0)
    assert found.numbers["first"] == pytest.approx(sum(240 - 9 * i for i in range(5)) / 2000)
    assert "APIServer pid=1 engine 1's intervals (one of 2 producers" in found.text


def test_a_steady_engine_beside_a_falling_one_is_not_blamed():
    text = two_engines(lambda t: 240 - 9 * t)
    assert drift_of(text).numbers["producer"] == "APIServer pid=1 engine 1"
    alone = "".join(throughput(1, 10 * t, 0) + spec(1, 10 * t, 320) for t in range(TICKS))
    assert drift_of(alone) is None


def test_api_servers_are_producers_and_pair_their_own_throughput_lines():
    """Two API server processes each print '1 Engines Aggregated' and their line; their output interleaves, so a
    SpecDecoding line takes the throughput line of its own process, not the last one printed."""
    lines = []
    for t in range(TICKS):
        lines += [throughput(7, 10 * t, None, running=4), throughput(9, 10 * t, None, running=12),
                  spec(7, 10 * t, 320), spec(9, 10 * t, 200 if t < 12 else 120)]
    run = read_engine_run("".join(lines))
    assert [(r.producer, r.load.running) for r in run.series[:2]] == [("APIServer pid=7", 4), ("APIServer pid=9", 12)]
    found = drift_of("".join(lines))
    assert found.numbers["producer"] == "APIServer pid=9"
    steady = "".join(throughput(pid, 10 * t, None) + spec(pid, 10 * t, 320 if pid == 7 else 200)
                     for t in range(TICKS) for pid in ((7,) if t >= 16 else (7, 9) if t >= 8 else (9,)))
    assert drift_of(steady) is None


def test_engines_not_named_are_merged_moment_by_moment():
    """SpecDecoding lines without their throughput lines (a grep): two lines of one process at one moment are
    concurrent engines that cannot be told apart, so each moment's lines are one interval of the series."""
    text = two_engines(lambda t: 200, with_throughput=False)
    run = read_engine_run(text)
    assert (run.accepted, run.drafted) == (520 * TICKS, 800 * TICKS)
    assert len(run.series) == TICKS and all((r.accepted, r.drafted) == (520, 800) for r in run.series)
    assert any("48 lines printed at one moment by one producer (24 moments)" in n for n in run.notes)
    assert drift_of(text) is None


def test_v0_totals_are_differenced_within_each_producer():
    """V0 lines are totals since their engine started: two servers' lines interleaved are two such counters, not
    one that falls (which read as one series was refused as an engine restart)."""
    def v0(pid, t, steps, accepted):
        emitted = steps + accepted
        return (f"(APIServer pid={pid}) INFO {stamp(t)} metrics.py:467] Speculative metrics: Draft acceptance rate: "
                f"{accepted / (4 * steps):.3f}, System efficiency: {emitted / (5 * steps):.3f}, Number of speculative "
                f"tokens: 4, Number of accepted tokens: {accepted}, Number of draft tokens: {4 * steps}, Number of "
                f"emitted tokens: {emitted}.\n")
    text = "".join(v0(1, 10 * t, 100 * t, 320 * t) + v0(2, 10 * t, 50 * t, 100 * t) for t in range(1, 9))
    run = read_engine_run(text)
    assert (run.steps, run.accepted, run.drafted) == (800 + 400, 2560 + 800, 4 * 1200)
    assert [(r.producer, r.steps, r.accepted) for r in run.series[2:4]] == [("APIServer pid=1", 100, 320),
                                                                           ("APIServer pid=2", 50, 100)]
    assert drift_of(text) is None


def test_real_dp_logs_keep_their_totals_and_name_their_producers():
    run = read_engine_run(WILD / "vllm-v1-specdecoding-dp-engines-6.txt")
    assert (run.accepted, run.drafted, run.steps) == (17 + 27, 110 + 75, 22 + 15)
    assert [r.producer for r in run.series] == ["APIServer pid=3617069 engine 0", "APIServer pid=3617069 engine 1"]
    run = read_engine_run(WILD / "vllm-ascend-specdecoding-dp-engines-4.txt")
    assert (run.accepted, run.drafted, run.steps) == (282 + 299, 453 + 453, 151 + 151)
    assert [r.producer for r in run.series] == ["APIServer pid=95669 engine 2", "APIServer pid=95673 engine 4"]
    run = read_engine_run(WILD / "vllm-ascend-specdecoding-api-servers-8.txt")
    assert (run.accepted, run.drafted) == (474 + 418, 624 + 561)
    assert [r.producer for r in run.series] == ["APIServer pid=2523786", "APIServer pid=2523785"]
    assert any(n.startswith("lines of 2 producers") for n in run.notes)
    ranks = read_reported(WILD / "sglang-decode-batch-dp-ranks-11.txt")
    assert [e.producer for e in ranks.series] == ["DP3", "DP5", "DP2", "DP4"]


def test_one_engine_whose_first_line_lost_its_throughput_line_is_still_one_producer():
    """The excerpt starts with a SpecDecoding line whose 'Engine 000:' line was cut above it: the process names
    only engine 0, so that line is engine 0's too."""
    run = read_engine_run(WILD / "vllm-v1-specdecoding-engine-interleaved-5.txt")
    assert [r.producer for r in run.series] == ["APIServer pid=1 engine 0"] * 2
    assert any(n.startswith("1 producer (APIServer pid=1 engine 0)") for n in run.notes)


@pytest.mark.parametrize(("prefix", "producer"), [
    ("(APIServer pid=1) INFO 05-04 01:06:43 [metrics.py:101] ", "APIServer pid=1"),
    ("(EngineCore_DP1 pid=77) INFO 05-04 01:06:43 [metrics.py:101] ", "EngineCore_DP1 pid=77"),
    ("> (APIServer pid=5) INFO 07-20 18:11:49 [loggers.py:271] Engine 004: ", "APIServer pid=5 engine 4"),
    ("[DP1] INFO 05-04 01:06:43 ", "DP1"),
    ("INFO 05-04 01:06:43 engine 1 ", "engine 1"),
    ("2025-10-20 03:02:22 INFO 31223 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] ", "DP3"),
    ("[2025-10-22 10:27:56 DP0 TP0] ", "DP0"),
    ("[2025-10-22 10:27:56 TP0] ", None),
    ("INFO 08-06 10:00:00 metrics.py:467] ", None),
    ("", None),
])
def test_producers_are_read_from_the_prefix(prefix, producer):
    assert producer_of(prefix) == producer


def test_moments_are_read_to_the_second():
    assert moment_of("(APIServer pid=1) INFO 05-04 01:06:43 [metrics.py:101] ") == "05-04 01:06:43"
    assert moment_of("[2025-10-22 10:27:56 DP0 TP0] ") == "2025-10-22 10:27:56"
    assert moment_of("SpecDecoding metrics: ") is None


def test_coarsened_series_never_pools_two_producers():
    parts = [EngineRun(source="vLLM log", drafted=400, accepted=320 if i % 2 else 200, producer=f"engine {i % 2}")
             for i in range(12)]
    run = EngineRun(source="vLLM log", drafted=4800, accepted=3120, series=parts)
    shown, size = coarsened(run, 4)
    assert size == 3 and [(g.producer, g.accepted) for g in shown.series] == [
        ("engine 0", 600), ("engine 1", 960), ("engine 0", 600), ("engine 1", 960)]


def test_the_load_frame_names_each_rows_producer():
    frame = load_frame([read_engine_run(WILD / "vllm-ascend-specdecoding-dp-engines-4.txt")])
    assert list(frame["producer"]) == ["APIServer pid=95669 engine 2", "APIServer pid=95673 engine 4"]
    assert list(frame["load"]) == [1, 1]


def test_drift_of_one_unnamed_series_reads_as_before():
    parts = [EngineRun(source="vLLM log", drafted=400, accepted=360 - 20 * i) for i in range(9)]
    found = drift(EngineRun(source="vLLM log", drafted=3600, accepted=sum(p.accepted for p in parts), series=parts))
    assert "in the first third of the series" in found.text and found.numbers["producers"] == 1


def test_the_series_chart_draws_each_producer_as_its_own_line():
    """The chart of a run over time: two engines' lines interleaved are two traces (each producer's own intervals
    joined), not one line zigzagging between 0.8 and 0.5; a run of one producer stays one trace."""
    from specviz.views.engine_plots import series_chart, series_frame

    run = read_engine_run(two_engines(lambda t: 200))
    frame = series_frame({"dp": run})
    assert set(frame.producer) == {"APIServer pid=1 engine 0", "APIServer pid=1 engine 1"}
    rates = [trace for trace in series_chart(frame).data if trace.xaxis == "x"]
    assert sorted(trace.name for trace in rates) == ["dp · APIServer pid=1 engine 0", "dp · APIServer pid=1 engine 1"]
    assert sorted(tuple(set(trace.y)) for trace in rates) == [(0.5,), (0.8,)]  # 200 / 400 and 320 / 400, constant
    one = read_engine_run(two_engines(lambda t: 200, range(TICKS), range(0)))
    assert [trace.name for trace in series_chart(series_frame({"one": one})).data if trace.xaxis == "x"] == ["one"]


def test_the_reports_say_whose_each_interval_is():
    """The run's report names its producers; a run of means (SGLang's DP ranks' Decode batch lines) lists each
    interval with the rank that printed it; one producer's series says nothing of producers."""
    from specviz.views.engine_report import mean_run_markdown, run_markdown

    text = run_markdown(read_engine_run(two_engines(lambda t: 200)))
    assert "printed by 2 concurrent producers (APIServer pid=1 engine 0, APIServer pid=1 engine 1)" in text
    ranks = read_reported(WILD / "sglang-decode-batch-dp-ranks-11.txt")
    lines = mean_run_markdown(ranks).splitlines()
    table = [line for line in lines[next(i for i, x in enumerate(lines) if x.startswith("| part")):] if
             line.startswith("| ")]
    assert table[0].startswith("| part | printed by |")
    assert {row.split(" | ")[1] for row in table[2:]} == {r.producer for r in ranks.series} and len(ranks.series) > 1
    assert "producers" not in run_markdown(read_engine_run(two_engines(lambda t: 200, range(TICKS), range(0))))
