"""A data file whose deletion fails stays on disk, retired in the index.

Its consumed PUT records have already released the ACKs that cancel them. If a
later pass deleted the files holding those ACKs, a rebuild (which cannot know the
file was retired) would bring its messages back. So nothing else is deleted
until the retired file is gone.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

import msgcask
from draining import each_available
from msgcask.store.filenames import data_file_name
from msgcask.store.fs import FileSystem


def data_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.log"))


class StuckFiles(FileSystem):
    """Unlinking a path in ``stuck`` fails with EACCES; ``tries`` lists every unlink."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck: set[str] = set()
        self.tries: list[str] = []

    def unlink(self, path: str) -> None:
        self.tries.append(path)
        if path in self.stuck:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), path)
        super().unlink(path)


# 64 KiB data files; no background pass, no background sync: the test decides.
QUIET_SMALL_FILES: dict[str, object] = {
    "max_file_size": 64 * 1024,
    "compaction_interval": None,
    "sync_interval": 3600,
}


def three_files(store: msgcask.Store) -> msgcask.Queue:
    """Queue "q" with 300 messages of 500 bytes: with 64 KiB data files, files 1
    and 2 sealed and 3 the head."""
    q = store.queue("q")
    for _ in range(300):
        q.put(b"p" * 500)
    return q


def consume(store: msgcask.Store, q: msgcask.Queue, *file_ids: int) -> int:
    """Get and ack every message live in ``file_ids``, the oldest files (their
    ACKs go to the head); return how many."""
    count = sum(len(store.why_kept(f).live_messages) for f in file_ids)
    for _ in range(count):
        q.ack(q.get(block=False))
    return count


def with_file_1_stuck(store_path: Path) -> tuple[StuckFiles, msgcask.Store, msgcask.Error]:
    """A store of ``three_files`` whose file 1, consumed, a pass retired and then
    failed to delete (it keeps failing until ``fs.stuck`` is cleared); returns the
    file system, the store and the error the pass raised."""
    fs = StuckFiles()
    store = msgcask.Store(store_path, _fs=fs, **QUIET_SMALL_FILES)  # type: ignore[arg-type]
    consume(store, three_files(store), 1)
    fs.stuck.add(str(store_path / data_file_name(1)))
    with pytest.raises(msgcask.Error, match=r"deleting data files.*Check the permissions") as e:
        store.compact()
    return fs, store, e.value


def test_no_file_is_deleted_while_a_retired_one_is_still_on_disk(store_path: Path) -> None:
    options = QUIET_SMALL_FILES
    fs, store, _ = with_file_1_stuck(store_path)
    q = store.queue("q")
    # More traffic seals the file with those ACKs, and consumes everything else.
    for _ in range(300):
        q.put(b"p" * 500)
    for m in each_available(q):
        q.ack(m)
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


def test_the_next_open_finishes_a_failed_deletion_without_a_rebuild(store_path: Path) -> None:
    _, store, _ = with_file_1_stuck(store_path)
    live = sorted(m.id for m in store.queue("q").browse())
    store.close()
    with msgcask.Store(store_path, **QUIET_SMALL_FILES) as reopened:  # type: ignore[arg-type]
        assert reopened.recovery.mode != "rebuild", reopened.recovery.reason
        assert reopened.recovery.removed_files == [1]
        assert not (store_path / data_file_name(1)).exists()
        assert sorted(m.id for m in reopened.queue("q").browse()) == live
        assert reopened.verify() == []


def test_a_failed_deletion_is_recorded_as_the_error_msgcask_raises(store_path: Path) -> None:
    # stats().compaction.last_failure names the error by a class the caller can
    # catch (docs/operations.md: "Error: ..."), not by one internal to msgcask.
    _, store, failure = with_file_1_stuck(store_path)
    totals = store.stats().compaction
    assert totals.failed_passes == 1
    assert totals.last_failure == f"Error: {failure}"
    store.close()


def test_background_passes_that_keep_failing_log_it_once(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = StuckFiles()
    tries = fs.tries
    options = {**QUIET_SMALL_FILES, "compaction_interval": 0.02}
    with msgcask.Store(store_path, _fs=fs, **options) as store:  # type: ignore[arg-type]
        store.pause_compaction()
        q = three_files(store)
        consume(store, q, 1)
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
    options = QUIET_SMALL_FILES
    store = msgcask.Store(store_path, _fs=fs, **options)  # type: ignore[arg-type]
    q = three_files(store)
    acked = consume(store, q, 1)
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


def test_a_put_under_pressure_while_a_retired_file_cannot_be_deleted_is_refused_with_why(
    store_path: Path,
) -> None:
    # Puts that fit are stored as ever; one that needs space pressure, whose pass
    # fails on the stuck deletion, is refused with that error, and writes nothing.
    fs = StuckFiles()
    tries = fs.tries
    limit = 6 * 64 * 1024
    options = QUIET_SMALL_FILES
    store = msgcask.Store(store_path, _fs=fs, max_store_size=limit, **options)  # type: ignore[arg-type]
    q = three_files(store)
    consume(store, q, 1, 2)  # both files dead; their ACKs in the head
    fs.stuck.add(str(store_path / data_file_name(1)))
    with pytest.raises(msgcask.Error, match="deleting data files"):
        store.compact()  # file 1 retired and stuck; file 2 kept for now
    assert (store_path / data_file_name(2)).exists()
    assert store.stats().data_bytes == data_bytes(store_path)  # stuck files count
    assert [f.kept_by for f in store.stats().files][:2] == ["nothing (being deleted)"] * 2
    with pytest.raises(ValueError, match="deletion failed"):
        store.why_kept(1)
    tries.clear()
    stored = []
    while data_bytes(store_path) + 600 + 64 * 1024 <= limit:  # puts leave a file's worth
        stored.append(q.put(b"n" * 500))
    assert not tries  # no pressure yet
    before, queued = data_bytes(store_path), len(q)
    with pytest.raises(msgcask.Error, match="deleting data files"):
        q.put(b"n" * 500)
    assert tries  # a pass was tried, and failed on the stuck file
    assert (data_bytes(store_path), len(q)) == (before, queued)
    fs.stuck.clear()
    stored.append(q.put(b"n" * 500))  # the next pass under pressure deletes both files
    assert not (store_path / data_file_name(1)).exists()
    assert not (store_path / data_file_name(2)).exists()
    assert data_bytes(store_path) <= limit
    store.close()
    with msgcask.Store(store_path, **options) as reopened:  # type: ignore[arg-type]
        ids = [m.id for m in reopened.queue("q").browse()]
        assert set(stored) <= set(ids)
        assert reopened.verify() == []


def test_a_failed_background_deletion_is_logged_without_a_traceback(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = StuckFiles()
    tries = fs.tries
    # No schedule: the flush thread deletes files as they empty, alone.
    options = {**QUIET_SMALL_FILES, "sync_interval": 0.01}
    with msgcask.Store(store_path, _fs=fs, **options) as store:  # type: ignore[arg-type]
        q = three_files(store)
        fs.stuck.add(str(store_path / data_file_name(1)))
        consume(store, q, 1)
        for _ in range(500):
            if tries:
                break
            store._stop.wait(0.01)
        assert tries
        store._stop.wait(0.1)  # later syncs find it retired and stuck
        fs.stuck.clear()
    messages = [r for r in caplog.records if r.name == "msgcask"]
    assert not [r for r in messages if r.exc_info], [r.message for r in messages]
    failures = [r for r in messages if "deleting emptied data files failed" in r.message]
    assert len(failures) == 1, [r.message for r in messages]
    assert "Check the permissions" in failures[0].message


def test_files_unlinked_before_a_failed_one_are_gone_from_the_accounts(
    store_path: Path,
) -> None:
    fs = StuckFiles()
    options = QUIET_SMALL_FILES
    with msgcask.Store(store_path, _fs=fs, **options) as store:  # type: ignore[arg-type]
        q = three_files(store)
        acked = consume(store, q, 1, 2)
        fs.stuck.add(str(store_path / data_file_name(2)))
        with pytest.raises(msgcask.Error, match="deleting data files"):
            store.compact()  # file 1 is unlinked, file 2 is not
        assert not (store_path / data_file_name(1)).exists()
        files = store.stats().files
        assert [(f.file_id, f.retired) for f in files] == [(2, True), (3, False)]
        assert files[0].size == (store_path / data_file_name(2)).stat().st_size
        fs.stuck.clear()
        store.compact()
        assert [f.file_id for f in store.stats().files] == [3]
        assert not (store_path / data_file_name(2)).exists()
    with msgcask.Store(store_path, **options) as reopened:  # type: ignore[arg-type]
        assert len(reopened.queue("q")) == 300 - acked
        assert reopened.verify() == []


def test_verify_takes_files_retired_by_a_swap_for_gone(store_path: Path) -> None:
    # The victims of a rewrite could not be unlinked: retired in the index, still on
    # disk. verify() leaves them out; the MANIFEST rule must too, else the copy, where
    # the index points, reads as an unfinished compaction's and its messages as absent.
    fs = StuckFiles()
    store = msgcask.Store(store_path, _fs=fs, **QUIET_SMALL_FILES)  # type: ignore[arg-type]
    q = three_files(store)
    for i, m in enumerate([q.get(block=False) for _ in range(290)]):
        if i % 20:
            q.ack(m)
    fs.stuck.update(str(store_path / data_file_name(f)) for f in (1, 2, 3))
    with pytest.raises(msgcask.Error, match="deleting data files"):
        store.compact(threshold=0.9)
    assert any(a.retired for a in store._acct.files.values())
    assert any(f.kind == "compacted" for f in store.stats().files)
    assert store.verify() == []
    fs.stuck.clear()
    store.close()


def test_a_copy_the_pass_cannot_remove_again_is_removed_by_the_next_open(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The check before the swap keeps every victim (made to here), so the pass
    # removes its copy again; that unlink fails. The pass must still end cleanly
    # with every message where it was, and the copy, which nothing refers to, must
    # go on the next open.
    from msgcask.compactor import rewrite

    fs = StuckFiles()
    store = msgcask.Store(store_path, _fs=fs, **QUIET_SMALL_FILES)  # type: ignore[arg-type]
    q = three_files(store)
    for i in range(300):
        m = q.get(block=False)
        if i % 10:
            q.ack(m)  # every tenth stays, delivered: the sealed files are sparse
    before = [(m.id, bytes(m.body)) for m in q.browse()]
    files = {p.name for p in store_path.glob("*.log")}
    monkeypatch.setattr(rewrite, "_unaccounted", lambda s, victims, found: list(victims))
    fs.stuck.update(str(store_path / data_file_name(i)) for i in range(1, 100))
    with caplog.at_level("WARNING", logger="msgcask"):
        report = store.compact(threshold=0.5)
    assert report.files_rewritten == report.files_deleted == 0
    [warning] = [r.getMessage() for r in caplog.records if "next open removes it" in r.getMessage()]
    copy = Path(warning.split("could not remove ")[1].split(" (")[0])
    assert copy.exists() and copy.name not in files
    assert [(m.id, bytes(m.body)) for m in q.browse()] == before
    store.close()
    monkeypatch.undo()
    with msgcask.Store(store_path, **QUIET_SMALL_FILES) as reopened:  # type: ignore[arg-type]
        assert reopened.recovery.removed_files == [int(copy.stem)]
        assert [(m.id, bytes(m.body)) for m in reopened.queue("q").browse()] == before
        assert reopened.verify() == []
    assert not copy.exists()


def test_a_copy_whose_victims_were_partly_deleted_survives_a_replay_onto_an_older_index(
    store_path: Path, tmp_path: Path
) -> None:
    # An index committed before the victims and their copy existed (as a crash, or
    # a power cut losing the index's last commits, leaves it) knows none of them.
    # One victim is gone, so the copy is the only home of its messages: opening
    # must not take the copy for an unfinished compaction's and remove it.
    fs = StuckFiles()
    # Each look at the clock a second later: file 2 is older than file 3, so the
    # pass takes it first, and deletes it first.
    clock = itertools.count().__next__
    store = msgcask.Store(store_path, _fs=fs, _clock=clock, **QUIET_SMALL_FILES)  # type: ignore[arg-type]
    q = store.queue("q")
    q.put(b"p" * 500)
    store.sync()
    shutil.copytree(store_path / "index", tmp_path / "index.old")  # knows file 1 alone
    for _ in range(400):
        q.put(b"p" * 500)  # files 1 to 3 sealed
    for i, m in enumerate(list(each_available(q))):
        if m.id > 140 and i % 4:
            q.ack(m)  # files 2 and 3 sparse; file 1 stays full
        else:
            q.nack(m)
    fs.stuck.add(str(store_path / data_file_name(3)))
    with pytest.raises(msgcask.Error, match="deleting data files"):
        store.compact(threshold=0.6)
    assert not (store_path / data_file_name(2)).exists(), "test setup: victim 2 deleted"
    assert (store_path / data_file_name(3)).exists(), "test setup: victim 3 kept"
    live = sorted(m.id for m in q.browse())
    store.close()
    shutil.rmtree(store_path / "index")
    shutil.copytree(tmp_path / "index.old", store_path / "index")
    with msgcask.Store(store_path, **QUIET_SMALL_FILES) as reopened:  # type: ignore[arg-type]
        assert sorted(m.id for m in reopened.queue("q").browse()) == live
        assert reopened.verify() == []
