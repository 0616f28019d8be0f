"""The host line a measurement's log starts with: when (UTC) and where (CPU model, logical CPUs, torch's threads) it
ran, and how busy the host was (load average over 1, 5 and 15 minutes), so a figure in docs can say date and host.

    from hostline import host_line, load_average   # a script run as python scripts/measure/<name>.py
    print(f"# {host_line()}")                       # 2026-12-03 21:40 UTC; <CPU>, 2 logical CPUs, torch 2 threads, ...
    print(f"# load average at the end: {load_average()}")
"""
from __future__ import annotations

import os
import platform
import sys
import time


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (Linux on x86), else what ``platform`` reports."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def load_average() -> str:
    """The load average over 1, 5 and 15 minutes, "1.02 0.87 0.55" (other work on the host, runnable or running)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def logical_cpus() -> str:
    """How many logical CPUs the host has ("16 logical CPUs"), and how many this process may use where fewer."""
    total = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    return f"{total} logical CPUs" + (f" ({usable} usable)" if usable != total else "")


def host_line() -> str:
    """Date and time (UTC), CPU model, logical CPUs, torch's threads (where the script uses torch) and load average,
    as one line: call it after the script has set its thread count."""
    torch = sys.modules.get("torch")  # not imported for a script that does not use it
    threads = f", torch {torch.get_num_threads()} threads" if torch is not None else ""
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_model()}, {logical_cpus()}{threads}, "
            f"load average {load_average()}")
