"""Trace -> Markdown: a run's headline numbers, and its measured speedup beside Leviathan's prediction.

Notation: alpha = mean beta (beta = sum min(p, q)), tau = tokens per round, c = draft/target cost ratio.
Names that come from a trace (target, draft, stop reason) are escaped: an imported trace is untrusted.
"""
from __future__ import annotations

import html
import re
import statistics

from .. import theory
from ..drafts import eagle, early_exit
from ..models import HYBRIDS, PROMPT_LOOKUP
from ..rules import rule_of, run_closed_forms
from ..trace import Trace

GLOSSARY = """
| symbol | meaning |
|---|---|
| **p** | the target's probability of a token (after temperature, top-k, top-p) |
| **q** | the draft's probability of the token it proposed, under the same transforms |
| **u** | the coin: a uniform draw in [0, 1); a draft is accepted when u < min(1, p/q) |
| **β** | Σ min(p, q) over the vocabulary: the chance that position is accepted |
| **α** | the mean of β: the acceptance rate the theory uses |
| **k** | drafts per round (a tree: nodes per round) |
| **τ** | tokens a round emits: the accepted drafts plus one (the resample or the bonus); E[τ] = (1 − α^(k+1)) / (1 − α) |
| **c** | one draft step's time over one target forward's |
| **v** | one verify pass's time (the target over all drafts) over one target forward's |
| **speedup** | E[τ] / (k c + v): tokens per round over the round's cost in target forwards |
| **residual** | norm(max(0, p − q)): what a token is drawn from after a rejection, so the output keeps the target's law |

**The colours**: green, a draft the target accepted; red (struck out), a draft it rejected; orange, the token drawn from
the residual after a rejection; blue, the bonus: the target's own next token, free when every draft passed (or the
round's only token when nothing was drafted); grey, drafts after a rejection, never verified.

"""
SETTINGS_HELP = {  # the explorer's folded settings, in full (their own help is one line)
    "k policy": "fixed: k drafts every round; history: k + 1 when the last 10 rounds accepted over 80% of their drafts, "
                "k − 1 under 50%; heuristic: transformers' schedule, + 2 after a round that accepted every draft, else − 1",
    "stop drafting below q(x)": "a round stops drafting once the draft's probability of its own token falls below this "
                                "(transformers' assistant_confidence_threshold, 0.4 by default): fewer wasted drafts",
    "top-k, top-p": "the target and the draft both keep only their k likeliest tokens, or the likeliest holding "
                    "probability p, before p and q are compared",
    "seed": "every coin u and every sample comes from it: the same seed and settings make the same run",
    "baseline": "the target alone on the same prompt and settings, timed: the measured speedup's denominator",
    "draft shape": "chain: k drafts in a row · chain:DEPTH,SIBLINGS: that chain plus sibling leaves where earlier rounds "
                   "say the draft's second choice wins most · a static tree: children per depth (3,2,2,1) · "
                   "dynamic:BUDGET,DEPTH,WIDTH[,THRESHOLD] (EAGLE-2): each level expands the WIDTH most promising nodes, "
                   "the BUDGET likeliest to be accepted (as this run's verdicts so far say) are verified, and a threshold "
                   "drops nodes less likely than it. A whole tree is verified in one target pass",
    "tree children": "top: the draft's best tokens · iid: drawn from q with replacement · distinct: drawn without "
                     "replacement · auto: top when greedy, distinct when sampling",
    "acceptance rule": "Leviathan's min(1, p/q) keeps the text exactly the target's sample; some engines accept "
                       "otherwise (typical, lenient, optimistic are lossy and chains only: they change the text's law; "
                       "the acceptance rule lab compares them)",
}
GLOSSARY += "\n| setting (under *More settings*) | what it does |\n|---|---|\n" + "\n".join(
    f"| **{name}** | {text} |" for name, text in SETTINGS_HELP.items()) + "\n"  # "What do these numbers mean?"
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~])")


def esc(x) -> str:
    """A name from a trace as plain text inside Markdown: HTML-escaped, and every Markdown punctuation
    backslash-escaped (an imported trace is untrusted: no emphasis, no link, no image out of it)."""
    return MARKDOWN_PUNCTUATION.sub(r"\\\1", html.escape(str(x), quote=False))


HERE = "on this machine"


def summary_markdown(trace: Trace | None, base: Trace | None, chain: Trace | None = None,
                     spread: list[float] | None = None, where: str = HERE, skipped: str | None = None) -> str:
    """Headline numbers, and the measured speedup beside Leviathan's prediction (a tree run: beside the
    positional model's, and against ``chain``, a chain run of the same draft and seed, if given). ``spread``:
    the speedups of several interleaved (run, baseline) pairs, which the speedup leads with (median and range);
    ``skipped``: why there is only the one pair; ``where``: where and when the runs were timed (a recorded run's
    machine, not this one)."""
    if trace is None:
        return "*No run yet.*"
    if trace.config.tree is not None and trace.mode == "speculative":
        return tree_summary(trace, base, chain, speed_text(trace, base, spread, skipped), where)
    s = trace.summary()
    c, k, v = theory.cost_ratio(trace, base), theory.mean_k(trace), theory.verify_cost(trace, base)
    closed = run_closed_forms(trace.rounds)[0]  # the run's rule's P(accept); Leviathan's is mean beta
    alpha = min(s.alpha if closed is None else closed, 1.0)
    predicted = theory.expected_speedup(alpha, k, c, v) if trace.mode == "speculative" else 1.0
    base_txt = f"{base.summary().tokens_per_s:.1f} tokens/s" if base else "–"
    return (
        f"{forwards_headline(s.target_forwards_per_token, trace.mode)}\n\n"
        f"**{s.new_tokens} tokens in {s.rounds} rounds** ({esc(trace.stop_reason or 'running…')}) · "
        f"{esc(trace.target_name or 'target')} ← {esc(trace.draft_name or 'no draft')}\n\n"
        f"| acceptance rate | α (mean β) | τ tokens / round | target forwards / token | tokens/s | baseline |\n"
        f"|---|---|---|---|---|---|\n"
        f"| {s.acceptance_rate:.2f} | {s.alpha:.2f} | {s.tau:.2f} | {s.target_forwards_per_token:.2f} | "
        f"{s.tokens_per_s:.1f} | {base_txt} |\n\n"
        f"**Speedup {where}** {speed_text(trace, base, spread, skipped)} · predicted **{predicted:.2f}×** by "
        f"(1 − α^(k+1)) / ((1 − α)(k c + v)) with α = {alpha:.2f}, "
        f"k = {k:.2f} (mean drafts per round), c = {c:.3f} (a draft step over one target forward) and "
        + (f"v = {v:.2f} (a verify pass over one target forward), both measured in these two runs."
           if base is not None else "v = 1 (Leviathan's assumption: the verify pass costs one forward; the "
           "baseline measures both), c over this run's verify pass.")
    ) + rule_note(trace, theory.measured_speedup(trace, base)) + draft_note(trace)


def rule_note(trace: Trace, measured: float | None) -> str:
    """The accept rule, where it is not Leviathan's with sampled drafts; a lossy one's cost in truth beside its speedup."""
    cfg = trace.config
    if trace.mode == "speculative" and cfg.verify == "block" and not cfg.greedy:
        return ("\n\n*Verification*: **as one block** (Sun et al. 2024): a round keeps the longest prefix of drafts i "
                "with u_i < h_i, h_i the chance it stops after i (in the replay), whatever the drafts before it did; "
                "lossless, and never fewer drafts kept in expectation than token by token (the prediction above is token "
                "by token's, which a block meets or beats in expectation).")
    if trace.mode != "speculative" or (cfg.rule == "leviathan" and not cfg.draft_greedy):
        return ""
    alpha, tv = run_closed_forms(trace.rounds)
    how = " with argmax drafts (q a point mass)" if cfg.draft_greedy and not cfg.greedy else ""
    head = f"\n\n*Acceptance rule*: **{esc(cfg.rule)}**{how}"
    if rule_of(cfg).lossless:
        told = f"; its chance of accepting a verified draft {alpha:.2f} in closed form" if alpha is not None else ""
        return head + f", lossless: the text keeps the target's law{told}."
    speed = f"{measured:.2f}×" if measured else "(no baseline yet)"
    return (head + f" (**lossy**): speedup {speed} at a cost in truth of TV = **{tv or 0.0:.3f}** per token (the total "
            "variation between the law of each emitted token and the target's p, averaged over the positions "
            "verified): the text is no longer the target's sample.")


def draft_note(trace: Trace) -> str:
    """What kind of draft it was, where that is not a plain model of the target's tokenizer: the target exiting
    early (its own first layers), or a draft with its own tokenizer (the replay aligns its tokens)."""
    spec = early_exit.parse(trace.draft_name)
    if spec is not None:
        adapter = " and one trained adapter layer" if spec.adapter else ""
        return (f"\n\n*Early exit*: the draft is the target's own first {spec.layers} layers{adapter}, its final norm and "
                "LM head (LayerSkip's self-speculation): it adds no model of its own, and drafts in the target's own "
                "key/value cache.")
    if trace.draft_name in HYBRIDS:
        model, table, options = HYBRIDS[trace.draft_name]
        cap = (f" In greedy runs at most {options['model_steps']} drafts a round come from `{model}`; the n-gram's sure "
               "steps may run on to k (sampled runs draft up to k from it)." if options.get("model_steps") else "")
        look = (f" Before the n-gram, greedy runs propose what followed the latest earlier occurrence of the run's own "
                f"last {options['lookup']} tokens (prompt lookup: the run's own loops, q = 1)." if options.get("lookup") else "")
        return (f"\n\n*Hybrid*: in greedy runs `{table}` (an n-gram of the target's own greedy text) drafts wherever its "
                f"top token has q >= 0.8, a near-free step, and `{model}` drafts elsewhere; sampled runs use `{model}` "
                f"only. Each token's q is that of the draft that proposed it.{look}{cap}")
    if eagle.parse(trace.draft_name):
        return ("\n\n*Feature draft* (EAGLE): one decoder layer that drafts from the target's own last hidden state at "
                "the position before (from the verify pass) and the next token, through the target's LM head.")
    if any(r.draft_view is not None for r in trace.rounds):
        return ("\n\n*A draft with its own tokenizer*: greedy runs re-tokenize its text, sampled runs draft from its "
                "q on the tokens both vocabularies hold; the round replay shows its tokens above the target's.")
    return ""


def k_note(draft: str | None, temperature) -> str:
    """One line for beside the k slider, read from the chosen draft: how many drafts a round it can make at this
    temperature, and why (``specviz.drafts.hybrid.draft_limit``'s cases, from the draft's name: nothing loads)."""
    greedy = float(temperature or 0) == 0
    if draft in HYBRIDS:
        model, table, options = HYBRIDS[draft]
        if not greedy and options.get("greedy_only", True):
            return f"sampled: up to k drafts, all from {model} (no n-gram)"
        cap = options.get("model_steps")
        if cap is not None:
            return f"greedy: at most {cap} from {model}, more only where {table} is sure"
        return f"greedy: up to k drafts, from {table} where it is sure, else {model}"
    if draft == PROMPT_LOOKUP:
        return "up to k drafts: what followed the run's last tokens where they occurred before"
    return f"up to k drafts a round, all from {draft}" if draft else "up to k drafts a round"


def speed_text(trace: Trace, base: Trace | None, spread: list[float] | None, skipped: str | None) -> str:
    """The measured speedup (tokens/s against an autoregressive run of the same target and settings): the median
    and range of interleaved pairs where there are several, else the one pair, saying so and why."""
    measured = theory.measured_speedup(trace, base)
    if not measured:
        return "*(no baseline: run the models to measure it)*"
    if spread and len(spread) >= 2:
        ordered = sorted(spread)
        return (f"measured median **{statistics.median(ordered):.2f}×** over {len(spread)} interleaved pairs (the run, "
                f"then its baseline, same settings and seed; range {ordered[0]:.2f}–{ordered[-1]:.2f}×: a shared CPU "
                f"moves single runs, the target forwards per token above do not move){baseline_note(base)}")
    why = f": {esc(skipped)}" if skipped else ""
    return f"measured **{measured:.2f}×** from one pair (this run and its baseline, tokens/s){why}{baseline_note(base)}"


FORWARDS = {"lean": "specviz's lean torch forward", "lean-c": "specviz's lean forward, its layers in C",
            "dynamic": "transformers' forward", "llamacpp": "llama.cpp's own forward (llama-cpp-python)",
            "gemma-c": "specviz's C stack on the GGUF as shipped (specviz.slim, numpy draws)"}


def baseline_note(base: Trace | None) -> str:
    """Which forward the baseline ran on (the speedup divides by it): the lean forward in C or on torch, llama.cpp's,
    transformers', or the C stack of a GGUF's slim run (the run's own)."""
    if base is None or not base.forward:
        return ""
    note = f"; the baseline ran the target alone on {FORWARDS.get(base.forward) or esc(base.forward)}"
    if base.forward == "gemma-c":
        return note + ", the forward the run took"
    if base.forward in ("lean-c", "llamacpp"):
        return note + ", the fastest one-row forward here"
    return note + (" (its layers in C, or llama.cpp's forward, would be faster: neither runs here, "
                   "docs/LLAMACPP.md)")


def forwards_headline(per_token: float, mode: str) -> str:
    """What speculation saves whatever the hardware: target forward passes per generated token, and the speedup
    that implies where a verify pass costs one forward and drafting is free (an upper bound)."""
    if mode != "speculative" or not per_token:
        return "**1.00 target forward per token** (autoregressive: one pass for every token)."
    saved = 1 - per_token
    return (f"**{per_token:.2f} target forwards per token** (autoregressive: 1.00): {100 * saved:.0f}% of the "
            f"target's passes saved; where a verify pass cost what one forward costs and drafting were free, that "
            f"would be **{1 / per_token:.2f}× faster** (measured, below).")


def tree_summary(trace: Trace, base: Trace | None, chain: Trace | None, speed: str = "", where: str = HERE) -> str:
    """A tree run: tokens per target pass and nodes per round, beside a chain of the same draft and seed."""
    s, tree = trace.summary(), trace.config.tree
    c, nodes, v = theory.cost_ratio(trace, base), theory.mean_k(trace), theory.verify_cost(trace, base)
    tau_hat = theory.predicted_tau(trace.rounds)
    predicted = tau_hat / (nodes * c + v) if nodes * c + v else 0.0
    rows = [_tree_row(f"tree {tree.label}", trace, base)]
    if chain is not None:
        rows.append(_tree_row(f"chain k = {chain.config.k}", chain, base))
    return (
        f"{forwards_headline(s.target_forwards_per_token, trace.mode)}\n\n"
        f"**{s.new_tokens} tokens in {s.rounds} rounds** ({esc(trace.stop_reason or 'running…')}) · "
        f"{esc(trace.target_name or 'target')} ← {esc(trace.draft_name or 'no draft')}, a token tree "
        f"(children: {esc(trace.rounds[0].tree.children if trace.rounds and trace.rounds[0].tree else '–')})\n\n"
        "| drafting | tokens / target pass | nodes verified / round | accepted / node | tokens/s | speedup |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"**Speedup {where}** {speed or speed_text(trace, base, None, None)}"
        f" · predicted **{predicted:.2f}×** = τ̂ / (n c + v) with τ̂ = {tau_hat:.2f} tokens per round (the positional "
        f"model: each node accepted, once its parent is, at its depth and rank's rate in this run), n = {nodes:.1f} "
        f"nodes per round, c = {c:.3f} per node and v = {v:.2f} (a verify pass of all nodes over one target forward)."
    )


def _tree_row(label: str, run: Trace, base: Trace | None) -> str:
    s, speed = run.summary(), theory.measured_speedup(run, base)
    per_pass = 1 / s.target_forwards_per_token if s.target_forwards_per_token else 0.0
    return (f"| {esc(label)} | {per_pass:.2f} | {theory.mean_k(run):.1f} | {s.acceptance_rate:.2f} | "
            f"{s.tokens_per_s:.1f} | {f'{speed:.2f}×' if speed else '–'} |")
