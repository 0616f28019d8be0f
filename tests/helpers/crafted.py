"""Traces crafted to amplify what an import renders: one long token text used by many prompt ids, a prompt of
millions of ids just under the 4 MiB limit, and the largest run the schema accepts (4,095 rounds of 16 drafts)."""
import json

from specviz.trace import MAX_TRACE_BYTES
from tests.helpers.traces import sample_trace


def long_text_trace(chars: int = 100_000, uses: int = 1_000) -> str:
    """A token whose text is ``chars`` long, used by ``uses`` prompt ids (about ``chars`` bytes of JSON)."""
    data = json.loads(sample_trace().to_json())
    data["prompt_ids"] = [1] * uses
    data["token_text"]["1"] = "x" * chars
    return json.dumps(data, separators=(",", ":"))


def long_prompt_trace() -> str:
    """As many prompt ids as fit under MAX_TRACE_BYTES (about 2 M)."""
    data = json.loads(sample_trace().to_json())
    data["prompt_ids"] = []
    head = len(json.dumps(data, separators=(",", ":")))
    data["prompt_ids"] = [2] * ((MAX_TRACE_BYTES - head - 64) // 2)
    return json.dumps(data, separators=(",", ":"))


def many_rounds_trace(rounds: int = 4095, k: int = 16) -> str:
    """``rounds`` rounds of ``k`` drafts each (every draft accepted but the last), under MAX_TRACE_BYTES."""
    data = json.loads(sample_trace().to_json())
    one = dict(data["rounds"][1], k=k, drafted=[7] * k, q=[0.5] * k, p=[0.5] * k, accept_prob=[1.0] * k, u=[0.1] * k,
               beta=[0.5] * k, n_accepted=k, emitted=[7] * k + [9], residual_top=[])
    data["rounds"] = [dict(one, index=i) for i in range(rounds)]
    return json.dumps(data, separators=(",", ":"))


def widest_trace() -> str:
    """The most the schema admits of what the views amplify: 4,095 rounds of 16 drafts and 32,768 prompt ids, every
    token's text as long as admitted (256 characters of markup)."""
    from specviz.trace_schema import MAX_PROMPT_IDS, MAX_TEXT_CHARS

    data = json.loads(many_rounds_trace())
    data["prompt_ids"] = [7] * MAX_PROMPT_IDS
    data["token_text"] = {t: ("<b>&" * MAX_TEXT_CHARS)[:MAX_TEXT_CHARS] for t in data["token_text"]}
    return json.dumps(data, separators=(",", ":"))


def big_tree_trace(nodes: int = 30_000) -> str:
    """One tree round of ``nodes`` nodes (about as many as fit under MAX_TRACE_BYTES), each a root."""
    data = json.loads(sample_trace().to_json())
    node = dict(parent=-1, depth=0, token=7, q=0.5, p=0.5, p_adj=None, accept_prob=None, u=None, status="rejected",
                value=None)
    data["rounds"][0]["tree"] = dict(nodes=[node] * nodes, path=[], children="top")
    return json.dumps(data, separators=(",", ":"))
