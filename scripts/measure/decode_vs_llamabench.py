"""specviz's one-token decode of the bundled target against llama-bench's on the same f32 weights, interleaved.

    .venv/bin/python scripts/measure/decode_vs_llamabench.py [--rounds 7] [--threads 2] [--tokens 64]

llama-bench measures llama.cpp's pure decoding (`-p 0 -n N`: N one-token decodes after an empty prompt, no HTTP, no
sampling), which is faster than a llama-server request; this puts specviz's equivalents beside it, each round
alternating which goes first:
  llama-bench      llama-bench -m target-f32.gguf -p 0 -n N -t THREADS -r 1 (its tg tokens/s)
  ours-forward     N one-token passes of the lean forward (CachedLM.feed after a one-token prompt), no sampling
  ours-ar          specviz.autoregressive_generate: the decoder, greedy, N tokens (prompt pass and sampling included)
  ours-ar-torch    the same on the lean forward's torch layers (specviz.runtime.native.disabled)
Needs: llama.cpp built (--llama-cpp, default the one vendored in /work/ext/llama_cpp_python-*/vendor/llama.cpp) and
the GGUF of scripts/measure/llamacpp_convert.py (--gguf). Takes about a minute. Writes nothing: it prints.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from llamacpp_convert import default_llama_cpp  # noqa: E402


def llama_bench(bin_dir: Path, gguf: Path, n: int, threads: int) -> float:
    out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(gguf), "-p", "0", "-n", str(n), "-t", str(threads),
                          "-r", "1", "-o", "json"], capture_output=True, text=True, check=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--gguf", type=Path, default=Path("/work/ext/gguf/target-f32.gguf"))
    ap.add_argument("--llama-cpp", type=Path, default=default_llama_cpp())
    args = ap.parse_args(argv)

    import torch

    from specviz import autoregressive_generate
    from specviz.config import EXAMPLE_PROMPTS, DecodeConfig
    from specviz.models import DEFAULT_TARGET, load_model
    from specviz.runtime import native
    from specviz.runtime.lm import CachedLM

    torch.set_num_threads(args.threads)
    n, bin_dir = args.tokens, args.llama_cpp / "build" / "bin"
    target, tok = load_model(DEFAULT_TARGET, device="cpu")
    prompt = tok(EXAMPLE_PROMPTS[0], return_tensors="pt").input_ids
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=n, record=False)

    def forward() -> float:
        lm = CachedLM(target)
        lm.feed([0])
        t0 = time.perf_counter()
        for i in range(n):
            lm.feed([1 + i])
        return n / (time.perf_counter() - t0)

    def ar(torch_layers=False):
        def run() -> float:
            with native.disabled() if torch_layers else contextlib.nullcontext():
                t0 = time.perf_counter()
                tokens = len(autoregressive_generate(target, prompt, cfg).new_tokens)
                return tokens / (time.perf_counter() - t0)
        return run

    fns = {"llama-bench": lambda: llama_bench(bin_dir, args.gguf, n, args.threads), "ours-forward": forward,
           "ours-ar": ar(), "ours-ar-torch": ar(torch_layers=True)}
    print(f"the lean forward's layers: {'in C' if native.enabled() else native.unavailable()}; {args.threads} threads, "
          f"{n} tokens, {args.rounds} rounds", flush=True)
    with torch.inference_mode():
        for fn in fns.values():
            fn()  # warm-up
        got = {name: [] for name in fns}
        names = list(fns)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                got[name].append(fns[name]())
    print(f"{'method':<15}{'median':>9}{'min':>9}{'max':>9}  tokens/s")
    for name, xs in got.items():
        print(f"{name:<15}{statistics.median(xs):9.1f}{min(xs):9.1f}{max(xs):9.1f}")
    lb = statistics.median(got["llama-bench"])
    for name in names[1:]:
        print(f"{name} / llama-bench: {statistics.median(got[name]) / lb:.2f}x (medians)")


if __name__ == "__main__":
    main()
