"""Form values -> validated settings. Sliders and number boxes send floats, text boxes send anything: each
parser raises a ValueError that says what to change (``widgets.friendly`` shows it as a gr.Error)."""
from __future__ import annotations

import torch

from ..config import LOSSY, RULES, DecodeConfig, TreeConfig
from ..labs.rules import VARIANTS

MAX_PROMPT_CHARS = 4000

BLOCK = "leviathan+block"  # the form value of Leviathan's rule with the chain verified as one block


def as_int(x, name: str) -> int:
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    raise ValueError(f"{name} must be a whole number, got {x!r}")


def as_float(x, name: str) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    raise ValueError(f"{name} must be a number, got {x!r}")


def number_in(x, name: str, low: float, high: float) -> float:
    x = as_float(x, name)
    if not low <= x <= high:
        raise ValueError(f"{name} must lie in [{low:g}, {high:g}], got {x:g}")
    return x


LIMITS = dict(k=(1, 16), temperature=(0, 2), top_k=(0, 100_000), top_p=(0.01, 1), max_new_tokens=(1, 512),
              draft_stop=(0, 0.99))  # the sliders' ranges (k and new tokens: the labs' widest), checked server-side


def make_config(k, k_policy, temperature, top_k, top_p, max_new_tokens, seed, draft_stop=0.0, shape="chain",
                children="auto", rule="leviathan", rule_options=None) -> DecodeConfig:
    """A DecodeConfig from form values, each within LIMITS (an API call can send any number); ``shape`` "chain"
    (k drafts a round) or a tree (``parse_tree``). A temperature between 0 and 0.01 is refused: dividing logits
    by it overflows."""
    v = dict(k=as_int(k, "k"), temperature=as_float(temperature, "temperature"), top_k=as_int(top_k, "top_k"),
             top_p=as_float(top_p, "top_p"), max_new_tokens=as_int(max_new_tokens, "max_new_tokens"),
             draft_stop=as_float(draft_stop or 0.0, "draft_stop"))
    for name, (low, high) in LIMITS.items():
        number_in(v[name], name, low, high)
    if 0 < v["temperature"] < 0.01:
        raise ValueError(f"temperature must be 0 (greedy) or at least 0.01, got {v['temperature']:g}")
    verify = parse_verify(rule)
    rule, draft_greedy = parse_rule(rule)
    return DecodeConfig(**v, k_policy=k_policy or "fixed", seed=as_int(seed, "seed"), max_k=max(10, v["k"]),
                        tree=parse_tree(shape, children), rule=rule, draft_greedy=draft_greedy, verify=verify,
                        **(rule_options or {}))


# the accept rules a form offers (the rule lab's variants), as (label, value): lossy ones say so
# and Leviathan's rule applied to a chain as one block (Sun et al. 2024's block verification, DecodeConfig.verify)
RULE_CHOICES = [(v.replace("+argmax", ", argmax drafts") + (" (lossy)" if v in LOSSY else ""), v) for v in VARIANTS]
RULE_CHOICES.insert(1, ("leviathan, the chain verified as one block", BLOCK))


def parse_rule(value) -> tuple[str, bool]:
    """(rule, draft_greedy) from a form's rule: a rule name, "name+argmax", "leviathan+block" (``parse_verify``), or
    a label ending in " (lossy)"."""
    text = str(value or "leviathan").removesuffix(" (lossy)")
    if text == BLOCK:
        return "leviathan", False
    rule, plus, drafting = text.partition("+")
    if rule not in RULES or (plus and drafting != "argmax"):
        raise ValueError(f"unknown acceptance rule: choose one of {', '.join(RULES)}, optionally with +argmax, or "
                         f"{BLOCK}")
    return rule, bool(plus)


def parse_verify(value) -> str:
    """How a form's rule verifies a chain: "block" for "leviathan+block", else "token"."""
    return "block" if str(value or "") == BLOCK else "token"


def parse_tree(shape, children="auto") -> TreeConfig | None:
    """None for a chain ("chain" or empty), else the TreeConfig of a spec like "3,2,2,1" or "dynamic:10,8,3";
    ``children`` applies unless the spec names its own ("/iid")."""
    if shape is None or not isinstance(shape, str):
        raise ValueError(f"the draft shape must be text such as chain, chain:12,2, 3,2,2,1 or dynamic:10,8,3, "
                         f"got {shape!r}")
    if shape.strip().lower() in ("", "chain"):
        return None
    if "/" not in shape and children not in (None, "", "auto"):
        shape = f"{shape}/{children}"
    return TreeConfig.parse(shape)


def encode(tokenizer, prompt) -> torch.Tensor:
    """A typed prompt as input ids (1, n)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty: type some text or pick an example")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt is {len(prompt)} characters long; keep it under {MAX_PROMPT_CHARS}")
    return tokenizer(prompt, return_tensors="pt").input_ids


def split_prompts(text) -> list[str]:
    """Prompts separated by an empty line (a prompt may hold single newlines)."""
    prompts = [p.strip("\n") for p in (text or "").split("\n\n") if p.strip()]
    if not prompts:
        raise ValueError("give at least one prompt (separate prompts with an empty line)")
    return prompts
