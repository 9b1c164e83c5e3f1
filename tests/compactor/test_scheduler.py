"""The background compaction schedule (compactor/scheduler.py).

A job runs a pass every ``compaction_interval`` seconds with no ``compact()`` call;
``pause_compaction()`` holds it, ``resume_compaction()`` restarts it, ``close()`` stops
it and leaves no thread behind, and ``compaction_interval=None`` runs no job at all.
Waits are bounded polling loops, never timing assertions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import msgcask
from msgcask.compactor import runner
from msgcask.store import format as fmt
from msgcask.store.fs import DataFile, FileSystem

MFS = 64 * 1024
INTERVAL = 0.2
WAIT = 20.0  # generous: a loaded CI machine may be slow, a broken job never gets there


def _open(path: Path, interval: float | None = INTERVAL) -> msgcask.Store:
    return msgcask.open(path, max_file_size=MFS, compaction_interval=interval)


def _make_sparse_files(store: msgcask.Store) -> int:
    """~10 sealed files, each holding a few pinned live messages among consumed ones
    (so deleting whole empty files cannot help: only a rewrite shrinks the store).
    Returns the data bytes right after."""
    q = store.queue("s")
    for i in range(600):
        q.put(b"p" * 1000, headers={"pin": "1"} if i % 25 == 0 else {})
    for _ in range(600 - 24):
        q.ack(q.get(block=False, selector=lambda h: "pin" not in h))
    return store.stats().data_bytes


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up after {WAIT} s waiting for {what}"
        time.sleep(0.05)


def _scheduler_threads(since: set[int | None]) -> list[str]:
    """Scheduler threads alive now that were not alive at ``since`` (other tests' stores
    are none of this test's business)."""
    return [
        t.name
        for t in threading.enumerate()
        if t.is_alive()
        and t.ident not in since
        and ("APScheduler" in t.name or "ThreadPoolExecutor" in t.name)
    ]


def _thread_ids() -> set[int | None]:
    return {t.ident for t in threading.enumerate()}


def _compacted(store: msgcask.Store) -> bool:
    """The ~10 sparse files are gone: what is left is the live data (in compacted files)
    and the write head (which holds the ACKs, so up to a file)."""
    st = store.stats()
    return st.data_bytes <= 2 * st.live_bytes + 2 * MFS


def _rewritten(store: msgcask.Store) -> int:
    return store.stats().compaction.files_rewritten


def test_background_job_compacts_without_a_compact_call(tmp_path: Path) -> None:
    with _open(tmp_path / "store") as store:
        _make_sparse_files(store)  # ~10 files; the job may start on them at once
        _wait_for(lambda: _rewritten(store) > 0, "a background pass to rewrite a file")
        _wait_for(lambda: _compacted(store), "the background job to shrink the store")
        assert store.last_compaction is not None
        assert store.stats().compaction.passes >= 1
        assert len(store.queue("s")) == 24
        assert store.verify() == []


def test_background_job_runs_again_and_again(tmp_path: Path) -> None:
    # Not a one-off: passes keep coming at the interval, and new garbage is reclaimed.
    with _open(tmp_path / "store") as store:
        _wait_for(lambda: store.stats().compaction.passes >= 3, "three background passes")
        _make_sparse_files(store)
        _wait_for(lambda: _rewritten(store) > 0, "a pass over files made after the first ones")
        assert store.verify() == []


def test_paused_compaction_leaves_garbage_until_resumed(tmp_path: Path) -> None:
    with _open(tmp_path / "store") as store:
        store.pause_compaction()
        passes_at_pause = store.stats().compaction.passes
        big = _make_sparse_files(store)
        time.sleep(10 * INTERVAL)  # ten intervals in which no pass may run
        st = store.stats()
        assert st.compaction.passes == passes_at_pause, "a pass ran while paused"
        assert st.compaction.files_rewritten == 0
        assert st.data_bytes >= big, "the store shrank while compaction was paused"

        store.resume_compaction()
        _wait_for(lambda: _rewritten(store) > 0, "a pass after resume_compaction()")
        _wait_for(lambda: _compacted(store), "the store to shrink")
        assert store.verify() == []


def test_explicit_compact_works_while_the_schedule_is_paused(tmp_path: Path) -> None:
    with _open(tmp_path / "store") as store:
        store.pause_compaction()
        big = _make_sparse_files(store)
        report = store.compact()
        assert report.files_rewritten > 0
        assert store.stats().data_bytes < big // 3
        assert store.last_compaction == report


def test_a_background_pass_reads_fewer_victims_than_compact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Victims go only when their pass ends, so a scheduled pass reads at most two data
    # files' worth of them and gives space back sooner; compact() reads up to eight.
    read: list[tuple[bool, int]] = []  # (in the background, bytes of the victims)
    real = runner.rewrite

    def spy(store: msgcask.Store, victims: list[int], **hooks: Any) -> object:
        sizes = {f.file_id: f.size for f in store.stats().files}
        background = threading.current_thread() is not threading.main_thread()
        read.append((background, sum(sizes[v] for v in victims)))
        return real(store, victims, **hooks)

    monkeypatch.setattr(runner, "rewrite", spy)
    with _open(tmp_path / "scheduled") as store:
        _make_sparse_files(store)
        _wait_for(lambda: _compacted(store), "the background job to shrink the store")
        assert store.verify() == []
    with _open(tmp_path / "explicit", interval=None) as store:
        _make_sparse_files(store)
        store.compact()
        assert store.verify() == []
    background = [n for bg, n in read if bg]
    explicit = [n for bg, n in read if not bg]
    assert background, "no background pass rewrote anything"
    assert max(background) <= 2 * MFS, f"background passes read {background} bytes of victims"
    assert explicit and explicit[0] > 2 * MFS, f"compact() read {explicit} bytes of victims"


def test_close_stops_the_job_and_leaves_no_thread(tmp_path: Path) -> None:
    before = _thread_ids()
    store = _open(tmp_path / "store", interval=0.05)
    _make_sparse_files(store)
    _wait_for(lambda: store.stats().compaction.passes >= 2, "background passes")
    assert _scheduler_threads(before), "no scheduler thread while the job is on"
    store.close()
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == [], f"threads still running after close(): {left}"
    # And the store, reopened, is intact: close did not cut a pass in half.
    with _open(tmp_path / "store", interval=None) as again:
        assert len(again.queue("s")) == 24
        assert again.verify() == []


class SlowOutputFS(FileSystem):
    """Compacted output files announce their first copy and then take their time."""

    def __init__(self) -> None:
        self.copying = threading.Event()

    def _wrap(self, path: str, fd: int, size: int) -> DataFile:
        fs = self

        class SlowOutput(DataFile):
            def append(self, data: bytes, *, single_record: bool = False) -> int:
                if self.size == 0 and data[:8] == fmt.MAGIC and data[10] == fmt.KIND_COMPACTED:
                    fs.copying.set()
                    time.sleep(0.5)  # close() arrives while the pass is here
                return super().append(data, single_record=single_record)

        return SlowOutput(path, fd, size)


def test_close_during_a_background_pass_waits_for_it(tmp_path: Path) -> None:
    fs = SlowOutputFS()
    before = _thread_ids()
    store = msgcask.Store(
        tmp_path / "store", max_file_size=MFS, compaction_interval=INTERVAL, _fs=fs
    )
    _make_sparse_files(store)
    assert fs.copying.wait(WAIT), "no background pass started"
    store.close()  # must wait for the pass, not pull the index from under it
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == [], f"threads still running after close(): {left}"
    with _open(tmp_path / "store", interval=None) as again:
        assert again.recovery.mode == "clean"
        assert len(again.queue("s")) == 24
        assert again.verify() == []


def test_close_while_paused_leaves_no_thread(tmp_path: Path) -> None:
    before = _thread_ids()
    store = _open(tmp_path / "store")
    store.pause_compaction()
    store.close()
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == [], f"threads still running after close(): {left}"


def test_no_interval_runs_no_job(tmp_path: Path) -> None:
    before = _thread_ids()
    with _open(tmp_path / "store", interval=None) as store:
        assert _scheduler_threads(before) == [], "a scheduler runs with compaction_interval=None"
        big = _make_sparse_files(store)
        time.sleep(10 * INTERVAL)
        st = store.stats()
        assert st.compaction.passes == 0
        assert st.compaction.files_rewritten == 0
        assert st.data_bytes >= big
        assert store.last_compaction is None
        # pause/resume are harmless without a job.
        store.pause_compaction()
        store.resume_compaction()
        time.sleep(3 * INTERVAL)
        assert store.stats().compaction.passes == 0


def test_background_job_uses_the_configured_threshold(tmp_path: Path) -> None:
    # Files ~4% live: above a threshold of 1%, so scheduled passes run but rewrite none;
    # an explicit pass at 0.5 does.
    store = msgcask.open(
        tmp_path / "store",
        max_file_size=MFS,
        compaction_interval=INTERVAL,
        compaction_threshold=0.01,
    )
    with store:
        big = _make_sparse_files(store)
        passes = store.stats().compaction.passes
        _wait_for(
            lambda: store.stats().compaction.passes >= passes + 3, "three more scheduled passes"
        )
        st = store.stats()
        assert st.compaction.files_rewritten == 0, "a pass ignored compaction_threshold"
        assert st.data_bytes >= big
        assert store.compact(threshold=0.5).files_rewritten > 0


def test_disk_use_near_the_space_bound_starts_a_pass_before_the_next_check(
    tmp_path: Path,
) -> None:
    # The periodic check runs every sync_interval (here a minute), the job every
    # hour: only the space watch can start the pass waited for.
    with msgcask.open(
        tmp_path / "store", max_file_size=MFS, compaction_interval=3600, sync_interval=60
    ) as store:
        _make_sparse_files(store)
        _wait_for(lambda: store.stats().compaction.passes >= 1, "a pass")
        _wait_for(lambda: not store._compactor.near_bound(), "disk use back under the bound")
        assert _compacted(store), store.stats()
        assert store.verify() == []


def test_the_space_watch_waits_for_new_data_after_a_pass_that_freed_nothing(
    tmp_path: Path,
) -> None:
    with _open(tmp_path / "store", interval=None) as store:
        _make_sparse_files(store)
        compactor = store._compactor
        assert compactor.near_bound()
        assert compactor.urgent()
        assert store.compact(threshold=0.01).files_rewritten == 0  # no file that sparse
        assert compactor.near_bound()
        assert not compactor.urgent()  # the same pass again would free nothing
        q = store.queue("more")
        for _ in range(70):
            q.put(b"m" * 1000)
        assert compactor.urgent()  # a data file written since: it may now
        assert store.compact().files_rewritten > 0
        assert not compactor.near_bound()


def test_a_background_pass_that_fails_unexpectedly_is_logged_counted_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An error msgcask does not raise itself (a bug, say) must not stop the schedule
    # or the store: the pass is logged with its traceback, counted as failed, and
    # the next pass does the work.
    real = runner.rewrite
    failures: list[int] = []

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            raise RuntimeError("unexpected")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "rewrite", failing_once)
    with _open(tmp_path / "store") as store:
        _make_sparse_files(store)
        _wait_for(lambda: _rewritten(store) > 0, "a pass after the failed one to rewrite")
        totals = store.stats().compaction
        assert failures == [1]
        assert totals.failed_passes == 1
        assert totals.last_failure == "RuntimeError: unexpected"
        [logged] = [r for r in caplog.records if "background compaction pass failed" in r.message]
        assert logged.exc_info is not None and logged.exc_info[0] is RuntimeError
        assert len(store.queue("s")) == 24
        assert store.verify() == []


def test_a_repeating_unexpected_failure_logs_its_traceback_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A bug that fails every pass the same way must not write a traceback per
    # pass: logged once, like a repeating msgcask error, and again if it changes.
    message = ["unexpected"]

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message[0])

    monkeypatch.setattr(runner, "rewrite", failing)
    with _open(tmp_path / "store") as store:
        _make_sparse_files(store)
        _wait_for(lambda: store.stats().compaction.failed_passes >= 3, "three failed passes")
        message[0] = "another"
        seen = store.stats().compaction.failed_passes
        _wait_for(lambda: store.stats().compaction.failed_passes >= seen + 2, "two more")
        store.pause_compaction()
    logged = [r for r in caplog.records if "background compaction pass failed" in r.message]
    assert [r.exc_info[1].args for r in logged if r.exc_info] == [("unexpected",), ("another",)]
    assert len(logged) == 2


def test_a_failure_that_comes_back_after_a_pass_succeeded_is_logged_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Logged once while it repeats; a pass that succeeds ends it, so the same
    # failure after that is news.
    real = runner.rewrite
    failing = [True]

    def sometimes_failing(*args: Any, **kwargs: Any) -> Any:
        if failing[0]:
            raise RuntimeError("unexpected")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "rewrite", sometimes_failing)
    with _open(tmp_path / "store") as store:
        _make_sparse_files(store)
        _wait_for(lambda: store.stats().compaction.failed_passes >= 2, "two failed passes")
        failing[0] = False
        passes = store.stats().compaction.passes
        _wait_for(lambda: store.stats().compaction.passes > passes, "a pass that succeeds")
        _make_sparse_files(store)  # work for the next pass to fail on
        failing[0] = True
        failed = store.stats().compaction.failed_passes
        _wait_for(lambda: store.stats().compaction.failed_passes > failed, "another failed pass")
        store.pause_compaction()
    logged = [r for r in caplog.records if "background compaction pass failed" in r.message]
    assert len(logged) == 2


def test_a_failure_after_a_pass_that_succeeded_in_the_same_run_is_logged_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # One background run chains passes while compaction is behind: a pass that
    # succeeds within it ends the failure, as a run that succeeds would.
    with _open(tmp_path / "store", interval=None) as store:
        real = store._compactor.run
        calls = []

        def fail_succeed_fail(**kwargs: Any) -> msgcask.CompactionReport:
            calls.append(kwargs)
            if len(calls) in (1, 3):
                raise msgcask.Error("no room for the copy")
            return real(**kwargs)

        monkeypatch.setattr(store._compactor, "run", fail_succeed_fail)
        monkeypatch.setattr(store._compactor, "behind", lambda: True)
        _make_sparse_files(store)
        store._scheduler._run()  # fails
        store._scheduler._run()  # a pass that rewrites, then a failing one
        assert len(calls) == 3
    logged = [r for r in caplog.records if "background compaction pass failed" in r.message]
    assert len(logged) == 2


def test_a_background_pass_that_meets_a_raw_index_error_stops_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An LMDB error that escapes a pass means the index transaction may be gone:
    # the store must refuse further calls (not commit later), and the schedule stop.
    import lmdb

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise lmdb.DiskError("injected")

    store = _open(tmp_path / "store")
    try:
        q = store.queue("s")
        ids = [q.put(b"m") for _ in range(3)]
        monkeypatch.setattr(store._compactor, "run", failing)
        store._scheduler.run_soon()
        _wait_for(lambda: store._scheduler._halted, "the schedule to stop")
        with pytest.raises(msgcask.IndexFailedError):
            q.put(b"refused")
    finally:
        store.close()
    with _open(tmp_path / "store", interval=None) as reopened:
        assert [m.id for m in reopened.queue("s").browse()] == ids
