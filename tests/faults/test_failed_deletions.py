"""A data file whose deletion fails stays on disk, retired in the index.

Its consumed PUT records have already released the ACKs that cancel them. If a
later pass deleted the files holding those ACKs, a rebuild (which cannot know the
file was retired) would bring its messages back. So nothing else is deleted
until the retired file is gone.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

import msgcask
from msgcask.store.filenames import data_file_name
from msgcask.store.fs import FileSystem


class StuckFiles(FileSystem):
    """Unlinking a path in ``stuck`` fails with EACCES."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck: set[str] = set()

    def unlink(self, path: str) -> None:
        if path in self.stuck:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), path)
        super().unlink(path)


def test_no_file_is_deleted_while_a_retired_one_is_still_on_disk(store_path: Path) -> None:
    fs = StuckFiles()
    options = {"max_file_size": 64 * 1024, "compaction_interval": None, "sync_interval": 3600}
    store = msgcask.Store(store_path, _fs=fs, **options)  # type: ignore[arg-type]
    q = store.queue("q")
    for _ in range(300):  # files 1 and 2 sealed, 3 the head
        q.put(b"p" * 500)
    in_first = len(store.why_kept(1).live_messages)
    for _ in range(in_first):
        q.ack(q.get(block=False))  # their ACKs go to the head
    fs.stuck.add(str(store_path / data_file_name(1)))
    with pytest.raises(msgcask.Error, match=r"deleting data files.*Check the permissions"):
        store.compact()
    # More traffic seals the file with those ACKs, and consumes everything else.
    for _ in range(300):
        q.put(b"p" * 500)
    while True:
        try:
            q.ack(q.get(block=False))
        except msgcask.Empty:
            break
    on_disk = sorted(store_path.glob("*.log"))
    with pytest.raises(msgcask.Error, match="deleting data files"):
        store.compact()
    assert sorted(store_path.glob("*.log")) == on_disk  # nothing else went
    store.close()

    # A rebuild now finds the ACKs beside the retired file's PUT records.
    shutil.rmtree(store_path / "index")
    with msgcask.Store(store_path, _fs=fs, **options) as reopened:  # type: ignore[arg-type]
        assert reopened.recovery.mode == "rebuild"
        assert list(reopened.queue("q").browse()) == []
        fs.stuck.clear()
        reopened.compact()  # the retired file goes first, then the rest
        assert list(reopened.queue("q").browse()) == []
        assert reopened.verify() == []
    with msgcask.Store(store_path, **options) as again:  # type: ignore[arg-type]
        assert list(again.queue("q").browse()) == []


def test_background_passes_that_keep_failing_log_it_once(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = StuckFiles()
    tries: list[str] = []
    stuck_unlink = fs.unlink

    def counted(path: str) -> None:
        tries.append(path)
        stuck_unlink(path)

    fs.unlink = counted  # type: ignore[method-assign]
    options = {"max_file_size": 64 * 1024, "compaction_interval": 0.02, "sync_interval": 3600}
    with msgcask.Store(store_path, _fs=fs, **options) as store:  # type: ignore[arg-type]
        store.pause_compaction()
        q = store.queue("q")
        for _ in range(300):
            q.put(b"p" * 500)
        for _ in range(len(store.why_kept(1).live_messages)):
            q.ack(q.get(block=False))
        fs.stuck.add(str(store_path / data_file_name(1)))
        store.resume_compaction()
        for _ in range(500):  # each pass tries the deletion again first
            if len(tries) >= 5:
                break
            store._stop.wait(0.01)
        assert len(tries) >= 5
        fs.stuck.clear()
    failures = [r for r in caplog.records if "background compaction pass failed" in r.message]
    assert len(failures) == 1, [r.message for r in failures]
    assert "deleting data files" in failures[0].message


def test_files_retired_by_a_pass_whose_fsync_failed_are_not_deleted_later(
    store_path: Path,
) -> None:
    # The retirement was never committed: the store refuses writes, and passes too.
    fs = FaultyFileSystem()
    options = {"max_file_size": 64 * 1024, "compaction_interval": None, "sync_interval": 3600}
    store = msgcask.Store(store_path, _fs=fs, **options)  # type: ignore[arg-type]
    q = store.queue("q")
    for _ in range(300):
        q.put(b"p" * 500)
    acked = len(store.why_kept(1).live_messages)
    for _ in range(acked):
        q.ack(q.get(block=False))
    on_disk = sorted(store_path.glob("*.log"))
    fs.fail_fsync = True
    with pytest.raises(msgcask.Error, match="fsync of the journal"):
        store.compact()
    fs.fail_fsync = False
    with pytest.raises(msgcask.Error, match="refuses writes"):
        store.compact()
    assert sorted(store_path.glob("*.log")) == on_disk
    store.close()
    with msgcask.Store(store_path, **options) as reopened:  # type: ignore[arg-type]
        assert len(reopened.queue("q")) == 300 - acked
        assert reopened.verify() == []
