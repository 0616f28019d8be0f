"""specviz: an instrumented, exact speculative decoder and the tools to see what it does.

Notation: p is the target's distribution, q the draft's (Leviathan et al. 2023).
The core (this folder's modules) knows nothing of the three wings built on it: ``specviz.labs``
(experiments -> DataFrames), ``specviz.views`` (DataFrame -> Figure, Trace -> HTML) and ``specviz.app``
(the gradio app); see docs/ARCHITECTURE.md.
"""
from . import conformance  # noqa: F401 (specviz.conformance.run: the engine conformance kit)
from .batch import autoregressive_generate_batch, speculative_generate_batch
from .config import EXAMPLE_PROMPTS, PRESETS, DecodeConfig, TreeConfig
from .decoder import Decoding, autoregressive_generate, speculative_generate
from .drafts.cross import CrossDrafter, CrossTokenizerDrafter, IntersectionDrafter
from .drafts.distill import distill, iter_distill
from .drafts.drafter import Drafter, ModelDrafter, PromptLookupDrafter, Proposal
from .drafts.ngram import NGramDrafter, NGramModel
from .drafts.trained.check import check_trained_draft
from .drafts.trained.coverage import vocab_coverage
from .engines import EngineRun, diagnose, read_engine_run
from .labs.compare import compare
from .labs.distill_lab import distill_lab, fresh_draft
from .labs.lossless import fit_table, lossless_lab
from .labs.policies import compare_policies, policy_summary
from .labs.rules import rules_lab
from .labs.sweep import best_k, iter_sweep, per_position, position_rows, summarize, sweep
from .models import DEFAULT_DRAFT, DEFAULT_TARGET, check_tokenizers, list_drafters, list_models, load_drafter, load_model
from .trace import Counts, Round, Summary, Trace

__all__ = [
    "DecodeConfig", "TreeConfig", "PRESETS", "EXAMPLE_PROMPTS",
    "speculative_generate", "autoregressive_generate", "Decoding",
    "speculative_generate_batch", "autoregressive_generate_batch",
    "Drafter", "ModelDrafter", "PromptLookupDrafter", "Proposal", "NGramDrafter", "NGramModel",
    "CrossTokenizerDrafter", "CrossDrafter", "IntersectionDrafter",
    "load_model", "load_drafter", "list_models", "list_drafters", "check_tokenizers", "DEFAULT_TARGET", "DEFAULT_DRAFT",
    "Trace", "Round", "Summary", "Counts", "EngineRun", "read_engine_run", "diagnose",
    "sweep", "iter_sweep", "summarize", "best_k", "position_rows", "per_position", "compare_policies", "policy_summary",
    "check_trained_draft", "vocab_coverage",
    "lossless_lab", "fit_table", "distill", "iter_distill", "distill_lab", "fresh_draft", "compare", "rules_lab",
]
