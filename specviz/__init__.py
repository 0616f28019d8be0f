"""specviz: an instrumented, exact speculative decoder and the tools to see what it does.

Notation: p is the target's distribution, q the draft's (Leviathan et al. 2023).
The core (this folder's modules) knows nothing of the three wings built on it: ``specviz.labs``
(experiments -> DataFrames), ``specviz.views`` (DataFrame -> Figure, Trace -> HTML) and ``specviz.app``
(the gradio app); see docs/ARCHITECTURE.md.
"""
from importlib import import_module

# where each public name lives: imported on first use (PEP 562), so ``import specviz`` costs nothing and a program
# that decodes never loads pandas, scipy or the labs it does not call
_HOMES = {
    ".batch": ("autoregressive_generate_batch", "speculative_generate_batch"),
    ".config": ("EXAMPLE_PROMPTS", "PRESETS", "DecodeConfig", "TreeConfig"),
    ".decoder": ("Decoding", "autoregressive_generate", "speculative_generate"),
    ".drafts.cross": ("CrossDrafter", "CrossTokenizerDrafter", "IntersectionDrafter"),
    ".drafts.distill": ("distill", "iter_distill"),
    ".drafts.drafter": ("Drafter", "ModelDrafter", "PromptLookupDrafter", "Proposal"),
    ".drafts.ngram": ("NGramDrafter", "NGramModel"),
    ".drafts.trained.check": ("check_trained_draft",),
    ".drafts.trained.coverage": ("vocab_coverage",),
    ".engines": ("EngineRun", "diagnose", "read_engine_run"),
    ".labs.compare": ("compare",),
    ".labs.distill_lab": ("distill_lab", "fresh_draft"),
    ".labs.lossless": ("fit_table", "lossless_lab"),
    ".labs.policies": ("compare_policies", "policy_summary"),
    ".labs.rules": ("rules_lab",),
    ".labs.sweep": ("best_k", "iter_sweep", "per_position", "position_rows", "summarize", "sweep"),
    ".models": ("DEFAULT_DRAFT", "DEFAULT_TARGET", "check_tokenizers", "list_drafters", "list_models", "load_drafter",
                "load_model"),
    ".trace": ("Counts", "Round", "Summary", "Trace"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
_SUBPACKAGES = ("conformance",)  # specviz.conformance.run: the engine conformance kit


def __getattr__(name: str):
    if name in _HOME_OF:
        value = getattr(import_module(_HOME_OF[name], __name__), name)
    elif name.startswith("__"):  # dunders that tools probe for (__wrapped__ ...)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:  # a module of the package (specviz.conformance, specviz.runtime ...), as an eager import made them
        try:
            value = import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBPACKAGES))


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
