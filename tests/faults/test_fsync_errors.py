"""fsync fails with EIO: the disk could not make written bytes durable.

The caller must get a msgcask.Error, never a raw OSError.
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
