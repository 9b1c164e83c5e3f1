"""fsync fails with EIO: the disk could not make written bytes durable.

The caller must get a msgcask.Error, never a raw OSError, and a store whose close could
not sync must still release its lock and reopen consistent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

import msgcask
from msgcask.store.fs import DataFile


def open_store(path: Path, fs: FaultyFileSystem, sync: str) -> msgcask.Store:
    return msgcask.Store(path, _fs=fs, sync=sync, compaction_interval=None, sync_interval=3600)


def test_put_whose_fsync_fails_in_sync_always_raises_msgcask_error(store_path: Path) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, "always")
    q = store.queue("q")
    q.put(b"durable")
    fs.fail_fsync = True
    with pytest.raises(msgcask.Error) as err:
        q.put(b"not durable")
    assert isinstance(err.value.__cause__, OSError)
    fs.fail_fsync = False
    store.close()


def test_sync_whose_fsync_fails_raises_msgcask_error(store_path: Path) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, "periodic")
    store.queue("q").put(b"pending")  # something for the sync to make durable
    fs.fail_fsync = True
    with pytest.raises(msgcask.Error):
        store.sync()
    fs.fail_fsync = False
    with pytest.raises(msgcask.Error, match="refuses writes"):
        store.queue("q").put(b"after")  # periodic mode stops writing too
    store.close()


def test_close_whose_fsync_fails_raises_msgcask_error_and_releases_the_store(
    store_path: Path,
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, "periodic")
    ids = [store.queue("q").put(b"m%d" % i) for i in range(3)]
    fs.fail_fsync = True
    with pytest.raises(msgcask.Error):
        store.close()
    with pytest.raises(msgcask.ClosedError):
        store.queues()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert reopened.recovery.mode != "clean"  # the close did not complete
        assert [m.id for m in reopened.queue("q").browse()] == ids
        assert reopened.verify() == []


def test_after_a_failed_fsync_the_store_refuses_writes_until_reopened(
    store_path: Path,
) -> None:
    # Retrying an fsync that failed can report success for pages the kernel dropped:
    # the only safe answer is to stop writing and let recovery judge on reopen.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, "always")
    q = store.queue("q")
    first = q.put(b"durable")
    fs.fail_fsync = True
    with pytest.raises(msgcask.Error):
        q.put(b"maybe")
    fs.fail_fsync = False  # the disk "recovers": still no more writes from this store
    with pytest.raises(msgcask.Error, match="refuses writes"):
        q.put(b"refused")
    with pytest.raises(msgcask.Error, match="refuses writes"):
        q.get(block=False)  # a get writes a DELIVER record
    for _ in range(2):  # and refused again, not half done by the first try
        with pytest.raises(msgcask.Error, match="refuses writes"):
            # Only an index change, but its commit would carry a checkpoint past
            # journal bytes that may be lost.
            store.queue("created after the failure")
    assert store.queues() == ["q"]
    store.close()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert "created after the failure" not in reopened.queues()
        bodies = [bytes(m.body) for m in reopened.queue("q").browse()]
        assert bodies[0] == b"durable" and b"refused" not in bodies
        assert reopened.queue("q").put(b"writes again") > first
        assert reopened.verify() == []


def test_a_seal_never_fsyncs_the_head_while_a_group_commit_does(store_path: Path) -> None:
    # Linux reports a write-back error once per open file: of two fsyncs of the head
    # at once, one could see it and the other return success for lost bytes.
    fs = FaultyFileSystem()
    store = msgcask.Store(
        store_path, _fs=fs, sync="always", max_file_size=64 * 1024, compaction_interval=None
    )
    q = store.queue("q")
    while store._journal.head.size < 60_000:
        q.put(b"x" * 1000)
    guard = threading.Lock()
    running: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    seal_started = threading.Event()

    def before_fsync() -> None:
        me = threading.current_thread().name
        with guard:
            if running:
                overlaps.append((*running, me))
            running.append(me)
        if me == "sealer":
            seal_started.set()
        elif me == "committer":
            seal_started.wait(1.0)  # time for a seal to start meanwhile, if it may
        with guard:
            running.remove(me)

    fs.before_fsync = before_fsync
    results: dict[str, object] = {}

    def put(name: str, body: bytes, delay: float) -> None:
        time.sleep(delay)
        results[name] = q.put(body)

    threads = [
        threading.Thread(target=put, args=("committer", b"small", 0), name="committer"),
        # Does not fit in the head: seals it (an fsync) and starts a new file.
        threading.Thread(target=put, args=("sealer", b"y" * 8000, 0.2), name="sealer"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    fs.before_fsync = None
    assert set(results) == {"committer", "sealer"}
    assert overlaps == []
    store.close()


@pytest.mark.parametrize("failing", ["a put's fsync", "the seal of the head"])
def test_a_blocked_get_hears_that_writes_stopped(store_path: Path, failing: str) -> None:
    fs = FaultyFileSystem()
    sync = "always" if failing == "a put's fsync" else "periodic"
    store = msgcask.Store(
        store_path,
        _fs=fs,
        sync=sync,
        max_file_size=64 * 1024,
        compaction_interval=None,
        sync_interval=3600,
    )
    others = store.queue("others")
    if failing == "the seal of the head":
        while store._journal.head.size < 60_000:
            others.put(b"x" * 1000)
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            store.queue("jobs").get()  # no timeout: only a put, or a failure, ends it
        except BaseException as e:
            outcome.append(e)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    time.sleep(0.2)
    fs.fail_fsync = True
    with pytest.raises(msgcask.Error):
        others.put(b"y" * 8000)  # its fsync fails, or the head's seal does
    fs.fail_fsync = False
    consumer.join(5)
    assert not consumer.is_alive(), "the get is still waiting"
    assert len(outcome) == 1 and isinstance(outcome[0], msgcask.Error)
    assert "refuses writes" in str(outcome[0])
    with contextlib.suppress(msgcask.Error):
        store.close()


def test_a_data_file_whose_close_fails_still_frees_the_store(store_path: Path) -> None:
    # close(2) can report a failed write-back (EIO on NFS and some FUSE file
    # systems): every other descriptor is still closed and the lock given up.
    class CloseFails(FaultyFileSystem):
        descriptors: list[int] = []

        def _wrap(self, path: str, fd: int, size: int) -> DataFile:
            handle = super()._wrap(path, fd, size)
            self.descriptors.append(fd)
            if "0000000001.log" in path:  # born as .tmp, then renamed

                def close() -> None:
                    DataFile.close(handle)
                    raise OSError(errno.EIO, os.strerror(errno.EIO))

                handle.close = close  # type: ignore[method-assign]
            return handle

    fs = CloseFails()
    store = msgcask.Store(store_path, _fs=fs, max_file_size=64 * 1024, compaction_interval=None)
    q = store.queue("q")
    for _ in range(300):
        q.put(b"x" * 500)  # three data files
    with pytest.raises(msgcask.Error, match=r"closing a data file .* failed"):
        store.close()
    for fd in fs.descriptors:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert len(reopened.queue("q")) == 300


def test_a_new_store_whose_first_fsync_fails_leaves_no_data_file(tmp_path: Path) -> None:
    # The first journal file is born under a temporary name; a failed publish must
    # not leave it behind, or a later open would take the directory for no store.
    fs = FaultyFileSystem()
    fs.fail_fsync = True
    path = tmp_path / "store"
    with pytest.raises(msgcask.Error, match="Input/output error"):
        msgcask.Store(path, _fs=fs)
    assert sorted(p.name for p in path.glob("*.log*")) == []
    fs.fail_fsync = False
    shutil.rmtree(path / "index", ignore_errors=True)
    with msgcask.open(path, compaction_interval=None) as store:
        store.queue("q").put(b"works")


def test_a_failed_background_fsync_is_logged_once_without_a_traceback(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = FaultyFileSystem()
    store = msgcask.Store(store_path, _fs=fs, sync_interval=0.01, compaction_interval=None)
    store.queue("q").put(b"pending")
    fs.fail_fsync = True
    for _ in range(500):  # the flush thread meets the failure, then stops
        if not store._flusher.is_alive():
            break
        time.sleep(0.01)
    fs.fail_fsync = False
    failures = [r for r in caplog.records if "background sync failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    assert failures[0].exc_info is None
    assert "fsync of the journal" in failures[0].getMessage()
    store.close()
