"""Hub models people compare, offered by the app where the hub is reachable (``SPECVIZ_ALLOW_MODELS``)."""
from __future__ import annotations

# Hub pairs people compare: target -> drafts that share its tokenizer.
HUB_PRESETS: dict[str, tuple[str, ...]] = {
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": ("HuggingFaceTB/SmolLM2-135M-Instruct",),
    "Qwen/Qwen2.5-1.5B-Instruct": ("Qwen/Qwen2.5-0.5B-Instruct",),
    "Qwen/Qwen2.5-7B-Instruct": ("Qwen/Qwen2.5-0.5B-Instruct",),
    "openai-community/gpt2-large": ("distilbert/distilgpt2", "openai-community/gpt2"),
    "openai-community/gpt2-xl": ("distilbert/distilgpt2", "openai-community/gpt2"),
    "EleutherAI/pythia-1.4b": ("EleutherAI/pythia-70m",),
}
# Cross-family hub pairs: the draft has another tokenizer, so it drafts through the target's (``specviz.drafts.cross``:
# re-tokenized text when greedy, the shared-token q when sampling). Listed with the presets above.
CROSS_PRESETS: dict[str, tuple[str, ...]] = {
    "Qwen/Qwen2.5-1.5B-Instruct": ("HuggingFaceTB/SmolLM2-135M-Instruct",),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": ("Qwen/Qwen2.5-0.5B-Instruct",),
    "openai-community/gpt2-large": ("EleutherAI/pythia-70m",),
}
