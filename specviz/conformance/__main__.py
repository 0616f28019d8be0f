"""python -m specviz.conformance: test an engine's speculative sampling against its plain sampling.

  llama.cpp (one server started with a draft, -md):
    python -m specviz.conformance --llamacpp http://127.0.0.1:8080 --prompt "Once upon a time" --out card/
  OpenAI-compatible (vLLM, SGLang, TGI: one server with speculation, one without):
    python -m specviz.conformance --openai http://127.0.0.1:8001 http://127.0.0.1:8002 --model NAME --out card/
  Samples drawn before:
    python -m specviz.conformance --on card/samples-on.jsonl --off card/samples-off.jsonl
Exit status: 0 pass, 1 flag, 2 input it cannot read (files of different settings, too few samples, a malformed
line, an engine's refusal), the reason printed.
"""
from __future__ import annotations

import argparse
import sys

from .clients import LlamaCpp, OpenAI
from .kit import DEFAULT_N, DEFAULT_TOKENS, from_files, run
from .power import plan_n
from .settings import Setting


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m specviz.conformance", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--llamacpp", metavar="URL", help="llama-server's base URL (speculation switched per request)")
    src.add_argument("--openai", nargs=2, metavar=("URL_ON", "URL_OFF"), help="two /v1/completions servers")
    src.add_argument("--on", metavar="FILE", help="samples with speculation on (JSONL, with --off)")
    ap.add_argument("--off", metavar="FILE")
    ap.add_argument("--model", default="", help="the model name an OpenAI-compatible server expects")
    ap.add_argument("--n-max", type=int, default=4, help="llama.cpp's speculative.n_max when on (default 4)")
    ap.add_argument("--prompt", action="append", help="a prompt (repeat for several); ids: 'ids:1,2,3'")
    ap.add_argument("--setting", action="append", help="T,top_k,top_p,min_p (repeat; default 0.6,3,1,0)")
    ap.add_argument("--n", type=int, default=DEFAULT_N, help=f"samples per mode, prompt and setting ({DEFAULT_N})")
    ap.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help=f"tokens per sample ({DEFAULT_TOKENS})")
    ap.add_argument("--seed", type=int, default=0, help="request seeds derive from it; -1: leave them unset")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--plan", type=float, metavar="TV", help="also print the N that catches this bias 95%% of the time")
    ap.add_argument("--out", help="a folder for the samples, card.json, card.md and card.html")
    return ap.parse_args(argv)


def prompts_of(texts):
    return [[int(t) for t in p[4:].split(",")] if p.startswith("ids:") else p for p in texts or ["Once upon a time"]]


def main(argv=None) -> int:
    """0 for a pass, 1 for a flag, 2 for input the kit cannot read (the reason printed, no traceback)."""
    a = parse(argv)
    try:
        return check(a)
    except ValueError as e:  # the library's reason for refusing a file, a setting or an engine's answer
        print(f"python -m specviz.conformance: error: {e}", file=sys.stderr)
        return 2


def check(a) -> int:
    if a.on:
        if not a.off:
            raise SystemExit("--on needs --off")
        card = from_files(a.on, a.off, a.alpha)
        if a.out:
            card.write(a.out)
    else:
        client = (LlamaCpp(a.llamacpp, n_max=a.n_max) if a.llamacpp else OpenAI(*a.openai, model=a.model))
        card = run(client, prompts_of(a.prompt), [Setting.parse(s) for s in a.setting or ["0.6,3,1,0"]], n=a.n,
                   n_predict=a.tokens, seed=None if a.seed < 0 else a.seed, alpha=a.alpha, out_dir=a.out)
    print(card.markdown())
    if a.plan:
        row = card.tests[card.tests.tested].iloc[0]
        law = [float(x) for x in row.law.split()]
        m = int(card.tests.tested.sum())
        print(f"To catch a bias of {a.plan:g} at position {row.position} 95% of the time: "
              f"{plan_n(law, a.plan, a.alpha / m)} samples per mode.")
    if a.out:
        from ..views.conformance_plots import pvalue_figure

        pvalue_figure(card.tests, a.alpha).write_html(f"{a.out}/card.html", include_plotlyjs="cdn")
    return 0 if card.verdict == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
