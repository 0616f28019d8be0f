"""Experiments on the core that return DataFrames: the k sweep, k policies, losslessness, the distillation
lab, drafts compared, and the benchmarks (``python -m specviz.labs.bench``). No gradio, no plotly."""
