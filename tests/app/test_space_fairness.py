"""Another visitor is served while one visitor's costliest request runs, and a request whose visitor left frees its
slot: the demo served in this process, spoken to over HTTP. No wall-clock bound: a request beside the paste is
compared with the same request beside a plain Python thread in the same run (a ratio; a multiple of its idle time
follows the host's speed), and what happened first is read from the order of events.

Before the engine readers were made linear, a 384 KB paste made another visitor's request wait 52 s; Batch's
benchmark ran 244 s while another visitor's lab waited 234 s (docs/RELIABILITY.md)."""
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from specviz.app import batch_tab, build_demo, engine_tab
from specviz.labs import batch_bench
from tests.helpers import hostile
from tests.helpers.app import serve, tiny_store
from tests.helpers.http import fn_index, join, session, stream, until
from tests.helpers.models import ui_models

pytestmark = pytest.mark.slow
PASTER, VISITOR, LEAVER, OTHER = "203.0.113.21", "198.51.100.21", "203.0.113.22", "198.51.100.22"
LAB = "estimate"  # the k sweep's Estimate at its defaults: an event of the labs' slot, short beside the paste
SLICE_S = 2e-4  # the reference load offers the interpreter every 0.2 ms of its CPU, as the paste's reading does
# the events' seconds in all beside the paste over the same beside that reference: 0.9 to 1.2x quiet, 0.6 to 2.9x
# beside two busy loops (2026-12-04, 12 runs); a reading made to hold the interpreter 2.5 s at once gave 4x, under
# the bound: what the bound catches is a reading that holds it for most of the events' time
SLOWDOWN = 6
PAIRS = 3  # a lab event and a /generate sent at once, so many times one after another beside each load
GENERATE = ["ROMEO:", "tiny-target", "tiny", 3, 0.8, 0, 1.0, 4, 0, 0.0, "chain", "auto"]  # /generate's 12 inputs
BENCH = ["tiny-target", "tiny", "ROMEO:", 2]  # Batch's benchmark: target, draft, prompts, k
MEASUREMENTS = 2 + 2 * len(batch_tab.BENCH_SIZES)  # its warm-ups, then both methods at each size


@pytest.fixture(scope="module")
def served():
    """The demo, its engine reads' thread CPU seconds and its benchmark's batches recorded as they run; the
    benchmark's rows long enough (256 tokens) that leaving lands between its measurements."""
    cpu, batches = [], []
    with pytest.MonkeyPatch.context() as mp:
        analyse = engine_tab.analyse

        @functools.wraps(analyse)  # its signature: gradio and the session gate read it
        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return analyse(*args, **kwargs)
            finally:
                cpu.append(time.thread_time() - start)

        mp.setattr(engine_tab, "analyse", timed)  # before the demo binds its handlers
        for name in ("speculative_generate_batch", "autoregressive_generate_batch"):
            real = getattr(batch_bench, name)
            mp.setattr(batch_bench, name, lambda *a, real=real, **k: batches.append(1) or real(*a, **k))
        mp.setattr(batch_tab, "BENCH_TOKENS", 256)
        demo = build_demo(tiny_store(ui_models(window=1024)))
        with serve(demo) as url:
            yield url, demo, cpu, batches


def generate_seconds(url, demo) -> float:
    with hostile.Timed() as t:
        assert hostile.send(url, demo, "generate", GENERATE, VISITOR).success
    return t.seconds


def test_another_visitor_is_served_while_the_costliest_paste_is_read(served):
    """The worst 4 MiB paste is answered within its budget (in the labs' slot), and meanwhile another visitor's
    /generate is served, finishing before the paste's reading does: it never queues behind it. Its time beside the
    paste over its idle time is printed, not asserted (it follows the host's load: about 2x at load 11, 15x idle,
    where the paste's reading holds the interpreter between the visitor's few short steps)."""
    url, demo, cpu, _ = served
    unloaded = min(generate_seconds(url, demo) for _ in range(3))
    sh = session()
    assert join(url, fn_index(demo, "read_engine"), hostile.engine_read(demo, hostile.costliest_paste()), sh,
                PASTER).status_code == 200
    with stream(url, sh, PASTER) as messages:
        until(messages, "process_starts")
        loaded = generate_seconds(url, demo)
        visitor_done = time.perf_counter()
        paste = until(messages, "process_completed")
        paste_done = time.perf_counter()
    assert paste["success"], paste
    behind = hostile.send(url, demo, "read_engine", hostile.engine_read(demo), VISITOR)  # the slot is free again
    assert behind.success
    print(f"\n/generate {unloaded:.2f} s idle, {loaded:.2f} s beside the costliest 4 MiB paste (x{loaded / unloaded:.1f}); "
          f"the paste's reading took {cpu[-2]:.2f} CPU-s and ended {paste_done - visitor_done:.2f} s after it")
    assert visitor_done < paste_done  # served while the paste was still being read


def timed_send(url, demo, api_name, data, ip) -> tuple[float, float]:
    """(the seconds one event took, when it ended), sent to its end; it must succeed."""
    with hostile.Timed() as t:
        outcome = hostile.send(url, demo, api_name, data, ip)
    assert outcome.success, outcome.summary
    return t.seconds, time.perf_counter()


class PythonLoad:
    """A thread of plain Python that offers the interpreter to waiting threads every SLICE_S of its CPU, until
    stopped: work that shares the interpreter as the paste's reading must (it offers it at each line's check, and
    a line of the costliest paste costs about 0.2 ms). What the paste does to another event is compared with what
    this does, measured in the same run on the same host."""

    def __enter__(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.spin, daemon=True)
        self.thread.start()
        return self

    def spin(self):
        while not self.stop.is_set():
            until = time.thread_time() + SLICE_S
            while time.thread_time() < until:
                pass
            time.sleep(0)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def lab_and_generate_at_once(url, demo, lab) -> tuple[tuple[float, float], tuple[float, float]]:
    """A second visitor's lab event and a third's /generate sent at once: (seconds, end) of each."""
    with ThreadPoolExecutor(2) as pool:
        lab_run = pool.submit(timed_send, url, demo, LAB, lab, VISITOR)
        gen_run = pool.submit(timed_send, url, demo, "generate", GENERATE, OTHER)
        return lab_run.result(), gen_run.result()


def in_all(pairs) -> tuple[float, float]:
    """The lab events' seconds in all, and the /generate events'."""
    return sum(lab for (lab, _), _ in pairs), sum(gen for _, (gen, _) in pairs)


def test_another_visitors_lab_and_generate_are_not_held_behind_the_costliest_paste(served):
    """Engine reads have a slot of their own: while the costliest 4 MiB paste is read, a second visitor's lab event
    at its defaults and a third's /generate start at once and finish before the paste's reading does (in the labs'
    shared slot the lab event waited for the paste's whole reading first). The paste's reading shares the
    interpreter with them, so they slow down, but no more than a plain Python thread that shares it fairly: sent
    PAIRS times beside each, in the same run, they take within SLOWDOWN times as long in all beside the paste. (A
    multiple of their idle time is not that bound: the slowdown comes from hand-offs of the interpreter, whose count
    does not shrink with the host's speed, so a quiet host crossed 6x.)"""
    url, demo, cpu, _ = served
    lab = hostile.inputs_by_label(demo, LAB)
    idle_lab = min(timed_send(url, demo, LAB, lab, VISITOR)[0] for _ in range(2))
    idle_gen = min(generate_seconds(url, demo) for _ in range(3))
    sh = session()
    assert join(url, fn_index(demo, "read_engine"), hostile.engine_read(demo, hostile.costliest_paste()), sh,
                PASTER).status_code == 200
    with stream(url, sh, PASTER) as messages, ThreadPoolExecutor(1) as pool:
        until(messages, "process_starts")
        paste_start = time.perf_counter()
        paste = pool.submit(lambda: (until(messages, "process_completed"), time.perf_counter()))
        beside = [lab_and_generate_at_once(url, demo, lab) for _ in range(PAIRS)]
        (done, paste_end) = paste.result()
    assert done["success"], done
    assert all(end < paste_end for _, end in beside[0])  # served while the paste was being read
    with PythonLoad():
        fair = [lab_and_generate_at_once(url, demo, lab) for _ in beside]
    lab_s, gen_s = in_all(beside)
    fair_lab, fair_gen = in_all(fair)
    idle_lab, idle_gen = PAIRS * idle_lab, PAIRS * idle_gen
    print(f"\nbeside the costliest paste (read in {paste_end - paste_start:.2f} s, {cpu[-1]:.2f} CPU-s), {PAIRS} "
          f"each in all: the lab {lab_s:.2f} s (x{lab_s / fair_lab:.1f} its {fair_lab:.2f} s beside a Python "
          f"thread, x{lab_s / idle_lab:.1f} its idle {idle_lab:.2f} s), /generate {gen_s:.2f} s (x{gen_s / fair_gen:.1f} "
          f"its {fair_gen:.2f} s beside a Python thread, x{gen_s / idle_gen:.1f} its idle {idle_gen:.2f} s)")
    assert lab_s < SLOWDOWN * fair_lab and gen_s < SLOWDOWN * fair_gen


def test_a_benchmark_whose_visitor_leaves_stops_between_measurements_and_frees_the_lab_slot(served):
    """Batch's benchmark checks its budget before every measurement: once its visitor leaves, at most the
    measurement in flight finishes, and another visitor's lab starts in the slot."""
    url, demo, _, batches = served
    batches.clear()
    sh = session()
    assert join(url, fn_index(demo, "run_bench"), BENCH, sh, LEAVER).status_code == 200
    with stream(url, sh, LEAVER) as messages:
        until(messages, "process_starts")
        while len(batches) < 3:  # the warm-ups done, the first timed batch under way
            time.sleep(0.02)
    at_leave = len(batches)  # the stream closed: the visitor left
    sh2 = session()
    assert join(url, fn_index(demo, "read_engine"), hostile.engine_read(demo), sh2, VISITOR).status_code == 200
    with stream(url, sh2, VISITOR) as messages:
        until(messages, "process_starts")
        at_start = len(batches)
        assert until(messages, "process_completed")["success"]
    print(f"\nbenchmark left after {at_leave} of its {MEASUREMENTS} batches; another lab started after {at_start}")
    assert at_start - at_leave <= 1 and at_start < MEASUREMENTS
    time.sleep(0.5)
    assert len(batches) == at_start  # and none ran after it
