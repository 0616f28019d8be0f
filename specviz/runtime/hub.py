"""Whether the model hub can be reached from here, asked without ever hanging: one probe bounded by HUB_TIMEOUT_S
(name lookup included: it runs in a thread), remembered for HUB_RECHECK_S; never in offline mode."""
from __future__ import annotations

import math
import os
import re
import threading
import time
from pathlib import Path

HUB_TIMEOUT_S = 2.0
HUB_RECHECK_S = 60.0
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_hub = {"at": -math.inf, "ok": False}
_hub_lock = threading.Lock()


def is_hub_id(name: str) -> bool:
    """"owner/name" or "name" as the hub spells them: no path syntax, nothing that exists on this disk."""
    return (isinstance(name, str) and bool(HUB_ID.match(name)) and ".." not in name
            and not Path(name).expanduser().exists())


def _probe_hub(timeout: float) -> bool:
    """One HEAD request to the hub endpoint; any HTTP answer means reachable."""
    import httpx
    from huggingface_hub import constants

    try:
        httpx.head(constants.ENDPOINT, timeout=timeout)
        return True
    except Exception:
        return False


def hub_reachable() -> bool:
    """False in offline mode (HF_HUB_OFFLINE); else a probe bounded by HUB_TIMEOUT_S (name lookup
    included: it runs in a thread), remembered for HUB_RECHECK_S."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}:
        return False
    with _hub_lock:
        if time.monotonic() - _hub["at"] < HUB_RECHECK_S:
            return _hub["ok"]
        result = []
        probe = threading.Thread(target=lambda: result.append(_probe_hub(HUB_TIMEOUT_S)), daemon=True)
        probe.start()
        probe.join(HUB_TIMEOUT_S + 0.5)
        _hub.update(at=time.monotonic(), ok=bool(result and result[0]))
        return _hub["ok"]


def param_count(path: str) -> int | None:
    """Parameters stored in a folder's or hub repo's safetensors files, without loading them (None if unknown)."""
    try:
        from . import int8

        if Path(path).is_dir() and int8.stored(path):
            return int8.parameter_count(path)
        if Path(path).is_dir():
            from safetensors import safe_open

            n = 0
            for f in Path(path).glob("*.safetensors"):
                with safe_open(str(f), "pt") as s:
                    n += sum(math.prod(s.get_slice(k).get_shape()) for k in s.keys())
            return n or None
        from huggingface_hub import get_safetensors_metadata

        return sum(get_safetensors_metadata(path).parameter_count.values()) if hub_reachable() else None
    except Exception:
        return None
