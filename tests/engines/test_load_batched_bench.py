"""llama-batched-bench's table read as rows: on its real output (tests/engines/fixtures/llama-batched-bench.txt,
printed by `llama-batched-bench -m target-f32.gguf -c 2304 -b 2048 -ub 512 -npp 128 -ntg 16 -npl 1,2,4,8,16 -t 2
-tb 2` on a loaded 2-core host, llama.cpp as llama-cpp-python 0.3.36 vendors it), and a table that does not add up
or is missing refused with what is wrong."""
from pathlib import Path

import pytest

from specviz.engines.llamacpp_load import read_batched_bench

RECORDED = Path(__file__).parent / "fixtures" / "llama-batched-bench.txt"


def test_the_recorded_table_reads_row_by_row():
    rows = read_batched_bench(RECORDED.read_text())
    assert [r["batch"] for r in rows] == [1, 2, 4, 8, 16]
    assert {(r["pp"], r["tg"]) for r in rows} == {(128, 16)}
    assert [r["n_kv"] for r in rows] == [144, 288, 576, 1152, 2304]  # B x (PP + TG)
    assert rows[1] == dict(pp=128, tg=16, batch=2, n_kv=288, t_pp=0.814, s_pp=314.62, t_tg=0.719, s_tg=44.51,
                           t=1.533, s=187.91)
    assert rows[4]["s_tg"] == pytest.approx(16 * 16 / 16.556, abs=0.01)  # B x TG / T_TG


def test_a_row_that_does_not_add_up_or_no_table_is_refused():
    text = RECORDED.read_text().replace("|    44.51 |", "|    54.51 |")
    with pytest.raises(ValueError, match=r"S_TG 54.51 is not B x TG / T_TG \(2 x 16 / 0.719\)"):
        read_batched_bench(text)
    with pytest.raises(ValueError, match="no llama-batched-bench table"):
        read_batched_bench("llama_batched_bench: n_kv_max = 4096\n")
    header = "\n".join(RECORDED.read_text().splitlines()[:5])
    with pytest.raises(ValueError, match="has no rows"):
        read_batched_bench(header)
