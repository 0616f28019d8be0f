"""Token texts that read right in any script.

A byte-level BPE token can hold part of a character (a Chinese character is 3 UTF-8 bytes, an emoji 4, and a
token may end in the middle of one), so decoding tokens one by one shows U+FFFD. Here every token keeps its
bytes, and a token's text *at its place in a sequence* is what an incremental UTF-8 decoder emits when that
token's bytes arrive: the characters it completes. A token that completes none shows as "" (``PARTIAL`` on
screen, with its bytes in the hover); the token that completes the character shows all of it.
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

PARTIAL = "◌"  # what the timeline shows for a token that completes no character
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte-fallback tokens


def _byte_decoder() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte-level alphabet

    return {c: b for b, c in bytes_to_unicode().items()}


def token_bytes(tokenizer, token: int) -> bytes:
    """The bytes a token stands for: byte-level BPE pieces through GPT-2's alphabet, SentencePiece byte-fallback
    pieces (<0xE4>) as their byte, anything else as the UTF-8 of its decoded text."""
    piece = tokenizer.convert_ids_to_tokens(int(token))
    if isinstance(piece, str):
        m = _BYTE_PIECE.fullmatch(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        if _is_byte_level(tokenizer) and piece not in getattr(tokenizer, "all_special_tokens", ()):
            table = _byte_decoder()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
    return tokenizer.decode([int(token)], clean_up_tokenization_spaces=False).encode("utf-8")


def _is_byte_level(tokenizer) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"


@dataclass
class RoundTexts:
    drafted: list[str] = field(default_factory=list)  # each drafted token's text where it was drafted
    emitted: list[str] = field(default_factory=list)  # each emitted token's text in the committed sequence
    nodes: list[str] = field(default_factory=list)  # a tree round: each node's text below its parent


@dataclass
class Texts:
    """Per-position texts of a trace: the prompt's tokens, and per round its drafts, emitted tokens and nodes."""

    prompt: list[str]
    rounds: list[RoundTexts]


def position_texts(prompt: list[int], rounds, bytes_of) -> Texts:
    """Every token's text at its place: committed tokens continue the committed text; a round's drafts (and a
    tree's nodes, along their own path) continue the text committed before the round. ``bytes_of(id)``: its bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    texts = Texts([decoder.decode(bytes_of(t)) for t in prompt], [])
    for r in rounds:
        start, out = decoder.getstate(), RoundTexts()
        out.drafted = [decoder.decode(bytes_of(x)) for x in r.drafted]
        if r.tree is not None:
            out.nodes = _node_texts(r.tree.nodes, start, bytes_of)
        decoder.setstate(start)
        out.emitted = [decoder.decode(bytes_of(t)) for t in r.emitted]
        texts.rounds.append(out)
    return texts


def _node_texts(nodes, start, bytes_of) -> list[str]:
    decoder, states, out = codecs.getincrementaldecoder("utf-8")("replace"), {}, []
    for i, node in enumerate(nodes):  # parents come before their children
        decoder.setstate(start if node.parent == -1 else states[node.parent])
        out.append(decoder.decode(bytes_of(node.token)))
        states[i] = decoder.getstate()
    return out


def shown(text: str) -> str:
    """A position's text for the screen: a token that completes no character shows ``PARTIAL``."""
    return text if text else PARTIAL


def fill_texts(trace, tokenizer) -> None:
    """Record in ``trace`` the text and bytes (hex) of every id it mentions: prompt, drafts, tree nodes, emitted
    tokens and residual candidates."""
    ids = set(trace.prompt_ids)
    for r in trace.rounds:
        ids.update(r.drafted, r.emitted, (t[0] for t in r.residual_top))
        ids.update(t for t in (r.resampled, r.bonus) if t is not None)
        ids.update(n.token for n in (r.tree.nodes if r.tree is not None else ()))
    for i in ids - trace.token_text.keys():
        trace.token_text[i] = tokenizer.decode([i], clean_up_tokenization_spaces=False)
        trace.token_bytes[i] = token_bytes(tokenizer, i).hex()
