"""A cross-tokenizer round's two tokenizations, aligned: the draft's own tokens above the target tokens they became,
each cell spanning the characters it holds (``specviz.drafts.alignment.align``). Every text is escaped."""
from __future__ import annotations

from ..drafts.alignment import align
from ..texts import RoundTexts
from ..trace import Round
from .timeline import esc, visible


def _cells(segments, side: str, label, css) -> str:
    """One table row: consecutive segments of the same token merged into one cell (colspan)."""
    cells, run = [], []
    for seg in segments + [None]:
        owner = None if seg is None else getattr(seg, side)
        if run and (seg is None or owner != getattr(run[-1], side)):
            i = getattr(run[-1], side)
            text = "".join(s.text for s in run)
            cls = css(i) if i is not None else "sv-align-none"
            title = label(i, text) if i is not None else "not covered by this tokenization"
            cells.append(f'<td colspan="{len(run)}" class="{cls}" title="{esc(title)}">{visible(text)}</td>')
            run = []
        if seg is not None:
            run.append(seg)
    return "".join(cells)


def alignment_html(r: Round, texts: RoundTexts) -> str:
    """The draft's tokens (its own ids) over the target tokens proposed from them, coloured by fate; "" for a
    round without a draft view (a draft sharing the target's tokenizer)."""
    view = r.draft_view
    if view is None:
        return ""
    target_texts = list(texts.drafted)
    segments = align(view.texts, target_texts)
    if not segments:
        return "<p>The draft added no text this round, so nothing was proposed.</p>"

    def draft_label(i, text):
        return f"draft token {i + 1} of {len(view.ids)}: id {view.ids[i]} in the draft's vocabulary, {text!r}"

    def target_label(i, text):
        return f"target token {i + 1} of {len(r.drafted)}: id {r.drafted[i]}, {text!r}, {r.status(i)}"

    def target_css(i):
        return f"sv-tok sv-{r.status(i)}"

    draft_row = _cells(segments, "draft", draft_label, lambda i: "sv-align-draft")
    target_row = _cells(segments, "target", target_label, target_css)
    return (f'<div class="sv-align"><p><b>Two tokenizations.</b> The draft wrote {len(view.ids)} tokens of its own '
            f"({esc(repr(view.text))}); re-encoded, they became {len(r.drafted)} target tokens, which the target "
            "verified.</p>"
            f'<table class="sv-table sv-align-table"><tr><th class="sv-left">draft</th>{draft_row}</tr>'
            f'<tr><th class="sv-left">target</th>{target_row}</tr></table></div>')
