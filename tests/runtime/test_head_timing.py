"""Where a pass's time goes: the LM head's share, timed apart from the layers (in C inside the one call, in torch
around the final norm and head, in transformers by a hook on the output embeddings), recorded per round, kept by the
trace's JSON, drawn by the timing chart and said by the replay."""
import copy
import json
import math
import time
from dataclasses import replace

import pytest
import torch

from specviz import DecodeConfig, Trace, autoregressive_generate, speculative_generate
from specviz.runtime import native
from specviz.runtime.lm import CachedLM, on_path
from specviz.runtime.timing import head_clock
from specviz.views import plots, timeline
from tests.helpers.models import tiny_gemma, tiny_gpt2, tiny_llama, ui_models
from tests.helpers.traces import sample_trace

CFG = DecodeConfig(k=3, max_new_tokens=12, temperature=0.8, seed=3)


@pytest.fixture(scope="module")
def pair():
    target, draft, tok = ui_models()
    return target, draft, tok("ROMEO:", return_tensors="pt").input_ids


def shares_within_their_passes(trace) -> None:
    """Every round's head shares within its passes; a round that ran no target forward (an autoregressive run's
    first: the prefill's last logits are its p) has none."""
    for r in trace.rounds:
        if r.index == 0 and not r.drafted:
            assert r.target_head_s is None, r
            continue
        assert r.target_head_s is not None and 0 < r.target_head_s <= r.target_s, r
        if r.drafted:
            assert r.draft_head_s is not None and 0 < r.draft_head_s <= r.draft_s, r


@pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")
def test_the_c_stack_times_its_head_inside_its_one_call():
    """One pass in C (layers and head in one call) adds one head pass to the clock: more than nothing, less than the
    whole call."""
    lm = CachedLM(tiny_llama().float())
    assert lm.forward_name == "lean-c"
    lm.feed([1, 2, 3])
    passes, seconds = head_clock.passes, head_clock.seconds
    t0 = time.perf_counter()
    lm.feed([4])
    call_s = time.perf_counter() - t0
    assert head_clock.passes == passes + 1 and 0 < head_clock.seconds - seconds < call_s


@pytest.mark.parametrize("forward, dtype", [("lean", torch.float64), ("lean", torch.float32), ("dynamic", torch.float64)])
def test_every_round_records_its_heads_share_of_each_pass(pair, forward, dtype):
    """Speculative and autoregressive runs, on the lean forward (in C where it builds, float32) and on
    transformers': each round's head shares lie within their passes; a round that drafts nothing has no draft
    head."""
    target, draft, prompt = pair
    target, draft = (copy.deepcopy(m).to(dtype) for m in (target, draft))
    spec = on_path(forward, speculative_generate, target, draft, prompt, CFG)
    shares_within_their_passes(spec)
    ar = on_path(forward, autoregressive_generate, target, prompt, CFG)
    shares_within_their_passes(ar)
    assert all(r.draft_head_s is None for r in ar.rounds)


def test_gemma_and_a_transformers_only_model_record_their_heads():
    gemma, gpt2 = tiny_gemma(), tiny_gpt2()
    prompt = torch.tensor([[1, 5, 9]])
    shares_within_their_passes(speculative_generate(gemma, gemma, prompt, CFG))
    trace = speculative_generate(gpt2, gpt2, prompt, CFG)
    assert trace.forward == "dynamic"
    shares_within_their_passes(trace)


def test_the_heads_shares_survive_json_and_old_traces_load_without_them(pair):
    trace = speculative_generate(pair[0], pair[1], pair[2], CFG)
    back = Trace.from_json(trace.to_json())
    assert [r.target_head_s for r in back.rounds] == [r.target_head_s for r in trace.rounds]
    data = json.loads(trace.to_json())
    for r in data["rounds"]:
        del r["draft_head_s"], r["target_head_s"]
    old = Trace.from_json(json.dumps(data))
    assert all(r.draft_head_s is None and r.target_head_s is None for r in old.rounds)
    data["rounds"][0]["target_head_s"] = data["rounds"][0]["target_s"] * 2
    with pytest.raises(ValueError, match=r"rounds\[0\]\.target_head_s .* is not within 0\.\.target_s"):
        Trace.from_json(json.dumps(data))


def test_the_timing_chart_splits_each_pass_where_its_head_was_timed():
    """By hand: round 1's target 4 ms of which 1 ms head, its draft 2 ms unsplit; the bars add up to the passes."""
    trace = sample_trace()
    trace.rounds[:] = [replace(r, draft_s=0.002, target_s=0.004, target_head_s=0.001) for r in trace.rounds]
    fig = plots.round_times(plots.rounds_frame(trace))
    bars = {t.name: list(t.y) for t in fig.data}
    assert set(bars) == {"draft", "target layers", "target LM head"}
    assert bars["target layers"][0] == pytest.approx(3.0) and bars["target LM head"][0] == pytest.approx(1.0)
    assert bars["draft"][0] == pytest.approx(2.0)
    assert "target 4.0 ms (its LM head 1.0 ms)" in timeline.replay_html(trace, 0)
    assert "(its LM head" not in timeline.replay_html(sample_trace(), 0)
    unsplit = plots.round_times(plots.rounds_frame(sample_trace()))
    assert {t.name for t in unsplit.data} == {"draft", "target"}
    assert not any(math.isnan(y) for t in unsplit.data for y in t.y)


def test_timing_transformers_head_leaves_the_model_as_it_was(pair):
    """The head's hooks live only while transformers' forward runs: after a run on that path the model has no hook,
    and the next run takes the lean forward (a hook left behind made every later run take transformers' path). While
    they are on, the lean path does not count them as the model's own instrumentation."""
    from specviz.runtime import lean_common
    from specviz.runtime.forwards import timing_head

    target, draft, prompt = pair
    on_path("dynamic", speculative_generate, target, draft, prompt, CFG)
    head = target.get_output_embeddings()
    assert not head._forward_hooks and not head._forward_pre_hooks
    assert speculative_generate(target, draft, prompt, CFG).forward == "lean"
    with timing_head(target):
        assert head._forward_hooks and not lean_common.instrumented(target)
    assert not head._forward_hooks
