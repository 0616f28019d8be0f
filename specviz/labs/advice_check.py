"""The advice checked against a measurement: does ``specviz.engines.advise``, given a specviz run's per-position
counts (read as an engine's, ``engines.specviz_trace``) and this machine's measured costs (``labs.hardware``),
pick the k that the k sweep (``labs.sweep``) measures as fastest on the same pair, prompts and settings?

The sweep runs every k with the autoregressive baseline interleaved; its per-position counts at the largest k
become one EngineRun (a greedy draft proposes the same first i tokens whatever k is, so the run at the largest k
covers every smaller one); the hardware lab times v(n) for n = 1..k_max + 1 and c. Two advised k: the i.i.d. fit's
(Leviathan's curve at the fitted alpha, any k) and the measured curve's (1 + the sum of the marginal rates).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..config import DecodeConfig
from ..engines import Advice, EngineRun, advise, total
from ..engines.specviz_trace import trace_run
from . import hardware
from .sweep import best_k, iter_sweep, summarize

AGREE = 1  # "within one step": |advised k - measured k| <= 1


@dataclass(frozen=True)
class AdviceCheck:
    summary: pd.DataFrame  # the sweep's summary per k (``sweep.summarize``), with speedup_median (paired runs)
    sweep_best_k: int  # the k of the highest measured speedup (pooled over the runs, as the sweep reports it)
    run: EngineRun  # the sweep's runs at the largest k, as one engine run
    hardware: hardware.Hardware
    advice: Advice

    @property
    def agrees(self) -> bool:
        """Both advised k within AGREE of the measured best k."""
        advised = [self.advice.best_k] + ([self.advice.best_k_measured] if self.advice.best_k_measured else [])
        return all(abs(k - self.sweep_best_k) <= AGREE for k in advised)

    def verdict(self) -> str:
        a = self.advice
        return (f"sweep (measured) best k = {self.sweep_best_k}; advice best k = {a.best_k} (i.i.d. fit, alpha "
                f"{a.alpha:.3f}, range {a.best_k_range[0]}..{a.best_k_range[1]}), measured curve's best k = "
                f"{a.best_k_measured}: " + ("AGREE within one step" if self.agrees else "DISAGREE by more than one step")
                + f" (the median paired speedup's best k: {int(best_k(self.summary, 'speedup_median').k.iloc[0])})")


def paired_medians(runs: pd.DataFrame) -> pd.Series:
    """Per k, the median over prompts and repeats of one run's speedup over the baseline run it was paired with: a
    load burst during one baseline or one run moves it less than it moves the pooled speedup."""
    base = runs[runs.draft == ""][["prompt", "repeat", "new_tokens", "seconds"]]
    both = runs[runs.draft != ""].merge(base, on=["prompt", "repeat"], suffixes=("", "_base"))
    one = (both.new_tokens / both.seconds) / (both.new_tokens_base / both.seconds_base)
    return one.groupby(both.k).median()


def advice_check(target, draft, prompts: list, ks=range(1, 11), cfg: DecodeConfig | None = None, repeats: int = 1,
                 hw_repeats: int = 7, draft_name: str = "draft") -> AdviceCheck:
    """The sweep over ``ks`` (``repeats`` times), then the hardware lab on the first prompt, then the advice."""
    cfg, ks = cfg or DecodeConfig(temperature=0.0, max_new_tokens=64), list(ks)
    rows, runs = [], []
    for row, trace in iter_sweep(target, {draft_name: draft}, prompts, ks, cfg, repeats):
        rows.append(row)
        if trace is not None and row["k"] == ks[-1]:
            runs.append(trace_run(trace))
    frame = pd.DataFrame(rows)
    summary = summarize(frame)
    summary["speedup_median"] = summary.k.map(paired_medians(frame))
    prompt = prompts[0][0].tolist()
    hw = hardware.measure(target, draft, prompt, rows=range(1, ks[-1] + 2), repeats=hw_repeats)
    run = total(runs, keep_series=False)
    advice = advise(run, hw.cost, max_k=ks[-1])
    return AdviceCheck(summary=summary, sweep_best_k=int(best_k(summary).k.iloc[0]), run=run, hardware=hw,
                       advice=advice)
