"""What each hostile input costs a public server: the demo served in this process on 127.0.0.1 (tiny random-init
models, no model hub), each input sent over HTTP as a visitor would send it, and for each its outcome, wall and CPU
seconds (the whole process: the server and this client), the peak resident memory above the idle figure (the
kernel's high-water mark, reset before each case; beside the RSS as the case starts: memory an earlier case
left allocated counts in the first figure, not in the second), the answer's size; then the case is sent again with another
visitor's /generate 0.3 s after it, timed beside the same /generate on the idle server.

    python scripts/measure/hostile_inputs.py                       # every case at the sizes a visitor can send
    python scripts/measure/hostile_inputs.py --cases k histogram   # some of them
    python scripts/measure/hostile_inputs.py --code DIR --k 1000000 --paste-kib 64   # older code, smaller inputs

--code DIR measures the ``specviz`` package found in DIR instead of this tree's (``git archive <commit> specviz |
tar -x -C DIR``): the inputs that once cost minutes and gigabytes are then best sent smaller (--k, --histogram-key,
--paste-kib, --eval-kib, --draws, --body-mb). The load average is printed at the start and the end: the figures
are this host's at that load.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from hostline import host_line, load_average

ROOT = Path(__file__).resolve().parents[2]


def cases(args, hostile) -> dict:
    """name: (what it is, how to send it: (url, demo, ip) -> Outcome)."""
    def engine(text=hostile.HEALTHY, v="1"):
        return lambda url, demo, ip: hostile.send(url, demo, "read_engine", hostile.engine_read(demo, text, v), ip)

    def draws(url, demo, ip):
        return hostile.send(url, demo, "run_rules_lab", hostile.inputs_by_label(demo, "run_rules_lab", draws=args.draws),
                            ip)

    def eight(url, demo, ip):
        outcomes = hostile.big_joins(url, 8, args.body_mb * hostile.MiB)
        return max(outcomes, key=lambda o: o.status)

    run = "eval time = / 12 /  "  # the eval-time pattern's '.*' then '/' searched again at every start
    eval_line = "slot print_timing: id  0 | task 1 | " + run * (args.eval_kib * 1024 // len(run))
    return {
        "k": (f"vLLM V0 line, k = {args.k:,}", engine(hostile.v0_line(args.k))),
        "histogram": (f"JSON histogram key {args.histogram_key:,}", engine(hostile.sparse_histogram(args.histogram_key))),
        "eval": (f"a llama.cpp line of 'eval time = / 12 /' runs, {args.eval_kib:,} KiB", engine(eval_line)),
        "paste": (f"the costliest paste (short vLLM lines, step recovery searching most), {args.paste_kib:,} KiB",
                  engine(hostile.costliest_paste(args.paste_kib * 1024))),
        "v": ("a 4 MiB v box", engine(v=hostile.big_v_box())),
        "draws": (f"rule lab, {args.draws:,} draws", draws),
        "paste-body": (f"a {args.body_mb} MB body to the queue, chunked", lambda url, demo, ip: hostile.post_chunked(
            url, "gradio_api/queue/join", args.body_mb * hostile.MiB, ip)),
        "eight": (f"eight {args.body_mb} MB bodies at once, chunked", eight),
        "upload": (f"a {args.body_mb} MB upload, chunked", lambda url, demo, ip: hostile.post_chunked(
            url, "gradio_api/upload", args.body_mb * hostile.MiB, ip)),
    }


def probe_beside(url, demo, hostile, generate, act):
    """(outcome of ``act``, seconds another visitor's /generate took, sent 0.3 s after ``act`` started)."""
    probe = {}

    def visitor():
        time.sleep(0.3)
        with hostile.Timed() as t:
            probe["ok"] = hostile.send(url, demo, "generate", generate, "198.51.100.99").success
        probe["s"] = t.seconds

    thread = threading.Thread(target=visitor)
    thread.start()
    outcome = act()
    thread.join()
    return outcome, probe["s"] if probe.get("ok") else float("nan")


def measure(args) -> None:
    import psutil

    from specviz.app import build_demo
    from tests.helpers import hostile
    from tests.helpers.app import serve, tiny_store

    generate = ["ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 1.0, 4, 0, 0.0, "chain", "auto"]
    process = psutil.Process()
    demo = build_demo(tiny_store())
    with serve(demo) as url:
        assert hostile.send(url, demo, "read_engine", hostile.engine_read(demo), "192.0.2.1").success
        idle_generate = min(_timed_generate(url, demo, hostile, generate) for _ in range(3))
        idle = hostile.rss_mb()
        print(f"idle: RSS {idle:.0f} MB; another visitor's /generate (4 tokens) {idle_generate:.2f} s")
        print(f"{'case':58} | {'outcome':60} | wall s | CPU s | peak RSS over idle | over its start | /generate beside it")
        all_cases = cases(args, hostile)
        for i, name in enumerate(args.cases or all_cases):
            what, act = all_cases[name]
            ip = f"203.0.113.{i + 1}"
            cpu0, start = sum(process.cpu_times()[:2]), hostile.rss_mb()
            with hostile.Peak() as peak, hostile.Timed() as wall:  # alone: its own cost
                outcome = act(url, demo, ip)
            cpu = sum(process.cpu_times()[:2]) - cpu0
            _, beside = probe_beside(url, demo, hostile, generate, lambda act=act, ip=ip: act(url, demo, ip))  # again
            print(f"{what:58} | {outcome.summary[:60]:60} | {wall.seconds:6.1f} | {cpu:5.1f} | "
                  f"{peak.mb - idle:+6.0f} MB | {peak.mb - start:+6.0f} MB | {beside:.2f} s", flush=True)
        if "paste" in (args.cases or all_cases):
            print(leaving(url, demo, hostile, args))


def _timed_generate(url, demo, hostile, generate) -> float:
    with hostile.Timed() as t:
        hostile.send(url, demo, "generate", generate, "192.0.2.1")
    return t.seconds


def leaving(url, demo, hostile, args) -> str:
    """The costliest paste's visitor leaves 0.5 s into its reading: how soon another visitor's engine read starts."""
    from tests.helpers.http import fn_index, join, session, stream, until

    sh = session()
    join(url, fn_index(demo, "read_engine"), hostile.engine_read(demo, hostile.costliest_paste(args.paste_kib * 1024)),
         sh, "203.0.113.50")
    with stream(url, sh, "203.0.113.50") as messages:
        until(messages, "process_starts")
        time.sleep(0.5)
    left = time.perf_counter()
    sh2 = session()
    join(url, fn_index(demo, "read_engine"), hostile.engine_read(demo), sh2, "198.51.100.50")
    with stream(url, sh2, "198.51.100.50") as messages:
        until(messages, "process_starts")
        freed = time.perf_counter() - left
        until(messages, "process_completed")
    return f"the costliest paste's visitor left 0.5 s into its reading: another engine read started {freed:.2f} s later"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", help="k histogram eval paste v draws paste-body eight upload (default: all)")
    ap.add_argument("--code", type=Path, help="a folder holding the specviz package to measure (older code)")
    ap.add_argument("--k", type=int, default=10**8)
    ap.add_argument("--histogram-key", type=int, default=59_999)
    ap.add_argument("--paste-kib", type=int, default=4096 - 4, help="the costliest paste's size")
    ap.add_argument("--eval-kib", type=int, default=4096 - 4, help="the 'eval time = ' line's size")
    ap.add_argument("--draws", type=int, default=10**8)
    ap.add_argument("--body-mb", type=int, default=200, help="the chunked bodies' size (eight of them: each)")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(args.code)] if args.code else []
    sys.path.insert(1 if args.code else 0, str(ROOT))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("SPECVIZ_TRUSTED_PROXIES", "1")  # clients named by X-Forwarded-For behind one proxy
    import torch

    torch.set_num_threads(1)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    import specviz

    print(f"{host_line()}\n"
          f"python {' '.join(sys.argv)}\nspecviz from {Path(specviz.__file__).parent} (this tree at {commit})")
    measure(args)
    print(f"end: load average {load_average()}", flush=True)
    os._exit(0)  # a handler thread of older code may still be running: end without waiting for it


if __name__ == "__main__":
    main()
