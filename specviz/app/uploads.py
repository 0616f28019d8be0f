"""Request bodies bounded however they arrive: an ASGI middleware in front of every route that
- refuses a body over ``MAX_BODY_BYTES`` (HTTP 413): by its ``Content-Length`` at once, and a chunked one (no length)
  as soon as the bytes that arrived pass the bound, counted as they stream in;
- refuses a client's uploads past ``SPECVIZ_CLIENT_UPLOAD_MB`` megabytes a minute (HTTP 429, saying so), an upload
  without a length counted as the largest body admitted;
- keeps gradio's upload folder under its cap (``tempfiles.max_bytes``) on write: an upload that would not fit beside
  the files there and the uploads in flight is refused (HTTP 507), and no visitor's file is ever deleted to make room
  for another's (uploads go once read, ``tempfiles.discard``, or after an hour, gradio's ``delete_cache``);
- closes gradio's ``deep_link`` route, which writes a session's state into the upload folder and is not used here.
Messages name no server path."""
from __future__ import annotations

import time
from collections import defaultdict, deque
from pathlib import Path

import anyio
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from ..trace import MAX_TRACE_BYTES
from .identity import client_key
from .tempfiles import folder_bytes, max_bytes

MAX_BODY_BYTES = MAX_TRACE_BYTES + 2**20  # the largest file or paste admitted (4 MiB), with its encoding's overhead
CLOSED = ("/gradio_api/deep_link",)  # routes of gradio's that this app does not use and that write files


class UploadWindow:
    """Bytes each client uploaded in the last ``window_s`` seconds."""

    def __init__(self, mb_per_min: float, window_s: float = 60.0):
        self.limit, self.window_s = mb_per_min * 2**20, window_s
        self.sent: defaultdict[str, deque] = defaultdict(deque)

    def admit(self, key: str, size: int) -> bool:
        """Whether ``key`` may upload ``size`` bytes now (counted when it may)."""
        now = time.monotonic()
        if len(self.sent) > 1024:  # forget the clients with nothing in the window
            self.sent = defaultdict(deque, {k: q for k, q in self.sent.items() if q and q[-1][0] >= now - self.window_s})
        sent = self.sent[key]
        while sent and sent[0][0] < now - self.window_s:
            sent.popleft()
        if sum(n for _, n in sent) + size > self.limit:
            return False
        sent.append((now, size))
        return True


class RequestLimits:
    """The middleware: ``folder`` is gradio's upload folder (``gradio.utils.get_upload_folder()``)."""

    def __init__(self, app, mb_per_min: float, folder: str, max_body: int = MAX_BODY_BYTES):
        self.app, self.window, self.folder, self.max_body = app, UploadWindow(mb_per_min), Path(folder), max_body
        self.in_flight = 0  # bytes of uploads admitted and not yet finished (one event loop: no lock needed)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"].rstrip("/").endswith(CLOSED):
            return await _answer(scope, receive, send, 404, "not found")
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        request = Request(scope)
        declared = _length(request.headers.get("content-length"))
        if declared is None:
            return await _answer(scope, receive, send, 400, "Content-Length must be a whole number of bytes")
        if declared > self.max_body:
            return await _answer(scope, receive, send, 413, self._too_large())
        if not scope["path"].endswith("/upload"):
            return await self._bounded(scope, receive, send, self.max_body)
        return await self._upload(scope, receive, send, request, declared or self.max_body)

    async def _upload(self, scope, receive, send, request, size: int):
        key = client_key(request) or getattr(request.client, "host", None) or "?"  # uploads carry no session
        if not self.window.admit(key, size):
            mb = self.window.limit / 2**20
            return await _answer(scope, receive, send, 429,
                                 f"too many uploads: at most {mb:.0f} MB a minute per visitor; wait a minute")
        used = await anyio.to_thread.run_sync(folder_bytes, self.folder) if self.folder.is_dir() else 0
        if used + self.in_flight + size > max_bytes():
            return await _answer(scope, receive, send, 507, "the server's space for uploads is full: try again in a "
                                                            "few minutes")
        self.in_flight += size
        try:
            await self._bounded(scope, receive, send, size)
        finally:
            self.in_flight -= size

    async def _bounded(self, scope, receive, send, limit: int):
        """Read the body (at most ``limit`` bytes: 413 past them, however it arrives), then run the app on it."""
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was whole
            seen += len(message.get("body", b""))
            if seen > limit:
                return await _answer(scope, _nothing, send, 413, self._too_large())
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay():
            return body.pop() if body else await receive()  # then the client's disconnect, as the app expects

        await self.app(scope, replay, send)

    def _too_large(self) -> str:
        return f"the request is too large: at most {self.max_body / 2**20:.0f} MiB"


def _length(raw: str | None) -> int | None:
    """A Content-Length's bytes (0 where absent: chunked); None where it is not a whole number."""
    if raw is None:
        return 0
    raw = raw.strip()
    return int(raw) if raw.isdigit() and len(raw) < 16 else None


async def _nothing():
    return {"type": "http.disconnect"}


async def _answer(scope, receive, send, status: int, text: str):
    await PlainTextResponse(text, status_code=status)(scope, receive, send)
