"""DecodeConfig: every knob of one generation run, checked whenever one is built (replace too), plus named presets;
TreeConfig: the tree a run drafts instead of a chain, checked the same way."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from types import NoneType, UnionType
from typing import Annotated, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import ConfigDict, Field, InstanceOf, TypeAdapter, ValidationError, with_config
from pydantic.fields import FieldInfo
from pydantic_core import core_schema
from typing_extensions import TypedDict

KPolicy = Literal["fixed", "history", "heuristic"]
K_POLICIES = get_args(KPolicy)
# the accept step's rules (specviz.rules): Leviathan's is the default; LOSSY ones change what is emitted
Rule = Literal["leviathan", "point_mass", "exact_match", "typical", "optimistic", "lenient"]
RULES = get_args(Rule)
LOSSY = frozenset({"typical", "optimistic", "lenient"})
# how a sampled chain's drafts are verified: one token at a time (Leviathan et al. 2023) or as one block (Sun et al.
# 2024, "Block Verification Accelerates Speculative Decoding"): both exact; the block keeps at least as many
Verify = Literal["token", "block"]
VERIFIES = get_args(Verify)
TreeChildren = Literal["auto", "top", "iid", "distinct"]
TREE_CHILDREN = get_args(TreeChildren)
MAX_TREE_NODES = 128  # nodes one verify pass may hold (a 128-token forward still costs a few one-token ones)
EXAMPLE_PROMPTS = [  # in the style of the bundled models' corpus (Shakespeare and Milton)
    "ROMEO:",
    "Shall I compare thee to a summer's day?",
    "To be, or not to be, that is the question:",
    "Of Man's first disobedience, and the fruit",
    "KING HENRY:\nOnce more unto the breach, dear friends,",
]
HELDOUT_PROMPTS = [  # for benchmarks: from the corpus's held-out works (its validation split) or new lines
    "VALENTINE:\nCease to persuade, my loving Proteus:",
    "TIMON:\nFriends, I have brought you here tonight",
    "JULIA:\nBut say, Lucetta, now we are alone,",
    "The night is cold, and all the stars are out;",
    "APEMANTUS:\nThou art a fool to trust",
]


class _IntOrFloat:
    """After a Field's bounds in an annotation: the value must be an int or a float (or a subclass) before pydantic's
    float check, which alone would take anything with ``__float__`` (a tensor, a numpy float32). In its core, fast."""

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.chain_schema([core_schema.is_instance_schema((int, float)), handler(source)])


REAL = _IntOrFloat()


@dataclass(frozen=True)
class TreeConfig:
    """Draft a tree of continuations instead of a chain; the target verifies every node in one forward pass.

    Static tree: ``shape[d]`` children for every node at depth d (``(3, 2, 2, 1)``: three children of the
    root, two of each of those, ...). Dynamic tree (``budget`` > 0, as EAGLE-2): each of ``depth`` levels
    expands the ``width`` most valuable nodes of the level above, ``width`` children each, and the ``budget`` most
    valuable nodes are verified. A node's value is its chance of being reached and accepted, learnt from the run's
    own verdicts (``specviz.trees.value``) where EAGLE-2 takes the product of q along the path, and
    ``threshold`` > 0 drafts and verifies only nodes at least that likely to be reached and accepted: the tree
    grows deep where the draft is reliable, wide where it is not, and stops where another row would not pay.
    ``children``, how a node's children are chosen (and so which acceptance rule is exact):
    "top" the draft's most probable tokens (deterministic: each tried as a point mass), "iid" drawn from q with
    replacement (SpecInfer's multi-candidate rule), "distinct" drawn from q without replacement (recursive
    rejection sampling), "auto" top when greedy and distinct when sampling. A sampled dynamic tree takes top
    children or distinct ones; with distinct ones, how many children a node gets is fixed from its own value before
    they are drawn, and every drawn child is verified (keeping drawn children by their probability would bias the
    law), so its budget and threshold bound the tree rather than choosing among what was drawn.
    A chain with siblings (``siblings`` >= 0, "chain:DEPTH,SIBLINGS[,THRESHOLD]"): the chain of ``depth`` drafts
    the chain decoder would draft, drafted the same way, plus at most ``siblings`` leaves beside it, each the
    draft's best other token at one of the chain's positions (``specviz.trees.chain``).
    A tree of ranks (``choices``, Medusa's ``medusa_choices``): each node the path of ranks from the root, (0, 1) the
    draft's second most probable token below its most probable one; every prefix of a path is a node too.

    Each field's annotation is its check, as DecodeConfig's (pydantic, strict: an integer is no bool, a number no
    string, NaN fails the threshold's bounds), then the checks that relate fields; ``choices`` is checked by hand
    (``_checked_choices``). A refusal is a ValueError naming the field and its limit, never the value given."""

    shape: Annotated[tuple[Annotated[int, Field(ge=1)], ...], Field(min_length=1, max_length=16)] = (3, 2, 2, 1)
    budget: Annotated[int, Field(ge=0, description="0 = a static tree of the given shape")] = 0
    depth: Annotated[int, Field(ge=1, le=16)] = 5
    width: Annotated[int, Field(ge=1, le=16)] = 4
    children: TreeChildren = "auto"
    threshold: Annotated[float, Field(ge=0, lt=1), REAL] = 0.0
    siblings: Annotated[int, Field(ge=0)] | None = None  # >= 0: a chain of ``depth`` with that many sibling leaves
    # a tree of ranks (Medusa's): each node its path of ranks. Checked by hand, not by its annotation: a path's
    # prefixes must be paths too and no path may repeat (relations between entries), and JSON gives lists, which
    # are read as tuples where a strict tuple check would refuse them
    choices: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self):
        if isinstance(self.shape, list):
            object.__setattr__(self, "shape", tuple(self.shape))
        if self.choices is not None:
            object.__setattr__(self, "choices", _checked_choices(self))
        try:
            _TREE_CHECK.validate_python({name: self.__dict__[name] for name in _TREE_HINTS})
        except ValidationError as e:
            said = (_tree_said(err, self.__dict__) for err in e.errors() if not _miscounted(err, self.shape))
            raise ValueError("; ".join(dict.fromkeys(said))) from None
        if self.dynamic and self.children == "iid":
            raise ValueError("a dynamic tree takes top children or children drawn without replacement: use "
                             "children='top', 'distinct' or 'auto'")
        if self.chained and (self.dynamic or self.children == "iid"):
            raise ValueError("a chain with siblings has no node budget and draws its siblings without "
                             "replacement: use budget=0 and children 'auto', 'top' or 'distinct'")
        if self.threshold and not (self.dynamic or self.chained):
            raise ValueError("a tree threshold needs a dynamic tree (a node budget > 0) or a chain with siblings")
        if (nodes := self.nodes) > MAX_TREE_NODES:
            raise ValueError(f"the tree has {nodes if nodes < 10**6 else 'over a million'} nodes; at most "
                             f"{MAX_TREE_NODES} are verified in one pass")

    @classmethod
    def parse(cls, text: str) -> TreeConfig:
        """From a short spec: "3,2,2,1" (a static shape), "dynamic:10,8,3" (budget, depth, width) or
        "dynamic:10,8,3,0.25" (and a threshold), "chain:12,2" (depth, siblings) or "chain:12,2,0.05" (and a
        threshold), any followed by "/iid", "/distinct" or "/top" for the children rule; "choices:0;0.0;1;0.1" a tree
        of ranks (paths by ";", ranks by "."). ValueError with the forms if unreadable."""
        spec, _, children = str(text).strip().partition("/")
        if spec.startswith("choices:"):
            return cls(choices=_choice_paths(spec[len("choices:"):]), **({"children": children} if children else {}))
        kind, _, numbers = spec.rpartition(":")
        parts = [v for v in numbers.replace(" ", "").split(",") if v]
        arity = {"dynamic": 3, "chain": 2}.get(kind)
        threshold = parts.pop() if arity and len(parts) == arity + 1 else "0"
        try:
            values, threshold = tuple(int(v) for v in parts), float(threshold)
        except ValueError:
            values = ()
        forms = ('a static shape like "3,2,2,1", "dynamic:BUDGET,DEPTH,WIDTH[,THRESHOLD]" like "dynamic:10,8,3" '
                 'or "dynamic:12,10,2,0.25", or "chain:DEPTH,SIBLINGS[,THRESHOLD]" like "chain:12,2"')
        if kind not in ("", "static", "dynamic", "chain") or not values or (arity and len(values) != arity):
            raise ValueError(f"unreadable tree {text!r}: give {forms} (optionally /top, /iid or /distinct)")
        extra = {"children": children} if children else {}
        if kind == "dynamic":
            return cls(budget=values[0], depth=values[1], width=values[2], threshold=threshold, **extra)
        if kind == "chain":
            return cls(depth=values[0], siblings=values[1], threshold=threshold, **extra)
        return cls(shape=values, **extra)

    @property
    def label(self) -> str:
        """The short spec ``parse`` reads."""
        if self.choices is not None:
            return "choices:" + ";".join(".".join(map(str, path)) for path in self.choices)
        body = (f"dynamic:{self.budget},{self.depth},{self.width}" if self.dynamic else
                f"chain:{self.depth},{self.siblings}" if self.chained else ",".join(map(str, self.shape)))
        body += f",{self.threshold:g}" if self.threshold else ""
        return body + ("" if self.children == "auto" else f"/{self.children}")

    @property
    def dynamic(self) -> bool:
        return self.budget > 0

    @property
    def chained(self) -> bool:
        return self.siblings is not None

    @property
    def nodes(self) -> int:
        """Nodes the target verifies per round, at most (fewer where the draft runs out of candidates)."""
        if self.choices is not None:
            return len(self.choices)
        if self.dynamic:
            return self.budget
        if self.chained:
            return self.depth + self.siblings
        total, level = 0, 1
        for m in self.shape:
            level *= m
            total += level
        return total

    @property
    def levels(self) -> int:
        if self.choices is not None:
            return max(map(len, self.choices))
        return self.depth if self.dynamic or self.chained else len(self.shape)

    def children_for(self, greedy: bool) -> str:
        """The children rule in force: greedy runs always take top children (q's argmax is all greedy drafts), and so
        does a tree of ranks (each node a rank of q)."""
        if greedy or self.choices is not None:
            return "top"
        return "distinct" if self.children == "auto" else self.children


@dataclass(frozen=True)
class DecodeConfig:
    """Settings shared by speculative and autoregressive generation.

    temperature == 0 means greedy. Otherwise logits are divided by temperature, then
    top-k (0 = off), then top-p (1.0 = off) filtering is applied, in that order, to the
    target's AND the draft's logits (the order transformers' ``generate()`` uses).

    Each field's annotation is its check (pydantic, strict: an integer is no bool, a number no string; every
    float field has a bound, so NaN fails it); ``__post_init__`` runs them, so ``dataclasses.replace`` checks
    again, then the checks that relate two fields. A refusal is a ValueError naming the field and its limit,
    never the value given (it may be markup).
    """

    k: Annotated[int, Field(ge=1, description="draft at least one token per round")] = 4
    max_new_tokens: Annotated[int, Field(ge=0)] = 64
    temperature: Annotated[float, Field(ge=0, description="0 = greedy"), REAL] = 1.0
    top_k: Annotated[int, Field(ge=0, description="use 0 to turn top-k off")] = 0
    top_p: Annotated[float, Field(gt=0, le=1, description="1.0 = off"), REAL] = 1.0
    seed: Annotated[int, Field(ge=0, lt=2**63, description="a torch.Generator seed")] = 0
    k_policy: KPolicy = "fixed"
    min_k: Annotated[int, Field(ge=1)] = 1
    max_k: Annotated[int, Field(ge=1)] = 10
    # stop a round's drafting once the draft gives its own token a probability below this (0 = off):
    # transformers' assistant_confidence_threshold. The stop depends on the draft alone: still lossless.
    draft_stop: Annotated[float, Field(ge=0, lt=1, description="0 = off"), REAL] = 0.0
    record: bool = True  # False keeps only what generation needs (benchmarks the recording overhead)
    tree: InstanceOf[TreeConfig] | None = None  # draft a tree (k then unused); None: a chain of k
    # the accept step's rule (specviz.rules; lossy ones in LOSSY) and its parameters: Medusa's typical acceptance
    # accepts x where p(x) > min(typical_epsilon, typical_delta * exp(-H(p))); lenient accepts with
    # min(1, p / (lenience * q)). draft_greedy: the draft takes argmax q while the target samples (q is then onehot)
    rule: Annotated[Rule, Field(description=f"lossy: {', '.join(sorted(LOSSY))}")] = "leviathan"
    typical_epsilon: Annotated[float, Field(gt=0, lt=1, description="Medusa: 0.09"), REAL] = 0.09
    typical_delta: Annotated[float, Field(gt=0, lt=float("inf"), description="Medusa: 0.3"), REAL] = 0.3
    lenience: Annotated[float, Field(gt=0, le=1, description="1 = Leviathan's rule"), REAL] = 0.5
    draft_greedy: bool = False
    # "block": a sampled chain is verified as one block (Leviathan's rule only; greedy runs decide on the argmax
    # either way, so their text is the same)
    verify: Verify = "token"

    def __post_init__(self):
        if isinstance(self.tree, dict):  # as to_dict and the trace JSON write it
            object.__setattr__(self, "tree", _tree_from(self.tree))
        try:
            _CHECK.validate_python(self.__dict__)
        except ValidationError as e:
            raise ValueError("; ".join(_said(err, self.__dict__) for err in e.errors())) from None
        if self.max_k < self.min_k:
            raise ValueError(f"max_k must be >= min_k ({self.min_k})")
        if self.tree is not None and (self.k_policy != "fixed" or self.draft_stop):
            raise ValueError("a tree round drafts its whole tree: use k_policy='fixed' and draft_stop=0 with a tree")
        if self.tree is not None and (self.rule != "leviathan" or self.draft_greedy):
            raise ValueError("a token tree is verified with Leviathan's rule and sampled drafts: use rule='leviathan' "
                             "and draft_greedy=False with a tree, or a chain (tree=None) for the other rules")
        if self.verify == "block" and (self.tree is not None or self.rule != "leviathan"):
            raise ValueError("block verification takes a chain (tree=None) under Leviathan's rule (rule='leviathan'): "
                             "use verify='token' with a tree or another rule")
        if self.k_policy != "fixed" and not self.min_k <= self.k <= self.max_k:
            raise ValueError(f"with k_policy={self.k_policy!r} the starting k must lie in "
                             f"[min_k, max_k] = [{self.min_k}, {self.max_k}]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)


# -- DecodeConfig's checks: its annotations, run by pydantic over the instance's fields --------------------------
_HINTS = get_type_hints(DecodeConfig, include_extras=True)
_CHECK = TypeAdapter(with_config(ConfigDict(strict=True))(TypedDict("DecodeConfigFields", _HINTS)))
_SIGNS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_CROSSED = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}  # pydantic's
# TreeConfig's: every field's annotation but the choices' (checked by hand)
_TREE_HINTS = {k: v for k, v in get_type_hints(TreeConfig, include_extras=True).items() if k != "choices"}
_TREE_CHECK = TypeAdapter(with_config(ConfigDict(strict=True))(TypedDict("TreeConfigFields", _TREE_HINTS)))


def _choice_paths(text: str) -> list[list[int]]:
    """A tree of ranks from its short spec: paths by ";", ranks by "." ("0;0.0;1;0.1")."""
    try:
        return [[int(r) for r in path.split(".")] for path in text.replace(" ", "").split(";") if path]
    except ValueError:
        raise ValueError('unreadable tree choices: give paths of ranks like "choices:0;0.0;1;0.1"') from None


def _checked_choices(tree: TreeConfig) -> tuple[tuple[int, ...], ...]:
    """A tree of ranks as tuples, refused in words unless every path is 1-16 ranks >= 0, no path repeats, every
    prefix of a path is a path too, and the tree is nothing else (no budget, siblings or drawn children)."""
    given = tree.choices
    if not isinstance(given, (list, tuple)) or not given or not all(isinstance(c, (list, tuple)) for c in given):
        raise ValueError("tree choices must be a non-empty list of paths of ranks, such as [[0], [1], [0, 0]]")
    paths = tuple(tuple(c) for c in given)
    for path in paths:
        if not 1 <= len(path) <= 16 or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in path):
            raise ValueError("every path of tree choices must be 1-16 ranks, each an integer >= 0")
    if len(set(paths)) < len(paths):
        raise ValueError("tree choices name a node twice")
    lacking = [list(p) for p in paths if len(p) > 1 and p[:-1] not in set(paths)]
    if lacking:
        raise ValueError(f"tree choices {lacking[:3]} lack their parent path: every prefix of a path must be a node")
    if tree.budget or tree.siblings is not None or tree.children not in ("auto", "top"):
        raise ValueError("a tree of ranks takes each node's rank in q: use budget=0, no siblings, children 'auto' or 'top'")
    return paths


def _tree_from(given: dict) -> TreeConfig:
    """A TreeConfig from its fields as the JSON holds them; an unknown field is refused without its name."""
    names = [f.name for f in fields(TreeConfig)]
    if not set(given) <= set(names):
        raise ValueError(f"tree must be a specviz.TreeConfig or None, or an object of {', '.join(names)}")
    return TreeConfig(**given)


def _said(error: dict, values: dict) -> str:
    """One failed check of a DecodeConfig field in words (``_words``)."""
    name = error["loc"][0]
    return _words(name, values[name], _HINTS[name], error)


def _tree_said(error: dict, values: dict) -> str:
    """One failed check of a TreeConfig field in words (``_words``), named as the tree's: "tree depth", "every
    tree shape entry"; the shape itself (not a tuple, or not 1-16 entries long) in a sentence of its own."""
    name, *at = error["loc"]
    hint = _TREE_HINTS[name]
    if name == "shape" and not at:
        return f"tree shape must be 1-16 children counts, one per depth, got {type(values[name]).__name__}"
    if name == "shape":
        return _words("every tree shape entry", values[name][at[0]], get_args(_parts(hint)[0])[0], error)
    if get_origin(hint) in (Union, UnionType):  # "X | None": the words of X (None is admitted, so never the error)
        hint = next(a for a in get_args(hint) if a is not NoneType)
    return _words(f"tree {name}", values[name], hint, error)


def _miscounted(error: dict, shape) -> bool:
    """Whether a failed check is pydantic's length check of a shape whose length is right: it counts the entries
    that passed their own check, so a shape of one bad entry reads as too short besides that entry's own error."""
    return error["loc"] == ("shape",) and error["type"] in ("too_short", "too_long") and 1 <= len(shape) <= 16


def _words(name: str, value, hint, error: dict) -> str:
    """One failed check in words: the field, what it must be, its hint; the type given, never the value."""
    base, info = _parts(hint)
    crossed = _CROSSED.get(error["type"])
    if crossed and base is int:  # an integer out of range: the bound it crossed
        what = f"{_SIGNS[crossed]} {_number(error['ctx'][crossed])}"
    else:
        what = _kind(base, info)
    hint = f" ({info.description})" if info is not None and info.description else ""
    typed = not crossed and not (get_origin(base) is Literal and isinstance(value, str))  # a wrong type: say which
    return f"{name} must be {what}{hint}" + (f", got {type(value).__name__}" if typed else "")


def _parts(hint) -> tuple[object, FieldInfo | None]:
    """(the type, its pydantic Field or None) of an annotation."""
    if get_origin(hint) is not Annotated:
        return hint, None
    base, *extras = get_args(hint)
    return base, next((x for x in extras if isinstance(x, FieldInfo)), None)


def _kind(base, info: FieldInfo | None) -> str:
    """What an annotation admits, in words: "an integer >= 1", "a number in (0, 1]", "one of fixed, history"."""
    if base is bool:
        return "True or False"
    if get_origin(base) is Literal:
        return f"one of {', '.join(get_args(base))}"
    if base in (int, float):
        return ("an integer" if base is int else "a number") + _range(info)
    return "a specviz.TreeConfig or None"


def _range(info: FieldInfo | None) -> str:
    """A Field's bounds in words: " in (0, 1]", " >= 0" or "" (an infinite bound goes unsaid)."""
    bounds = {k: v for m in (info.metadata if info else ()) for k in _SIGNS
              if (v := getattr(m, k, None)) is not None and v != float("inf")}
    low = next(((k, v) for k, v in bounds.items() if k[0] == "g"), None)
    high = next(((k, v) for k, v in bounds.items() if k[0] == "l"), None)
    if low and high:
        return (f" in {'(' if low[0] == 'gt' else '['}{_number(low[1])}, "
                f"{_number(high[1])}{')' if high[0] == 'lt' else ']'}")
    return next((f" {_SIGNS[k]} {_number(v)}" for k, v in bounds.items()), "")  # one bound or none


def _number(x) -> str:
    """A limit as people write it: 1, 0.5, 2**63."""
    if isinstance(x, int) and x >= 2**32 and x & (x - 1) == 0:
        return f"2**{x.bit_length() - 1}"
    return f"{x:g}"


# the explorer's opening settings (the app's sliders and the /generate API default to them; the benchmark's floor
# is measured at them)
# k = 6: the default draft's feature draft stops at 5 a round (its best sampled k, model card); greedy runs may add a
# sixth from the run's own text or the n-gram (measured best greedy, model card)
DEFAULTS = DecodeConfig(k=6, temperature=0.8, max_new_tokens=64)

PRESETS = {
    "greedy": DecodeConfig(k=4, temperature=0.0),
    "sample": DecodeConfig(k=4, temperature=1.0),
    "nucleus": DecodeConfig(k=4, temperature=0.8, top_k=50, top_p=0.95),
    "adaptive": DecodeConfig(k=4, temperature=0.0, k_policy="heuristic"),
    "confident": DecodeConfig(k=10, temperature=0.0, draft_stop=0.4),  # transformers' default assistant rule
}


def eos_ids(model) -> list[int]:
    """The token ids a run stops at: the model's generation config's eos_token_id (one or several; none: [])."""
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
