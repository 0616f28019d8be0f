"""The app's handlers as plain functions, and the /generate API through gradio_client."""
import json
import re

import gradio as gr
import pytest

from specviz import DecodeConfig, Trace, speculative_generate, theory
from specviz.app import build_demo
from tests.helpers.app import SETTINGS, free_port, handlers
from tests.helpers.models import last


@pytest.mark.slow
def test_run_and_generate_match_speculative_generate(pair, store):
    target, draft, tok = pair
    ids = tok("ROMEO:", return_tensors="pt").input_ids
    cfg = DecodeConfig(**SETTINGS)
    want = speculative_generate(target, draft, ids, cfg).new_tokens
    h = handlers(store)
    outs = last(h.run("ROMEO:", "tiny-target", "tiny", *SETTINGS.values(), False))
    trace = outs[0]
    assert trace.new_tokens == want and len(want) == 12
    assert trace.draft_name == "tiny" and trace.token_text  # texts filled for replay
    assert 'class="sv-tok sv-' in outs[2] and len(outs) == 14
    api = Trace.from_json(h.generate("ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 0.95, 12, 7))
    assert api.new_tokens == want


@pytest.mark.slow
def test_draft_stop_control_reaches_the_decoder(pair, store):
    target, draft, tok = pair
    ids = tok("ROMEO:", return_tensors="pt").input_ids
    want = speculative_generate(target, draft, ids, DecodeConfig(**SETTINGS, draft_stop=0.6))
    trace = last(handlers(store).run("ROMEO:", "tiny-target", "tiny", *SETTINGS.values(), False, {}, 0.6))[0]
    assert trace.config.draft_stop == 0.6 and [r.drafted for r in trace.rounds] == [r.drafted for r in want.rounds]
    assert any(len(r.drafted) < r.k for r in trace.rounds)
    with pytest.raises(gr.Error, match="draft_stop"):
        last(handlers(store).run("ROMEO:", "tiny-target", "tiny", *SETTINGS.values(), False, {}, 1.5))
    api = Trace.from_json(handlers(store).generate("ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 0.95, 12, 7, 0.6))
    assert [r.drafted for r in api.rounds] == [r.drafted for r in want.rounds]


def test_default_draft_falls_back_to_first_available(store):
    assert store.default_draft() == "tiny"  # "small" is not available
    assert store.default_target() == "tiny-target"


@pytest.mark.slow
def test_run_with_baseline_reports_measured_and_predicted_speedup(store):
    outs = last(handlers(store).run("To be, or not to be", "tiny-target", "prompt-lookup", *SETTINGS.values(), True))
    base = outs[1]
    assert base is not None and base.mode == "autoregressive" and len(base.new_tokens) == 12
    assert "predicted **" in outs[3]
    spread = re.search(r"Speedup on this machine\*\* measured median \*\*([\d.]+)×\*\* over (\d) interleaved pairs.*"
                       r"range ([\d.]+)–([\d.]+)×", outs[3])  # the speedup leads with the pairs' median and range
    assert spread and spread[2] == "3" and float(spread[3]) <= float(spread[1]) <= float(spread[4])
    s = outs[0].summary()  # the headline: forwards per token and the speedup they imply, hardware-free
    assert outs[3].startswith(f"**{s.target_forwards_per_token:.2f} target forwards per token**")
    assert f"**{1 / s.target_forwards_per_token:.2f}× faster**" in outs[3].split("\n")[0]


@pytest.mark.parametrize("args, message", [
    (("   ", "tiny-target", "tiny"), "prompt is empty"),
    (("ROMEO:", "gpt-5", "tiny"), "unknown target 'gpt-5'"),
    (("ROMEO:", "tiny-target", "../../etc"), "unknown draft"),
])
def test_bad_input_raises_readable_gr_error(store, args, message):
    with pytest.raises(gr.Error, match=message):
        last(handlers(store).run(*args, *SETTINGS.values(), False))


@pytest.mark.parametrize("change, message", [
    (dict(k=0), r"k must lie in \[1, 16\]"), (dict(top_p=0.0), r"top_p must lie in"), (dict(temperature=-1.0), "temperature"),
    (dict(max_new_tokens=200), "exceeds the target's context window of 128"), (dict(seed=1.5), "whole number"),
    (dict(max_new_tokens=10**9), r"max_new_tokens must lie in \[1, 512\]"), (dict(k=10**6), "k must lie in"),
    (dict(temperature=1e-30), "at least 0.01"), (dict(top_k=10**12), "top_k must lie in"),
])
def test_out_of_range_settings_raise_gr_error(store, change, message):
    settings = {**SETTINGS, **change}
    with pytest.raises(gr.Error, match=message):
        last(handlers(store).run("ROMEO:", "tiny-target", "tiny", *settings.values(), False))


@pytest.mark.slow
def test_json_export_import_round_trip(store, tmp_path):
    h = handlers(store)
    trace = last(h.run("ROMEO:", "tiny-target", "tiny", *SETTINGS.values(), False))[0]
    csv, js = h.export(trace)
    assert csv.endswith(".csv") and open(csv).readline().startswith("round,k,position")
    outs = h.load(js)
    assert outs[0].to_json() == trace.to_json() and outs[1] is None  # no baseline without the models
    assert outs[2].count("sv-tok") > 12  # timeline rebuilt from token_text alone
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "nope"}')
    with pytest.raises(gr.Error, match="not a specviz trace"):
        h.load(str(bad))
    with pytest.raises(gr.Error, match="nothing to export"):
        h.export(None)


@pytest.mark.slow
def test_an_exported_run_keeps_its_baseline_and_its_speedup(store):
    """Export a run with its baseline; the import restores both, and the summary shows the measured speedup
    again (the same figure as before the export)."""
    h = handlers(store)
    outs = last(h.run("ROMEO:", "tiny-target", "tiny", *SETTINGS.values(), True))
    trace, base, summary = outs[0], outs[1], outs[3]
    assert base is not None and "measured median **" in summary
    _, js = h.export(trace, base)
    back = h.load(js)
    assert back[0].to_json() == trace.to_json() and back[1].to_json() == base.to_json()
    measured = f"{theory.measured_speedup(trace, base):.2f}"  # the exported pair, said to be one pair
    assert f"measured **{measured}×** from one pair" in back[3]
    assert "Speedup where it was recorded (an imported trace" in back[3] and "on this machine" not in back[3]
    bad = json.loads(open(js).read())
    bad["baseline"]["rounds"][0]["index"] = "<b>x</b>"  # the baseline is checked like the trace
    path = js.replace("trace.json", "bad.json")
    open(path, "w").write(json.dumps(bad))
    with pytest.raises(gr.Error, match=r"baseline\.rounds\[0\]\.index must be an integer"):
        h.load(path)


@pytest.mark.slow
def test_replay_steps_clamp(store):
    h = handlers(store)
    trace = last(h.run("ROMEO:", "tiny-target", "tiny", *SETTINGS.values(), False))[0]
    n = len(trace.rounds)  # the slider names rounds 1 .. n
    assert h.step(trace, 1, -1) == 1 and h.step(trace, n, +1) == n and h.step(trace, 1, +1) == 2
    html, accept, residual, tree = h.replay(trace, 1)
    assert f"<b>Round 1</b> of {n}:" in html and accept.data[0].y is not None and tree["visible"] is False  # a chain
    assert f"<b>Round {n}</b> of {n}:" in h.replay(trace, n)[0]


@pytest.mark.slow
def test_tree_mode_runs_a_tree_then_its_chain_twin_and_draws_each_round(pair, store):
    from specviz.config import TreeConfig

    target, draft, tok = pair
    ids = tok("ROMEO:", return_tensors="pt").input_ids
    settings = {**SETTINGS, "max_new_tokens": 20}
    want = speculative_generate(target, draft, ids, DecodeConfig(**settings, tree=TreeConfig(shape=(3, 2, 1))))
    h = handlers(store)
    outs = last(h.run("ROMEO:", "tiny-target", "tiny", *settings.values(), True, {}, 0.0, "3,2,1", "auto"))
    trace = outs[0]
    assert trace.new_tokens == want.new_tokens and trace.config.tree == TreeConfig(shape=(3, 2, 1))
    assert "tree 3,2,1" in outs[3] and "chain k = 3" in outs[3] and "tokens / target pass" in outs[3]
    from specviz.views.timeline import timeline_html

    assert "▲" in timeline_html(trace)  # the timeline marks tree rounds
    r = next(i for i, r in enumerate(trace.rounds) if r.tree.nodes)
    html, accept, residual, tree = h.replay(trace, r + 1)  # the slider names round r + 1
    assert tree["visible"] is True
    drawn = {d.name: len(d.x) for d in tree["value"].data if d.name}
    assert sum(drawn[s] for s in ("accepted", "rejected", "not visited")) == len(trace.rounds[r].tree.nodes)
    assert drawn["resampled"] + drawn["bonus"] == 1  # the token drawn where the walk stopped
    api = Trace.from_json(h.generate("ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 0.95, 20, 7, 0.0, "3,2,1"))
    assert api.new_tokens == want.new_tokens
    siblings = last(h.run("ROMEO:", "tiny-target", "tiny", *settings.values(), True, {}, 0.0, "chain:5,2", "auto"))
    assert "tree chain:5,2" in siblings[3] and "chain k = 5" in siblings[3]  # beside its own chain, not the k slider's
    with pytest.raises(gr.Error, match="unreadable tree"):
        h.generate("ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 0.95, 20, 7, 0.0, "tree please")
    with pytest.raises(gr.Error, match="drafts chains only"):
        last(h.run("ROMEO:", "tiny-target", "prompt-lookup", *settings.values(), False, {}, 0.0, "2,2", "auto"))


@pytest.mark.slow
def test_generate_endpoint_with_gradio_client(store):
    from gradio_client import Client

    demo = build_demo(store)
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        out = Client(f"http://127.0.0.1:{port}/", verbose=False).predict("ROMEO:", api_name="/generate")
        trace = Trace.from_json(out if isinstance(out, str) else json.dumps(out))
        assert trace.draft_name == "tiny" and len(trace.new_tokens) == 64  # the defaults
    finally:
        demo.close()


@pytest.mark.slow
def test_theory_explorer_draws_leviathan_and_takes_the_runs_numbers(store):
    h = handlers(store)
    fig = h.what_if(0.8, 4, 0.1, 1.2)
    tau, speed, chosen = fig.data[:3]
    assert tau.y[3] == pytest.approx((1 - 0.8 ** 5) / 0.2)  # k = 4: E[tau] = (1 - alpha^5) / (1 - alpha)
    assert speed.y[3] == pytest.approx((1 - 0.8 ** 5) / 0.2 / (4 * 0.1 + 1.2)) == chosen.y[0]
    outs = last(h.run("ROMEO:", "tiny-target", "tiny", *SETTINGS.values(), True))
    trace, base = outs[0], outs[1]
    alpha, k, c, v, note = h.from_run(trace, base)
    assert alpha == pytest.approx(trace.summary().alpha, abs=1e-3) and k == 3 and c > 0 and v > 0
    fig = h.what_if(alpha, k, c, v, trace, base)
    assert fig.data[-1].name == "this run, measured" and fig.data[-1].x[0] == pytest.approx(3, abs=0.5)
    with pytest.raises(gr.Error, match="run speculative decoding first"):
        h.from_run(None, None)


@pytest.mark.slow
def test_the_run_button_says_why_it_takes_no_click_until_the_run_ends(store):
    """A click while a run decodes, runs its baseline or measures its spread is never silently dropped: the button is
    disabled and names the phase, and the run's last update (or the step after a failed run) enables it again."""
    h = handlers(store)
    settings = {**SETTINGS, "max_new_tokens": 4}
    buttons = [outs[-1] for outs in h.run("ROMEO:", "tiny-target", "tiny", *settings.values(), True)]
    phases = [b["value"] for b in buttons if isinstance(b, dict) and b.get("interactive") is False]
    assert phases[0] == "Running… (decoding)" and "Running… (running the baseline)" in phases
    assert phases[-1] == "Running… (measuring the spread)"
    assert buttons[-1]["interactive"] is True and buttons[-1]["value"] == "Run"
    quick = [outs[-1] for outs in h.run("ROMEO:", "tiny-target", "tiny", *settings.values(), False)]
    assert quick[-1]["interactive"] is True and not any("baseline" in str(b) for b in quick)
    demo = build_demo(store)
    deps, run_id = demo.config["dependencies"], next(c["id"] for c in demo.config["components"]
                                                      if c.get("props", {}).get("elem_id") == "run")
    first = next(d for d in deps if (run_id, "click") in [tuple(t) for t in d["targets"]])
    assert first["queue"] is False and first["outputs"] == [run_id]  # disabled at once, before the queue
    main = next(d for d in deps if d["trigger_after"] == first["id"])
    assert run_id in main["outputs"] and main["api_name"] == "run"
    after = next(d for d in deps if d["trigger_after"] == main["id"])
    assert after["outputs"] == [run_id] and not after["trigger_only_on_success"]  # re-enabled after an error too


@pytest.mark.slow
def test_an_opened_run_sets_the_form_so_run_makes_the_run_shown(store):
    """A gallery run (or an import) sets every setting of the form to its own: prompt (without the start token the
    tokenizer adds), models where this server has them, k .. seed and the draft shape."""
    from specviz.app import explorer
    from specviz.labs import gallery

    h = handlers(store)
    entry = next(e for e in gallery.entries().values() if e.cfg.tree is not None)  # a tree run: its shape too
    outs = h.open_gallery(entry.title)
    assert isinstance(outs, explorer.Shown)  # by name: one field a wired component (counted below)
    assert outs.trace.config == entry.cfg and outs.round_slider.maximum == len(outs.trace.rounds)
    assert None not in (outs.by_position, outs.per_round, outs.p_vs_q, outs.times)  # the whole run's four charts
    form = h.form_of(outs.trace)
    cfg = entry.cfg
    assert form[0] == entry.prompt and form[3:] == (cfg.k, cfg.k_policy, cfg.temperature, cfg.top_k, cfg.top_p,
                                                    cfg.max_new_tokens, cfg.seed, cfg.tree.label)
    assert form[1] == gr.skip() and form[2] == gr.skip()  # the tiny store has neither model: the picks stay
    assert h.form_of(None) == (gr.skip(),) * 11
    deps = build_demo(store).config["dependencies"]
    after = {d["trigger_after"] for d in deps if str(d["api_name"]).startswith("form_of")}
    opened = sorted(d["api_name"] for d in deps if d["id"] in after)  # after an import, a gallery run (list or button)
    assert all(len(d["outputs"]) == len(explorer.Shown._fields) for d in deps if d["api_name"] in opened)
    assert opened == ["load", "open_gallery", *(f"open_gallery_{i}" for i in range(1, explorer.GALLERY_BUTTONS + 1))]


def what_if_sliders(demo) -> dict:
    """The theory explorer's sliders by label: (minimum, maximum)."""
    found = {c["props"]["label"]: (c["props"]["minimum"], c["props"]["maximum"]) for c in demo.config["components"]
             if c["type"] == "slider" and c["props"].get("label") in ("α", "k", "c", "v")}
    assert len(found) == 4
    return found


def tree_trace():
    import torch

    from specviz.config import TreeConfig
    from tests.helpers.models import perturbed, tiny_llama

    target = tiny_llama(seed=0)
    cfg = DecodeConfig(temperature=0.0, max_new_tokens=12, tree=TreeConfig.parse("dynamic:16,6,4"))
    return speculative_generate(target, perturbed(target), torch.tensor([[3, 5, 7]]), cfg)


@pytest.mark.slow
@pytest.mark.parametrize("measured", [None, dict(k=40.0, c=7.5, v=3.593), dict(k=0.0, c=0.0, v=0.2)],
                         ids=["as measured", "above every slider", "below every slider"])
def test_the_theory_sliders_take_whatever_a_tree_run_puts_into_them(store, monkeypatch, measured):
    """A tree run's numbers (its k is its nodes per round, its v may pass 3) land inside the sliders' ranges, the
    sliders' own check passes, and the curves draw; a value a slider cannot hold is given beside it, measured."""
    from specviz.app import runs

    trace = tree_trace()
    if measured:
        monkeypatch.setattr(runs.theory, "mean_k", lambda t: measured["k"])
        monkeypatch.setattr(runs.theory, "cost_ratio", lambda t, b: measured["c"])
        monkeypatch.setattr(runs.theory, "verify_cost", lambda t, b: measured["v"])
    h = handlers(store)
    alpha, k, c, v, note = h.from_run(trace, None)
    bounds = what_if_sliders(build_demo(store))
    for label, value in (("α", alpha), ("k", k), ("c", c), ("v", v)):
        low, high = bounds[label]
        gr.Slider(low, high).preprocess(value)  # what gradio checks on every later slider move
    assert h.what_if(alpha, k, c, v, trace, None).data  # and the curves draw
    assert note.startswith("*This run*: a tree run: k is its nodes per round")
    if measured == dict(k=40.0, c=7.5, v=3.593):
        assert (k, c, v) == (16, 5.0, 3.593)  # v = 3.593 fits now; k and c are held at their ends, and said so
        assert "k measured 40: the slider stops at 16" in note and "c measured 7.5: the slider stops at 5" in note
        assert "v measured" not in note
    if measured == dict(k=0.0, c=0.0, v=0.2):
        assert (k, c, v) == (1, 0.0, 0.5) and "v measured 0.2: the slider stops at 0.5" in note


@pytest.mark.slow
def test_the_theory_sliders_ends_are_what_if_accepts(store):
    """The sliders' ranges are the ones what_if checks: both ends of each draw."""
    from specviz.app import runs

    bounds = what_if_sliders(build_demo(store))
    assert bounds == {"α": runs.SLIDERS["alpha"], "k": runs.SLIDERS["k"], "c": runs.SLIDERS["c"], "v": runs.SLIDERS["v"]}
    h = handlers(store)
    for end in (0, 1):
        assert h.what_if(*(bounds[name][end] for name in ("α", "k", "c", "v"))).data
    with pytest.raises(gr.Error, match=r"v must lie in \[0.5, 5\]"):
        h.what_if(0.5, 4, 0.1, 5.01)


@pytest.mark.slow
def test_the_first_screen_folds_every_other_setting_with_one_line_of_help(store):
    """Prompt, Target, Draft, k, temperature and Run outside; the rest in a closed "More settings", each with a
    short help line; the long texts (the tree shapes' grammar) in the glossary."""
    from specviz.app import explorer
    from specviz.views.summary import GLOSSARY

    demo = build_demo(store)
    comps = {c["id"]: c for c in demo.config["components"]}
    more = next(c for c in comps.values() if c["props"].get("elem_id") == "more-settings")
    assert more["props"]["open"] is False

    def inside(cid, layout=demo.config["layout"], within=False):
        if layout.get("id") == cid:
            return within
        return any(inside(cid, child, within or layout.get("id") == more["id"]) for child in layout.get("children", []))

    labelled = {}  # the explorer's own (built first: the labs reuse some labels)
    for c in comps.values():
        labelled.setdefault(c["props"].get("label"), c)
    folded = ["k policy", "Stop drafting below draft confidence q(x) (0 = off)", "top-k (0 = off)", "top-p (1 = off)",
              "Max new tokens", "Seed", "Also run the autoregressive baseline (measured speedup)", "Draft shape",
              "Tree children", "Acceptance rule"]
    for label in folded:
        c = labelled[label]
        assert inside(c["id"]), label
        assert 0 < len(c["props"]["info"]) <= 70, label  # one short line
    for label in ("Prompt", "Target", "Draft", "k (drafts per round)", "Temperature (0 = greedy)"):
        assert not inside(labelled[label]["id"]), label
    assert "dynamic:BUDGET,DEPTH,WIDTH[,THRESHOLD]" in GLOSSARY and "EAGLE-2" in GLOSSARY
    assert "assistant_confidence_threshold" in GLOSSARY
    titles = [b["props"]["value"] for b in comps.values() if "sv-gallery-btn" in (b["props"].get("elem_classes") or [])]
    from specviz.labs import gallery
    assert titles == list(gallery.entries())[:explorer.GALLERY_BUTTONS]  # the first ready runs, one click away
