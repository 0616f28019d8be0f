"""Who a request is from, in a way the client cannot forge.

``X-Forwarded-For`` is a list a client may start itself: every proxy appends the address it received the request
from, so only the hops appended by the deployment's own proxies can be trusted. ``SPECVIZ_TRUSTED_PROXIES`` says how
many proxies stand in front of the app (0 by default: the header is not read at all); with N, and a peer on a private
or loopback address (a public peer is never one of the deployment's proxies), the client is the N-th address from
the right, the one the outermost trusted proxy saw. Otherwise a public peer is its own address, and a private peer
(a local run, a proxy not declared) is one visitor per session hash."""
from __future__ import annotations

import ipaddress
import os

TRUSTED_PROXIES_ENV = "SPECVIZ_TRUSTED_PROXIES"
MAX_TRUSTED_PROXIES = 8


def trusted_proxies() -> int:
    """How many proxies in front of the app append to X-Forwarded-For (SPECVIZ_TRUSTED_PROXIES; 0: none)."""
    raw = (os.environ.get(TRUSTED_PROXIES_ENV) or "0").strip()
    if not raw.isdigit() or int(raw) > MAX_TRUSTED_PROXIES:
        raise ValueError(f"{TRUSTED_PROXIES_ENV} must be a whole number from 0 to {MAX_TRUSTED_PROXIES} (the proxies "
                         "in front of the app that append to X-Forwarded-For)")
    return int(raw)


def _private(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in ("localhost", "testclient")
    return address.is_loopback or address.is_private


def _hop(forwarded: str, n: int) -> str | None:
    """The n-th address from the right of an X-Forwarded-For value (None: fewer hops, or not an address)."""
    hops = [h.strip() for h in forwarded.split(",")[-n:]] if forwarded else []
    if len(hops) < n:
        return None
    try:
        return str(ipaddress.ip_address(hops[0]))
    except ValueError:
        return None


def client_key(request, session_hash: str | None = None, proxies: int | None = None) -> str | None:
    """The client behind a request (a fastapi.Request, a gr.Request or a starlette Request): with ``proxies``
    trusted proxies (default: SPECVIZ_TRUSTED_PROXIES) the address the outermost one saw; else a public peer's
    address; a private peer is one visitor per ``session_hash``."""
    proxies = trusted_proxies() if proxies is None else proxies
    client = getattr(request, "client", None)
    host = getattr(client, "host", None) if client is not None else None
    if proxies and host is not None and _private(host):  # a public peer is never one of the deployment's proxies
        headers = getattr(request, "headers", None) or {}
        if hasattr(headers, "getlist"):  # a header sent twice reads as one list, in order
            forwarded = ", ".join(headers.getlist("x-forwarded-for"))
        else:
            forwarded = headers.get("x-forwarded-for", "") if hasattr(headers, "get") else ""
        hop = _hop(forwarded, proxies)
        if hop is not None:
            return hop
    if host is not None and not _private(host):
        return host
    return session_hash
