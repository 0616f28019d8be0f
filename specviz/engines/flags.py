"""The setting that fixes k in each engine (read from each engine's argument parser or config)."""
from __future__ import annotations


def engine_of(source: str) -> str:
    """The engine behind a detected format: vllm, llama.cpp, sglang, tensorrt-llm or specviz."""
    s = source.lower()
    for key, engine in (("vllm", "vllm"), ("llama", "llama.cpp"), ("sglang", "sglang"), ("tensorrt", "tensorrt-llm"),
                        ("trtllm", "tensorrt-llm"), ("specviz", "specviz")):
        if key in s:
            return engine
    return "unknown"


def flag_for(source: str, k: int) -> str:
    """How to run the engine with k drafts per step."""
    engine = engine_of(source)
    if engine == "vllm":  # as docs/features/speculative_decoding/*.md start a server: --speculative-config JSON
        return f"""--speculative-config '{{"num_speculative_tokens": {k}, ...}}' (keep your method and model keys)"""
    if engine == "llama.cpp":  # common/arg.cpp: --spec-draft-n-max (the old --draft-max / --draft is removed)
        return f"--spec-draft-n-max {k} (builds before the rename: --draft-max {k})"
    if engine == "sglang":  # a chain: num_draft_tokens = num_steps + 1 (the verified root included)
        return (f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}")
    if engine == "tensorrt-llm":  # TorchLlmArgs.speculative_config.max_draft_len, via --extra_llm_api_options
        return f"speculative_config: {{max_draft_len: {k}}} in the --extra_llm_api_options YAML"
    if engine == "specviz":
        return f"DecodeConfig(k={k})"
    return f"k = {k} (the engine's number of speculative tokens)"
