"""Uploads bounded by disk (specviz/app/uploads.py, tempfiles.py): a client's uploads per minute are capped, the
upload folder is capped by size (oldest files removed first), and an imported trace's upload is deleted once
read. The server here has an upload folder of its own (GRADIO_TEMP_DIR)."""
import contextlib
import os
from pathlib import Path

import pytest

from specviz.app import build_demo
from tests.helpers.app import serve, tiny_store
from tests.helpers.http import fn_index, join, session, stream, until, upload
from tests.helpers.traces import sample_trace

pytestmark = pytest.mark.slow
FOUR_MB = os.urandom(4 * 10**6)


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under folder, counted while the server may be removing some (a file or its folder
    gone between the listing and the stat counts nothing)."""
    total = 0
    for root, _, files in os.walk(folder):  # os.walk skips a folder removed under it (rglob raised)
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("uploads")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADIO_TEMP_DIR", str(folder))
        mp.setenv("SPECVIZ_TEMP_MB", "64")
        demo = build_demo(tiny_store())
        with serve(demo) as url:
            yield url, demo, folder


def test_rapid_uploads_from_one_client_are_capped_per_minute(served):
    url, _, folder = served
    codes = [upload(url, "big.json", FOUR_MB, "203.0.113.70") for _ in range(250)]
    accepted = [r for r in codes if r.status_code == 200]
    assert 1 <= len(accepted) <= 10  # 40 MB a minute
    refused = [r for r in codes if r.status_code == 429]
    assert len(refused) == 250 - len(accepted) and "at most 40 MB a minute per visitor" in refused[0].text
    assert folder_bytes(folder) <= 64 * 2**20 + 4 * 10**6
    assert upload(url, "small.json", b"{}", "198.51.100.9").status_code == 200  # another visitor still uploads


def test_the_upload_folder_stays_under_its_cap_oldest_removed_first(served):
    url, _, folder = served
    first = upload(url, "first.json", FOUR_MB, "198.51.100.200").json()[0]
    for i in range(60):  # 240 MB from 60 clients, none over its own rate
        assert upload(url, f"u{i}.json", FOUR_MB, f"198.51.{100 + i // 200}.{i % 200}").status_code == 200
        assert folder_bytes(folder) <= 64 * 2**20 + 4 * 10**6
    assert not Path(first).exists()  # the oldest went first
    print(f"\nupload folder after 61 uploads of 4 MB: {folder_bytes(folder) / 2**20:.0f} MiB (cap 64 MiB)")


def test_an_imported_traces_upload_is_deleted_once_read(served, tmp_path):
    url, demo, _ = served
    served_path = upload(url, "trace.json", sample_trace().to_json().encode(), "198.51.100.77").json()[0]
    assert Path(served_path).exists()
    sh = session()
    data = [{"path": served_path, "orig_name": "trace.json", "meta": {"_type": "gradio.FileData"}}]
    assert join(url, fn_index(demo, "load"), data, sh, "198.51.100.77").status_code == 200
    with stream(url, sh, "198.51.100.77") as messages:
        assert until(messages, "process_completed")["success"]
    assert not Path(served_path).exists()
