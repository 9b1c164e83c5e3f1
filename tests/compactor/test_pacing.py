"""How background work shares the interpreter with foreground calls (compactor/pacing.py).

The pacer's decisions are checked with a fake clock (nothing here measures time):
frequent sleeps while calls keep coming, rare ones otherwise, and longer slices of
work whenever compaction is behind or a put waits.
Then, on a real store, that a background run keeps passing while it is behind.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

import msgcask
from msgcask.compactor import pacing, policy
from msgcask.compactor.pacing import Pacer

KIB = 1024
MFS = 64 * KIB


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps = 0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(pacing, "time", fake)
    return fake


def assert_sleeps_after(pacer: Pacer, clock: FakeClock, short: float, more: float) -> None:
    """No sleep after ``short`` seconds of work; one once ``more`` seconds follow."""
    sleeps = clock.sleeps
    clock.now += short
    pacer.pause()
    assert clock.sleeps == sleeps  # not yet a slice of work
    clock.now += more
    pacer.pause()
    assert clock.sleeps == sleeps + 1


def test_while_calls_come_in_work_runs_in_small_slices(clock: FakeClock) -> None:
    pacer = Pacer()
    pacer.calls += 1
    pacer.pause()
    assert_sleeps_after(pacer, clock, pacing.POLITE_SLICE / 2, pacing.POLITE_SLICE)


def test_without_calls_work_runs_in_large_slices(clock: FakeClock) -> None:
    pacer = Pacer()
    pacer.pause()
    assert_sleeps_after(pacer, clock, pacing.FULL_SLICE / 2, pacing.FULL_SLICE)


def test_calls_stop_counting_after_the_polite_window(clock: FakeClock) -> None:
    pacer = Pacer()
    pacer.calls += 1
    pacer.pause()
    clock.now += pacing.POLITE_WINDOW * 2
    pacer.pause()  # sleeps: that much work without one
    # No call since: a polite pacer would sleep after the first stretch.
    assert_sleeps_after(pacer, clock, pacing.POLITE_SLICE * 2, pacing.FULL_SLICE)


@pytest.mark.parametrize("how", ["behind", "forced"])
def test_behind_or_forced_work_does_not_step_aside_for_calls(clock: FakeClock, how: str) -> None:
    pacer = Pacer(behind=lambda: how == "behind")
    with pacer.forcing() if how == "forced" else contextlib.nullcontext():
        pacer.calls += 1
        pacer.pause()
        # A polite pacer would sleep after the first stretch.
        assert_sleeps_after(pacer, clock, pacing.POLITE_SLICE * 2, pacing.URGENT_SLICE)


def test_work_stays_forced_while_any_put_waits(clock: FakeClock) -> None:
    pacer = Pacer()
    with pacer.forcing():
        with pacer.forcing():
            assert pacer.forced
        assert pacer.forced  # the other put still waits
    assert not pacer.forced


def test_being_behind_is_checked_again_only_after_a_while(clock: FakeClock) -> None:
    answers = iter([False, True])
    checks: list[bool] = []

    def behind() -> bool:
        checks.append(next(answers))
        return checks[-1]

    pacer = Pacer(behind=behind)
    pacer.calls += 1
    pacer.pause()
    clock.now += pacing.RECHECK_EVERY / 4
    pacer.calls += 1
    pacer.pause()
    assert checks == [False]
    clock.now += pacing.RECHECK_EVERY
    pacer.calls += 1
    pacer.pause()
    assert checks == [False, True]
    # Behind now: work goes on past a polite slice.
    pacer.calls += 1
    assert_sleeps_after(pacer, clock, pacing.POLITE_SLICE * 2, pacing.URGENT_SLICE)


def test_spans_cover_every_item_once_in_batches(clock: FakeClock) -> None:
    pacer = Pacer()
    pacer.calls += 1
    b = pacing.BATCH
    assert list(pacer.spans(2 * b + 3)) == [(0, b), (b, 2 * b), (2 * b, 2 * b + 3)]
    assert list(Pacer().spans(0)) == []
    clock.now += 1.0  # no call since: the same batches
    assert list(pacer.spans(b)) == [(0, b)]


def test_a_background_run_keeps_passing_while_compaction_is_behind(tmp_path: Path) -> None:
    # Forty sparse files: one pass reads at most eight, so a single compact() leaves
    # the store behind; a background run chains passes until it has caught up.
    def sparse_store(path: Path) -> msgcask.Store:
        store = msgcask.open(path, max_file_size=MFS, compaction_interval=None)
        q = store.queue("q")
        for _ in range(40 * 60):
            q.put(b"s" * 1000)
        for i in range(40 * 60):
            m = q.get(block=False)
            if i % 10:
                q.ack(m)
        return store

    def within_bound(store: msgcask.Store) -> bool:
        st = store.stats()
        return st.data_bytes <= (st.live_bytes + st.needed_bytes) / 0.5 + 3 * MFS

    with sparse_store(tmp_path / "one") as store:
        store.compact()
        assert store.stats().compaction.passes == 1
        assert not within_bound(store)
    with sparse_store(tmp_path / "run") as store:
        store._compact_in_background()
        assert store.stats().compaction.passes > 1
        assert within_bound(store), store.stats()
        assert store.verify() == []


def test_disk_use_near_the_space_bound_counts_as_behind(tmp_path: Path) -> None:
    # Two sealed files a tenth live (under two files of work for passes, so not
    # behind by the backlog measure) and a write head full of consumed messages:
    # disk use is more than two files beyond what the live data allows.
    with msgcask.open(tmp_path, max_file_size=MFS, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(120):
            q.put(b"s" * 1000)
        for i in range(120):
            m = q.get(block=False)
            if i % 10:
                q.ack(m)
        for _ in range(40):
            q.put(b"d" * 1000)
            q.ack(q.get(block=False))
        compactor = store._compactor
        views = compactor._rewritable(compactor._views())
        assert not policy.behind(views, 0.5, policy.min_gain_for(MFS), MFS), views
        assert compactor.near_bound(), store.stats()
        assert compactor.behind()
        store.compact()
        assert not compactor.near_bound(), store.stats()
        assert not compactor.behind()
