"""The hostile inputs a public server was tried with, as data, and how to send each to a served demo over HTTP as a
visitor would: an engine line with a huge k, a histogram with one far key, the costliest 4 MiB paste the "Your
engine" tab reads (short lines whose step recovery searches most), a 4 MiB v box, the rule lab's 10^8 draws, bodies far over
the bound sent without a length (chunked), and upload floods. Each send returns what came back (``Outcome``).

Shared by tests/app/test_space_memory.py, tests/app/test_space_fairness.py and scripts/measure/hostile_inputs.py."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from specviz.trace import MAX_TRACE_BYTES
from tests.helpers.http import fn_index, join, session, stream, until, upload

MiB = 2**20
# a vLLM V1 line whose printed mean leaves step recovery its widest search (64 positions, 100,000 drafted)
WIDEST_RECOVERY = ("INFO 12-02 10:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 1.00, Accepted: "
                   "5 tokens, Drafted: 100000 tokens, Per-position acceptance rate: " + ", ".join(["0.001"] * 64))
# the costliest line of vLLM V1 per byte to read (a search over accepted counts, means and rates): short, and its
# rounded counts leave step recovery a stretch of about 200 step counts to search, twice
COSTLIEST = ("INFO 12-02 10:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 1.04, Accepted: "
             "1251 tokens, Drafted: 250000 tokens, Per-position acceptance rate: " + ", ".join(["0.005"] * 8))
HEALTHY = ("INFO 12-02 10:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.40, Accepted: 280 "
           "tokens, Drafted: 600 tokens, Per-position acceptance rate: 0.700, 0.470, 0.230")


def v0_line(k: int) -> str:
    """vLLM V0's metrics line claiming ``k`` speculative tokens (k = 10^8 once took a server from 1.1 to 5.7 GB)."""
    return (f"INFO 12-02 10:00:00 metrics.py:467] Speculative metrics: Draft acceptance rate: 0.500, System "
            f"efficiency: 0.500, Number of speculative tokens: {k}, Number of accepted tokens: {k}, Number of draft "
            f"tokens: {2 * k}, Number of emitted tokens: {3 * k}.")


def sparse_histogram(key: int) -> str:
    """One response whose acceptance histogram has a single far key (n = 60,000 once held a lab slot 148 s)."""
    return ('{"metrics": {"speculative_decoding": {"num_spec_steps": 1, "num_accepted_draft_tokens": 0, '
            f'"acceptance_histogram": {{"0": 1, "{key}": 0}}}}}}}}')


def costliest_paste(size: int = MAX_TRACE_BYTES - 4096, line: str = COSTLIEST) -> str:
    """As many ``line``s as fit in ``size`` characters (the tab's limit, its JSON encoding under the body bound): the
    4 MiB paste whose reading costs the most CPU of the lines tried (19,046 lines; WIDEST_RECOVERY's 7,313 lines
    cost 0.4x as much since step recovery narrows its search to where the rounded counts can add up)."""
    return "\n".join([line] * (size // (len(line) + 1)))


def big_v_box(size: int = MAX_TRACE_BYTES) -> str:
    """About ``size`` characters of verify-cost points in the v box, rows 1, 2, 3, ... (4 MiB once answered 69 MB)."""
    points, n = [], 0
    while n < size:
        points.append(f"{len(points) + 1}:1.0")
        n += len(points[-1]) + 1
    return ",".join(points)


@dataclass(frozen=True)
class Outcome:
    """What one hostile request got back: an HTTP status, whether the event succeeded, its message (a refusal's
    text), and the size of what was sent back."""
    status: int
    success: bool | None = None
    message: str = ""
    answer_bytes: int = 0

    @property
    def summary(self) -> str:
        if self.success is None:
            return f"HTTP {self.status}: {self.message[:90]}"
        return (f"answered, {self.answer_bytes / 2**10:,.0f} KiB" if self.success
                else f"refused: {self.message[:90]}")


def inputs_by_label(demo, api_name: str, **by_label) -> list:
    """The event's inputs at their defaults, those whose label starts with a key of ``by_label`` (underscores for
    spaces) set to its value."""
    data = []
    for component in demo.fns[fn_index(demo, api_name)].inputs:
        label = getattr(component, "label", None) or ""
        match = [v for k, v in by_label.items() if label.startswith(k.replace("_", " "))]
        data.append(match[0] if match else component.value)
    return data


def engine_read(demo, text: str = HEALTHY, v: str = "1") -> list:
    """The "Read and diagnose" event's inputs: ``text`` pasted, ``v`` typed, everything else as the page starts."""
    return inputs_by_label(demo, "read_engine", Paste_engine_output=text, v=v)


def send(url: str, demo, api_name: str, data: list, ip: str, timeout: float = 600.0) -> Outcome:
    """One event from client ``ip`` in a fresh session, to its end."""
    sh = session()
    try:
        joined = join(url, fn_index(demo, api_name), data, sh, ip, timeout=60)
    except httpx.HTTPError as error:
        return Outcome(0, message=type(error).__name__)
    if joined.status_code != 200:
        return Outcome(joined.status_code, message=joined.text)
    with stream(url, sh, ip, timeout) as messages:
        done = until(messages, "process_completed")
    output = done.get("output") or {}
    return Outcome(200, bool(done.get("success")), str(output.get("error") or ""), len(json.dumps(output)))


FILE_PART = b'--b\r\nContent-Disposition: form-data; name="files"; filename="x.json"\r\n\r\n'


def chunks(total: int, head: bytes = b"", piece: int = 2**16):
    """``head``, then spaces to ``total`` bytes, sent without a Content-Length: each chunk made as it is sent (none
    held whole here)."""
    yield head
    sent = len(head)
    while sent < total:
        yield b" " * piece
        sent += piece


def post_chunked(url: str, path: str, total: int, ip: str) -> Outcome:
    """A body of ``total`` bytes with no length, to ``path`` (an upload's as one file of a multipart form)."""
    upload = path.endswith("upload")
    kind = "multipart/form-data; boundary=b" if upload else "application/json"
    try:
        r = httpx.post(f"{url}{path}", content=chunks(total, FILE_PART if upload else b""), timeout=120,
                       headers={"content-type": kind, "x-forwarded-for": ip})
    except httpx.HTTPError as error:  # the server answered and closed before the body was sent: a refusal
        return Outcome(0, message=type(error).__name__)
    return Outcome(r.status_code, message=r.text)


def big_joins(url: str, count: int = 8, size: int = 100 * MiB) -> list[Outcome]:
    """``count`` queue joins of ``size`` bytes each at once (eight of 100 MB once held about 1.1 GB)."""
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda i: post_chunked(url, "gradio_api/queue/join", size, f"203.0.113.{100 + i}"),
                             range(count)))


def upload_flood(url: str, clients: int = 61, size: int = 4 * 10**6) -> list[int]:
    """One upload of ``size`` bytes from each of ``clients`` clients (none over its own rate): their statuses."""
    content = b"0" * size
    return [upload(url, f"u{i}.json", content, f"198.51.{100 + i // 200}.{i % 200}").status_code
            for i in range(clients)]


class Timed:
    """The seconds a block took (wall), for what a script prints; tests compare two of them, never one to a
    constant."""

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def rss_mb() -> float:
    """This process's resident memory (the app is served in-process: the server's)."""
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / MiB


class Peak:
    """This process's peak resident memory over a block, in MB: the kernel's own high-water mark (VmHWM), reset to
    the current RSS as the block starts (``/proc/self/clear_refs``), so no spike between samples is missed."""

    def __enter__(self):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return self

    def __exit__(self, *exc):
        with open("/proc/self/status") as f:
            self.mb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
