"""llama.cpp against specviz on the bundled pair, side by side in one run, greedy.

    .venv/bin/python scripts/measure/bench_llamacpp.py [--repeats 5] [--ks 4 6 8] [--threads 2] [--max-new-tokens 64]

Needs (scripts/measure/build_llamacpp.sh makes all of it once): the GGUF files of scripts/measure/llamacpp_convert.py
(--gguf, default /work/ext/gguf: target-f32.gguf, lite-f32.gguf) and llama.cpp's llama-server (--llama-cpp, default
the one vendored in /work/ext/llama_cpp_python-*/vendor/llama.cpp). Takes about 9 minutes on 2 cores at --repeats 5 (much
more on a busy machine: 2-thread runs of both engines stall when other work holds a core). Writes nothing: it
prints (redirect it into docs/benchmarks/).

Methods, on the 5 example and 5 held-out prompts (specviz.config: EXAMPLE_PROMPTS + HELDOUT_PROMPTS, as
specviz.labs.bench's "all"), interleaved prompt by prompt and repeat by repeat in an order rotated each turn:
  lc-ar            llama-server on the target alone
  lc-spec-kK       llama-server with `lite` as draft (--spec-type draft-simple --spec-draft-n-max K), one server a K
  lc-NGRAM-k6      llama-server with a model-free draft (--spec-type NGRAM: ngram-simple, ngram-cache; --lc-ngram)
  lc-lite+NGRAM-k6 both (--spec-type draft-simple,NGRAM with `lite`): the best llama.cpp can run is the fastest lc-*
  ours-ar          specviz.autoregressive_generate (the lean forward path, the decoder's default: its layer stack in C
                   where specviz.runtime.native builds, as here; else torch)
  torch-ar         the same on the lean forward's torch layers (specviz.runtime.native.disabled)
  ours-default-kK specviz.speculative_generate with specviz.models.DEFAULT_DRAFT at the default k: the library's
                   (DecodeConfig().k, 4) and the explorer's (specviz.config.DEFAULTS.k, 6), and at 12 (its best
                   greedy chain on the torch forward, docs/TREES.md); --default-ks
  ours-lite-k6     specviz.speculative_generate with `lite` at k = 6
  lcfwd-*          the same three with the target's (and lite's) forward run by llama.cpp itself, through
                   llama-cpp-python (specviz.runtime.llamacpp: the same libllama as the servers, LLAMA_CPP_LIB_PATH
                   set to their build), specviz keeping every decision; the feature draft reads llama.cpp's hidden
                   states
  slim-*           slim-ar and slim-lite-k6: specviz.slim (the decoder in numpy) on llama.cpp's forward of the same two
                   GGUF files, lite a slim.ModelDraft on its own llama.cpp sequence, the target file's EOS ids
  *-t0.8           (--temperatures 0.8) ours, lcfwd and slim rows at T = 0.8 (plain temperature sampling, seed per call)
All greedy unless marked, the same prompt ids (the bundled tokenizer's, BOS included, sent to llama.cpp as token ids), the same
token budget, EOS honoured by both, the same threads (torch.set_num_threads; llama.cpp -t and -td). Ours run with
DecodeConfig(record=False) (what generation needs; llama.cpp records nothing either). A call's tokens/s is its
tokens over its wall time: for llama.cpp the HTTP round trip of one /completion (prefill + decode; the server's own
timings are printed beside it), for ours the call of the decoder (prefill + decode), as specviz.labs.bench does.

It also checks that every greedy output equals ours-ar's (the target's own greedy text, through specviz; lcfwd-*
rows: lcfwd-ar's, the target's own greedy text on llama.cpp's forward; slim-* rows: slim-ar's) and prints
per-position acceptance at greedy for lite at k = 6: llama.cpp's (its /metrics counter of accepted tokens per draft
position, over its drafts), specviz's on the same prompts, and specviz's with its rounds aligned as llama.cpp's
(llama.cpp's first new token comes from the prompt pass, without a draft; specviz's first round drafts it).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from hostline import host_line, load_average  # noqa: E402
from llamacpp_convert import default_llama_cpp, post, server_command, start_server  # noqa: E402


@dataclass
class Row:
    tokens: int = 0
    seconds: float = 0.0
    per_call: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)  # llama.cpp: tokens/s from the server's own timings
    compared: int = 0
    differing: int = 0
    drafted: int = 0
    accepted: int = 0

    def add(self, n: int, s: float) -> None:
        self.tokens += n
        self.seconds += s
        self.per_call.append(n / s)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.per_call) if self.per_call else 0.0


def metrics(port: int) -> dict[str, float]:
    """/metrics as {name or name{labels}: value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def per_pos(m: dict[str, float]) -> dict[int, float]:
    pat = re.compile(r'llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\}')
    return {int(g.group(1)): v for key, v in m.items() if (g := pat.fullmatch(key))}


def spec_counts(m: dict[str, float]) -> tuple[float, float, float, dict[int, float]]:
    return (m.get("llamacpp:spec_decode_num_drafts_total", 0.0), m.get("llamacpp:spec_decode_num_draft_tokens_total", 0.0),
            m.get("llamacpp:spec_decode_num_accepted_tokens_total", 0.0), per_pos(m))


def fmt_pos(values) -> str:
    return " ".join(f"{v:.3f}" for v in values)


def floors(rows: dict, best: str, fastest: str, dks: list[str]) -> None:
    """The engine-grade floors, each by medians and by totals: specviz's autoregressive decode at least 0.8x
    llama.cpp's; the default draft above llama.cpp's best speculative setting; the default draft at least 2.0x (greedy)
    and 1.8x (T = 0.8) the fastest autoregressive baseline."""
    def both(a: str, b: str) -> tuple[float, float]:
        return rows[a].median / rows[b].median, rows[a].tok_s / rows[b].tok_s

    dk = "default-k6" if "default-k6" in dks else dks[0]
    checks = [("specviz AR / llama.cpp AR", both("ours-ar", "lc-ar"), 0.8, True),
              (f"ours-{dk} / llama.cpp's best ({best})", both(f"ours-{dk}", best), 1.0, False),
              (f"ours-{dk} / {fastest}", both(f"ours-{dk}", fastest), 2.0, True)]
    for name in rows:
        if name.startswith(f"ours-{dk}-t"):
            checks.append((f"{name} / {fastest}", both(name, fastest), 1.8, True))
    print("floors (medians, totals):")
    for what, (med, tot), floor, at_least in checks:
        met = min(med, tot) >= floor if at_least else min(med, tot) > floor
        print(f"  {what:<58}{med:6.2f}x {tot:6.2f}x  floor {'>=' if at_least else '>'} {floor}: "
              f"{'met' if met else 'MISSED'}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 6, 8], help="llama.cpp's draft lengths (6 is needed)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--gguf", type=Path, default=Path("/work/ext/gguf"))
    ap.add_argument("--llama-cpp", type=Path, default=default_llama_cpp())
    ap.add_argument("--port", type=int, default=18440)
    ap.add_argument("--lc-ngram", nargs="*", default=["ngram-simple", "ngram-cache"],
                    help="llama.cpp's model-free --spec-type values also run (alone and beside lite), k = 6")
    ap.add_argument("--default-ks", type=int, nargs="*", default=None,
                    help="k of the default draft's rows (default: the library's and the explorer's default k, and "
                         "12, its best greedy chain on the torch forward in docs/TREES.md)")
    ap.add_argument("--temperatures", type=float, nargs="*", default=[0.8],
                    help="sampled runs of ours and lcfwd beside the greedy ones (none: greedy only)")
    args = ap.parse_args(argv)
    print(f"# {host_line()}")
    print(f"# python {' '.join(sys.argv)}")
    if 6 not in args.ks:
        args.ks.append(6)

    import torch

    from specviz import autoregressive_generate, speculative_generate
    from specviz.config import DEFAULTS, EXAMPLE_PROMPTS, HELDOUT_PROMPTS, DecodeConfig
    from specviz.models import DEFAULT_DRAFT, DEFAULT_TARGET, drafter_for, load_model
    from specviz.runtime import lean_llama, llamacpp, lm, native, packed_linear

    os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(args.llama_cpp / "build" / "bin"))  # the servers' own libllama
    torch.set_num_threads(args.threads)
    if llamacpp.available():
        sys.exit(llamacpp.available())
    n = args.max_new_tokens
    target, tok = load_model(DEFAULT_TARGET, device="cpu")
    default_draft = drafter_for(target, DEFAULT_TARGET, DEFAULT_DRAFT, device="cpu")
    lite = drafter_for(target, DEFAULT_TARGET, "lite", device="cpu")
    default_ks = args.default_ks or sorted({DecodeConfig().k, DEFAULTS.k, 12})
    k_default = default_ks[0]
    texts = EXAMPLE_PROMPTS + HELDOUT_PROMPTS
    prompts = [tok(p, return_tensors="pt").input_ids for p in texts]

    bin_dir = args.llama_cpp / "build" / "bin"
    tgt, dft = args.gguf / "target-f32.gguf", args.gguf / "lite-f32.gguf"
    servers: dict[str, tuple[int, list[str]]] = {"lc-ar": (args.port, [])}
    for i, k in enumerate(sorted(args.ks)):
        servers[f"lc-spec-k{k}"] = (args.port + 1 + i, ["-md", str(dft), "--spec-type", "draft-simple",
                                                       "--spec-draft-n-max", str(k), "-td", str(args.threads)])
    for i, kind in enumerate(args.lc_ngram):  # llama.cpp's model-free drafts, and each beside lite
        for j, (label, extra) in enumerate(((f"lc-{kind}-k6", []), (f"lc-lite+{kind}-k6", ["-md", str(dft), "-td",
                                                                                        str(args.threads)]))):
            types = kind if not extra else f"draft-simple,{kind}"
            servers[label] = (args.port + 20 + 2 * i + j, extra + ["--spec-type", types, "--spec-draft-n-max", "6"])
    print("llama.cpp servers:")
    for name, (port, extra) in servers.items():
        print(f"  {name}: {' '.join(server_command(bin_dir, tgt, port, args.threads, extra))}")
    procs = {name: start_server(bin_dir, tgt, port, extra, threads=args.threads)
             for name, (port, extra) in servers.items()}

    def lc(name):
        port = servers[name][0]

        def run(ids):
            body = {"prompt": ids[0].tolist(), "n_predict": n, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                    "min_p": 0.0, "cache_prompt": False, "return_tokens": True}
            t0 = time.perf_counter()
            r = post(f"http://127.0.0.1:{port}/completion", body)
            s = time.perf_counter() - t0
            t = r["timings"]
            return r["tokens"], s, t["predicted_n"] / ((t["prompt_ms"] + t["predicted_ms"]) / 1000), \
                (t.get("draft_n", 0), t.get("draft_n_accepted", 0))
        return run

    def ours(draft, k, forward="auto", temperature=0.0, torch_layers=False):
        cfg = DecodeConfig(k=k, temperature=temperature, max_new_tokens=n, record=False)

        def run(ids):
            t0 = time.perf_counter()
            with torch.inference_mode(), (native.disabled() if torch_layers else contextlib.nullcontext()):
                tr = lm.on_path(forward, autoregressive_generate, target, ids, cfg) if draft is None else \
                    lm.on_path(forward, speculative_generate, target, draft, ids, cfg)
            s = time.perf_counter() - t0
            c = tr.counts()
            return list(tr.new_tokens), s, None, (c.drafted, c.accepted)
        return run

    from specviz import slim
    from specviz.runtime.llamacpp_seq import Sequence, Vocab

    slim_target, slim_eos = Sequence(str(tgt), threads=args.threads), Vocab(str(tgt)).eog
    slim_lite = slim.ModelDraft(Sequence(str(dft), threads=args.threads))

    def slim_run(draft, k, temperature=0.0):
        cfg = DecodeConfig(k=k, temperature=temperature, max_new_tokens=n, record=False)

        def run(ids):
            t0 = time.perf_counter()
            prompt = ids[0].tolist()
            tr = slim.autoregressive(slim_target, prompt, cfg, eos=slim_eos) if draft is None else \
                slim.speculative(slim_target, draft, prompt, cfg, eos=slim_eos)
            s = time.perf_counter() - t0
            c = tr.counts()
            return list(tr.new_tokens), s, None, (c.drafted, c.accepted)
        return run

    fns = {name: lc(name) for name in servers}
    fns["torch-ar"] = ours(None, k_default, torch_layers=True)
    sampled: set[str] = set()  # rows at T > 0: not compared with the greedy text
    for temp in [0.0] + [t for t in args.temperatures if t]:
        tag = "" if temp == 0 else f"-t{temp:g}"
        for pre, forward in (("ours", "auto"), ("lcfwd", "llamacpp")):
            fns[f"{pre}-ar{tag}"] = ours(None, k_default, forward, temp)
            fns |= {f"{pre}-default-k{k}{tag}": ours(default_draft, k, forward, temp) for k in default_ks}
            fns[f"{pre}-lite-k6{tag}"] = ours(lite, 6, forward, temp)
        fns[f"slim-ar{tag}"], fns[f"slim-lite-k6{tag}"] = slim_run(None, k_default, temp), slim_run(slim_lite, 6, temp)
        sampled |= {name for name in fns if tag and name.endswith(tag)}
    rows = {name: Row() for name in fns}
    lc_per_prompt: list[tuple[int, int]] = []  # lc-spec-k6's (drafted, accepted) per prompt, first repeat
    try:
        for fn in fns.values():  # warm-up: first calls allocate
            fn(prompts[0])
        # the lean forward's torch layers' several-row path (torch-ar's), timed again now that the servers are up and
        # idle (it was first timed when the target's layers were laid out, while they were starting)
        w = lean_llama.lean_weights(target)
        path = packed_linear.calibrate(lean_llama.matmuls(w.blocks) + [(w.head_t, w.head_b, False)])
        timed = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in packed_linear._state.get("timed", {}).items())
        stack = "in C (specviz.runtime.native)" if native.enabled() else f"on torch: {native.unavailable()}"
        print(f"ours-*: the lean forward's layer stack {stack}; torch-ar's several-row matmuls: {path} "
              f"(7-row matmuls, fastest of {packed_linear.CALIBRATE_REPEATS}: {timed or 'not timed'})", flush=True)
        before = {name: spec_counts(metrics(servers[name][0])) for name in servers if name != "lc-ar"}
        t_start = time.perf_counter()
        names = list(fns)
        for rep in range(args.repeats):
            for i, ids in enumerate(prompts):
                shift = (rep * len(prompts) + i) % len(names)
                outs = {}
                for name in names[shift:] + names[:shift]:
                    toks, s, engine, (d, a) = fns[name](ids)
                    row = rows[name]
                    row.add(len(toks), s)
                    row.drafted += d
                    row.accepted += a
                    if engine is not None:
                        row.engine.append(engine)
                    outs[name] = toks
                    if rep == 0 and name == "lc-spec-k6":
                        lc_per_prompt.append((d, a))
                for name, toks in outs.items():  # lcfwd-*: against lcfwd-ar, the target's own greedy text there
                    ref = next((f"{pre}-ar" for pre in ("lcfwd", "slim") if name.startswith(pre + "-")), "ours-ar")
                    if name != ref and name not in sampled:
                        rows[name].compared += 1
                        rows[name].differing += toks != outs[ref]
            print(f"repeat {rep + 1}/{args.repeats} done at {time.perf_counter() - t_start:.0f} s", flush=True)
        after = {name: spec_counts(metrics(servers[name][0])) for name in servers if name != "lc-ar"}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait()

    print(f"\n{len(prompts)} prompts x {args.repeats} repeats, greedy, {n} new tokens, {args.threads} threads; "
          f"tok/s per call: median [min-max]; total = all tokens / all seconds")
    print(f"{'method':<17}{'median':>8}{'min':>8}{'max':>8}{'total':>8}{'engine':>8}{'accept':>8}  "
          "greedy == ours-ar (lcfwd-*: == lcfwd-ar)")
    for name, r in rows.items():
        eng = f"{statistics.median(r.engine):8.1f}" if r.engine else f"{'':>8}"
        acc = f"{r.accepted / r.drafted:8.3f}" if r.drafted else f"{'':>8}"
        same = f"{r.compared - r.differing}/{r.compared}" if r.compared else "(reference)" if name in (
            "ours-ar", "lcfwd-ar", "slim-ar") else "(sampled)"
        print(f"{name:<17}{r.median:8.1f}{min(r.per_call):8.1f}{max(r.per_call):8.1f}{r.tok_s:8.1f}{eng}{acc}  {same}")
    print("(engine: llama.cpp's own timings, tokens / (prompt_ms + predicted_ms), median; accept: accepted / drafted)")

    def ratio(a, b, what):
        ra, rb = rows[a], rows[b]
        print(f"  {what:<44}{ra.median / rb.median:6.2f}x (medians)  {ra.tok_s / rb.tok_s:6.2f}x (totals)")

    print("ratios:")
    dks = [f"default-k{k}" for k in default_ks]
    ratio("ours-ar", "lc-ar", "specviz AR (lean, C) / llama.cpp AR")
    ratio("torch-ar", "lc-ar", "specviz AR (lean, torch) / llama.cpp AR")
    ratio("lcfwd-ar", "lc-ar", "specviz AR (llama.cpp forward) / llama.cpp AR")
    ratio("slim-ar", "lc-ar", "specviz.slim AR (llama.cpp forward) / llama.cpp AR")
    ratio("slim-lite-k6", "lc-spec-k6", "specviz.slim spec lite k6 / llama.cpp spec lite k6")
    ratio("slim-lite-k6", "slim-ar", "specviz.slim spec lite k6 / specviz.slim AR")
    best = max((nm for nm in servers if nm != "lc-ar"), key=lambda nm: rows[nm].median)
    for pre, what in (("ours", "lean"), ("lcfwd", "llama.cpp forward")):
        ratio(f"{pre}-lite-k6", "lc-spec-k6", f"specviz spec lite k6 ({what}) / llama.cpp spec lite k6")
        for dk in dks:
            ratio(f"{pre}-{dk}", best, f"specviz {dk} ({what}) / llama.cpp's best ({best})")
    for name in servers:
        if name != "lc-ar":
            ratio(name, "lc-ar", f"{name} / lc-ar")
    bases = [nm for nm in rows if nm.endswith("-ar") or "-ar-t" in nm]  # every autoregressive row, greedy or sampled
    fastest = max(bases, key=lambda nm: rows[nm].median)
    print(f"speedups over the fastest autoregressive baseline of this run, greedy or sampled ({fastest}, "
          f"{rows[fastest].median:.1f} tok/s by medians; {', '.join(f'{nm} {rows[nm].median:.1f}' for nm in bases)}):")
    for temp_tag in [""] + sorted({"-t" + nm.rsplit("-t", 1)[1] for nm in sampled}):
        for pre in ("ours", "lcfwd", "slim"):
            for what in ("lite-k6", *dks) if pre != "slim" else ("lite-k6",):
                ratio(f"{pre}-{what}{temp_tag}", fastest, f"{pre}-{what}{temp_tag} / {fastest}")
    floors(rows, best, fastest, dks)
    print(f"# load average after the timed calls: {load_average()}")

    # per-position acceptance at greedy, lite, k = 6
    b, a = before["lc-spec-k6"], after["lc-spec-k6"]
    drafts, pos = a[0] - b[0], {i: a[3].get(i, 0) - b[3].get(i, 0) for i in range(6)}
    print(f"\nper-position acceptance, greedy, lite, k = 6, over the timed runs ({len(prompts)} prompts x {args.repeats})")
    print("  P(draft position i accepted) = rounds accepting >= i+1 drafted tokens / rounds (i = 0..5); "
          "cond = P(i accepted | i-1 accepted)")
    lc_rate = [pos[i] / drafts for i in range(6)]
    print(f"  llama.cpp (/metrics, {int(drafts)} drafts, {int(a[1] - b[1])} drafted, {int(a[2] - b[2])} accepted): "
          f"{fmt_pos(lc_rate)}")
    print(f"    cond: {fmt_pos([pos[i] / (pos[i - 1] if i else drafts) for i in range(6) if (pos[i - 1] if i else drafts)])}")
    for label, shift in (("specviz (same prompts)", 0), ("specviz, rounds aligned as llama.cpp's", 1)):
        counts, mine = None, []
        with torch.inference_mode():
            for ids in prompts:
                first = ids
                if shift:  # llama.cpp's first token comes from the prompt pass: draft from the prompt + it
                    g = autoregressive_generate(target, ids, DecodeConfig(temperature=0.0, max_new_tokens=1))
                    first = torch.cat([ids, torch.tensor([g.new_tokens[:1]])], dim=1)
                tr = speculative_generate(target, lite, first, DecodeConfig(k=6, temperature=0.0,
                                                                            max_new_tokens=n - shift))
                counts = tr.counts() if counts is None else counts + tr.counts()
                mine.append((tr.counts().drafted, tr.counts().accepted))
        rate = [x / counts.rounds for x in counts.accepted_at[:6]]
        acc = counts.accepted_at
        print(f"  {label} ({counts.rounds} rounds, {counts.drafted} drafted, {counts.accepted} accepted): "
              f"{fmt_pos(rate)}")
        print(f"    cond: {fmt_pos([acc[i] / (acc[i - 1] if i else counts.rounds) for i in range(6)])}; "
              f"trace.per_position (accepted / drafted at i): {fmt_pos(counts.per_position[:6])}")
        print("    drafted/accepted per prompt, this vs llama.cpp's (its timings.draft_n, draft_n_accepted): "
              + ", ".join(f"p{i} {m[0]}/{m[1]}" + ("" if m == tuple(theirs) else f" vs {theirs[0]}/{theirs[1]}")
                          for i, (m, theirs) in enumerate(zip(mine, lc_per_prompt))))


if __name__ == "__main__":
    main()
