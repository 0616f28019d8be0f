"""Two tokenizations of one text, side by side: what a draft with another tokenizer proposed in its own tokens, and
the target tokens that text became (``specviz.drafts.cross``).

``DraftTokens`` (``specviz.records``) is the round's record of the draft's own view; ``align`` cuts the text at
every boundary of either tokenization, so a view can draw the draft's tokens above the target's, each spanning
the characters it covers.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    """A stretch of text that no token boundary of either tokenization cuts: ``draft`` and ``target`` are the
    indexes of the tokens that hold it (None where that tokenization does not reach it)."""

    text: str
    draft: int | None
    target: int | None


def _owners(texts) -> list[int]:
    """For each character of the concatenated texts, the index of the token that holds it."""
    return [i for i, t in enumerate(texts) for _ in t]


def align(draft_texts, target_texts) -> list[Segment]:
    """The text cut at every token boundary of both tokenizations. Where the two texts differ (the target's
    tokens were cut at k, or re-encoding changed the text), each segment's characters come from the longer one."""
    d_own, t_own = _owners(draft_texts), _owners(target_texts)
    chars = "".join(draft_texts) if len(d_own) >= len(t_own) else "".join(target_texts)
    segments: list[Segment] = []
    for j, ch in enumerate(chars):
        d = d_own[j] if j < len(d_own) else None
        t = t_own[j] if j < len(t_own) else None
        if segments and (segments[-1].draft, segments[-1].target) == (d, t):
            segments[-1] = Segment(segments[-1].text + ch, d, t)
        else:
            segments.append(Segment(ch, d, t))
    return segments


def incremental_texts(decode, context: list[int], new: list[int]) -> tuple[str, ...]:
    """Each new token's text as it reads after ``context`` and the tokens before it: what decoding adds with it.
    A token that holds only part of a character adds nothing; the token that completes the character holds it."""
    def settled(text: str) -> str:  # a trailing U+FFFD is a character still incomplete
        return text.rstrip("\ufffd")

    texts, before = [], settled(decode(context))
    for i in range(len(new)):
        after = decode(context + new[: i + 1])
        after = after if i == len(new) - 1 else settled(after)
        texts.append(after[len(before):] if after.startswith(before) else "")
        before = settled(after) if after.startswith(before) else before
    return tuple(texts)
