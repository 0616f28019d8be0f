"""Soak: 200 requests in a row to /generate (gradio_client) against one in-process app with tiny models.
Every response is a trace with the tokens asked for, a bad request midway errors without harming the
next, and the server's resident memory grows by less than SOAK_MAX_GROWTH_MB after a warm-up."""
import gc
import os

import pytest
from gradio_client.exceptions import AppError

from tests.helpers.app import generate

pytestmark = pytest.mark.slow  # 200 requests in a row
WARMUP, REQUESTS, BAD_AT = 20, 200, 100
MAX_GROWTH_MB = float(os.environ.get("SOAK_MAX_GROWTH_MB", "150"))


def rss_mb() -> float:
    """This process's resident memory; the app runs in-process, so it is the server's."""
    gc.collect()
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        with open("/proc/self/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kb / 1024


@pytest.mark.slow
def test_200_requests_in_a_row_keep_memory_flat(client):  # noqa: F811
    for i in range(WARMUP):
        assert len(generate(client, seed=i, max_new_tokens=1 + i % 4).new_tokens) == 1 + i % 4
    before = rss_mb()
    failures = []
    for i in range(REQUESTS):
        if i == BAD_AT:
            with pytest.raises(AppError, match="the prompt is empty"):
                generate(client, prompt="")
        n = 1 + i % 4  # the request just after the bad one must work too
        trace = generate(client, prompt=["ROMEO:", "JULIET:", "To be"][i % 3], seed=1000 + i, max_new_tokens=n)
        if len(trace.new_tokens) != n:
            failures.append((i, n, len(trace.new_tokens)))
    after = rss_mb()
    growth = after - before
    print(f"\nsoak: {REQUESTS} requests (+1 bad) after {WARMUP} warm-up; RSS {before:.1f} -> {after:.1f} MB, "
          f"growth {growth:+.1f} MB ({growth * 1024 / REQUESTS:+.1f} KB/request)")
    assert not failures, failures
    assert growth < MAX_GROWTH_MB, f"RSS grew {growth:.1f} MB over {REQUESTS} requests"
