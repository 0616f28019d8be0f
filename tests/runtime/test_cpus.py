"""runtime.cpus.StallWatch: passes compared with the fastest of their row count, a stall counted past the factor and
the floor both, the verdict once enough have been counted."""
from specviz.runtime.cpus import StallWatch, usable_cpus


def test_a_stall_is_counted_past_the_factor_and_the_floor():
    watch = StallWatch(4.0, 2, floor=0.002)
    assert not watch.stalled(1, 0.0002)  # the first of its row count: nothing to compare with
    assert not watch.stalled(1, 0.0009) and watch.stalls == 0  # 4.5x, but under the floor: the host's jitter
    assert not watch.stalled(5, 0.01) and not watch.stalled(5, 0.03) and watch.stalls == 0  # 3x: within the factor
    assert not watch.stalled(1, 0.003) and watch.stalls == 1  # 15x and over the floor
    assert watch.stalled(5, 0.05)  # the second: stalled


def test_without_a_floor_the_factor_alone_decides():
    watch = StallWatch(4.0, 1)
    watch.stalled(3, 0.0001)
    assert watch.stalled(3, 0.0005) and usable_cpus() >= 1


def test_stalls_count_within_the_window_of_the_last_passes():
    """Stalls far apart (more than ``window`` passes between) never add up to a verdict; as many close together do."""
    watch = StallWatch(4.0, 3, window=10)
    watch.stalled(1, 0.001)
    for _ in range(3):  # a stall, then ten ordinary passes: it has left the window when the next comes
        assert not watch.stalled(1, 0.01)
        for _ in range(10):
            watch.stalled(1, 0.001)
    assert watch.stalls == 0
    assert not watch.stalled(1, 0.01) and not watch.stalled(1, 0.001) and not watch.stalled(1, 0.01)
    assert watch.stalled(1, 0.01) and watch.stalls == 3 == sum(watch.recent)


def test_one_thread_after_stalls_then_the_threads_asked_for_again():
    """Stalls send the next pass to one thread; after ``retry`` passes there (not compared: one thread is slower
    without stalling) the threads asked for come back with the count cleared, and stalls again send them away."""
    watch = StallWatch(4.0, 2, retry=5)
    assert watch.threads(1, 0.001, 2, 2) == 2
    assert watch.threads(1, 0.010, 2, 2) == 2  # one stall is not two
    assert watch.threads(1, 0.010, 2, 2) == 1
    for _ in range(4):
        assert watch.threads(1, 0.050, 1, 2) == 1  # slow on one thread: not a stall, and no verdict yet
    assert watch.threads(1, 0.050, 1, 2) == 2 and watch.stalls == 0 and not watch.recent
    assert watch.fastest[1] == 0.001  # one thread's passes never became the fastest
    assert watch.threads(1, 0.010, 2, 2) == 2 and watch.threads(1, 0.010, 2, 2) == 1  # still busy: one again
    assert all(watch.threads(1, 0.001, 1, 1) == 1 for _ in range(10))  # one asked for: one it stays
