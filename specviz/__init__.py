"""specviz: an instrumented, exact speculative decoder and the tools to see what it does.

Notation: p is the target's distribution, q the draft's (Leviathan et al. 2023).
"""
from .batch import autoregressive_generate_batch, speculative_generate_batch
from .compare import compare
from .config import EXAMPLE_PROMPTS, PRESETS, DecodeConfig
from .decoder import Decoding, autoregressive_generate, speculative_generate
from .distill import distill, iter_distill
from .drafters import Drafter, ModelDrafter, PromptLookupDrafter, Proposal
from .lab_distill import distill_lab, fresh_draft
from .labs import compare_policies, per_position, policy_summary, position_rows
from .lossless import fit_table, lossless_lab
from .models import (DEFAULT_DRAFT, DEFAULT_TARGET, check_tokenizers, list_drafters, list_models, load_drafter,
                     load_model)
from .ngram import NGramDrafter, NGramModel
from .sweep import best_k, iter_sweep, summarize, sweep
from .trace import Counts, Round, Summary, Trace

__all__ = [
    "DecodeConfig", "PRESETS", "EXAMPLE_PROMPTS",
    "speculative_generate", "autoregressive_generate", "Decoding",
    "speculative_generate_batch", "autoregressive_generate_batch",
    "Drafter", "ModelDrafter", "PromptLookupDrafter", "Proposal", "NGramDrafter", "NGramModel",
    "load_model", "load_drafter", "list_models", "list_drafters", "check_tokenizers", "DEFAULT_TARGET", "DEFAULT_DRAFT",
    "Trace", "Round", "Summary", "Counts",
    "sweep", "iter_sweep", "summarize", "best_k", "position_rows", "per_position", "compare_policies", "policy_summary",
    "lossless_lab", "fit_table", "distill", "iter_distill", "distill_lab", "fresh_draft", "compare",
]
