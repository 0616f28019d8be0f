"""The trace JSON's schema: every field's kind and what each kind admits, checked on import (imported traces
are rendered into HTML, so nothing unchecked gets that far). ``Trace.from_json`` calls these; a violation is a
ValueError that names the field and its type, never its value (it may be markup).

What an import may hold is bounded by what it makes the app render and keep: token ids and counts below 2**31,
finite numbers, texts of valid Unicode (a lone surrogate breaks the response stream) of at most
``MAX_TEXT_CHARS`` characters, at most ``MAX_PROMPT_IDS`` prompt ids, ``MAX_ROUNDS`` rounds and
``MAX_TREE_NODES_TOTAL`` tree nodes."""
from __future__ import annotations

import json
import math

from .config import MAX_TREE_NODES, DecodeConfig
from .records import NODE_STATUSES, DraftTokens, TreeNode, TreeRecord

# -- the JSON schema: every field's kind, and what each kind admits ------------------------------------------
MODES, STOP_REASONS = ("speculative", "autoregressive"), ("eos", "length", "budget", "")
TRACE_FIELDS = dict(prompt_ids="prompt", config="object", mode="mode", target_name="string", draft_name="string",
                    eos_token_ids="ids", rounds="objects", prefill_s="number", total_s="number",
                    stop_reason="stop_reason", token_text="token_text",
                    token_bytes="token_bytes", forward="string")
ROUND_FIELDS = dict(index="count", k="count", drafted="ids", q="numbers", p="numbers", accept_prob="numbers",
                    u="numbers?", beta="numbers?", n_accepted="count", emitted="ids", resampled="id?", bonus="id?",
                    next_p="number", residual_top="residual_top", draft_s="number", target_s="number", wall_s="number",
                    tree="object?", draft_view="object?", rule_accept="numbers?", rule_tv="numbers?")
OPTIONAL_ROUND_FIELDS = ("tree", "draft_view", "rule_accept", "rule_tv")  # traces from before they were recorded
VIEW_FIELDS = dict(ids="ids", texts="strings")
TREE_FIELDS = dict(nodes="objects", path="ids", children="children")
NODE_FIELDS = dict(parent="parent", depth="count", token="count", q="number", p="number", p_adj="number?",
                   accept_prob="number?", u="number?", status="node_status", value="number?")
NODE_REQUIRED = tuple(name for name in NODE_FIELDS if name != "value")  # traces from before it was recorded


MAX_ID = 2**31  # token ids, indices and counts lie below it (a larger one overflows a tensor)
MAX_TEXT_CHARS = 256  # a token's text, a model's name: longer is no token's (token_bytes holds at most 128 bytes)
MAX_PROMPT_IDS = 32768  # prompt ids read (the timeline shows the last views.timeline.PROMPT_SHOWN of them)


def _is_count(v) -> bool:  # an index, a count or a token id
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_ID


def _is_num(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) < 2**63 if isinstance(v, int) else math.isfinite(v)


def _is_text(v) -> bool:
    """A string of valid Unicode (no lone surrogate) of at most MAX_TEXT_CHARS characters."""
    return isinstance(v, str) and len(v) <= MAX_TEXT_CHARS and _encodes(v)


def _plain(v) -> bool:
    """An object of valid Unicode and finite numbers, its integers below 2**63 in size (a config's values)."""
    if isinstance(v, dict):
        return all(_encodes(k) and _plain(x) for k, x in v.items())
    if isinstance(v, list):
        return all(map(_plain, v))
    return v is None or isinstance(v, bool) or _is_num(v) or isinstance(v, str) and _encodes(v)


def _encodes(v) -> bool:
    """Whether v (a string, or an object of strings, numbers and lists) is valid Unicode throughout."""
    try:
        (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError):
        return False
    return True


def _is_hex(h: str) -> bool:
    return len(h) % 2 == 0 and all(c in "0123456789abcdef" for c in h)


def _list_of(ok):
    return lambda v: isinstance(v, list) and all(ok(x) for x in v)


TEXT = f"valid Unicode of at most {MAX_TEXT_CHARS} characters"
KINDS = {  # kind: (check, what the message says it must be)
    "count": (_is_count, "an integer in [0, 2**31)"),
    "id?": (lambda v: v is None or _is_count(v), "a token id or null"),
    "number": (_is_num, "a finite number"),
    "string": (_is_text, f"a string of {TEXT}"),
    "object": (lambda v: isinstance(v, dict) and _plain(v), "an object of valid Unicode and numbers below 2**63"),
    "object?": (lambda v: v is None or isinstance(v, dict) and _plain(v),
                "an object of valid Unicode and numbers below 2**63, or null"),
    "number?": (lambda v: v is None or _is_num(v), "a finite number or null"),
    "parent": (lambda v: isinstance(v, int) and not isinstance(v, bool) and -1 <= v < MAX_ID, "an integer >= -1"),
    "children": (lambda v: v in ("top", "iid", "distinct"), "one of top, iid, distinct"),
    "node_status": (lambda v: v in NODE_STATUSES, f"one of {NODE_STATUSES}"),
    "ids": (_list_of(_is_count), "a list of token ids"),
    "prompt": (lambda v: _list_of(_is_count)(v) and len(v) <= MAX_PROMPT_IDS,
               f"a list of at most {MAX_PROMPT_IDS} token ids"),
    "numbers": (_list_of(_is_num), "a list of finite numbers"),
    "strings": (_list_of(_is_text), f"a list of strings of {TEXT}"),
    "numbers?": (_list_of(lambda x: x is None or _is_num(x)), "a list of finite numbers or nulls"),
    "objects": (_list_of(lambda v: isinstance(v, dict)), "a list of objects"),
    "mode": (lambda v: v in MODES, f"one of {MODES}"),
    "stop_reason": (lambda v: v in STOP_REASONS, f"one of {STOP_REASONS}"),
    "token_text": (lambda v: isinstance(v, dict) and all(k.isascii() and k.isdigit() and len(k) < 11 and _is_text(s)
                                                         for k, s in v.items()),
                   f'an object {{"token id": "text"}}, each text {TEXT}'),
    "token_bytes": (lambda v: isinstance(v, dict) and all(k.isascii() and k.isdigit() and len(k) < 11 and isinstance(h, str)
                                                          and len(h) <= 256 and _is_hex(h) for k, h in v.items()),
                    'an object {"token id": "hex bytes"}'),
    "residual_top": (_list_of(lambda r: isinstance(r, list) and len(r) == 4 and _is_count(r[0])
                              and all(map(_is_num, r[1:]))), "a list of [token, residual, p, q] rows"),
}


MAX_ROUNDS, MAX_TREE_NODES_TOTAL = 4096, 65536  # a trace with more is refused before anything is built
MAX_TREE_NODES_ROUND = 8 * MAX_TREE_NODES  # a round's tree: a run verifies at most MAX_TREE_NODES in one pass


def check_sizes(rounds: list, where: str) -> None:
    """At most MAX_ROUNDS rounds and MAX_TREE_NODES_TOTAL tree nodes (MAX_TREE_NODES_ROUND in one round): a
    ValueError before any is built."""
    trees = [len(r["tree"].get("nodes", ())) for r in rounds if isinstance(r, dict) and isinstance(r.get("tree"), dict)]
    if len(rounds) > MAX_ROUNDS or sum(trees) > MAX_TREE_NODES_TOTAL or max(trees, default=0) > MAX_TREE_NODES_ROUND:
        raise ValueError(f"malformed trace JSON: {where}rounds: at most {MAX_ROUNDS} rounds and "
                         f"{MAX_TREE_NODES_TOTAL} tree nodes, {MAX_TREE_NODES_ROUND} in one round, are read")


def check_fields(d: dict, kinds: dict, where: str, required=()) -> None:
    unexpected, missing = sorted(set(d) - set(kinds)), sorted(set(required) - set(d))
    if unexpected or missing:  # ascii(): a name is shown escaped (it may hold markup or a lone surrogate)
        where, unexpected = where or "trace ", [ascii(name[:MAX_TEXT_CHARS]) for name in unexpected[:8]]
        raise ValueError(f"malformed trace JSON: {where}fields differ: missing {missing}, unexpected "
                         f"[{', '.join(unexpected)}]")
    for name, value in d.items():
        ok, what = KINDS[kinds[name]]
        if not ok(value):  # the type, never the value, goes into the message: it may be markup
            raise ValueError(f"malformed trace JSON: {where}{name} must be {what}, got {type(value).__name__}")


def round_fields(d: dict, where: str, cfg: DecodeConfig) -> dict:
    """A round's JSON object checked (kinds, equal per-token lengths, n_accepted <= drafted <= k) and turned
    into Round's keyword arguments."""
    check_fields(d, ROUND_FIELDS, where, required=[f for f in ROUND_FIELDS if f not in OPTIONAL_ROUND_FIELDS])
    m, n, k = len(d["drafted"]), d["n_accepted"], d["k"]
    for name in ("q", "p", "accept_prob", "u", "beta", "rule_accept", "rule_tv"):  # one per drafted token, or none
        values, needed = d.get(name, ()), cfg.record and name not in OPTIONAL_ROUND_FIELDS
        if len(values) != m and (needed or values):
            raise ValueError(f"malformed trace JSON: {where}{name} has {len(values)} entries, drafted has {m}")
    if n > m or m > k:
        what = f"n_accepted ({n}) exceeds the drafted tokens ({m})" if n > m else f"drafted ({m}) exceeds k ({k})"
        raise ValueError(f"malformed trace JSON: {where}{what}")
    tree, view = d.get("tree"), d.get("draft_view")
    d = {key: tuple(v) if isinstance(v, list) else v for key, v in d.items()}
    d["residual_top"] = tuple(tuple(t) for t in d["residual_top"])
    if tree is not None:
        d["tree"] = tree_fields(tree, f"{where}tree.")
    if view is not None:
        check_fields(view, VIEW_FIELDS, f"{where}draft_view.", required=VIEW_FIELDS)
        if len(view["ids"]) != len(view["texts"]):
            raise ValueError(f"malformed trace JSON: {where}draft_view has unequal ids and texts")
        d["draft_view"] = DraftTokens(tuple(view["ids"]), tuple(view["texts"]))
    return d


def tree_fields(d: dict, where: str):
    """A tree round's JSON object checked (kinds; every parent an earlier node, depths consistent, the path a
    chain of accepted nodes from the root) and turned into a TreeRecord."""
    check_fields(d, TREE_FIELDS, where, required=TREE_FIELDS)
    nodes = []
    for i, node in enumerate(d["nodes"]):
        check_fields(node, NODE_FIELDS, f"{where}nodes[{i}].", required=NODE_REQUIRED)
        parent = node["parent"]
        if parent >= i or node["depth"] != (0 if parent < 0 else nodes[parent].depth + 1):
            raise ValueError(f"malformed trace JSON: {where}nodes[{i}] has a parent or depth that is not a tree's")
        nodes.append(TreeNode(**node))
    path = d["path"]
    for j, n in enumerate(path):
        if n >= len(nodes) or nodes[n].parent != (path[j - 1] if j else -1) or nodes[n].status != "accepted":
            raise ValueError(f"malformed trace JSON: {where}path is not a chain of accepted nodes from the root")
    return TreeRecord(tuple(nodes), tuple(path), d["children"])


def loads(text: str):
    """json.loads, with Python's refusal of a huge integer (over 4,300 digits) said as a malformed trace."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as e:
        if "digits" in str(e):
            raise ValueError("malformed trace JSON: a number with thousands of digits (no trace holds one)") from None
        raise
