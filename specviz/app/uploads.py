"""Uploads bounded by disk: an ASGI middleware on gradio's upload route that refuses a client's upload past
``SPECVIZ_CLIENT_UPLOAD_MB`` megabytes a minute (HTTP 429, saying so), and caps gradio's upload folder
(``tempfiles.cap_size``, oldest files first) after each upload lands."""
from __future__ import annotations

import time
from collections import defaultdict, deque
from pathlib import Path

import anyio
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from .identity import client_key
from .tempfiles import cap_size, max_bytes

MAX_UPLOAD_BYTES = 4 * 2**20  # an upload without a Content-Length is counted as the largest one admitted


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


class UploadLimits:
    """The middleware: ``folder`` is gradio's upload folder (``gradio.utils.get_upload_folder()``)."""

    def __init__(self, app, mb_per_min: float, folder: str):
        self.app, self.window, self.folder = app, UploadWindow(mb_per_min), Path(folder)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].endswith("/upload"):
            return await self.app(scope, receive, send)
        request = Request(scope)
        size = int(request.headers.get("content-length") or MAX_UPLOAD_BYTES)
        key = client_key(request) or getattr(request.client, "host", None) or "?"  # uploads carry no session
        if not self.window.admit(key, size):
            mb = self.window.limit / 2**20
            refusal = PlainTextResponse(f"too many uploads: at most {mb:.0f} MB a minute per visitor; wait a minute",
                                        status_code=429)
            return await refusal(scope, receive, send)
        await self.app(scope, receive, send)
        if self.folder.is_dir():
            await anyio.to_thread.run_sync(cap_size, self.folder, max_bytes())
