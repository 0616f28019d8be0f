"""Is an engine's speculative sampling exact? Draw continuations through its HTTP API with speculation on and off,
test that both follow one law position by position (chi-square, rare categories merged, Holm-corrected), state the
bias the test would catch, and classify greedy divergences (docs/CONFORMANCE.md).

clients.py   llama.cpp's /completion, OpenAI-compatible /v1/completions
settings.py  a sampling setting          samples.py  the JSONL samples, read_samples
stats.py     the two-sample tests, Holm  power.py    power, detectable bias, the N a bias needs
greedy.py    greedy divergences: near-tie or structural
card.py      the report card, read_card  kit.py      run: draw, test, state
"""
from .card import Card, read_card
from .clients import LlamaCpp, OpenAI
from .kit import DEFAULT_N, DEFAULT_TOKENS, analyse, run
from .samples import read_samples
from .settings import Setting

__all__ = ["run", "analyse", "Card", "read_card", "read_samples", "LlamaCpp", "OpenAI", "Setting", "DEFAULT_N",
           "DEFAULT_TOKENS"]
