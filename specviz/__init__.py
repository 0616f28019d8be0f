"""specviz: an instrumented, exact speculative decoder and the tools to see what it does.

Notation: p is the target's distribution, q the draft's (Leviathan et al. 2023).
"""
from .config import EXAMPLE_PROMPTS, PRESETS, DecodeConfig
from .sweep import best_k, summarize, sweep
from .decoder import Decoding, autoregressive_generate, speculative_generate
from .drafters import Drafter, ModelDrafter, PromptLookupDrafter, Proposal
from .models import DEFAULT_DRAFT, DEFAULT_TARGET, check_tokenizers, list_drafters, list_models, load_drafter, load_model
from .ngram import NGramDrafter, NGramModel
from .trace import Round, Summary, Trace

__all__ = [
    "EXAMPLE_PROMPTS", "sweep", "summarize", "best_k", "PRESETS", "DecodeConfig", "Decoding", "autoregressive_generate", "speculative_generate",
    "Drafter", "ModelDrafter", "PromptLookupDrafter", "Proposal", "check_tokenizers", "list_models",
    "load_model", "list_drafters", "load_drafter", "DEFAULT_TARGET", "DEFAULT_DRAFT", "Round", "Summary", "Trace", "NGramDrafter", "NGramModel",
]
