"""DecodeConfig's checks (pydantic over its annotations): the same values admitted and refused as the conditions
written out below, every refusal a ValueError naming the field and its limit and never the value, and
``dataclasses.replace`` checking again."""
import math
import sys
from dataclasses import fields, replace

import numpy as np
import pytest

from specviz.config import K_POLICIES, RULES, VERIFIES, DecodeConfig, TreeConfig

HOSTILE = "<script>alert(1)</script>" + "x" * 10_000


def _integer(low: int, high: float = math.inf):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v < high


def _number(ok):  # an int or float (NaN fails every bound); an int too large for a float is refused too
    return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and ok(v) \
        and (isinstance(v, float) or abs(v) <= sys.float_info.max)


ADMITS = {  # each field's condition, written out by hand (every other field at its default)
    "k": _integer(1), "max_new_tokens": _integer(0), "top_k": _integer(0), "seed": _integer(0, 2**63),
    "min_k": _integer(1, 11), "max_k": _integer(1),  # min_k <= max_k (10 by default)
    "temperature": _number(lambda v: v >= 0), "top_p": _number(lambda v: 0 < v <= 1),
    "draft_stop": _number(lambda v: 0 <= v < 1), "typical_epsilon": _number(lambda v: 0 < v < 1),
    "typical_delta": _number(lambda v: 0 < v < math.inf), "lenience": _number(lambda v: 0 < v <= 1),
    "record": lambda v: isinstance(v, bool), "draft_greedy": lambda v: isinstance(v, bool),
    "k_policy": lambda v: isinstance(v, str) and v in K_POLICIES, "rule": lambda v: isinstance(v, str) and v in RULES,
    "verify": lambda v: isinstance(v, str) and v in VERIFIES,
}
VALUES = [0, 1, -1, 2, 10, 11, 0.0, 0.5, 1.0, 1.5, -0.5, 1e-300, 2**63 - 1, 2**63, 10**400, True, False, math.nan,
          math.inf, -math.inf, "1", "0.5", "fixed", "history", "lenient", "block", "", None, [1], (1,), {"k": 1},
          np.float64(0.5), np.int64(2), np.float32(0.5), HOSTILE]


def test_every_field_but_the_tree_has_its_condition_here():
    assert set(ADMITS) == {f.name for f in fields(DecodeConfig)} - {"tree"}


@pytest.mark.parametrize("name", sorted(ADMITS))
def test_each_field_admits_exactly_what_its_condition_admits(name):
    for value in VALUES:
        try:
            DecodeConfig(**{name: value})
            admitted = True
        except ValueError:
            admitted = False
        assert admitted == ADMITS[name](value), f"{name}={value!r:.40}: admitted {admitted}"


@pytest.mark.parametrize("change, message", [
    (dict(k=0), "k must be >= 1 (draft at least one token per round)"),
    (dict(k=2.5), "k must be an integer >= 1 (draft at least one token per round), got float"),
    (dict(k=True), "k must be an integer >= 1 (draft at least one token per round), got bool"),
    (dict(max_new_tokens=-3), "max_new_tokens must be >= 0"),
    (dict(top_k=-2), "top_k must be >= 0 (use 0 to turn top-k off)"),
    (dict(seed=-5), "seed must be >= 0 (a torch.Generator seed)"),
    (dict(seed=2**63), "seed must be < 2**63 (a torch.Generator seed)"),
    (dict(seed="7"), "seed must be an integer in [0, 2**63) (a torch.Generator seed), got str"),
    (dict(temperature=-0.25), "temperature must be a number >= 0 (0 = greedy)"),
    (dict(temperature=math.nan), "temperature must be a number >= 0 (0 = greedy)"),
    (dict(top_p=1.25), "top_p must be a number in (0, 1] (1.0 = off)"),
    (dict(draft_stop=1.0), "draft_stop must be a number in [0, 1) (0 = off)"),
    (dict(draft_stop="high"), "draft_stop must be a number in [0, 1) (0 = off), got str"),
    (dict(typical_epsilon=1.0), "typical_epsilon must be a number in (0, 1) (Medusa: 0.09)"),
    (dict(typical_delta=math.inf), "typical_delta must be a number > 0 (Medusa: 0.3)"),
    (dict(lenience=0), "lenience must be a number in (0, 1] (1 = Leviathan's rule)"),
    (dict(record="yes"), "record must be True or False, got str"),
    (dict(draft_greedy=1), "draft_greedy must be True or False, got int"),
    (dict(k_policy="magic"), "k_policy must be one of fixed, history, heuristic"),
    (dict(rule="medusa"), "rule must be one of leviathan, point_mass, exact_match, typical, optimistic, lenient "
                          "(lossy: lenient, optimistic, typical)"),
    (dict(tree="3,2"), "tree must be a specviz.TreeConfig or None, got str"),
    (dict(min_k=4, max_k=3), "max_k must be >= min_k (4)"),
    (dict(k=0, lenience=2), "k must be >= 1 (draft at least one token per round); "
                            "lenience must be a number in (0, 1] (1 = Leviathan's rule)"),
])
def test_a_refusal_names_the_field_and_its_limit(change, message):
    with pytest.raises(ValueError) as caught:
        DecodeConfig(**change)
    assert str(caught.value) == message


@pytest.mark.parametrize("name", [f.name for f in fields(DecodeConfig)])
@pytest.mark.parametrize("hostile", [HOSTILE, ["<img src=x onerror=alert(1)>"], {"<b>": "<i>"}, b"<script>"])
def test_a_refusal_never_echoes_the_value(name, hostile):
    with pytest.raises(ValueError) as caught:
        DecodeConfig(**{name: hostile})
    said = str(caught.value)
    assert said.startswith(f"{name} must be") or said.startswith("tree must be"), said
    assert "<" not in said and "alert" not in said and "input_value" not in said and len(said) < 200, said


@pytest.mark.parametrize("tree", [{"<script>": 1}, {"shape": HOSTILE}, {"children": HOSTILE},
                                  {"threshold": HOSTILE}, {"budget": HOSTILE}, {"shape": [HOSTILE]}])
def test_a_tree_from_json_is_refused_without_its_value(tree):
    with pytest.raises(ValueError, match="tree") as caught:
        DecodeConfig(tree=tree)
    assert "<" not in str(caught.value) and "alert" not in str(caught.value)


def test_replace_checks_again():
    cfg = DecodeConfig(k=3, temperature=0.5)
    assert replace(cfg, max_new_tokens=2) == DecodeConfig(k=3, temperature=0.5, max_new_tokens=2)
    for change, message in ((dict(k=0), "k must be >= 1"), (dict(top_p=0.0), "top_p must be"),
                            (dict(k_policy="history", k=20), r"\[min_k, max_k\]"),
                            (dict(rule="typical", tree=TreeConfig()), "Leviathan's rule")):
        with pytest.raises(ValueError, match=message):
            replace(cfg, **change)


def test_values_are_kept_as_given():
    """The checks only check: an int temperature stays an int, a list-shaped tree becomes a TreeConfig."""
    cfg = DecodeConfig(temperature=1, top_p=np.float64(0.5), tree={"shape": [2, 1]})
    assert type(cfg.temperature) is int and type(cfg.top_p) is np.float64 and cfg.tree == TreeConfig(shape=(2, 1))
