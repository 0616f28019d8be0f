"""TreeConfig's checks (pydantic over its annotations, then the checks that relate fields): the same values admitted
and refused as the conditions written out below, every refusal a ValueError naming the field and its limit and
never the value, and ``dataclasses.replace`` checking again. A frozen record built by keyword, its fields and
defaults as they were."""
import dataclasses
import math
import re
from dataclasses import fields, replace

import numpy as np
import pytest

from specviz.config import MAX_TREE_NODES, TREE_CHILDREN, TreeConfig

HOSTILE = "<script>alert(1)</script>" + "x" * 10_000


def _integer(low: int, high: float = math.inf):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _static_nodes(shape) -> int:
    total, level = 0, 1
    for m in shape:
        level *= m
        total += level
    return total


def _shape(v) -> bool:  # a tuple (a list is read as one) of 1-16 integers >= 1, at most 128 nodes in all
    return isinstance(v, (tuple, list)) and 1 <= len(v) <= 16 and all(_integer(1)(m) for m in v) \
        and _static_nodes(v) <= MAX_TREE_NODES


def _threshold(v) -> bool:  # an int or float, not bool (NaN fails the bounds)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1


ADMITS = {  # each field's condition, written out by hand, with the other fields it is tried beside
    "shape": ({}, _shape),
    "budget": ({}, _integer(0, MAX_TREE_NODES)),  # a dynamic tree's nodes are its budget
    "depth": ({}, _integer(1, 16)),
    "width": ({}, _integer(1, 16)),
    "children": ({}, lambda v: isinstance(v, str) and v in TREE_CHILDREN),
    "threshold": ({"budget": 10}, _threshold),  # a threshold needs a dynamic tree (or a chain with siblings)
    "siblings": ({}, lambda v: v is None or _integer(0, MAX_TREE_NODES - 5)(v)),  # depth 5 + siblings nodes
}
VALUES = [0, 1, -1, 2, 4, 16, 17, 123, 124, 128, 129, 10**400, -10**400, 0.0, 0.5, 0.99, 1.0, 1.5, 2.0, -0.5, True,
          False, math.nan, math.inf, -math.inf, "1", "auto", "top", "iid", "distinct", "best", "", None, (), (1,),
          (2, 1), [2, 1], (0,), (1, 0), (True,), (1.0,), ("1",), (1,) * 16, (1,) * 17, (8, 8, 8), (128,), (129,),
          (10**400,), [1], {"a": 1}, np.float64(0.5), np.int64(2), np.float32(0.5), range(1, 3), b"x", HOSTILE]


def test_every_field_has_its_condition_here_but_the_choices():
    assert set(ADMITS) == {f.name for f in fields(TreeConfig)} - {"choices"}  # choices: test_trained_run


@pytest.mark.parametrize("name", sorted(ADMITS))
def test_each_field_admits_exactly_what_its_condition_admits(name):
    base, admits = ADMITS[name]
    for value in VALUES:
        try:
            TreeConfig(**base, **{name: value})
            admitted = True
        except ValueError:
            admitted = False
        assert admitted == admits(value), f"{name}={value!r:.40}: admitted {admitted}"


@pytest.mark.parametrize("given, message", [
    (dict(shape=()), "tree shape must be 1-16 children counts, one per depth, got tuple"),
    (dict(shape=(1,) * 17), "tree shape must be 1-16 children counts, one per depth, got tuple"),
    (dict(shape="3,2"), "tree shape must be 1-16 children counts, one per depth, got str"),
    (dict(shape=(0, 2)), "every tree shape entry must be >= 1"),
    (dict(shape=(2, True)), "every tree shape entry must be an integer >= 1, got bool"),
    (dict(shape=("2",)), "every tree shape entry must be an integer >= 1, got str"),  # its length is right
    (dict(shape=(2.0, 0)), "every tree shape entry must be an integer >= 1, got float; "
                           "every tree shape entry must be >= 1"),
    (dict(budget=-1), "tree budget must be >= 0 (0 = a static tree of the given shape)"),
    (dict(budget=True), "tree budget must be an integer >= 0 (0 = a static tree of the given shape), got bool"),
    (dict(budget=np.int64(4)), "tree budget must be an integer >= 0 (0 = a static tree of the given shape), "
                               "got int64"),
    (dict(depth=0), "tree depth must be >= 1"),
    (dict(depth=17), "tree depth must be <= 16"),
    (dict(width=2.0), "tree width must be an integer in [1, 16], got float"),
    (dict(depth=0, width=17), "tree depth must be >= 1; tree width must be <= 16"),
    (dict(children="best"), "tree children must be one of auto, top, iid, distinct"),
    (dict(children=None), "tree children must be one of auto, top, iid, distinct, got NoneType"),
    (dict(budget=10, threshold=math.nan), "tree threshold must be a number in [0, 1)"),
    (dict(budget=10, threshold=1.0), "tree threshold must be a number in [0, 1)"),
    (dict(budget=10, threshold=-0.5), "tree threshold must be a number in [0, 1)"),
    (dict(budget=10, threshold=True), "tree threshold must be a number in [0, 1), got bool"),
    (dict(budget=10, threshold="0.5"), "tree threshold must be a number in [0, 1), got str"),
    (dict(budget=10, threshold=np.float32(0.5)), "tree threshold must be a number in [0, 1), got float32"),
    (dict(siblings=-1), "tree siblings must be >= 0"),
    (dict(siblings=1.0), "tree siblings must be an integer >= 0, got float"),
    (dict(siblings=False), "tree siblings must be an integer >= 0, got bool"),
    (dict(budget=10, children="iid"), "a dynamic tree takes top children or children drawn without replacement: "
                                      "use children='top', 'distinct' or 'auto'"),
    (dict(siblings=2, budget=8), "a chain with siblings has no node budget and draws its siblings without "
                                 "replacement: use budget=0 and children 'auto', 'top' or 'distinct'"),
    (dict(siblings=2, children="iid"), "a chain with siblings has no node budget and draws its siblings without "
                                       "replacement: use budget=0 and children 'auto', 'top' or 'distinct'"),
    (dict(threshold=0.2), "a tree threshold needs a dynamic tree (a node budget > 0) or a chain with siblings"),
    (dict(shape=(8, 8, 8)), "the tree has 584 nodes; at most 128 are verified in one pass"),  # 8 + 64 + 512
    (dict(depth=12, siblings=117), "the tree has 129 nodes; at most 128 are verified in one pass"),
    (dict(budget=10**400), "the tree has over a million nodes; at most 128 are verified in one pass"),
])
def test_a_refusal_names_the_field_and_its_limit(given, message):
    with pytest.raises(ValueError) as caught:
        TreeConfig(**given)
    assert str(caught.value) == message


@pytest.mark.parametrize("name", sorted(ADMITS))
@pytest.mark.parametrize("hostile", [HOSTILE, (HOSTILE,), ["<img src=x onerror=alert(1)>"], {"<b>": "<i>"},
                                     b"<script>", pytest.param(10**400, id="10**400")])
def test_a_refusal_never_echoes_the_value(name, hostile):
    with pytest.raises(ValueError) as caught:
        TreeConfig(**ADMITS[name][0], **{name: hostile})
    said = str(caught.value)
    assert said.startswith(("tree ", "every tree shape entry", "the tree has")), said
    assert not re.search("<[a-z]", said) and "alert" not in said and "input_value" not in said and len(said) < 200, said
    assert "1000000" not in said, said


def test_a_frozen_record_with_its_fields_and_defaults():
    defaults = {f.name: f.default for f in fields(TreeConfig)}
    assert defaults == dict(shape=(3, 2, 2, 1), budget=0, depth=5, width=4, children="auto", threshold=0.0,
                            siblings=None, choices=None)
    tree = TreeConfig(shape=(2, 1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        tree.depth = 99
    assert TreeConfig() == TreeConfig(**defaults) and TreeConfig().nodes == 3 + 6 + 12 + 12


def test_replace_checks_again():
    tree = TreeConfig(budget=10, depth=4, width=3)
    assert replace(tree, threshold=0.25) == TreeConfig(budget=10, depth=4, width=3, threshold=0.25)
    for change, message in ((dict(depth=0), "tree depth must be >= 1"), (dict(children="iid"), "a dynamic tree"),
                            (dict(budget=0, threshold=0.5), "a tree threshold needs"),
                            (dict(threshold=math.nan), r"tree threshold must be a number in \[0, 1\)")):
        with pytest.raises(ValueError, match=message):
            replace(tree, **change)


def test_values_are_kept_as_given():
    """The checks only check: a list-shaped shape becomes a tuple, an int or numpy threshold stays what it was."""
    assert TreeConfig(shape=[2, 1]).shape == (2, 1) and TreeConfig(shape=[2, 1]) == TreeConfig(shape=(2, 1))
    tree = TreeConfig(budget=10, threshold=np.float64(0.25))
    assert type(tree.threshold) is np.float64 and type(TreeConfig(threshold=0).threshold) is int
    assert TreeConfig.parse(tree.label) == tree
