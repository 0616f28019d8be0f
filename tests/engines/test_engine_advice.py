"""The cost model (typed in, or from llama-bench), the advice on k and its flag, and the command line."""
from pathlib import Path

import pytest

from specviz.engines import CostModel, EngineRun, advice_text, advise, cost_from_llama_bench, parse_verify
from specviz.engines.__main__ import main
from specviz.engines.flags import flag_for

FIXTURES = Path(__file__).parent / "fixtures"
LLAMA = FIXTURES / "llamacpp"
TWO_MODELS = """| model | size | params | backend | threads | test | t/s |
| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |
| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA | 8 | pp1 | 100.00 ± 1.00 |
| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA | 8 | pp4 | 380.00 ± 2.00 |
| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA | 8 | tg128 | 100.00 ± 0.50 |
| llama 1B Q8_0 | 1.22 GiB | 1.24 B | CUDA | 8 | tg128 | 400.00 ± 3.00 |

build: 0c1e570 (1)
"""


def test_verify_cost_between_and_beyond_the_points():
    cost = CostModel(c=0.1, verify=((1, 1.0), (2, 1.1), (4, 1.3)))
    assert cost.v(3) == pytest.approx(1.2) and cost.v(8) == pytest.approx(1.7)  # the last slope, 0.1 a row
    assert cost.step_cost(3) == pytest.approx(3 * 0.1 + 1.3) and cost.step_cost(0) == 1.0
    assert CostModel(c=0.1).v(9) == 1.0  # Leviathan's theorem: a verify pass costs one forward
    assert CostModel(c=0.1, verify=1.25).v(5) == 1.25
    assert parse_verify("1:1,2:1.05,8:1.3") == ((1, 1.0), (2, 1.05), (8, 1.3))
    for bad in ({"c": -0.1}, {"c": 0.1, "verify": ((2, 1.0), (1, 1.0))}, {"c": 0.1, "verify": ((1, 0.0),)}):
        with pytest.raises(ValueError):
            CostModel(**bad)


def test_llama_bench_markdown_of_one_model_needs_c():
    with pytest.raises(ValueError, match="give c"):
        cost_from_llama_bench(LLAMA / "bench.md")
    cost = cost_from_llama_bench(LLAMA / "bench.md", c=0.2)
    # v(n) = n x tg t/s / pp n t/s: tg64 215.02, pp2 303.11, pp16 1048.17
    assert cost.v(2) == pytest.approx(2 * 215.02 / 303.11) and cost.v(16) == pytest.approx(16 * 215.02 / 1048.17)
    assert cost.c == 0.2


@pytest.mark.parametrize("name, rows, tg, pp", [("bench.json", 4, 210.4196, 532.029729),
                                               ("bench.csv", 8, 210.745566, 734.852315)])
def test_llama_bench_json_and_csv(name, rows, tg, pp):
    cost = cost_from_llama_bench(LLAMA / name, c=0.2)
    assert cost.v(rows) == pytest.approx(rows * tg / pp)


def test_llama_bench_with_a_draft_model_gives_c():
    cost = cost_from_llama_bench(TWO_MODELS)
    assert cost.c == pytest.approx(100 / 400)  # the draft's step over the target's: 1/400 s over 1/100 s
    assert cost.v(4) == pytest.approx(4 * 100 / 380)


def test_advice_by_hand():
    # alpha = (800 + 640 + 512) / (1000 + 800 + 640) = 0.8 exactly; c = 0.05, v = 1:
    # speedup (1 - 0.8^(k+1)) / (0.2 (0.05 k + 1)) = 3.0396, 3.0823, 3.0921, 3.0780 at k = 6, 7, 8, 9
    run = EngineRun(source="vLLM log", drafted=3000, accepted=1952, steps=1000, k=3, accepted_per_pos=(800, 640, 512))
    advice = advise(run, CostModel(c=0.05), max_k=12)
    assert advice.alpha == pytest.approx(0.8) and advice.best_k == 8
    lo, hi = advice.best_k_range
    assert lo <= 8 <= hi and lo < hi  # 1000 steps leave alpha a few hundredths wide: the best k is not sharp
    # the measured curve, up to k = 3: (1 + 0.8 + 0.64 + 0.512) / 1.15 = 2.567 beats 2.44 / 1.10 = 2.218
    assert advice.best_k_measured == 3
    assert advice.table.loc[advice.table.k == 8, "speedup_iid"].iloc[0] == pytest.approx(3.09, abs=0.06)
    assert advice.table["speedup_measured"].iloc[3:].isna().all()  # not measured beyond k = 3
    assert '"num_speculative_tokens": 8' in advice.flag


def test_advice_text_says_which_curve_it_rests_on():
    fits = EngineRun(source="vLLM log", drafted=3000, accepted=1952, steps=1000, k=3, accepted_per_pos=(800, 640, 512))
    assert "from the i.i.d. fit" in advice_text(advise(fits, CostModel(c=0.05)))
    rejected = EngineRun(source="vLLM log", drafted=3000, accepted=1300, steps=1000, k=3, accepted_per_pos=(800, 400, 100))
    assert "from the measured curve" in advice_text(advise(rejected, CostModel(c=0.2)))


def test_no_k_pays_when_drafting_is_dear():
    run = EngineRun(source="SGLang meta_info", drafted=300, accepted=30, steps=100, k=3, accepted_per_pos=(20, 8, 2))
    advice = advise(run, CostModel(c=0.9))
    assert advice.best_k == 0 and "off" in advice.flag


def test_advice_needs_steps():
    with pytest.raises(ValueError, match="only totals"):
        advise(EngineRun(source="t", drafted=17, accepted=10), CostModel(c=0.1))


@pytest.mark.parametrize("source, words", [
    ("vLLM log", """--speculative-config '{"num_speculative_tokens": 4"""),
    ("Prometheus scrape (llamacpp)", "--spec-draft-n-max 4"),
    ("SGLang meta_info", "--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5"),
    ("TensorRT-LLM per-request stats", "max_draft_len: 4"),
    ("specviz trace", "DecodeConfig(k=4)"),
])
def test_each_engine_gets_its_own_flag(source, words):
    assert words in flag_for(source, 4)


def test_command_line(capsys):
    assert main([str(FIXTURES / "vllm_cliff.log"), "--c", "0.05", "--v", "1:1,9:1.4"]) == 0
    out = capsys.readouterr().out
    assert "format: vLLM log" in out and "counts: drafted 11520, accepted 4616, steps 1440, k 8" in out
    assert "[problem] cliff: position 6" in out and "advice for vLLM log:" in out and "set it with:" in out


def test_command_line_compares_runs_and_reads_llama_bench(capsys):
    greedy, sampled = FIXTURES / "sglang_greedy.json", FIXTURES / "sglang_sampled.json"
    args = [str(greedy), str(sampled), "--separate", "--temperature", "0", "--temperature", "0.7",
            "--cost", str(LLAMA / "bench.md"), "--c", "0.1"]
    assert main(args) == 0
    assert "temperature_collapse" in capsys.readouterr().out


def test_command_line_errors_are_readable(capsys):
    assert main([str(FIXTURES / "README.md")]) == 2
    assert "error: could not read" in capsys.readouterr().err
    assert main([str(FIXTURES / "vllm_healthy.log"), "--v", "1.2"]) == 2  # --v without --c
    assert main([str(FIXTURES / "no-such.log")]) == 2
    assert "no-such.log: no such file" in capsys.readouterr().err


def test_command_line_prices_by_the_drafter_kind(capsys):
    log = [str(FIXTURES / "vllm_cliff.log"), "--c", "0.05"]
    assert main(log) == 0
    sequential = capsys.readouterr().out
    assert main(log + ["--drafter", "block"]) == 0
    block = capsys.readouterr().out
    assert "a block drafter" in block and "a block drafter" not in sequential
    with pytest.raises(SystemExit):  # argparse refuses a kind it does not know
        main(log + ["--drafter", "tree"])
