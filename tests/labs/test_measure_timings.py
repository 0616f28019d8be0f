"""The measurement scripts' shared figure printer (scripts/measure/timings.py): median [min-max] of repeated figures,
the one the batched-vs-llama.cpp and Gemma recipe scripts print their rounds with."""
import importlib.util
from pathlib import Path

import pytest

MEASURE = Path(__file__).resolve().parents[2] / "scripts" / "measure"


def load(name: str, monkeypatch):
    """A script of scripts/measure loaded by path, its folder on the path as when it runs (it imports its siblings)."""
    monkeypatch.syspath_prepend(str(MEASURE))
    spec = importlib.util.spec_from_file_location(name, MEASURE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spread_is_the_median_and_range_in_the_format_asked(monkeypatch):
    spread = load("timings", monkeypatch).spread
    assert spread([3.0, 1.0, 2.0]) == "2.0 [1.0-3.0]"
    assert spread([4.0, 1.0, 2.0, 10.0], ".2f") == "3.00 [1.00-10.00]"  # even count: the mean of the middle two
    assert spread([7.25]) == "7.2 [7.2-7.2]"  # one figure: its own median and range (7.25 rounds half to even)


def test_spread_refuses_no_figures(monkeypatch):
    with pytest.raises(ValueError, match="at least one figure"):
        load("timings", monkeypatch).spread([])


@pytest.mark.parametrize("script", ["batched_vs_llamacpp", "gemma_recipe"])
def test_the_scripts_print_with_the_shared_spread(script, monkeypatch):
    module = load(script, monkeypatch)
    assert Path(module.spread.__code__.co_filename).resolve() == MEASURE / "timings.py"  # no copy of its own
    assert module.spread([1.0, 5.0, 2.0], ".2f") == "2.00 [1.00-5.00]"


def test_draft_ranking_pools_seeds_and_pairs_its_prompts(monkeypatch):
    """scripts/measure/gemma_draft_acceptance.py: tau is all new tokens over all rounds; its standard error is the
    delta method's for that ratio over prompts; a later draft's difference is of the two taus, its error paired prompt
    by prompt (hand-computed: first 19/11, residuals +-15/11 over 11; other 21/11, residuals +-27/11)."""
    acceptance = load("gemma_draft_acceptance", monkeypatch)
    first, other = [(10, 5), (9, 6)], [(12, 5), (9, 6)]  # tokens a round 2.0, 1.5 and 2.4, 1.5
    assert acceptance.report("a", first, first).split()[1:5] == ["tau", "1.727", "(se", "0.248"]
    line = acceptance.report("b", other, first)
    assert "tau 1.909 (se 0.446 over 2 prompts)" in line and line.endswith("vs first +0.182 (se 0.198), won 1/2")
    assert not set(acceptance.EVERYDAY) & set(load("gemma_vs_llamacpp", monkeypatch).PROMPTS)


def test_median_interval_brackets_the_median_and_narrows_with_more_figures(monkeypatch):
    """The median of the ratios and a 95% bootstrap interval around it: the same text for the same figures (a fixed
    seed), one figure its own interval, and ten times the figures of the same spread a narrower interval."""
    median_interval = load("timings", monkeypatch).median_interval
    few = [1.2, 1.5, 1.3, 1.7, 1.1, 1.6, 1.4, 1.45, 1.38, 1.52]
    text = median_interval(few)
    assert text == median_interval(few) and text.startswith("1.42x [")
    lo, hi = (float(v) for v in text[text.index("[") + 1: -1].split("-"))
    assert lo < 1.42 < hi
    lo10, hi10 = (float(v) for v in median_interval(few * 10)[7:-1].split("-"))
    assert lo <= lo10 < 1.42 < hi10 <= hi and hi10 - lo10 < hi - lo
    assert median_interval([1.25]) == "1.25x [1.25-1.25]"
    with pytest.raises(ValueError, match="at least one figure"):
        median_interval([])


def test_the_drafts_benchmark_ends_with_the_engine_figures_from_its_own_rows(monkeypatch):
    """gemma_drafts_vs_llamacpp.py's last lines: specviz's autoregressive median over llama-server's at each
    temperature and over llama-bench's, and the two peak residents (hand-computed: 100 / 40, 100 / 50, 420 / 350)."""
    import argparse

    drafts = load("gemma_drafts_vs_llamacpp", monkeypatch)
    args = argparse.Namespace(temperatures=[0.0, 0.8], max_new_tokens=64)
    rows = {(0.0, "specviz autoregressive"): [(90.0,), (100.0,), (120.0,)], (0.0, "llama-server"): [(40.0,)],
            (0.8, "specviz autoregressive"): [(80.0,)], (0.8, "llama-server"): [(32.0,), (48.0,)],
            (0.0, "llama-bench tg64"): [(50.0,), (60.0,), (40.0,)]}
    said = drafts.engine_line(rows, args, 420.0, 350.0)
    assert said.splitlines() == [
        "specviz autoregressive: T=0 100.0 tok/s, 2.50x llama-server (40.0); T=0.8 80.0 tok/s, 2.00x llama-server "
        "(40.0); over llama-bench (50.0): T=0 2.00x, T=0.8 1.60x",
        "resident (peak): specviz 420 MB (this process, every side's draft loaded), llama-server 350 MB (1.20x)"]
    no_engine = drafts.engine_line({(0.0, "specviz autoregressive"): [(90.0,)]}, args, 420.0, float("nan"))
    assert no_engine.splitlines() == ["specviz autoregressive: T=0 90.0 tok/s",
                                      "resident (peak): specviz 420 MB (this process, every side's draft loaded)"]
