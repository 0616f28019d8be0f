"""Trace -> HTML: the generated text as tokens coloured by their fate, and one round's replay.

Pure functions of a Trace; every piece of text (token, prompt, number) goes through ``esc``
(html.escape with quote=True), because the UI shows this HTML unsanitized.
Notation: p target probability, q draft probability, u the uniform draw, beta = sum min(p, q).

A token's details (its numbers and the decision) sit in its ``data-tip`` attribute, which the CSS shows at once as a
panel under the token's line on hover, or while the token has focus (a click or a tap pins it; Tab walks the tokens):
no script, and the text is an attribute's, never markup. Rounds are numbered from 1 on screen (``Round.index`` + 1).
Given the draft's vocabulary (``vocab``: the target ids a pruned draft can propose, read from its map ``d2t``), a
resampled or bonus token outside it is marked (``data-outside``: a dotted outline and ⊘): the draft could never have
proposed it, so no draft of any quality would have been accepted there.

What they render is bounded before any HTML is built, whatever the trace: a token shows at most ``TOKEN_SHOWN``
characters (its details ``TITLE_CHARS``), the timeline the prompt's last ``PROMPT_SHOWN`` tokens and rounds until
its markup reaches ``TIMELINE_CHARS``, the plain text ``PLAIN_CHARS``; a note says where something was cut. The
replay reads one round (and the few tokens before it), so moving the slider costs the same on any trace.
"""
from __future__ import annotations

import html
import re
from dataclasses import replace

from ..texts import RoundTexts, Texts, position_texts, shown
from ..trace import Round, Trace

TOKEN_SHOWN, TITLE_CHARS = 128, 600  # characters of a token's text on screen (a token holds at most 128 bytes); of a hover
PROMPT_SHOWN = 512  # the prompt's last tokens the timeline shows
TIMELINE_CHARS = 2_000_000  # the timeline's markup adds no round past this (about 2 MB)
PLAIN_CHARS = 100_000  # the plain-text view's characters
CONTEXT = 8  # tokens before a cut whose bytes may complete a character after it
SPECIAL = re.compile(r"<\|[^<>|]{1,40}\|>|</?s>|<(?:pad|unk|bos|eos|mask)>")  # control tokens' texts

LEGEND = {
    "accepted": "accepted draft", "rejected": "rejected draft", "resampled": "resampled (residual)",
    "bonus": "bonus (drawn from the target)", "discarded": "discarded (never verified)",
}
OUTSIDE = "⊘ outside the draft's vocabulary (it could never propose it)"
OUTSIDE_TIP = "the draft's vocabulary does not hold this token: it could never have proposed it"
# Translucent fills and saturated underlines read on light and dark backgrounds alike;
# text colour is inherited from the theme.
CSS = """
.sv-timeline { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 1.05rem;
  line-height: 2.1; white-space: pre-wrap; word-break: break-word; }
.sv-legend { font-family: ui-sans-serif, system-ui, sans-serif; font-size: 0.9rem; margin-bottom: 0.4rem; }
.sv-legend .sv-tok { margin-right: 0.6rem; }
.sv-empty { font-size: 1.05rem; margin: 0.6rem 0; }
.sv-tok { border-radius: 3px; padding: 0.05rem 0.1rem; border-bottom: 3px solid transparent; }
.sv-timeline, .sv-replay-wrap { position: relative; }
.sv-tok[data-tip] { cursor: pointer; }
.sv-tok[data-tip]:focus { outline: 2px solid #2563eb; outline-offset: 1px; }
.sv-tok[data-tip]:hover::after, .sv-tok[data-tip]:focus::after, .sv-round-n[data-tip]:hover::after,
.sv-round-n[data-tip]:focus::after {
  content: attr(data-tip); position: absolute; left: 0; right: 0; margin-top: 1.9em; z-index: 20;
  padding: 0.45em 0.75em; border-radius: 6px; background: #111827; color: #f9fafb; opacity: 1;
  font: 500 0.85em/1.45 ui-sans-serif, system-ui, sans-serif; white-space: pre-wrap; text-decoration: none;
  text-align: left; pointer-events: none; box-shadow: 0 4px 14px rgba(0, 0, 0, 0.3); }
.sv-round-n[data-tip] { cursor: pointer; }
.sv-round-n[data-tip]:hover::after, .sv-round-n[data-tip]:focus::after { font-size: 1.3em; vertical-align: baseline; }
.sv-prompt { background: rgba(128, 128, 128, 0.18); border-bottom-color: rgba(128, 128, 128, 0.6); }
.sv-accepted { background: rgba(34, 197, 94, 0.28); border-bottom-color: #16a34a; }
.sv-rejected { background: rgba(239, 68, 68, 0.28); border-bottom-color: #dc2626; text-decoration: line-through;
  text-decoration-color: #dc2626; text-decoration-thickness: 2px; }
.sv-resampled { background: rgba(249, 115, 22, 0.32); border-bottom-color: #ea580c; }
.sv-bonus { background: rgba(59, 130, 246, 0.30); border-bottom-color: #2563eb; }
.sv-discarded { background: rgba(128, 128, 128, 0.12); border-bottom: 2px dashed #888;
  color: color-mix(in srgb, currentColor 50%, transparent); }  /* faded, its details not (opacity would fade them) */
.sv-tok[data-outside] { outline: 2px dotted #7c3aed; outline-offset: 1px; }
.sv-tok[data-outside]::before { content: "⊘"; font-size: 0.7em; vertical-align: super; color: #7c3aed; }
.sv-round { border-left: 2px solid rgba(128, 128, 128, 0.7); padding-left: 2px; margin-left: 3px; }
.sv-round-n { font-size: 0.65rem; vertical-align: super; opacity: 0.7; margin-right: 1px; }
.sv-ws { opacity: 0.55; }
.sv-generated { background: rgba(128, 128, 128, 0.07); border-bottom-color: rgba(128, 128, 128, 0.35); }
.sv-round-tree { font-weight: 700; }
.sv-plain { font-family: ui-sans-serif, system-ui, sans-serif; white-space: pre-wrap; word-break: break-word;
  margin: 0.4rem 0 0; padding: 0.5rem 0.7rem; border-left: 3px solid rgba(128, 128, 128, 0.5); }
.sv-compare-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 0.8rem; }
.sv-compare-run h4 { margin: 0 0 0.3rem; font-size: 0.95rem; }
.sv-replay-wrap { overflow-x: auto; max-width: 100%; }
.sv-presenter .prose, .sv-presenter label, .sv-presenter .sv-table { font-size: 1.25rem !important; }
.sv-presenter .sv-timeline { font-size: 1.7rem !important; line-height: 2.3; font-weight: 600; }
.sv-presenter .sv-legend { font-size: 1.25rem !important; }
.sv-presenter .sv-plain { font-size: 1.5rem !important; }
.sv-presenter .sv-tok { border-bottom-width: 5px; }
.sv-presenter .sv-accepted { background: rgba(22, 163, 74, 0.55); }
.sv-presenter .sv-rejected { background: rgba(220, 38, 38, 0.55); }
.sv-presenter .sv-resampled { background: rgba(234, 88, 12, 0.6); }
.sv-presenter .sv-bonus { background: rgba(37, 99, 235, 0.55); }
.sv-table { border-collapse: collapse; font-size: 0.95rem; }
.sv-table td, .sv-table th { padding: 0.15rem 0.6rem; border-bottom: 1px solid rgba(128, 128, 128, 0.35);
  text-align: right; }
.sv-table td.sv-left, .sv-table th.sv-left { text-align: left; }
.sv-table td.sv-decision { min-width: 16rem; }
.sv-align-table td { text-align: center; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  white-space: pre; border-left: 1px solid rgba(128, 128, 128, 0.45); }
.sv-align-draft { background: rgba(168, 85, 247, 0.22); }
.sv-align-none { opacity: 0.4; }
#intro h1 { font-size: 1.6rem; margin: 0 0 0.2rem; }
#intro p { margin: 0; }
.sv-gallery-btns { gap: 4px !important; }
.sv-gallery-btn { font-size: 0.85rem !important; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
  display: block !important; text-align: left !important; }
"""


def esc(x) -> str:
    """The one escape every text in the app's HTML goes through (quotes too: texts land in attributes)."""
    return html.escape(str(x), quote=True)


def visible(text: str) -> str:
    """Escaped token text with newlines and tabs shown as glyphs (the newline still breaks the line)."""
    out = esc(text).replace("\t", '<span class="sv-ws">→</span>\t')
    out = out.replace("\r", '<span class="sv-ws">␍</span>')
    return out.replace("\n", '<span class="sv-ws">↵</span>\n')


def cut(text: str, chars: int = TOKEN_SHOWN) -> str:
    """At most ``chars`` characters of text, an ellipsis where it was cut."""
    return text if len(text) <= chars else text[:chars] + "…"


def token_span(text: str, status: str, tip: str = "", outside: bool = False) -> str:
    """A token by fate, its details ``tip`` shown on hover, click or tap (focusable: a tap focuses it); one that
    completes no character (part of a multi-byte one) shows ◌; ``outside``: a token the draft's vocabulary lacks."""
    details = f' tabindex="0" data-tip="{esc(cut(tip, TITLE_CHARS))}"' if tip else ""
    mark = ' data-outside="1"' if outside else ""
    return (f'<span class="sv-tok sv-{status}" data-status="{esc(status)}"{mark}{details}>'
            f'{visible(shown(cut(text)))}</span>')


def _num(x) -> str:
    return "–" if x is None else f"{x:.3g}"


RULE_TESTS = {  # rule -> (its test: the bar u must pass, or the test in words; what a rejection emits)
    "leviathan": ("min(1, p/q)", "a token is resampled from norm(max(0, p − q))"),
    "point_mass": ("p (q taken as 1)", "a token is drawn from p without the draft"),
    "lenient": ("min(1, p/(l·q))", "a token is resampled from norm(max(0, p − q))"),
    "exact_match": ("the target draws its own token at u and keeps the draft if they are equal",
                    "the target's own token is emitted"),
    "typical": ("Medusa's typical acceptance: p above min(ε, δ·e^(−H(p)))", "the target's argmax is emitted"),
    "optimistic": ("optimistic: every draft passes", "never"),
}


def decision(r: Round, i: int, greedy: bool, rule: str = "leviathan", verify: str = "token") -> str:
    """The verify step's decision at drafted position i under the run's rule, in words, with the recorded numbers;
    under another rule than Leviathan's, also what Leviathan's would have done with the same u; a block-verified round
    (``verify="block"``, sampled) in block verification's own terms (``block_decision``)."""
    status = _status(r, i)
    if verify == "block" and not greedy:
        return block_decision(r, i, status)
    if status == "discarded":
        why = "an accepted EOS ended the run" if i < r.n_accepted else "an earlier draft in this round was rejected"
        return f"not verified: {why}; discarded"
    if greedy:
        if rule == "optimistic":
            return "accepted unchecked (optimistic: every draft passes)"
        return ("draft = target argmax: accepted" if status == "accepted"
                else "draft ≠ target argmax: rejected; the target's argmax is appended instead")
    (test, emitted), a, u = RULE_TESTS.get(rule, RULE_TESTS["leviathan"]), r.accept_prob[i], r.u[i]
    verdict = "accepted" if status == "accepted" else f"rejected; {emitted}"
    if rule in ("leviathan", "point_mass", "lenient"):
        said = f"u = {_num(u)} {'<' if status == 'accepted' else '≥'} {test} = {_num(a)}: {verdict}"
    else:
        said = f"{test}: {verdict} (P(accept | x) = {_num(a)}, u = {_num(u)})"
    if rule == "leviathan" or u is None:
        return said
    bar = min(1.0, r.p[i] / r.q[i]) if r.q[i] else 0.0
    return f"{said} · Leviathan's rule, same u: {'accepted' if u < bar else 'rejected'} (min(1, p/q) = {_num(bar)})"


def block_decision(r: Round, i: int, status: str) -> str:
    """Block verification keeps the longest prefix of drafts j with u_j < h_j (h_j: the chance it stops after j
    drafts, recorded in accept_prob; NaN where the walk down from the last draft never needed it), whatever the drafts
    before it did: position i in those words, with the numbers the run recorded."""
    n, h, u = r.n_accepted, r.accept_prob[i], r.u[i]
    if h != h:
        return (f"kept: block verification kept the first {n} drafts (u = {_num(r.u[n - 1])} < h = "
                f"{_num(r.accept_prob[n - 1])} at draft {n}); h here was not needed")
    test = f"u = {_num(u)} {'<' if u < h else '≥'} h = {_num(h)}"
    if i < n:
        return f"kept: {test}" + ("" if i == n - 1 else f"; block verification kept the first {n} drafts")
    if status == "discarded" and i < len(r.emitted):
        return f"kept, then discarded: an accepted EOS ended the run ({test})"
    if i == n:
        return f"{test}: not kept; block verification kept {n} draft{'s' if n != 1 else ''} and drew the next " \
               "token from norm(max(0, P p − q)) here"
    return f"{test}: not kept (block verification keeps a prefix: {n} draft{'s' if n != 1 else ''})"


def _status(r: Round, i: int) -> str:
    s = r.status(i)
    return "discarded" if s == "accepted" and i >= len(r.emitted) else s  # accepted after an emitted EOS


def quoted(trace: Trace, token: int, text: str) -> str:
    """A token's text for a hover: quoted, with its bytes where it completes no character."""
    return repr(text) if text else f"(bytes {trace.token_bytes.get(token, '?')}: part of a character)"


def _draft_title(trace: Trace, r: Round, i: int, text: str) -> str:
    p, q, u, b = r.p[i], r.q[i], r.u[i], r.beta[i]
    ratio = p / q if q else None
    return (f"{quoted(trace, r.drafted[i], text)}  round {r.index + 1}, draft {i + 1} of {len(r.drafted)}\n"
            f"p = {_num(p)}   q = {_num(q)}   p/q = {_num(ratio)}   u = {_num(u)}   beta = {_num(b)}\n"
            f"{decision(r, i, trace.config.greedy, trace.config.rule, trace.config.verify)}")


def _next_title(trace: Trace, r: Round, status: str, token: int, text: str) -> str:
    pos = f"round {r.index + 1}, position {r.n_accepted + 1}"
    if status == "bonus":
        what = (f"all {len(r.drafted)} drafts accepted: a bonus token from the target's p" if r.drafted
                else "no drafts (autoregressive)" if r.k == 0
                else "no drafts this round (the drafter proposed nothing): the target's own token")
    elif trace.config.greedy:
        what = "after the rejection: the target's argmax"
    elif trace.config.rule != "leviathan":
        what = f"after the rejection ({trace.config.rule}): {RULE_TESTS[trace.config.rule][1]}"
    elif trace.config.verify == "block":
        what = f"after {r.n_accepted} drafts kept (block verification): drawn from norm(max(0, P p − q))"
    else:
        what = "after the rejection: drawn from the residual norm(max(0, p − q))"
    return f"{quoted(trace, token, text)}  {pos}\np = {_num(r.next_p)}\n{what}"


def next_text(trace: Trace, r: Round, texts: RoundTexts, token: int) -> str:
    """The resampled or bonus token's text where it was appended."""
    return texts.emitted[r.n_accepted] if len(texts.emitted) > r.n_accepted else trace.text(token)


def round_spans(trace: Trace, r: Round, texts: RoundTexts, vocab: frozenset[int] | None = None) -> str:
    """One round: its drafts by fate, then the resampled or bonus token (marked where ``vocab``, the target ids the
    draft can propose, lacks it)."""
    if r.tree is not None:  # a tree round: its number says so, and hovering it says how big the tree was
        tip = (f"round {r.index + 1}: a tree of {len(r.tree.nodes)} nodes, {len(r.tree.path)} accepted (the replay "
               "draws it)")
        parts = [f'<span class="sv-round-n sv-round-tree" tabindex="0" data-tip="{esc(tip)}">{esc(r.index + 1)}▲</span>']
    else:
        parts = [f'<span class="sv-round-n">{esc(r.index + 1)}</span>']
    for i, x in enumerate(r.drafted):
        parts.append(token_span(texts.drafted[i], _status(r, i), _draft_title(trace, r, i, texts.drafted[i])))
    for status, tok in (("resampled", r.resampled), ("bonus", r.bonus)):
        if tok is not None:
            text = next_text(trace, r, texts, tok)
            shown_as = "generated" if trace.mode == "autoregressive" else status  # a baseline's tokens stay neutral
            outside = vocab is not None and tok not in vocab
            tip = _next_title(trace, r, status, tok, text) + (f"\n{OUTSIDE_TIP}" if outside else "")
            parts.append(token_span(text, shown_as, tip, outside))
    return f'<span class="sv-round" data-round="{esc(r.index)}">{"".join(parts)}</span>'


def legend(vocab: frozenset[int] | None = None) -> str:
    """The fates' colours; with a pruned draft vocabulary, its mark too."""
    items = "".join(token_span(label, status) for status, label in LEGEND.items())
    if vocab is not None:
        items += token_span(OUTSIDE, "bonus", outside=True)
    hint = "a bar and small number start each round · point at a token, or click or tap it, for p, q, u and the decision"
    return f'<div class="sv-legend">{items}<span>{hint}</span></div>'


def bounded_texts(trace: Trace, prompt: list[int], rounds) -> Texts:
    """Texts at their places for ``prompt`` (a tail of the trace's, or the tokens before a round) then ``rounds``,
    each token's bytes from the trace (a text without bytes read to at most TITLE_CHARS characters)."""
    def bytes_of(t: int) -> bytes:
        hexed = trace.token_bytes.get(t)
        return bytes.fromhex(hexed) if hexed is not None else trace.text(t)[:TITLE_CHARS].encode("utf-8", "replace")
    return position_texts(prompt, rounds, bytes_of)


def one_round(trace: Trace, i: int) -> Trace:
    """Round i alone, the CONTEXT tokens committed before it as its prompt: what the replay of round i reads (its
    texts, its rows), at the same cost on any trace."""
    before, j = [], i - 1
    while j >= 0 and len(before) < CONTEXT:
        before[:0] = trace.rounds[j].emitted
        j -= 1
    if len(before) < CONTEXT:
        before[:0] = trace.prompt_ids[-CONTEXT:]
    return replace(trace, prompt_ids=before[-CONTEXT:], rounds=[trace.rounds[i]])


def _note(text: str) -> str:
    return f'<p class="sv-cut"><i>{esc(text)}</i></p>'


def _plain(trace: Trace, prompt_ids: list[int], texts: Texts) -> str:
    """The text as a reader reads it: control tokens (EOS, ``<|bos|>`` and their kind) left out, at most
    PLAIN_CHARS characters."""
    eos = set(trace.eos_token_ids)
    def keep(t: int, text: str) -> bool:
        return t not in eos and not SPECIAL.fullmatch(text)
    parts = [x for t, x in zip(prompt_ids, texts.prompt) if keep(t, x)]
    parts += [x for r, rt in zip(trace.rounds, texts.rounds) for t, x in zip(r.emitted, rt.emitted) if keep(t, x)]
    plain = "".join(parts)
    return esc(cut(plain, PLAIN_CHARS)) + (_note(f"(the first {PLAIN_CHARS:,} characters)") if len(plain) > PLAIN_CHARS
                                          else "")


def outside_note(trace: Trace, vocab: frozenset[int] | None) -> str:
    """How many of the run's resampled and bonus tokens the draft's vocabulary lacks ("" without a pruned one)."""
    if vocab is None or trace.mode != "speculative":
        return ""
    target = [t for r in trace.rounds for t in (r.resampled, r.bonus) if t is not None]
    out = sum(t not in vocab for t in target)
    return (f"{out} of the {plural(len(target), 'token')} the target chose itself (resampled or bonus) lie outside "
            f"the draft's vocabulary of {len(vocab):,} tokens (⊘): the draft could never have proposed them.")


def timeline_html(trace: Trace | None, with_legend: bool = True, vocab: frozenset[int] | None = None) -> str:
    """The hero view: prompt, then every round's tokens coloured by fate (within the bounds above); the colours'
    legend first unless ``with_legend`` is False (several timelines under one legend). ``vocab``: the target ids a
    pruned draft vocabulary holds (None: the draft can propose any token), its missing tokens marked."""
    head = legend(vocab) if with_legend else ""
    if trace is None:
        return (f'{head}<p class="sv-empty"><i>Press Run, or open a ready run: the text appears here, each draft '
                "token coloured by the target's verdict.</i></p>")
    hidden = max(0, len(trace.prompt_ids) - PROMPT_SHOWN)
    context, ids = list(trace.prompt_ids[max(0, hidden - CONTEXT):hidden]), list(trace.prompt_ids[hidden:])
    texts = bounded_texts(trace, context + ids, trace.rounds)
    texts.prompt = texts.prompt[len(context):]
    notes = [f"The first {hidden:,} prompt tokens are not shown (the last {PROMPT_SHOWN} are)."] if hidden else []
    notes += [note] if (note := outside_note(trace, vocab)) else []
    prompt = "".join(token_span(text, "prompt", f"prompt token {t}") for t, text in zip(ids, texts.prompt))
    rounds, size = [], len(prompt)
    for r, t in zip(trace.rounds, texts.rounds):
        if size > TIMELINE_CHARS:
            notes.append(f"Rounds {r.index + 1}–{trace.rounds[-1].index + 1} are not shown: the timeline stops at "
                         f"{TIMELINE_CHARS / 1e6:.0f} MB of markup (the round replay shows every round).")
            break
        rounds.append(round_spans(trace, r, t, vocab))
        size += len(rounds[-1])
    if any(len(x) > TOKEN_SHOWN for x in trace.token_text.values()):
        notes.append(f"Token texts longer than {TOKEN_SHOWN} characters are cut (…).")
    plain = _plain(trace, ids, texts)
    return (f'{head}{"".join(map(_note, notes))}<div class="sv-timeline">{prompt}{"".join(rounds)}</div>'
            f'<details class="sv-plain-box" open><summary>Plain text</summary><div class="sv-plain">{plain}</div></details>')


def _stopped_early(trace: Trace, r) -> str:
    """Why a round drafted fewer than k tokens under DecodeConfig.draft_stop ("" otherwise)."""
    stop = trace.config.draft_stop
    if not (stop and r.drafted and len(r.drafted) < r.k and r.q[-1] is not None and r.q[-1] < stop):
        return ""
    return (f"<p>Drafting stopped early: the draft gave its last token q = {r.q[-1]:.3f}, below "
            f"draft_stop = {stop:g}.</p>")


def replay_html(trace: Trace | None, index: int) -> str:
    """One round in detail: the proposals with q, p and the decision, then what was appended."""
    if trace is None or not trace.rounds:
        return "<p><i>No rounds yet.</i></p>"
    i = max(0, min(int(index), len(trace.rounds) - 1))
    r, texts = trace.rounds[i], one_round(trace, i).texts().rounds[0]
    block = trace.config.verify == "block" and not trace.config.greedy
    head = "".join(f"<th>{h}</th>" for h in ("#", "q", "p", "p/q", "h (block)" if block else "min(1, p/q)", "u", "beta"))
    rows = []
    for i, x in enumerate(r.drafted):
        ratio = r.p[i] / r.q[i] if r.q[i] else None
        cells = "".join(f"<td>{esc(_num(v))}</td>" for v in (r.q[i], r.p[i], ratio, r.accept_prob[i], r.u[i], r.beta[i]))
        span = token_span(texts.drafted[i], _status(r, i), _draft_title(trace, r, i, texts.drafted[i]))
        verdict = esc(decision(r, i, trace.config.greedy, trace.config.rule, trace.config.verify))
        rows.append(f'<tr><td class="sv-left">{span}'
                    f'</td><td>{i + 1}</td>{cells}<td class="sv-left sv-decision">{verdict}</td></tr>')
    table = (f'<table class="sv-table"><tr><th class="sv-left">draft</th>{head}<th class="sv-left">decision</th></tr>'
             f'{"".join(rows)}</table>') if rows else ("<p>No drafts this round (the drafter found nothing to propose): "
                                                      "the target's own token was appended.</p>")
    appended = "".join(token_span(text, "prompt", f"id {t}") for t, text in zip(r.emitted, texts.emitted))
    if r.tree is not None:
        size = f"a tree of {len(r.tree.nodes)} nodes, {esc(r.n_accepted)} accepted"
    else:
        size = f"k = {esc(r.k)}, " + (f"{len(r.drafted)} drafted, {esc(r.n_accepted)} accepted" if r.drafted
                                      else "nothing drafted")
    return (f'<div class="sv-replay-wrap"><p><b>Round {esc(r.index + 1)}</b> of {len(trace.rounds)}: {size}; '
            f"draft {_ms(r.draft_s, r.draft_head_s)}, target {_ms(r.target_s, r.target_head_s)}.</p>"
            f'{_stopped_early(trace, r)}{table}<p>Appended: <span class="sv-timeline">{appended}</span> '
            f'({plural(len(r.emitted), "token")})</p></div>')


def _ms(total: float, head: float | None) -> str:
    """A pass's time, with its LM head's share where the forward timed it."""
    return f"{total * 1e3:.1f} ms" + ("" if head is None else f" (its LM head {head * 1e3:.1f} ms)")


def plural(n: int, noun: str) -> str:
    """"1 token", "2 tokens"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
