"""Request bodies and uploads bounded (specviz/app/uploads.py, tempfiles.py): a client's uploads per minute are capped,
a body is cut off past its bound however it arrives (with a length or chunked), the upload folder stays under its cap
by refusing new uploads (never by deleting a pending one), gradio's deep_link route is closed, and an imported
trace's upload is deleted once read. The server here has an upload folder of its own (GRADIO_TEMP_DIR)."""
import os
from pathlib import Path

import pytest

from specviz.app import build_demo
from specviz.app.tempfiles import folder_bytes
from tests.helpers.app import serve, tiny_store
from tests.helpers.http import fn_index, join, session, stream, until, upload
from tests.helpers.traces import sample_trace

pytestmark = pytest.mark.slow
FOUR_MB = os.urandom(4 * 10**6)


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


def test_the_upload_folder_stays_under_its_cap_and_no_visitors_file_is_deleted_for_another(served):
    url, _, folder = served
    first = upload(url, "first.json", FOUR_MB, "198.51.100.200").json()[0]
    codes = []
    for i in range(60):  # 240 MB from 60 clients, none over its own rate
        r = upload(url, f"u{i}.json", FOUR_MB, f"198.51.{100 + i // 200}.{i % 200}")
        codes.append(r.status_code)
        assert folder_bytes(folder) <= 64 * 2**20
        if r.status_code == 507:
            assert "space for uploads is full" in r.text and "/" not in r.text  # no server path
    assert Path(first).exists()  # a pending upload is never deleted to make room
    assert codes.count(200) >= 5 and codes.count(507) >= 40
    print(f"\nupload folder after 61 uploads of 4 MB: {folder_bytes(folder) / 2**20:.0f} MiB (cap 64 MiB), "
          f"{codes.count(507)} refused")
    for path in Path(folder).rglob("*.json"):  # room again for the tests after this one
        path.unlink()


def _chunks(total: int, size: int = 2**16):
    """A body of ``total`` bytes sent without a Content-Length (chunked)."""
    head = b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"x.json\"\r\n\r\n"
    yield head
    sent = len(head)
    while sent < total:
        yield b"x" * size
        sent += size


def test_a_body_is_bounded_however_it_arrives(served):
    import httpx

    url, demo, folder = served
    before = folder_bytes(folder)
    chunked = httpx.post(f"{url}gradio_api/upload", content=_chunks(64 * 2**20), timeout=60,
                         headers={"content-type": "multipart/form-data; boundary=b", "x-forwarded-for": "203.0.113.81"})
    assert chunked.status_code == 413  # gradio's file-size check or ours, whichever the bytes reach first
    assert folder_bytes(folder) - before < 6 * 2**20  # the 64 MiB never reached the disk
    big = httpx.post(f"{url}gradio_api/queue/join", content=b"{" + b" " * (8 * 2**20) + b"}", timeout=60,
                     headers={"content-type": "application/json", "x-forwarded-for": "203.0.113.82"})
    assert big.status_code == 413
    streamed = httpx.post(f"{url}gradio_api/queue/join", content=(b" " * 2**16 for _ in range(200)), timeout=60,
                          headers={"content-type": "application/json", "x-forwarded-for": "203.0.113.83"})
    assert streamed.status_code == 413
    from specviz.app.uploads import _length
    assert [_length(v) for v in (None, "12", " 7 ", "-5", "1e9", "9" * 20)] == [0, 12, 7, None, None, None]


def test_gradios_deep_link_route_writes_nothing(served):
    import httpx

    url, _, folder = served
    r = httpx.get(f"{url}gradio_api/deep_link", params={"session_hash": "x"}, timeout=30)
    assert r.status_code == 404
    assert not (Path(folder) / "deep_links").exists()


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
