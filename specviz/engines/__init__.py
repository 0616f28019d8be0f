"""specviz.engines: bring your own engine's run. Read what vLLM, llama.cpp, SGLang or TensorRT-LLM reported
about their speculative decoding (logs, /metrics scrapes, per-request metrics in responses, printed summaries, or
a specviz trace), diagnose it and advise the k to run with.

    run = read_engine_run("vllm.log")          # EngineRun: counts, the format named in run.source
    rates(run)                                 # every rate, with its definition
    diagnose(run, cost=CostModel(c=0.05))      # [Finding]: alpha, the per-position curve, cliff, mismatch, ...
    advise(run, CostModel(c=0.05))             # Advice: the table of k, the best k, the flag that sets it
    advise(run, cost, drafter="block")         # priced by the drafter's kind: sequential, block, ngram (DRAFTERS)
    compare_runs(before, after)                # per position: which rates moved, with intervals
    read_reported("sglang.log")                # EngineRun, or a MeanRun where the output gives means, not counts
    [s.load for s in run.series]               # Load: running and queued requests, tokens/s, per interval
    diagnose_load({"on": run, "off": other})   # [Finding]: where speculation stops paying under load, drift, advice

Counts are what the engines report; a field one does not report is None, and whatever a parser derived is said
in run.notes. The parsers cite the engine source they follow, one module per format. Imports the core only.
"""
from .advice import Advice, advice_text, advise
from .compare_runs import Comparison, compare_runs, comparison_text
from .cost import DRAFTERS, CostModel, drafter_kind, parse_verify
from .doctor import diagnose
from .finding import Finding
from .fit import AlphaFit, Positions, fit_alpha, positions
from .llamabench import cost_from_llama_bench
from .load_doctor import diagnose_load, load_frame
from .means import MeanRun, Spread, mean_figures, underived
from .read import FORMATS, detect_format, read_engine_run, read_reported
from .run import EngineRun, Load, Rate, load_figures, rates, total

__all__ = [
    "EngineRun", "Rate", "rates", "total", "read_engine_run", "detect_format", "FORMATS",
    "Load", "load_figures", "MeanRun", "Spread", "mean_figures", "underived", "read_reported",
    "diagnose", "Finding", "fit_alpha", "positions", "AlphaFit", "Positions",
    "advise", "Advice", "advice_text", "CostModel", "parse_verify", "cost_from_llama_bench",
    "DRAFTERS", "drafter_kind", "compare_runs", "Comparison", "comparison_text",
    "load_frame", "diagnose_load",
]
