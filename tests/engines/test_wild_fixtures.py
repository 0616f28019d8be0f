"""The corpus of real engine output (fixtures/wild/) is intact: every file has a manifest entry with every key, every
entry a file, and each number the manifest says the source prints occurs in the file as printed (a check that the
excerpt was copied verbatim, not retyped). The readers are not run on it here."""
import json
import re
from pathlib import Path

import pytest

WILD = Path(__file__).parent / "fixtures" / "wild"
MANIFEST = WILD / "manifest.json"
NOT_EXCERPTS = {"manifest.json", "README.md", "findings.json"}  # findings.json: what the doctor should find
KEYS = {"file", "engine", "version", "source", "date", "what", "cut", "figures", "notes", "carries_counts",
        "synthetic_from_format"}
PREFIX = {"vllm": "vllm-", "vllm-ascend": "vllm-ascend-", "llama.cpp": "llamacpp-", "sglang": "sglang-",
          "tensorrt-llm": "trtllm-", "tgi": "tgi-", "mlx-lm": "mlx-"}  # engine -> file name prefix
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def manifest():
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


def figure_values(value):
    """The leaves of one figure: a number, a string as printed ('88.8%'), or lists / dicts of them."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in figure_values(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in figure_values(v)]
    return [value]


def figure_mismatches(text, figures):
    """Each figure leaf absent from ``text``: a string must occur literally, a number must equal a number printed."""
    printed = {float(token) for token in NUMBER.findall(text)}
    missing = []
    for name, value in figures.items():
        for leaf in figure_values(value):
            found = leaf in text if isinstance(leaf, str) else float(leaf) in printed
            if not found:
                missing.append(f"{name}={leaf!r}")
    return missing


def test_every_entry_has_every_key_and_a_file():
    entries = manifest()
    assert len(entries) >= 40
    names = [e["file"] for e in entries]
    assert len(names) == len(set(names)), "a file is listed twice"
    for entry in entries:
        assert set(entry) == KEYS, f"{entry['file']}: keys {sorted(set(entry) ^ KEYS)}"
        assert (WILD / entry["file"]).is_file(), entry["file"]
        prefixes = [p for p in PREFIX.values() if entry["file"].startswith(p)]
        assert max(prefixes, key=len) == PREFIX[entry["engine"]], f"{entry['file']}: engine {entry['engine']}"
        assert entry["source"].startswith("https://github.com/"), entry["file"]
        assert entry["date"] is None or re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"]), entry["file"]
        assert all(isinstance(entry[k], bool) for k in ("cut", "carries_counts", "synthetic_from_format"))
        assert entry["figures"] and entry["what"] and entry["notes"], entry["file"]


def test_every_file_in_the_folder_is_listed():
    listed = {e["file"] for e in manifest()}
    present = {p.name for p in WILD.iterdir() if p.name not in NOT_EXCERPTS}
    assert present - listed == set(), "files without a manifest entry"


@pytest.mark.parametrize("entry", manifest(), ids=lambda e: e["file"])
def test_figures_occur_in_the_file_as_printed(entry):
    text = (WILD / entry["file"]).read_text(encoding="utf-8")
    assert figure_mismatches(text, entry["figures"]) == []
    if entry["file"].endswith(".json"):
        json.loads(text)  # a .json excerpt is whole JSON; a pasted one with placeholders is kept as .txt


def test_the_verbatim_check_catches_a_retyped_number():
    line = "SpecDecoding metrics: Draft acceptance rate: 88.8%, Mean acceptance length: 5.44, Accepted: 262 tokens"
    assert figure_mismatches(line, {"Accepted": 262, "Mean acceptance length": 5.44, "rate": "88.8%"}) == []
    # a digit slipped, a rounding changed, a percent written as a fraction: each is reported
    assert figure_mismatches(line, {"Accepted": 226, "Mean acceptance length": 5.4, "rate": "0.888"}) == [
        "Accepted=226", "Mean acceptance length=5.4", "rate='0.888'"]


def test_synthetic_entries_are_few_and_say_so():
    synthetic = [e for e in manifest() if e["synthetic_from_format"]]
    assert len(synthetic) <= 3
    assert all("SYNTHETIC" in e["what"] and "synthetic" in e["file"] for e in synthetic)
