"""The conformance kit's card of llama.cpp's own server on the bundled pair (scripts/measure/conformance_llamacpp.sh),
read back: every tested row's counts, p-values, Holm's p, flags and detectable bias recomputed from the recorded
samples; the power sentence, N, the reported acceptance and the verdict the card states follow from them. The
statistics run on the recorded files, never on the build. llama.cpp's draft-simple acceptance is exact_match
(``specviz.rules``: the target samples its own token and keeps the draft while they agree; common/sampling.cpp
common_sampler_sample_and_accept_n): lossless, so the kit's prediction is a pass."""
import gzip
import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from specviz.conformance import Setting, read_samples
from specviz.conformance.card import Card
from specviz.conformance.kit import analyse
from specviz.models import load_model

FOLDER = Path(__file__).parent / "fixtures" / "llamacpp"
PREDICTION = Path(__file__).resolve().parents[2] / "scripts" / "measure" / "llamacpp_acceptance_prediction.py"
EXACT = ["prompt_id", "setting", "position", "kind", "given", "n_on", "n_off", "categories", "tested", "flagged",
         "method"]
FIGURES = ["statistic", "pvalue", "p_holm", "tv", "detectable_tv"]


@pytest.fixture(scope="module")
def card() -> dict:
    return json.loads((FOLDER / "card.json").read_text())


@pytest.fixture(scope="module")
def frame(tmp_path_factory) -> pd.DataFrame:
    """The recorded samples, unpacked and read with the kit's checks (same settings, prompts, lengths, engine)."""
    folder = tmp_path_factory.mktemp("samples")
    for mode in ("on", "off"):
        with gzip.open(FOLDER / f"samples-{mode}.jsonl.gz", "rb") as f, open(folder / f"samples-{mode}.jsonl", "wb") as g:
            shutil.copyfileobj(f, g)
    return read_samples(folder / "samples-on.jsonl", folder / "samples-off.jsonl")


@pytest.mark.slow
def test_every_row_is_the_kits_reading_of_the_samples(card, frame):
    recorded = pd.DataFrame(card["tests"]).fillna({"given": ""})
    again = analyse(frame, card["alpha"]).fillna({"given": ""})
    assert len(again) == len(recorded) and int(again.tested.sum()) == int(recorded.tested.sum()) > 0
    for column in EXACT:
        assert list(again[column]) == list(recorded[column]), column
    for column in FIGURES:
        a, b = again[column].astype(float), recorded[column].astype(float)
        assert list(a.isna()) == list(b.isna()), column
        assert a[a.notna()].tolist() == pytest.approx(b[b.notna()].tolist(), rel=1e-9), column


def test_the_cards_verdict_power_and_acceptance_follow_from_them(card, frame):
    settings = [Setting(**s) for s in card["settings"]]
    tests = pd.DataFrame(card["tests"])
    rebuilt = Card.build(card["info"], settings, frame, tests, [], card["alpha"], card["near_tie"]).to_json()
    assert rebuilt["power"] == card["power"] and rebuilt["n"] == card["n"] == frame.groupby(
        ["prompt_id", "setting", "mode"]).size().min()
    on = frame[frame["mode"] == "on"]
    acc = card["acceptance"]
    assert (acc["drafted"], acc["accepted"]) == (int(on.draft_n.sum()), int(on.draft_accepted.sum()))
    assert acc["drafted"] > 0 and acc["drafted_off"] == 0  # drafting on one side only: the off server had no draft
    structural = [d for d in card["greedy"] if d["kind"] == "structural"]
    assert card["verdict"] == ("flag" if tests.flagged.any() or structural else "pass")


def test_llama_cpp_is_exact_here(card):
    """exact_match keeps the target's own sample at every position: the law of the text is the target's, so no
    sampled test flags and greedy decoding agrees token for token, or first differs at a near-tie."""
    assert card["verdict"] == "pass"
    assert {s["temperature"] for s in card["settings"]} >= {0.8}
    assert {d["kind"] for d in card["greedy"]} <= {"identical", "near-tie"}
    assert card["info"]["engine"] == "llama.cpp /completion" and card["info"]["draft"] == "lite-f32.gguf"


@pytest.mark.slow
def test_the_reported_draft_counts_are_the_drafts_argmax_kept_by_exact_match(monkeypatch):
    """The rule lab's model of llama.cpp (scripts/measure/llamacpp_acceptance_prediction.py: draft-simple drafts the
    draft model's argmax, min(n_max, tokens left - 1) a round; the target keeps a draft while its own sample equals
    it), replayed over each recorded request's tokens, gives the draft_n and draft_n_accepted the engine reported
    for that request: 500 of 500 at each setting."""
    monkeypatch.syspath_prepend(str(PREDICTION.parent))  # the script imports its folder's hostline, as when run
    spec = importlib.util.spec_from_file_location("llamacpp_acceptance_prediction", PREDICTION)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    draft, tokenizer = load_model("lite")
    for setting, rows in script.engine_samples(FOLDER / "samples-on.jsonl.gz").items():
        pair = script.Pair(None, draft, {})  # the replay asks the draft only
        prompt = tuple(tokenizer("ROMEO:").input_ids)
        replayed = [script.replay(pair, prompt, tokens, 4)[:2] for tokens, _, _ in rows]
        assert len(rows) == 500 and replayed == [(d, a) for _, d, a in rows], setting
        assert sum(a for _, a in replayed) in (131, 97)  # the card's 228 drafts kept, 131 at T = 0.8 and 97 at 1.0
