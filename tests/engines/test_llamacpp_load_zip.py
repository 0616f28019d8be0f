"""A llama.cpp load recording read from a zip of its folder (``read_llamacpp_load_zip``): the same runs as the
folder read directly, however it was zipped (the folder itself, or its contents), from bytes or a path; what is not a
recording, or not safe to open, refused saying what was expected."""
from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest

from specviz.engines.llamacpp_load import MAX_ZIP_BYTES, read_llamacpp_load, read_llamacpp_load_zip
from tests.helpers.zipped import zip_folder

RECORDED = Path(__file__).parent / "fixtures" / "llamacpp_load"
EXPECTED = "expected a zip of the folder scripts/measure/record_llamacpp_load.sh writes"
ONE = b'{"start": 0, "end": 1, "timings": {"predicted_n": 11, "prompt_ms": 0, "draft_n_accepted": 5}}\n'


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("prefix", ["llamacpp_load/", "", "recordings/2026-12-03/"])
def test_a_zipped_recording_reads_as_the_folder_does(prefix):
    assert read_llamacpp_load_zip(zip_folder(RECORDED, prefix)) == read_llamacpp_load(RECORDED)


def test_a_zip_on_disk_reads_as_its_bytes(tmp_path):
    path = tmp_path / "recording.zip"
    path.write_bytes(zip_folder(RECORDED, "llamacpp_load/"))
    assert read_llamacpp_load_zip(path) == read_llamacpp_load_zip(str(path)) == read_llamacpp_load(RECORDED)


def test_the_recording_says_its_llama_cpp_its_k_and_that_its_steps_match_metrics():
    """The fixture's README: 'llama.cpp version: 0.5.0-dev (build 1, commit 0c1e570) ...', commands with
    --spec-draft-n-max 4; its four configurations with speculation on each match /metrics (pinned one by one in
    test_load_doctor_llamacpp.py)."""
    runs = read_llamacpp_load_zip(zip_folder(RECORDED, "llamacpp_load/"))
    assert (runs["on"].k, runs["off"].k) == (4, None)
    for run in runs.values():
        assert any("read as llama.cpp version: 0.5.0-dev (build 1, commit 0c1e570) built with GNU 12.2.0 for Linux "
                   "x86_64 (as the recording's README.md names it)" in note for note in run.notes)
    assert runs["on"].notes[-1].endswith("equal /metrics' llamacpp:spec_decode_num_drafts between the scrapes in 4 "
                                         "of 4 configurations with speculation on")


def test_a_recording_without_its_readme_names_no_version_and_no_k():
    runs = read_llamacpp_load_zip(zipped({"np1-on/completions.jsonl": ONE, "np1-off/completions.jsonl": ONE}))
    assert runs["on"].k is None
    assert any("a llama.cpp build the recording does not name" in note for note in runs["on"].notes)
    assert runs["on"].notes[-1].startswith("steps not checked: no configuration holds both /metrics scrapes")


def test_steps_that_metrics_counts_otherwise_are_said():
    """np1-on's scrapes count 118 steps; one response of 11 tokens and 5 accepted implies 5."""
    before, after = ((RECORDED / "np1-on" / f"metrics-{w}.txt").read_bytes() for w in ("before", "after"))
    runs = read_llamacpp_load_zip(zipped({"np1-on/completions.jsonl": ONE, "np1-on/metrics-before.txt": before,
                                          "np1-on/metrics-after.txt": after}))
    assert "in np1-on (5 from the responses, 118 in /metrics): this build counts otherwise" in runs["on"].notes[-1]


def test_macos_resource_forks_and_other_files_are_passed_over():
    data = zip_folder(RECORDED, "rec/", extra={"__MACOSX/rec/np1-on/._completions.jsonl": b"\x00\x05\x16\x07",
                                              "rec/notes.txt": b"mine"})
    assert read_llamacpp_load_zip(data) == read_llamacpp_load(RECORDED)


def bomb() -> bytes:
    """One entry of zeros one byte over the limit: a zip of a few tens of KiB."""
    return zipped({"np1-on/completions.jsonl": ONE, "np1-on/server.log": bytes(MAX_ZIP_BYTES + 1)})


def larger_than_declared() -> bytes:
    """np1-on/completions.jsonl's sizes in both headers set to 10 bytes below what it holds."""
    data = bytearray(zipped({"np1-on/completions.jsonl": ONE}))
    size = struct.pack("<I", len(ONE))
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.index(signature) + offset
        assert data[at:at + 4] == size
        data[at:at + 4] = struct.pack("<I", len(ONE) - 10)
    return bytes(data)


REFUSED = {  # case: (the zip's bytes, words the message holds)
    "not a zip": (b"np1-on/completions.jsonl\n" + ONE, ["not a zip file", EXPECTED]),
    "empty": (b"", ["not a zip file"]),
    "no np folders": (zipped({"server.log": b"x", "logs/np1/completions.jsonl": ONE}),
                      ["not a llama.cpp load recording", "no np<N>-on / np<N>-off folders", EXPECTED]),
    "absolute": (zipped({"/etc/np1-on/completions.jsonl": ONE}), ["absolute path or '..'", EXPECTED]),
    "dot dot": (zipped({"rec/../../np1-on/completions.jsonl": ONE}), ["absolute path or '..'"]),
    "windows absolute": (zipped({"C:\\np1-on\\completions.jsonl": ONE}), ["absolute path or '..'"]),
    "backslash dot dot": (zipped({"..\\np1-on\\completions.jsonl": ONE}), ["absolute path or '..'"]),
    "too many entries": (zipped({f"np1-on/{i}.txt": b"" for i in range(1025)} | {"np1-on/completions.jsonl": ONE}),
                         ["1,026 entries; at most 1,024", EXPECTED]),
    "zip bomb": (bomb(), ["unpacks to 64.0 MiB; at most 64 MiB", EXPECTED]),
    "larger than declared": (larger_than_declared(), ["np1-on/completions.jsonl", "could not be read"]),
    "two recordings": (zipped({"a/np1-on/completions.jsonl": ONE, "b/np1-off/completions.jsonl": ONE}),
                       ["np folders under 2 different folders: zip one recording"]),
    "not utf-8": (zipped({"np1-on/completions.jsonl": b"\xff\xfe"}), ["np1-on/completions.jsonl' is not UTF-8"]),
    "no completions": (zipped({"np1-on/server.log": b"x"}), ["the zip: np1-on/completions.jsonl missing"]),
    "bad request": (zipped({"np2-off/completions.jsonl": b'{"start": 0}\n'}),
                    ["the zip: np2-off/completions.jsonl line 1: not a recorded request"]),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_is_not_a_recording_or_not_safe_is_refused(case):
    data, words = REFUSED[case]
    with pytest.raises(ValueError) as info:
        read_llamacpp_load_zip(data)
    assert all(word in str(info.value) for word in words), str(info.value)


def test_an_entry_named_twice_is_refused():
    buffer = io.BytesIO()
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("np1-on/completions.jsonl", ONE)
        archive.writestr("np1-on/completions.jsonl", ONE)
    with pytest.raises(ValueError, match="holds np1-on/completions.jsonl twice: zip one recording"):
        read_llamacpp_load_zip(buffer.getvalue())


def test_a_refusal_does_not_echo_a_long_entry_name():
    name = "../" + "x" * 5000 + "/np1-on/completions.jsonl"
    with pytest.raises(ValueError) as info:
        read_llamacpp_load_zip(zipped({name: ONE}))
    assert len(str(info.value)) < 400 and "x" * 100 not in str(info.value)


def test_the_limits_can_be_lowered():
    data = zip_folder(RECORDED, "rec/")
    with pytest.raises(ValueError, match="entries; at most 10 "):
        read_llamacpp_load_zip(data, max_members=10)
    with pytest.raises(ValueError, match="at most 0 MiB"):
        read_llamacpp_load_zip(data, max_bytes=2**16)
