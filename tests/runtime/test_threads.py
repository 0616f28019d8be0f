"""The thread count of each call of the C layers (specviz.runtime.threads): the rule on hand-computed costs and free
cores, the free cores from an interval's idle and own CPU seconds (on a virtual clock), and the choice reaching every
call of a speculative run and of its autoregressive baseline alike, with torch's own team sized the same way."""
import pytest
import torch

from specviz import DecodeConfig, autoregressive_generate, speculative_generate
from specviz.runtime import native, threads
from specviz.runtime.native import ops, stack
from specviz.runtime.threads import INTERVAL, Cores, Policy, Timings, allowed_most, choose, free_cores
from tests.helpers.models import gqa_llama


def timed(**fastest_ms) -> Timings:
    """Timings probed in full: fastest milliseconds per thread count (t1=10.0, t2=6.0)."""
    t = Timings()
    for name, ms in fastest_ms.items():
        for _ in range(threads.PROBES):
            t.add(int(name[1:]), ms / 1000)
    return t


def test_a_call_that_fills_two_cores_takes_them_only_where_two_are_free():
    verify = timed(t1=10.0, t2=6.0)  # a verify pass: 40% saved on two threads
    assert choose(verify, free=2.0, most=2) == 2
    assert choose(verify, free=1.75, most=2) == 2  # 1.75 >= 2 - SLACK
    assert choose(verify, free=1.7, most=2) == 1
    assert choose(verify, free=0.6, most=2) == 1  # one core taken by other work
    assert choose(verify, free=2.0, most=1) == 1  # torch's count is the ceiling


def test_a_call_that_cannot_fill_two_cores_stays_on_one():
    assert choose(timed(t1=0.30, t2=0.28), free=2.0, most=2) == 1  # 7% saved < GAIN
    assert choose(timed(t1=0.30, t2=0.26), free=2.0, most=2) == 2  # 13% saved
    assert choose(timed(t1=0.30, t2=0.45), free=2.0, most=2) == 1  # slower on two


def test_with_more_cores_the_largest_count_that_still_saves_enough():
    assert choose(timed(t1=10.0, t2=6.0, t3=5.8), free=3.0, most=4) == 2  # 5.8 > 0.9 x 6.0
    assert choose(timed(t1=10.0, t2=6.0, t3=5.0), free=3.0, most=4) == 3
    assert choose(timed(t1=10.0, t2=6.0, t3=5.0, t4=1.0), free=3.0, most=4) == 3  # 3.0 + SLACK < 4 cores


def test_each_allowed_count_is_timed_before_the_fastest_is_trusted_the_larger_first():
    t, picks = Timings(), []
    for _ in range(2 * threads.PROBES + 1):
        picks.append(choose(t, free=2.0, most=2))
        t.add(picks[-1], {1: 0.010, 2: 0.006}[picks[-1]])
    assert picks == [2] * threads.PROBES + [1] * threads.PROBES + [2]
    assert choose(Timings(), free=0.5, most=2) == 1  # no free core to time two threads on: never tried
    while sum(t.calls.values()) < threads.RETRY - 1:
        t.add(2, 0.006)
    assert choose(t, free=2.0, most=2) == 1  # the count tried least, timed again now and then
    t.add(1, 0.004)  # faster than before (other work had slowed its first timings)
    assert choose(t, free=2.0, most=2) == 1


def test_the_threads_free_cores_allow():
    assert [allowed_most(f, 2) for f in (0.0, 0.6, 1.74, 1.75, 2.0)] == [1, 1, 1, 2, 2]
    assert allowed_most(7.9, 4) == 4


def test_free_cores_are_the_idle_and_own_seconds_per_wall_second():
    assert free_cores(idle=0.0, own=0.13, wall=0.2, cores=2) == pytest.approx(0.65)  # two busy loops beside us
    assert free_cores(idle=0.2, own=0.2, wall=0.2, cores=2) == pytest.approx(2.0)  # alone on one thread
    assert free_cores(idle=0.4, own=0.3, wall=0.2, cores=2) == 2.0  # at most the cores
    assert free_cores(idle=0.0, own=0.0, wall=0.0, cores=2) == 2.0


def test_the_free_cores_are_read_once_an_interval_on_a_virtual_clock():
    now, idle, own = [0.0], [100.0], [5.0]  # virtual seconds: wall, the host's idle core-seconds, this process's CPU
    cores = Cores(clock=lambda: now[0], cpu=lambda: own[0], idle=lambda: idle[0])
    cores.count = 2
    cores.free()  # the first reading: the interval starts
    now[0] += INTERVAL
    idle[0], own[0] = idle[0] + 0.1, own[0] + 0.1  # over 0.2 s: half a core idle, half a core ours
    assert cores.free() == pytest.approx(0.2 / INTERVAL)
    idle[0] += 1.0
    now[0] += INTERVAL / 2
    assert cores.free() == pytest.approx(0.2 / INTERVAL)  # within the interval: the last reading
    now[0] += INTERVAL / 2
    assert cores.free() == 2.0  # 1.0 idle core-seconds over 0.2 s, at most the two cores


def test_the_environment_fixes_the_count_and_says_what_it_takes(monkeypatch):
    policy = Policy(cores=Fixed(0.5))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv(threads.ENV, "2")
        assert policy.threads(("any",)) == 2  # not the one thread the free cores allow
        monkeypatch.setenv(threads.ENV, "4")
        assert policy.threads(("any",)) == 2  # at most torch's count
        monkeypatch.setenv(threads.ENV, "two")
        with pytest.raises(ValueError, match=threads.ENV):
            policy.threads(("any",))
    finally:
        torch.set_num_threads(before)


class Fixed:
    """Free cores that read the same whatever happens."""

    def __init__(self, free: float):
        self.value = free

    def free(self) -> float:
        return self.value


def test_a_team_block_sizes_torchs_own_threads_and_puts_them_back():
    policy, before = Policy(cores=Fixed(0.6)), torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with policy.team():
            assert torch.get_num_threads() == 1 and policy.ceiling() == 2
            with policy.team():  # nested: the outer block's setting
                assert torch.get_num_threads() == 1 and policy.ceiling() == 2
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        policy.cores.value = 2.0
        with policy.team():
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


class Calls:
    """The thread count every call of the C library was given, and torch's own count at that moment."""

    def __init__(self, so):
        self.so, self.seen = so, []

    def __getattr__(self, name):
        fn = getattr(self.so, name)
        if name not in ("sv_layers", "sv_linear"):
            return fn

        def call(*args):
            self.seen.append((name, args[-1], torch.get_num_threads()))
            return fn(*args)
        return call


@pytest.mark.slow
@pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")
@pytest.mark.parametrize(("free", "want"), [(0.6, 1), (2.0, 2)])
def test_the_choice_reaches_every_call_of_a_speculative_run_and_of_its_baseline(monkeypatch, free, want):
    target = gqa_llama(dtype=torch.float32, tied=True, layers=3, sharpen=20)
    draft = gqa_llama(seed=1, dtype=torch.float32, tied=True, layers=1, sharpen=20)
    prompt, cfg = torch.tensor([[5, 9, 11, 5, 9, 11, 3]]), DecodeConfig(k=4, temperature=0, max_new_tokens=16)
    calls = Calls(native.lib())
    monkeypatch.setattr(stack, "lib", lambda: calls)
    monkeypatch.setattr(ops, "lib", lambda: calls)
    monkeypatch.setattr(threads, "policy", Policy(cores=Fixed(free)))
    monkeypatch.setattr(stack, "policy", threads.policy)
    monkeypatch.setattr(ops, "policy", threads.policy)
    monkeypatch.setattr("specviz.runtime.timing.policy", threads.policy)
    monkeypatch.setattr(threads, "choose", lambda timings, free, most: min(most, want))  # the choice, marked
    monkeypatch.delenv(threads.ENV, raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        baseline = autoregressive_generate(target, prompt, cfg)
        ar_calls, calls.seen = calls.seen, []
        run = speculative_generate(target, draft, prompt, cfg)
        assert torch.get_num_threads() == 2  # torch's count put back after each run
    finally:
        torch.set_num_threads(before)
    assert run.new_tokens == baseline.new_tokens and run.counts().accepted > 0
    assert ar_calls and calls.seen
    assert {(count, team) for _, count, team in ar_calls + calls.seen} == {(want, want)}
    shapes = {s for s in threads.policy.timings if s[0] == "layers"}  # ("layers", layers, rows, ...)
    assert {s[2] for s in shapes if s[1] == 3} > {1}  # the target's one-row passes and its verify passes
    assert any(s[1] == 1 for s in shapes)  # the draft's one-layer passes
