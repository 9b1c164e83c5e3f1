"""Files drained while a pass reads its victims go at once, and a pass's report
counts every file the pass deleted, in the right column.

Under a fast drain a pass that rewrites several victims can take a second or
more; files whose last message is consumed meanwhile must not wait for the
pass to end (the space bound is checked while the drain goes on). The pass
deletes them after each victim it reads, leaving its own victims alone.

``files_deleted`` counts files deleted whole without copying, ``files_rewritten``
files copied out and deleted, ``bytes_reclaimed`` the bytes of the files
deleted (never negative) and ``bytes_copied`` those of the copies it left in
the store. That holds for files drained while the pass reads its victims, for
victims whose records all died between the plan and the rewrite, for retired
files an earlier pass failed to delete, for a swap that keeps its victims, and
for a copy removed again before its swap.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import msgcask
from disk_files import written_size
from draining import each_available
from msgcask.compactor import needed, reclaim, rewrite, runner
from msgcask.store.filenames import data_file_name
from msgcask.store.fs import FileSystem

MAX_FILE_SIZE = 64 * 1024
BODY = b"d" * 1000
QUIET = {"max_file_size": MAX_FILE_SIZE, "compaction_interval": None, "sync_interval": 3600}


def _on_disk(path: Path) -> dict[int, int]:
    """Data file id -> bytes up to its last record (the head's preallocated
    tail is not data)."""
    return {int(p.name[:10]): written_size(p) for p in path.glob("*.log")}


def _copies(store: msgcask.Store) -> set[int]:
    return {f.file_id for f in store.stats().files if f.kind == "compacted"}


def _check_report(
    store: msgcask.Store,
    before: dict[int, int],
    after: dict[int, int],
    report: msgcask.CompactionReport | msgcask.CompactionStats,
) -> None:
    """Every file gone is counted once, bytes_reclaimed is what the files gone
    took, and bytes_copied what the compacted files made take (of a pass's
    report, or of the totals since open with ``before`` taken at open)."""
    gone, made = before.keys() - after.keys(), after.keys() - before.keys()
    assert report.files_deleted + report.files_rewritten == len(gone)
    assert report.bytes_reclaimed == sum(before[f] for f in gone)
    assert report.bytes_copied == sum(after[f] for f in made & _copies(store))


def _drained_while_the_victims_are_read(
    store: msgcask.Store, monkeypatch: pytest.MonkeyPatch
) -> int:
    """Fill file 1 with live messages and sparse files after it (the victims);
    file 1 is drained when a pass reads its first victim. Returns its id."""
    full = store.queue("full")
    for _ in range(64):  # file 1: live, never a victim
        full.put(BODY)
    live, work = store.queue("live"), store.queue("work")
    for i in range(4 * 60):  # sparse files after it: the victims
        if i % 20 == 0:
            live.put(BODY)
        else:
            work.put(BODY)
            work.ack(work.get(block=False))
    (drained,) = [f.file_id for f in store.stats().files if f.live_messages >= 55]
    real = needed.find_by_id

    def first_victim_read(s: msgcask.Store, file_id: int) -> object:
        while len(full):  # the consumer empties file 1 meanwhile
            full.ack(full.get(block=False))
        return real(s, file_id)

    monkeypatch.setattr(needed, "find_by_id", first_victim_read)
    return drained


def test_a_file_drained_during_the_rewrite_is_gone_before_the_copy_and_counts_as_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with msgcask.open(path, **QUIET) as store:
        drained = _drained_while_the_victims_are_read(store, monkeypatch)
        on_disk_when_written: list[bool] = []
        real_write = rewrite._write_output

        def write_output(s: msgcask.Store, victims: list[int], copies: list[object]) -> object:
            on_disk_when_written.append(drained in _on_disk(path))
            return real_write(s, victims, copies)  # type: ignore[arg-type]

        monkeypatch.setattr(rewrite, "_write_output", write_output)
        before = _on_disk(path)
        report = store.compact(threshold=0.5)
        after = _on_disk(path)
        assert drained in before and drained not in after
        assert on_disk_when_written == [False]
        assert report.files_rewritten >= 2
        assert report.files_deleted == 1  # the drained file
        _check_report(store, before, after, report)
        assert store.stats().compaction.files_deleted == 1
        assert store.verify() == []


def test_a_file_drained_during_a_rewrite_that_fails_counts_in_the_totals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The drained file is gone whether or not the pass's copy gets written.
    path = tmp_path / "s"
    with msgcask.open(path, **QUIET) as store:
        drained = _drained_while_the_victims_are_read(store, monkeypatch)

        def no_room(*args: object) -> object:
            raise msgcask.Error("no room for the copy")

        monkeypatch.setattr(rewrite, "_write_output", no_room)
        before = _on_disk(path)
        with pytest.raises(msgcask.Error, match="no room for the copy"):
            store.compact(threshold=0.5)
        assert before.keys() - _on_disk(path).keys() == {drained}
        totals = store.stats().compaction
        assert totals.files_deleted == 1
        assert totals.bytes_reclaimed == before[drained]
        assert store.verify() == []


def test_victims_that_died_before_their_rewrite_count_as_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with msgcask.open(path, **QUIET) as store:
        q = store.queue("q")
        for _ in range(130):  # files 1 and 2 full, 3 the head
            q.put(BODY)
        held = [q.get(block=False) for _ in range(130)]
        for m in held[:120]:  # files 1 and 2 sparse: each keeps a few live messages
            if m.id % 12:
                q.ack(m)
        rest = [m for m in held[:120] if not m.id % 12] + held[120:]
        real = needed.find_by_id

        def all_consumed_meanwhile(s: msgcask.Store, file_id: int) -> object:
            while rest:
                q.ack(rest.pop())
            return real(s, file_id)

        monkeypatch.setattr(needed, "find_by_id", all_consumed_meanwhile)
        before = _on_disk(path)
        report = store.compact(threshold=0.5)
        after = _on_disk(path)
        assert report.bytes_copied == 0
        assert report.files_rewritten == 0  # nothing was copied out of them
        assert report.files_deleted >= 2
        _check_report(store, before, after, report)
        assert store.verify() == []


class StuckFiles(FileSystem):
    """Unlinking a path in ``stuck`` fails with EACCES; fsyncing the directory
    fails with EIO while ``dir_fails``."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck: set[str] = set()
        self.dir_fails = False

    def unlink(self, path: str) -> None:
        if path in self.stuck:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), path)
        super().unlink(path)

    def fsync_dir(self, path: str) -> None:
        if self.dir_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        super().fsync_dir(path)


def _stuck_store(path: Path) -> tuple[StuckFiles, msgcask.Store]:
    """A store at ``path`` whose file system fails the deletions the test names."""
    fs = StuckFiles()
    return fs, msgcask.Store(path, _fs=fs, **QUIET)  # type: ignore[arg-type]


def _fail_deletion_of(
    file_id: int,
    fault: str,
    fs: StuckFiles,
    path: Path,
    deleter: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Make the deletion of ``file_id`` fail: its unlink (``fault`` "unlink"),
    or the directory fsync after the unlinks of the ``delete_retired`` call
    (made through ``deleter``'s name for it) that deletes it."""
    if fault == "unlink":
        fs.stuck.add(str(path / data_file_name(file_id)))
        return
    real_delete = deleter.delete_retired

    def delete_retired(s: msgcask.Store, file_ids: list[int]) -> object:
        fs.dir_fails = file_id in file_ids
        return real_delete(s, file_ids)

    monkeypatch.setattr(deleter, "delete_retired", delete_retired)


def _clear_faults(fs: StuckFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    fs.stuck.clear()
    fs.dir_fails = False


def _through_a_failed_deletion(
    store: msgcask.Store,
    fs: StuckFiles,
    monkeypatch: pytest.MonkeyPatch,
    compact: Callable[[], object],
) -> tuple[dict[int, int], set[int], dict[int, int]]:
    """Run ``compact`` with a deletion fault armed (it fails), then again with
    the faults cleared; after each, the totals count every file gone from the
    disk once. Returns the files on disk before, the retired files after the
    failure, and the files on disk after it."""
    path = Path(store.path)
    before = _on_disk(path)
    with pytest.raises(msgcask.Error, match="deleting data files"):
        compact()
    failed = _on_disk(path)
    _check_report(store, before, failed, store.stats().compaction)
    retired = {f.file_id for f in store.stats().files if f.retired}
    _clear_faults(fs, monkeypatch)
    compact()
    _check_report(store, before, _on_disk(path), store.stats().compaction)
    assert store.verify() == []
    return before, retired, failed


def _two_sealed_files(store: msgcask.Store) -> msgcask.Queue:
    """Files 1 and 2 sealed and full of live messages, 3 the head; their queue."""
    q = store.queue("q")
    for _ in range(300):
        q.put(b"p" * 500)
    return q


def _four_sparse_files(store: msgcask.Store) -> None:
    """Files 1 to 4 sealed, each kept by a few live messages (a pass at
    threshold 0.5 rewrites them all), 5 the head."""
    q = store.queue("q")
    for _ in range(4 * 62):
        q.put(BODY)
    for m in each_available(q):
        if m.id % 12:
            q.ack(m)


def test_a_retired_file_deleted_at_last_counts_as_deleted(tmp_path: Path) -> None:
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        q = _two_sealed_files(store)
        for _ in range(len(store.why_kept(1).live_messages)):
            q.ack(q.get(block=False))
        fs.stuck.add(str(path / data_file_name(1)))
        with pytest.raises(msgcask.Error, match="deleting data files"):
            store.compact()
        assert store.stats().files[0].retired
        fs.stuck.clear()
        before = _on_disk(path)
        report = store.compact()
        after = _on_disk(path)
        assert 1 in before and 1 not in after
        assert report.files_deleted == 1
        _check_report(store, before, after, report)


def test_victims_deleted_before_a_deletion_fails_count_in_the_totals(tmp_path: Path) -> None:
    # The swap committed and the first victims are gone when the unlink of a
    # later one fails: the files gone count, and the later pass counts the rest.
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        _four_sparse_files(store)
        sealed = [f.file_id for f in store.stats().files if f.file_id != 5]
        fs.stuck.add(str(path / data_file_name(sealed[-1])))
        before = first = _on_disk(path)
        with pytest.raises(msgcask.Error, match="deleting data files"):
            store.compact(threshold=0.5)
        after = _on_disk(path)
        gone = before.keys() - after.keys()
        assert gone  # victims unlinked before the one that failed
        totals = store.stats().compaction
        assert totals.files_deleted + totals.files_rewritten == len(gone)
        assert totals.bytes_reclaimed == sum(before[f] for f in gone)
        assert totals.bytes_copied == sum(after[f] for f in _copies(store))
        fs.stuck.clear()
        store.compact(threshold=0.5)
        assert sealed[-1] not in _on_disk(path)
        totals = store.stats().compaction
        gone = first.keys() - _on_disk(path).keys()
        assert totals.files_deleted + totals.files_rewritten == len(gone)
        assert store.verify() == []


def test_files_deleted_whole_before_a_deletion_fails_count_in_the_totals(tmp_path: Path) -> None:
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        q = _two_sealed_files(store)
        sealed = {i for f in (1, 2) for _, i in store.why_kept(f).live_messages}
        for m in each_available(q):
            if m.id in sealed:  # files 1 and 2 hold nothing needed, the head stays
                q.ack(m)
        fs.stuck.add(str(path / data_file_name(2)))
        before = _on_disk(path)
        with pytest.raises(msgcask.Error, match="deleting data files"):
            store.compact()
        gone = before.keys() - _on_disk(path).keys()
        assert gone == {1}
        totals = store.stats().compaction
        assert (totals.files_deleted, totals.bytes_reclaimed) == (1, before[1])


def test_a_swap_that_keeps_its_victims_reclaims_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The guard after the swap keeps every victim (here it is made to, and the
    # pass deletes no file whole, as it would the victims the guard kept in
    # vain): the copy stays beside them, so the pass wrote bytes and freed none.
    path = tmp_path / "s"
    with msgcask.open(path, **QUIET) as store:
        _four_sparse_files(store)
        monkeypatch.setattr(rewrite, "_held", lambda s, victims, dead_puts: list(victims))
        monkeypatch.setattr(runner, "reclaim", lambda s, file_ids: reclaim.reclaim(s, []))
        before = _on_disk(path)
        report = store.compact(threshold=0.5)
        after = _on_disk(path)
        assert before.keys() <= after.keys()  # nothing deleted
        assert report.files_rewritten == report.files_deleted == 0
        assert report.bytes_reclaimed == 0
        assert report.bytes_copied > 0
        _check_report(store, before, after, report)
        assert store.stats().compaction.bytes_reclaimed == 0


def test_a_copy_the_pass_removes_again_is_not_counted_as_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check before the swap finds the victims' counts wrong (here it is made
    # to): the copy is removed and every victim kept. The pass copied nothing
    # into the store, though the copy's bytes were written (bytes_written).
    path = tmp_path / "s"
    with msgcask.open(path, **QUIET) as store:
        _four_sparse_files(store)
        monkeypatch.setattr(rewrite, "_unaccounted", lambda s, victims, found: list(victims))
        removed: list[int] = []
        real_discard = rewrite._discard

        def discard(s: msgcask.Store, out: object) -> None:
            removed.append(out.size)  # type: ignore[attr-defined]
            real_discard(s, out)  # type: ignore[arg-type]

        monkeypatch.setattr(rewrite, "_discard", discard)
        before, written = _on_disk(path), store.stats().bytes_written
        report = store.compact(threshold=0.5)
        after = _on_disk(path)
        assert len(removed) == 1 and removed[0] > 0  # a copy was written, then removed
        assert after == before  # nothing deleted, no copy left
        assert report.files_rewritten == report.files_deleted == report.bytes_reclaimed == 0
        assert report.bytes_copied == 0
        _check_report(store, before, after, report)
        stats = store.stats()
        assert stats.compaction.bytes_copied == 0
        assert stats.bytes_written == written + removed[0]
        assert store.verify() == []


def test_a_pass_that_seals_the_write_head_counts_the_files_it_deletes(tmp_path: Path) -> None:
    # The pass seals a dead head to delete it; the new head it opens (a header)
    # is neither freed nor a copy, so it is in neither figure.
    path = tmp_path / "s"
    with msgcask.open(path, **QUIET) as store:
        q = store.queue("q")
        for _ in range(40):  # the head more than half full, then all consumed
            q.put(BODY)
        for m in each_available(q):
            q.ack(m)
        before = _on_disk(path)
        report = store.compact()
        after = _on_disk(path)
        assert before.keys() - after.keys() == {1} and len(after) == 1
        assert report.files_deleted == 1
        _check_report(store, before, after, report)


@pytest.mark.parametrize("fault", ["unlink", "directory-fsync"])
def test_victims_whose_deletion_a_later_pass_completes_count_as_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # The swap committed and the victims' deletion failed (the first unlink, or
    # the fsync of the directory after every unlink): the next pass deletes
    # them (again, for the fsync: their unlink may not be durable). They were
    # rewritten, and count so, once: when they leave the disk.
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        _four_sparse_files(store)
        # The copy is in; the victims' deletion fails.
        _fail_deletion_of(1, fault, fs, path, rewrite, monkeypatch)
        before, victims, failed = _through_a_failed_deletion(
            store, fs, monkeypatch, lambda: store.compact(threshold=0.5)
        )
        assert victims == {1, 2, 3, 4}
        assert victims.isdisjoint(failed) == (fault == "directory-fsync")
        gone = before.keys() - _on_disk(path).keys()
        assert victims <= gone
        # Forgotten too, even those the failed try had unlinked already.
        assert victims.isdisjoint(f.file_id for f in store.stats().files)
        totals = store.stats().compaction
        assert totals.files_rewritten == len(victims)
        assert totals.files_deleted == len(gone - victims)


def _empty_file(
    store: msgcask.Store, q: msgcask.Queue, held: list[msgcask.Message], file_id: int
) -> None:
    """Ack the messages of ``held`` (delivered, not yet acked) whose records
    are in ``file_id``: it holds nothing needed then."""
    in_file = {i for _, i in store.why_kept(file_id).live_messages}
    for m in [m for m in held if m.id in in_file]:
        q.ack(m)
        held.remove(m)


def _held_and_emptied(
    store: msgcask.Store, *file_ids: int
) -> tuple[msgcask.Queue, list[msgcask.Message]]:
    """``_two_sealed_files`` with every message delivered and held, then the
    files ``file_ids`` emptied (``_empty_file``); the queue and what it holds."""
    q = _two_sealed_files(store)
    held = list(each_available(q))
    for file_id in file_ids:
        _empty_file(store, q, held, file_id)
    return q, held


def _deletion_failures_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.message for r in caplog.records if "deleting emptied data files failed" in r.message]


def test_deletions_between_passes_kept_back_by_a_stuck_retired_file_log_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # File 1 stays retired after a pass failed to delete it; file 2 empties
    # next. The deletion between passes must first delete file 1, and fails:
    # that failure is logged (once), file 2 waits, and the next pass says why.
    caplog.set_level(logging.ERROR, logger="msgcask")
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        q, held = _held_and_emptied(store, 1)
        fs.stuck.add(str(path / data_file_name(1)))
        with pytest.raises(msgcask.Error, match="deleting data files"):
            store.compact()  # told to its caller, not logged
        assert _deletion_failures_logged(caplog) == []
        _empty_file(store, q, held, 2)
        for _ in range(2):
            assert store._compactor.reclaim_emptied() == 0
        (failure,) = _deletion_failures_logged(caplog)
        assert "Check the permissions" in failure
        assert [(f.file_id, f.retired) for f in store.stats().files][:2] == [(1, True), (2, False)]
        with pytest.raises(msgcask.Error, match="deleting data files"):
            store.compact()
        fs.stuck.clear()
        assert store._compactor.reclaim_emptied() == 2
        assert {1, 2}.isdisjoint(_on_disk(path))
        assert store.stats().compaction.files_deleted == 2
        # Failing again after a success is news again.
        _empty_file(store, q, held, 3)
        with store._lock:
            store._roll_over()
        fs.stuck.add(str(path / data_file_name(3)))
        assert store._compactor.reclaim_emptied() == 0
        assert len(_deletion_failures_logged(caplog)) == 2


def _chain_of_two(store: msgcask.Store) -> None:
    """File 1 holds consumed PUT records whose ACKs are in file 2, which holds
    nothing else needed; file 3 is the head. A pass deletes file 1 in one
    deletion round and file 2 in the next."""
    q = store.queue("q")
    for _ in range(10):
        q.put(BODY)
    got = [q.get(block=False) for _ in range(10)]
    with store._lock:
        store._roll_over()
    for m in got[1:]:
        q.ack(m)
    for _ in range(20):
        q.put(BODY)
        q.ack(q.get(block=False))
    with store._lock:
        store._roll_over()
    q.ack(got[0])


@pytest.mark.parametrize("fault", ["unlink", "directory-fsync"])
def test_totals_after_a_failed_final_deletion_round_count_the_files_gone_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # The last round a pass may run fails: the totals count what left the disk
    # then (file 1, and file 2 if its unlink went through before the directory
    # fsync failed), and the pass that completes the deletion counts the rest.
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        _chain_of_two(store)
        monkeypatch.setattr(runner, "_MAX_RECLAIM_ROUNDS", 2)
        _fail_deletion_of(2, fault, fs, path, reclaim, monkeypatch)  # the final round's
        _, retired, failed = _through_a_failed_deletion(store, fs, monkeypatch, store.compact)
        assert 1 not in failed and retired == {2}
        assert (2 in failed) == (fault == "unlink")
        assert {1, 2}.isdisjoint(_on_disk(path))


def test_deletions_between_passes_count_the_files_gone_before_one_fails(tmp_path: Path) -> None:
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        _held_and_emptied(store, 1, 2)
        fs.stuck.add(str(path / data_file_name(2)))
        before = _on_disk(path)
        assert store._compactor.reclaim_emptied() == 1  # file 1, before file 2 failed
        after = _on_disk(path)
        assert before.keys() - after.keys() == {1}
        _check_report(store, before, after, store.stats().compaction)


@pytest.mark.parametrize("fault", ["unlink", "directory-fsync", "both"])
def test_a_failed_deletion_says_which_step_failed_why_and_the_fix(
    tmp_path: Path, fault: str
) -> None:
    # Files 1 and 2 are deleted in one round; the unlink of file 2 fails, the
    # directory fsync after the unlinks fails, or both (each needs its own fix).
    path = tmp_path / "s"
    fs, store = _stuck_store(path)
    with store:
        _held_and_emptied(store, 1, 2)
        if fault != "directory-fsync":
            fs.stuck.add(str(path / data_file_name(2)))
        fs.dir_fails = fault != "unlink"
        with pytest.raises(msgcask.Error, match="deleting data files") as failed:
            store.compact()
        message = str(failed.value)
        unlink = f"Could not unlink {data_file_name(2)} (Permission denied). Check the permissions"
        fsync = (
            "Could not fsync the directory after the unlinks (Input/output error). Check the disk"
        )
        assert (unlink in message) == (fault != "directory-fsync")
        assert (fsync in message) == (fault != "unlink")
        assert "retired in the index" in message
