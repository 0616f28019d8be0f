"""Every fuzzed input to the public endpoints gets a readable error: each hostile value in each argument of
/generate, the explorer's Run and a lab, and hostile files for the import, either works or is refused with a
message that says what is wrong (never an internal error, never an empty message), and the server keeps serving."""
import json

import pytest

from specviz.app import build_demo
from tests.helpers.app import serve, tiny_store
from tests.helpers.http import fn_index, session, shared_client, stream, until, upload

pytestmark = pytest.mark.slow
CLIENT = "198.51.100.50"
HOSTILE = [None, "", "abc", -1, 0, 1.5, 10**30, -(2**63), 2**64, 1e308, True, [], {}, [1, 2], {"a": 1}, "\ud800",
           "<img src=x onerror=alert(1)>", "../../etc/passwd", "x" * 5000, "1e999", "nan"]
GENERATE = ["ROMEO:", "tiny-target", "tiny", 2, 0.8, 0, 1.0, 2, 0, 0.0, "chain", "auto"]
RUN = ["ROMEO:", "tiny-target", "tiny", 2, "fixed", 0.8, 0, 1.0, 2, 0, False, None, 0.0, "chain", "auto", "leviathan"]
TREE_LAB = ["tiny-target", "tiny", "ROMEO:", "2", "", 0.0, 0, 1.0, 2, 1, 0]
HTTP = shared_client()  # about 1,500 requests: one SSL context, not one each


@pytest.fixture(scope="module")
def served():
    demo = build_demo(tiny_store())
    with serve(demo) as url:
        yield url, demo


def outcome(url: str, index: int, data: list) -> tuple[bool, str]:
    """(worked, the error's text) of one call; a refusal at the queue's door counts with its detail."""
    sh = session()
    try:
        body = json.dumps({"data": data, "fn_index": index, "session_hash": sh, "event_data": None, "trigger_id": None})
    except (ValueError, TypeError) as e:  # not even JSON: the client cannot send it
        return False, f"unsendable: {e}"
    joined = HTTP.post(f"{url}gradio_api/queue/join", content=body.encode("utf-8", "surrogatepass"),
                        headers={"x-forwarded-for": CLIENT, "content-type": "application/json"}, timeout=30)
    if joined.status_code != 200:
        return False, str(joined.json().get("detail", joined.text)) if joined.text else ""
    with stream(url, sh, CLIENT, client=HTTP) as messages:
        done = until(messages, "process_completed")
    return done["success"], "" if done["success"] else str(done["output"].get("error") or "")


def readable(message: str) -> bool:
    return bool(message.strip()) and "internal error" not in message and "Traceback" not in message


def fuzz(url, index, valid, positions=None):
    bad = []
    for i in positions if positions is not None else range(len(valid)):
        for value in HOSTILE:
            worked, message = outcome(url, index, [*valid[:i], value, *valid[i + 1:]])
            if not worked and not readable(message):
                bad.append((i, value if not isinstance(value, str) else value[:40], message[:200]))
    return bad


def test_fuzzed_generate_arguments_get_readable_errors(served):
    url, demo = served
    assert fuzz(url, fn_index(demo, "generate"), GENERATE) == []
    assert outcome(url, fn_index(demo, "generate"), GENERATE)[0]  # still serving


def test_fuzzed_explorer_run_and_lab_arguments_get_readable_errors(served):
    url, demo = served
    assert fuzz(url, fn_index(demo, "run"), RUN, positions=[0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 14, 15]) == []
    assert fuzz(url, fn_index(demo, "run_tree_lab"), TREE_LAB) == []


def test_fuzzed_trace_files_get_readable_errors(served):
    url, demo = served
    load = fn_index(demo, "load")
    bad = []
    files = [b"", b"\x00" * 100, b"{", b"[]", b"null", b'{"schema": "specviz.trace/1"}', b'"\\ud800"',
             b'{"schema": "specviz.trace/1", "prompt_ids": [1e999], "config": {}, "rounds": []}',
             b'{"schema": "specviz.trace/1", "prompt_ids": [], "config": {"k": 99999999999999999999}, "rounds": []}',
             b'{"schema": "specviz.trace/1", "prompt_ids": [], "config": {"\\ud800": 1}, "rounds": []}',
             b"[" * 100_000]
    for content in files:
        path = upload(url, "t.json", content, CLIENT).json()[0]
        worked, message = outcome(url, load, [{"path": path, "orig_name": "t.json", "meta": {"_type": "gradio.FileData"}}])
        if worked or not readable(message):
            bad.append((content[:40], message[:200]))
    for value in [None, "/etc/passwd", {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}, 5, "\ud800"]:
        worked, message = outcome(url, load, [value])
        if not worked and not readable(message):
            bad.append((value, message[:200]))
    assert bad == []
