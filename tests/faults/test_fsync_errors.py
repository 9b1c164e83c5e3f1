"""fsync fails with EIO: the disk could not make written bytes durable.

The caller must get a msgcask.Error, never a raw OSError, and a store whose close could
not sync must still release its lock and reopen consistent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

import msgcask


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
    store.close()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        bodies = [bytes(m.body) for m in reopened.queue("q").browse()]
        assert bodies[0] == b"durable" and b"refused" not in bodies
        assert reopened.queue("q").put(b"writes again") > first
        assert reopened.verify() == []
