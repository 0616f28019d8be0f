"""gradio's queue over plain HTTP, as a browser or a script speaks it, so a test can act as many sessions of one
client (``X-Forwarded-For``), leave mid-run (close the event stream) and watch when a job starts."""
import json
import uuid
from contextlib import contextmanager, nullcontext

import httpx


def fn_index(demo, api_name: str | None = None, trigger: str | None = None) -> int:
    """The index of the demo's event named ``api_name`` (or the first whose trigger is ``trigger``, say "load")."""
    for i, fn in demo.fns.items():
        if api_name is not None and fn.api_name == api_name:
            return i
        if trigger is not None and any(t[1] == trigger for t in fn.targets):
            return i
    raise KeyError(api_name or trigger)


def session() -> str:
    return uuid.uuid4().hex[:11]


def join(url: str, index: int, data: list, session_hash: str, ip: str, timeout: float = 10.0) -> httpx.Response:
    """Put an event in the queue for ``session_hash`` of client ``ip``; the response (200 with an event id, or
    the refusal)."""
    body = {"data": data, "fn_index": index, "session_hash": session_hash, "event_data": None, "trigger_id": None}
    return httpx.post(f"{url}gradio_api/queue/join", json=body, headers={"x-forwarded-for": ip}, timeout=timeout)


def shared_client() -> httpx.Client:
    """One client for many calls, each on a connection of its own (no keep-alive, as a fresh client's would): a new
    httpx client builds an SSL context, about 15 ms of CPU, which a test of a thousand calls pays a thousand times."""
    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


@contextmanager
def stream(url: str, session_hash: str, ip: str, timeout: float = 120.0, client: httpx.Client | None = None):
    """The session's event stream (open it after its first join), through ``client`` (None: a client of its own):
    yields an iterator of its messages (dicts); leaving the block disconnects."""
    with (httpx.Client() if client is None else nullcontext(client)) as http, http.stream(
            "GET", f"{url}gradio_api/queue/data", params={"session_hash": session_hash},
            headers={"x-forwarded-for": ip}, timeout=timeout) as response:
        yield (json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:"))


def until(messages, *kinds: str) -> dict:
    """The first message of one of ``kinds`` ("process_starts", "process_completed", ...)."""
    for message in messages:
        if message.get("msg") in kinds:
            return message
    raise AssertionError(f"the stream ended before {kinds}")


def call(url: str, index: int, data: list, ip: str, timeout: float = 120.0) -> dict:
    """One event, start to finish, in a fresh session of client ``ip``: its process_completed message."""
    sh = session()
    joined = join(url, index, data, sh, ip)
    assert joined.status_code == 200, joined.text
    with stream(url, sh, ip, timeout) as messages:
        return until(messages, "process_completed")


def upload(url: str, name: str, content: bytes, ip: str) -> httpx.Response:
    return httpx.post(f"{url}gradio_api/upload", files={"files": (name, content)}, headers={"x-forwarded-for": ip},
                      timeout=60)
