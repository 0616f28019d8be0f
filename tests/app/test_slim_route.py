"""The explorer's chains on an operator's Gemma-3 GGUF run on specviz.slim over the C stack (``app.slim_route``), on a
tiny GGUF and a tiny feature draft written here: the explorer alone offers the feature drafts whose width fits, greedy
runs and their baselines keep the target's own greedy text on that forward, sampled runs record every decision and
repeat with their seed, concurrent runs keep their own caches, and what slim does not run takes the torch decoder or
is refused in words."""
import threading

import pytest

from specviz import slim
from specviz.app import runs, slim_route
from specviz.app.store import ModelStore
from specviz.app.widgets import fitting_update
from specviz.config import DecodeConfig
from specviz.runtime.gemma_sequence import GemmaSequence
from specviz.runtime.native import gemma as native_gemma
from tests.helpers.tiny_gguf import served_tiny_gemma, write_tiny_feature_draft

pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(not native_gemma.available(), reason="the C Gemma-3 pass needs AVX-512 VNNI")

PROMPT = "a b the c a b the c a"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("slim-route")


@pytest.fixture
def store(root, monkeypatch):
    """The tiny GGUF, a feature draft of its width (random weights, spread q) and one of another width, served."""
    served_tiny_gemma(root, monkeypatch, narrow=True)
    return ModelStore()


def own_greedy(store, cfg):
    """The reference: the target's own greedy decode on the same forward (slim's autoregressive on a fresh sequence)."""
    _, tok = store.target("tiny-gemma")
    ids = [int(t) for t in tok(PROMPT, return_tensors="pt").input_ids[0]]
    gguf = slim_route.source(store.target("tiny-gemma")[0])
    return slim.autoregressive(GemmaSequence.from_gguf(gguf), ids, cfg).new_tokens


def test_only_the_explorer_offers_the_feature_drafts_that_fit(store):
    assert "tiny-feature" not in store.list_targets() and "tiny-gemma" in store.list_targets()
    mine = store.drafts_for("tiny-gemma", slim=True)
    assert "tiny-feature" in mine and "prompt-lookup" in mine
    assert "narrow-feature" not in mine  # 128 wide against the file's 256
    assert "gemma-3-270m-feature-draft" not in mine  # the bundled one: 640 wide
    assert "tiny-feature" not in store.drafts_for("tiny-gemma")  # the other tabs' pickers
    assert "tiny-feature" not in store.drafts_for("target", slim=True)  # the bundled family's target
    assert "tiny-feature" in fitting_update(store, "tiny-gemma", "tiny-feature", slim=True)["choices"]
    picked = fitting_update(store, "tiny-gemma", "a draft that does not fit", slim=True)["value"]
    assert picked == (store.default_draft() if store.default_draft() in mine else "tiny-feature")
    with pytest.raises(ValueError, match="pick it in the explorer"):
        store.pair("tiny-gemma", "tiny-feature")


@pytest.mark.parametrize("draft", ["prompt-lookup", "tiny-feature"])
def test_greedy_runs_and_their_baselines_keep_the_targets_own_greedy_text(store, draft):
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=16)
    trace = runs.generate(store, PROMPT, "tiny-gemma", draft, cfg)
    want = own_greedy(store, cfg)
    assert trace.forward == "gemma-c" and trace.draft_name == draft and trace.mode == "speculative"
    assert trace.new_tokens == want
    base = runs.baseline(store, trace)
    assert base.forward == "gemma-c" and base.mode == "autoregressive" and base.new_tokens == want
    assert runs.rerun(store, trace).new_tokens == want
    speedups, _ = runs.speed_pairs(store, trace, base)
    assert speedups and all(s > 0 for s in speedups)
    assert all(trace.text(t) is not None for t in trace.new_tokens)


def test_sampled_runs_record_every_decision_and_repeat_with_their_seed(store):
    cfg = DecodeConfig(k=3, temperature=0.8, max_new_tokens=24, seed=5)
    trace = runs.generate(store, PROMPT, "tiny-gemma", "tiny-feature", cfg)
    assert trace.forward == "gemma-c" and trace.new_tokens and trace.stop_reason in ("length", "eos")
    drafted = [r for r in trace.rounds if r.drafted]
    assert drafted
    for r in drafted:
        verified = min(r.n_accepted + 1, len(r.drafted))
        assert len(r.q) == len(r.p) == len(r.drafted) and all(0 < q <= 1 for q in r.q)
        assert all(u == u for u in r.u[:verified])  # a uniform drawn for every draft the walk reached
        assert r.emitted[: r.n_accepted] == r.drafted[: r.n_accepted]
    again = runs.generate(store, PROMPT, "tiny-gemma", "tiny-feature", cfg)
    assert again.new_tokens == trace.new_tokens


def test_concurrent_runs_keep_their_own_caches(store):
    cfg = DecodeConfig(k=2, temperature=0, max_new_tokens=16)
    want, got = own_greedy(store, cfg), {}

    def one(name, draft):
        got[name] = runs.generate(store, PROMPT, "tiny-gemma", draft, cfg).new_tokens

    threads = [threading.Thread(target=one, args=(i, d)) for i, d in enumerate(["tiny-feature", "prompt-lookup"] * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(tokens == want for tokens in got.values())


def test_what_slim_does_not_run_takes_the_torch_decoder_or_is_refused(store, monkeypatch):
    lossy = DecodeConfig(k=3, temperature=0.8, max_new_tokens=8, rule="lenient")  # another accept rule
    assert runs.generate(store, PROMPT, "tiny-gemma", "prompt-lookup", lossy).forward != "gemma-c"
    with pytest.raises(ValueError, match="pick it in the explorer"):
        runs.generate(store, PROMPT, "tiny-gemma", "tiny-feature", lossy)
    with pytest.raises(ValueError, match="feature draft"):  # a feature draft needs a Gemma-3 GGUF target
        runs.generate(store, "a b c", "target", "tiny-feature", DecodeConfig(k=2, temperature=0, max_new_tokens=4))
    monkeypatch.setenv("SPECVIZ_FORWARD", "lean")
    chain = DecodeConfig(k=3, temperature=0, max_new_tokens=8)
    assert runs.generate(store, PROMPT, "tiny-gemma", "prompt-lookup", chain).forward != "gemma-c"
    assert not slim_route.runs_here(store.target("tiny-gemma")[0], "prompt-lookup", chain)


def test_a_gguf_the_c_stack_refuses_runs_on_the_torch_decoder(store, monkeypatch):
    """Where the C stack cannot hold the file (say an untied output matrix), prompt lookup runs as before on the torch
    decoder and the feature draft is refused with the reason; the refusal is read once per loaded model."""
    model, _ = store.target("tiny-gemma")
    slim_route._SEQUENCES.pop(model, None)
    calls = []

    def refuse(path, **kw):
        calls.append(path)
        raise ValueError("this Gemma-3 GGUF has an untied output matrix; the C stack reads tied ones")

    monkeypatch.setattr(slim_route.GemmaSequence, "from_gguf", refuse)
    try:
        cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=8)
        assert runs.generate(store, PROMPT, "tiny-gemma", "prompt-lookup", cfg).forward != "gemma-c"
        with pytest.raises(ValueError, match="untied output matrix"):
            runs.generate(store, PROMPT, "tiny-gemma", "tiny-feature", cfg)
        assert len(calls) == 1
    finally:
        slim_route._SEQUENCES.pop(model, None)


def test_a_link_reopens_a_gguf_run_with_its_feature_draft(store):
    """A link's target sets the draft picker's choices as picking it does, so the link's feature draft is kept; a
    draft that does not fit the link's target gives way to one that does."""
    from types import SimpleNamespace

    from specviz.app import links

    load = links.page_loader(store)
    values = load(SimpleNamespace(query_params={"target": "tiny-gemma", "draft": "tiny-feature", "k": "2"}))
    draft = values[links.FIELDS.index("draft")]
    assert values[links.FIELDS.index("target")] == "tiny-gemma" and values[links.FIELDS.index("k")] == 2
    assert draft["value"] == "tiny-feature" and "tiny-feature" in draft["choices"]
    other = load(SimpleNamespace(query_params={"target": "tiny-gemma", "draft": "no-such-draft"}))
    assert other[links.FIELDS.index("draft")]["value"] in store.drafts_for("tiny-gemma", slim=True)
    bundled = load(SimpleNamespace(query_params={"target": "target", "draft": "tiny-feature"}))
    assert bundled[links.FIELDS.index("draft")]["value"] != "tiny-feature"  # it does not fit the bundled target


def test_an_opened_gguf_run_sets_its_feature_draft_in_the_form(store):
    """Opening a run (an import, a gallery run) sets the form to its settings: for a Gemma-3 GGUF run the draft picker's
    choices are the target's, its feature draft picked."""
    from specviz.app import explorer, links

    cfg = DecodeConfig(k=2, temperature=0, max_new_tokens=4)
    trace = runs.generate(store, PROMPT, "tiny-gemma", "tiny-feature", cfg)
    form = explorer.form_of(store, trace)
    draft = form[links.FIELDS.index("draft")]
    assert form[links.FIELDS.index("target")] == "tiny-gemma" and form[links.FIELDS.index("k")] == 2
    assert draft["value"] == "tiny-feature" and "tiny-feature" in draft["choices"]


def test_the_slim_route_runs_on_the_operators_threads(store, monkeypatch):
    """SPECVIZ_THREADS caps the slim route's sequences as it caps the torch side's C calls."""
    cfg = DecodeConfig(k=2, temperature=0, max_new_tokens=4)
    model, _ = store.target("tiny-gemma")
    for value, want in (("1", 1), ("2", 2)):
        monkeypatch.setenv("SPECVIZ_THREADS", value)
        run = slim_route.decoding(model, "tiny-gemma", "tiny-feature", [2, 5, 6], cfg)
        assert run.fwd.threads == want and run.draft.threads == want


def test_the_k_line_says_where_a_feature_draft_was_measured_fastest(store, root, tmp_path):
    """A feature draft's config may record the k and stop it was measured fastest at (``serving``): the explorer's k
    line then gives the one of the temperature's case and where it was measured; a draft without one adds nothing; a
    record not of that form is refused in words by the reader and leaves the line as it was."""
    import json

    from specviz.app.explorer import k_info, served_form
    from specviz.slim.feature_draft import CONFIG, served_settings

    config = root / "tiny-feature" / CONFIG
    before = config.read_text()
    assert served_settings(root / "tiny-feature") is None and slim_route.fastest_note("tiny-feature", 0.8) == ""
    meta = json.loads(before)
    try:
        meta["serving"] = {"greedy": {"k": 3, "draft_stop": 0.2}, "sampled": {"k": 2, "draft_stop": 0.1},
                           "measured": "on the tiny file, here"}
        config.write_text(json.dumps(meta))
        assert served_settings(root / "tiny-feature")["sampled"] == (2, 0.1)
        assert k_info("tiny-feature", 0.8)["info"].endswith(
            " · fastest measured sampled: k = 2, stop below q 0.1 (on the tiny file, here)")
        assert "greedy: k = 3, stop below q 0.2" in k_info("tiny-feature", 0.0)["info"]
        # a pick sets k and the stop to the record's, the temperature as the browser holds it (unchecked)
        assert served_form("tiny-feature", 0.8) == (2, 0.1) and served_form("tiny-feature", "0") == (3, 0.2)
        assert all(isinstance(v, dict) for v in served_form("prompt-lookup", 0.8))  # gr.skip(): left as they are
        for bad in ({"greedy": {"k": 0, "draft_stop": 0.2}}, {"sampled": {"k": 2, "draft_stop": 1.5}},
                    {"greedy": {"k": True, "draft_stop": 0}}, {"measured": ""}):
            config.write_text(json.dumps({**meta, "serving": {**meta["serving"], **bad}}))
            with pytest.raises(ValueError, match="'serving'"):
                served_settings(root / "tiny-feature")
            assert slim_route.fastest_note("tiny-feature", 0.8) == ""
            assert all(isinstance(v, dict) for v in served_form("tiny-feature", 0.8))
    finally:
        config.write_text(before)


def test_the_shipped_drafts_fastest_settings_are_the_fastest_its_log_printed():
    """The bundled Gemma-3 feature draft's ``serving`` record against the benchmark log it names: for greedy and for
    T = 0.8, the k and stop of the draft's row (under the name it had in that run, ``log_name``, or unnamed where the
    run had one draft) with the highest speedup over specviz's autoregressive decode."""
    import re
    from pathlib import Path

    from specviz import models
    from specviz.slim.feature_draft import CONFIG, served_settings

    folder = models.ASSETS / "gemma-3-270m-feature-draft"
    settings = served_settings(folder)
    record = __import__("json").loads((folder / CONFIG).read_text())["serving"]
    log = Path(__file__).resolve().parents[2] / record["log"]
    # a run of one draft names none in its rows
    row = re.compile(r"^\s*(0|0\.8) specviz feature draft (?:\(" + re.escape(record.get("log_name", folder.name)) +
                     r"\) )?k=(\d+)(?: min q=([\d.]+))?\s+[\d.]+ \[[\d.-]+\]\s+([\d.]+)x")
    best = {}
    for m in filter(None, map(row.match, log.read_text().splitlines())):
        case = "greedy" if m[1] == "0" else "sampled"
        if float(m[4]) > best.get(case, (0.0,))[0]:
            best[case] = (float(m[4]), int(m[2]), float(m[3] or 0))
    assert {case: best[case][1:] for case in best} == {"greedy": settings["greedy"], "sampled": settings["sampled"]}


def test_a_feature_draft_that_fuses_layers_runs_on_a_sequence_that_keeps_them(root, monkeypatch):
    """An operator's draft that fuses some of the target's layers with its features: the route's sequence keeps
    those layers, and the draft's greedy runs keep the target's own greedy text."""
    import os

    served_tiny_gemma(root, monkeypatch)
    folder = root / "taps-feature"
    if not folder.is_dir():
        write_tiny_feature_draft(folder, taps=(0, 1))
    monkeypatch.setenv("SPECVIZ_EXTRA_MODELS", os.environ["SPECVIZ_EXTRA_MODELS"] + f",taps-feature={folder}")
    store = ModelStore()
    assert "taps-feature" in store.drafts_for("tiny-gemma", slim=True)
    cfg = DecodeConfig(k=3, temperature=0, max_new_tokens=16)
    trace = runs.generate(store, PROMPT, "tiny-gemma", "taps-feature", cfg)
    assert trace.forward == "gemma-c" and trace.draft_name == "taps-feature"
    assert trace.new_tokens == own_greedy(store, cfg)
    assert tuple(slim_route._kept(store.target("tiny-gemma")[0])["sequence"].taps) == (0, 1)
