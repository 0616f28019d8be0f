"""The trace JSON's schema: every field's kind and what each kind admits, checked on import (imported traces
are rendered into HTML, so nothing unchecked gets that far). Each kind is a pydantic type (strict: nothing is
converted), each record a TypedDict of its fields' kinds, and one TypeAdapter checks the parsed JSON before anything
is built; then what relates fields (lengths, a tree's parents, the path). ``Trace.from_json`` calls these; a
violation is a ValueError that names the field and its type, never its value (it may be markup).

What an import may hold is bounded by what it makes the app render and keep: token ids and counts below 2**31,
finite numbers, texts of valid Unicode (a lone surrogate breaks the response stream) of at most
``MAX_TEXT_CHARS`` characters, at most ``MAX_PROMPT_IDS`` prompt ids, ``MAX_ROUNDS`` rounds and
``MAX_TREE_NODES_TOTAL`` tree nodes."""
from __future__ import annotations

import json
from dataclasses import fields
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, Strict, TypeAdapter, ValidationError, with_config
from pydantic_core import core_schema
from typing_extensions import NotRequired, TypeAliasType, TypedDict

from .config import MAX_TREE_NODES, DecodeConfig
from .records import NODE_STATUSES, DraftTokens, TreeNode, TreeRecord

MAX_ID = 2**31  # token ids, indices and counts lie below it (a larger one overflows a tensor)
MAX_TEXT_CHARS = 256  # a token's text, a model's name: longer is no token's (token_bytes holds at most 128 bytes)
MAX_PROMPT_IDS = 32768  # prompt ids read (the timeline shows the last views.timeline.PROMPT_SHOWN of them)
MAX_ROUNDS, MAX_TREE_NODES_TOTAL = 4096, 65536  # a trace with more is refused before anything is built
MAX_TREE_NODES_ROUND = 8 * MAX_TREE_NODES  # a round's tree: a run verifies at most MAX_TREE_NODES in one pass


class _Only:
    """In an annotation: the value must be an instance of these types before the rest is checked (pydantic's float
    would take an int of any size, which ``Number`` refuses from 2**63)."""

    def __init__(self, *types):
        self.types = types

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.chain_schema([core_schema.is_instance_schema(self.types), handler(source)])


# -- what each kind of field admits, as pydantic types (strict: no value is converted into another type) ------------
Count = Annotated[int, Strict(), Field(ge=0, lt=MAX_ID)]  # an index, a count or a token id
Number = Annotated[Annotated[float, Strict(), Field(allow_inf_nan=False), _Only(float)]  # finite; a float first:
                   | Annotated[int, Strict(), Field(gt=-2**63, lt=2**63)], Field(union_mode="left_to_right")]  # faster
# a str with a length bound is read as UTF-8, so a lone surrogate is refused (a plain str passes as it is): every
# str kind has one; a config's strings and names the file's own, 4 MiB (trace.MAX_TRACE_BYTES)
Text = Annotated[str, Strict(), Field(max_length=MAX_TEXT_CHARS)]
Key = Annotated[str, Strict(), Field(max_length=4 * 2**20)]
Plain = TypeAliasType("Plain", Annotated[bool, Strict()] | Number | Key | list["Plain"] | dict[Key, "Plain"] | None)
IdKey = Annotated[str, Strict(), Field(pattern=r"^[0-9]{1,10}$")]  # a token id as a JSON object's key
Hex = Annotated[str, Strict(), Field(pattern=r"^(?:[0-9a-f]{2}){0,128}$")]  # at most 128 bytes in hex
MODES, STOP_REASONS = ("speculative", "autoregressive"), ("eos", "length", "budget", "")
TEXT = f"valid Unicode of at most {MAX_TEXT_CHARS} characters"
KINDS = {  # kind: (its type, what the message says it must be)
    "count": (Count, "an integer in [0, 2**31)"),
    "id?": (Count | None, "a token id or null"),
    "number": (Number, "a finite number"),
    "number?": (Number | None, "a finite number or null"),
    "string": (Text, f"a string of {TEXT}"),
    "object": (dict[Key, Plain], "an object of valid Unicode and numbers below 2**63"),
    "parent": (Annotated[int, Strict(), Field(ge=-1, lt=MAX_ID)], "an integer >= -1"),
    "children": (Literal["top", "iid", "distinct"], "one of top, iid, distinct"),
    "node_status": (Literal[NODE_STATUSES], f"one of {NODE_STATUSES}"),
    "ids": (list[Count], "a list of token ids"),
    "prompt": (Annotated[list[Count], Field(max_length=MAX_PROMPT_IDS)], f"a list of at most {MAX_PROMPT_IDS} token ids"),
    "numbers": (list[Number], "a list of finite numbers"),
    "strings": (list[Text], f"a list of strings of {TEXT}"),
    "numbers?": (list[Number | None], "a list of finite numbers or nulls"),
    "mode": (Literal[MODES], f"one of {MODES}"),
    "stop_reason": (Literal[STOP_REASONS], f"one of {STOP_REASONS}"),
    "token_text": (dict[IdKey, Text], f'an object {{"token id": "text"}}, each text {TEXT}'),
    "token_bytes": (dict[IdKey, Hex], 'an object {"token id": "hex bytes"}'),
    "residual_top": (list[Annotated[tuple[Count, Number, Number, Number], Strict(False)]],
                     "a list of [token, residual, p, q] rows"),
}

# -- the records: each field's kind; a record's fields hold other records where the kind is one below -----------
NODE_FIELDS = dict(parent="parent", depth="count", token="count", q="number", p="number", p_adj="number?",
                   accept_prob="number?", u="number?", status="node_status", value="number?")
NODE_REQUIRED = tuple(name for name in NODE_FIELDS if name != "value")  # traces from before it was recorded
TREE_FIELDS = dict(nodes="nodes", path="ids", children="children")
VIEW_FIELDS = dict(ids="ids", texts="strings")
ROUND_FIELDS = dict(index="count", k="count", drafted="ids", q="numbers", p="numbers", accept_prob="numbers",
                    u="numbers?", beta="numbers?", n_accepted="count", emitted="ids", resampled="id?", bonus="id?",
                    next_p="number", residual_top="residual_top", draft_s="number", target_s="number", wall_s="number",
                    tree="tree?", draft_view="view?", rule_accept="numbers?", rule_tv="numbers?",
                    draft_head_s="number?", target_head_s="number?")
OPTIONAL_ROUND_FIELDS = ("tree", "draft_view", "rule_accept", "rule_tv", "draft_head_s",
                         "target_head_s")  # traces from before they were recorded
TRACE_FIELDS = dict(prompt_ids="prompt", config="object", mode="mode", target_name="string", draft_name="string",
                    eos_token_ids="ids", rounds="rounds", prefill_s="number", total_s="number",
                    stop_reason="stop_reason", token_text="token_text",
                    token_bytes="token_bytes", forward="string")
ROUND_REQUIRED = tuple(f for f in ROUND_FIELDS if f not in OPTIONAL_ROUND_FIELDS)
TRACE_REQUIRED = ("prompt_ids", "config", "rounds")


def _record(name: str, kinds: dict, required: tuple):
    """A record's TypedDict: each field's kind as its type, the optional ones NotRequired, no other field."""
    types = {f: KINDS[kind][0] if f in required else NotRequired[KINDS[kind][0]] for f, kind in kinds.items()}
    return with_config(ConfigDict(extra="forbid"))(TypedDict(name, types))


RECORD_KINDS = {  # kind: (the record's fields, those required, a list of them (or one), what the message says)
    "nodes": (NODE_FIELDS, NODE_REQUIRED, True, "a list of objects"),
    "tree?": (TREE_FIELDS, tuple(TREE_FIELDS), False, "a tree object or null"),
    "view?": (VIEW_FIELDS, tuple(VIEW_FIELDS), False, "a draft view object or null"),
    "rounds": (ROUND_FIELDS, ROUND_REQUIRED, True, "a list of objects"),
}


def _schema() -> TypeAdapter:
    """The records' kinds added to KINDS (inner records first: a record's type uses theirs); the trace's check."""
    for kind, (kinds, required, many, words) in RECORD_KINDS.items():
        record = _record(kind.strip("?").title() + "JSON", kinds, required)
        KINDS[kind] = (list[record] if many else record | None, words)
    return TypeAdapter(_record("TraceJSON", TRACE_FIELDS, TRACE_REQUIRED))


TRACE_JSON = _schema()


def check_sizes(rounds: list, where: str) -> None:
    """At most MAX_ROUNDS rounds and MAX_TREE_NODES_TOTAL tree nodes (MAX_TREE_NODES_ROUND in one round): a
    ValueError before any is built."""
    trees = [len(nodes) for r in rounds if isinstance(r, dict) and isinstance(r.get("tree"), dict)
             and isinstance(nodes := r["tree"].get("nodes"), list)]
    if len(rounds) > MAX_ROUNDS or sum(trees) > MAX_TREE_NODES_TOTAL or max(trees, default=0) > MAX_TREE_NODES_ROUND:
        raise ValueError(f"malformed trace JSON: {where}rounds: at most {MAX_ROUNDS} rounds and "
                         f"{MAX_TREE_NODES_TOTAL} tree nodes, {MAX_TREE_NODES_ROUND} in one round, are read")


def check_trace(data: dict, where: str) -> None:
    """Every field of a trace's JSON object, its rounds' and their trees' of the kind its table says (sizes first,
    then the schema), and the config's field names DecodeConfig's: a ValueError that names the first field wrong
    and its type, never its value (it may be markup)."""
    if isinstance(data.get("rounds"), list):
        check_sizes(data["rounds"], where)
    try:
        TRACE_JSON.validate_python(data)
    except ValidationError as e:
        raise ValueError(_said(e.errors()[0]["loc"], data, where)) from None
    names = [f.name for f in fields(DecodeConfig)]
    _check_names(data["config"], dict.fromkeys(names), (), f"{where}config ")


def _said(loc: tuple, data: dict, where: str) -> str:
    """The error at ``loc`` (pydantic's path into data) in words: down the records to the field, then its kind."""
    obj, kinds, required = data, TRACE_FIELDS, TRACE_REQUIRED
    while loc:
        name, rest = loc[0], loc[1:]
        value = obj.get(name) if name in kinds else None
        fields_, needed, many, _ = RECORD_KINDS.get(kinds.get(name), (None, (), False, ""))
        if fields_ is not None and many and len(rest) > 1 and isinstance(value, list) \
                and isinstance(value[rest[0]], dict):  # into one of a list of records
            obj, kinds, required, where, loc = value[rest[0]], fields_, needed, f"{where}{name}[{rest[0]}].", rest[1:]
        elif fields_ is not None and not many and rest and isinstance(value, dict):  # into a record
            obj, kinds, required, where, loc = value, fields_, needed, f"{where}{name}.", rest
        else:
            break
    _check_names(obj, kinds, required, where)
    if not loc:  # the object itself (its names are right: not met so far)
        return f"malformed trace JSON: {where or 'the trace '}is not an object of its fields"
    name = loc[0]  # a field of a kind, the object's names right: the value is of the wrong kind
    return f"malformed trace JSON: {where}{name} must be {KINDS[kinds[name]][1]}, got {type(obj[name]).__name__}"


def _check_names(d: dict, kinds: dict, required, where: str) -> None:
    """The object's field names against its table: a ValueError naming those missing and the unexpected ones that
    are plain names (one that is not may hold markup or a lone surrogate: it is counted, never shown)."""
    unexpected, missing = set(d) - set(kinds), sorted(set(required) - set(d))
    if unexpected or missing:
        shown = sorted(name for name in unexpected if name.isascii() and name.isidentifier() and len(name) <= 64)
        hidden = len(unexpected) - len(shown)
        raise ValueError(f"malformed trace JSON: {where or 'trace '}fields differ: missing {missing}, unexpected "
                         f"{shown[:8]}" + (f" and {hidden} not shown (not a plain name)" if hidden else ""))


def round_fields(d: dict, where: str, cfg: DecodeConfig) -> dict:
    """A round's JSON object, its kinds checked (check_trace), checked further (equal per-token lengths,
    n_accepted <= drafted <= k) and turned into Round's keyword arguments."""
    m, n, k = len(d["drafted"]), d["n_accepted"], d["k"]
    for name in ("q", "p", "accept_prob", "u", "beta", "rule_accept", "rule_tv"):  # one per drafted token, or none
        values, needed = d.get(name, ()), cfg.record and name not in OPTIONAL_ROUND_FIELDS
        if len(values) != m and (needed or values):
            raise ValueError(f"malformed trace JSON: {where}{name} has {len(values)} entries, drafted has {m}")
    if n > m or m > k:
        what = f"n_accepted ({n}) exceeds the drafted tokens ({m})" if n > m else f"drafted ({m}) exceeds k ({k})"
        raise ValueError(f"malformed trace JSON: {where}{what}")
    for part in ("draft", "target"):  # a share of its pass: between 0 and the pass's time
        head, total = d.get(f"{part}_head_s"), d[f"{part}_s"]
        if head is not None and not 0 <= head <= total:
            raise ValueError(f"malformed trace JSON: {where}{part}_head_s ({head}) is not within 0..{part}_s ({total})")
    tree, view = d.get("tree"), d.get("draft_view")
    d = {key: tuple(v) if isinstance(v, list) else v for key, v in d.items()}
    d["residual_top"] = tuple(tuple(t) for t in d["residual_top"])
    if tree is not None:
        d["tree"] = tree_fields(tree, f"{where}tree.")
    if view is not None:
        if len(view["ids"]) != len(view["texts"]):
            raise ValueError(f"malformed trace JSON: {where}draft_view has unequal ids and texts")
        d["draft_view"] = DraftTokens(tuple(view["ids"]), tuple(view["texts"]))
    return d


def tree_fields(d: dict, where: str):
    """A tree round's JSON object, its kinds checked (check_trace), checked further (every parent an earlier node,
    depths consistent, the path a chain of accepted nodes from the root) and turned into a TreeRecord."""
    nodes = []
    for i, node in enumerate(d["nodes"]):
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
