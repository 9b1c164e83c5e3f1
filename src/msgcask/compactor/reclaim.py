"""Deleting data files: the one guarded step that removes bytes from disk.

A file is deleted only when the index says nothing in it is needed. The order
makes that safe across crashes and power cuts:

1. release: the ACKs elsewhere that only had to outlive this file's PUT
   records stop counting as needed: those the file counts per ACK file at
   once, and those with ACKED entries by id (this needs the file's PUT ids:
   for a journal file, the index's entries in the file's range of ids;
   otherwise, or if that range does not hold them all, the ids the file's
   records name);
2. retire: the file is marked retired in the index and the index is
   committed; from here a reopen finishes the deletion;
3. unlink every retired file, then fsync the directory, so that no file whose
   records depended on them can be deleted before their deletion is durable;
   if an unlink fails, the retired files stay, and no other file is deleted
   until a later try deletes them (``finish_deletions``);
4. forget them in the index.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msgcask.compactor import needed
from msgcask.errors import Error
from msgcask.plural import counted
from msgcask.stats import CompactionReport
from msgcask.store.disk_advice import remedy
from msgcask.store.filenames import data_file_name
from msgcask.store.fs import crash_point

if TYPE_CHECKING:
    from msgcask.db import Store

log = logging.getLogger("msgcask")


class DeletionFailed(Error):
    """Deleting data files failed; ``done`` is what was deleted before the
    failure (gone from the disk and forgotten), which a pass's totals count."""

    def __init__(self, message: str, done: CompactionReport) -> None:
        super().__init__(message)
        self.done = done


def reclaim(store: Store, file_ids: list[int]) -> CompactionReport:
    """Delete whole files that hold nothing needed; return what that freed."""
    retired: list[int] = []
    with store._commits_held():
        try:
            _retire(store, file_ids, retired)
        finally:
            # Also when a later file failed: the ones retired so far are
            # deleted by the next pass, which must find their retirement durable.
            if retired:
                with store._lock:
                    pos = store._journal.position
                # The ACKs these deletions rely on must be durable before the
                # deletions are: else a power cut could keep the deletion and
                # lose what it followed.
                store._sync_journal_to(pos)
                with store._lock:
                    store._commit_index(force=True)
    if not retired:
        return CompactionReport()
    return delete_retired(store, retired)


def _retire(store: Store, file_ids: list[int], retired: list[int]) -> None:
    """Release and mark retired each file that still holds nothing needed.

    Only files that held nothing needed before any of them was released: one
    that a release here makes reclaimable (the file of the ACKs cancelling
    another one's PUT records) waits for a later round, which starts after
    this round's unlinks were made durable, so the PUT file is gone from the
    disk before the ACK file is (a rewrite whose victims all died since its
    plan passes a list of files that were not all reclaimable)."""
    with store._lock:
        ready = {f for f in file_ids if (a := store._acct.files.get(f)) and a.reclaimable}
    for file_id in file_ids:
        acct = store._acct.files.get(file_id)
        if acct is None or acct.retired or file_id not in ready:
            continue
        with store._lock:
            if not acct.reclaimable or file_id == store._journal.head_id:
                continue  # something became needed again since the plan
        if acct.dead_puts and not _release(store, file_id):
            continue
        with store._lock:
            if not acct.reclaimable or acct.dead_puts:
                continue
            store._catalog.release_counted(file_id)
            acct.retired = True
            retired.append(file_id)


def _release(store: Store, file_id: int) -> bool:
    """Release the ACKs that only had to outlive this file's dead PUT records.

    Nothing changes unless every such record is found: if one is unreadable
    (damage) the file cannot be deleted, and ACKs released for the others would
    let their files go while these PUT records stay: a rebuild would bring the
    messages back. Runs in short lock holds; a reclaimable sealed file gains no dead PUT
    records meanwhile (all its messages are consumed, and only the compactor,
    which is running this, releases them).
    """
    compactor = store._compactor
    expected = store._acct.files[file_id].dead_puts
    pending = needed.find_any(store, file_id)[1].dead_puts  # (id, file of its ACK)
    if len(pending) != expected:
        # Every pass finds it so again (a sealed file's bytes never change); what
        # was said is also what stats() says keeps it (Compactor.damage).
        if compactor.unreleasable.news(file_id, (len(pending), expected)):
            log.error(
                "msgcask: file %d: found %d of its %s (damaged?); kept",
                file_id,
                len(pending),
                counted(expected, "consumed PUT record"),
            )
        return False
    compactor.unreleasable.forget(file_id)
    release(store, file_id, pending)
    return True


def release(store: Store, file_id: int, pairs: list[tuple[int, int]]) -> None:
    """Delete the ACKED entries (id, ACK file) found for ``file_id``'s dead PUT
    records, a batch per lock hold, then release the ACKs it counts. No second
    lookup: only the compactor, one pass at a time, moves or deletes ACKED
    entries. Call only for a file whose PUT records are all consumed or copied."""
    for start, end in store._pacer.spans(len(pairs)):
        with store._lock:
            store._catalog.release_acked(file_id, pairs[start:end])
    with store._lock:
        store._catalog.release_counted(file_id)


def finish_deletions(store: Store) -> CompactionReport:
    """Delete the retired files a failed deletion left on disk, before any other
    file goes; return what that freed. Their consumed PUT records have
    released the ACKs that cancel them; if the files holding those ACKs went
    first, a rebuild (which cannot know these files were retired) would bring
    the messages back. Raises Error if they still cannot be deleted, or if the
    store refuses writes (then a retirement may not have been committed)."""
    store._check_writable()
    with store._lock:
        left = [f for f, account in store._acct.files.items() if account.retired]
    if not left:
        return CompactionReport()
    return delete_retired(store, left)


def delete_retired(store: Store, file_ids: list[int]) -> CompactionReport:
    """Unlink retired files, make that durable, and forget them; return what
    that freed: the files (a swap's victims as rewritten, others as deleted)
    and their bytes, each counted once, by the call that unlinks it.

    If an unlink fails, those unlinked before it are still made durable and
    forgotten (they are gone from the disk), and then DeletionFailed is raised,
    saying what they freed. If the directory fsync fails, the files unlinked
    stay retired (a power cut may bring them back, and the next try or open
    deletes them again), and DeletionFailed says what they freed: they are
    gone from the disk."""
    gone: dict[int, int] = {}  # file id: its size
    failure: _Failure | None = None
    for file_id in file_ids:
        crash_point("reclaim.before_unlink")
        with store._lock:
            handle = store._handles.pop(file_id, None)  # None: gone in a failed try
            if handle is not None:
                size = handle.size
                handle.close()
            else:
                size = store._acct[file_id].size
        try:
            store._fs.unlink(os.path.join(store.path, data_file_name(file_id)))
        except FileNotFoundError:
            pass  # already gone: that is what we want
        except OSError as e:
            failure = _Failure(f"Could not unlink {data_file_name(file_id)}", e)
            break
        gone[file_id] = size
    if not gone:
        done = CompactionReport()
    else:
        try:
            store._fs.fsync_dir(store.path)
        except OSError as e:
            with store._lock:
                unlinked = _newly_unlinked(store, gone)
                store._acct.unlinked.update(gone)
            failures = [_Failure("Could not fsync the directory after the unlinks", e)]
            raise _delete_failed(store, failures + ([failure] if failure else []), unlinked) from e
        if failure is None:
            crash_point("reclaim.after_unlink")
        with store._lock:
            done = _newly_unlinked(store, gone)
            for file_id in gone:
                store._acct.forget(file_id)
            with store._append_lock:  # puts add to it under that lock alone
                store._data_bytes -= sum(gone.values())
    if failure is not None:
        raise _delete_failed(store, [failure], done) from failure.error
    return done


def _newly_unlinked(store: Store, gone: dict[int, int]) -> CompactionReport:
    """What the files in ``gone`` (id: size) freed, leaving out those a
    failed try already counted (``Accounting.unlinked``). Call with the
    store's lock held."""
    new = gone.keys() - store._acct.unlinked
    rewritten = len(new & store._acct.swapped)
    return CompactionReport(
        files_deleted=len(new) - rewritten,
        files_rewritten=rewritten,
        bytes_reclaimed=sum(gone[f] for f in new),
    )


@dataclass(frozen=True, slots=True)
class _Failure:
    """One step of a deletion that failed: what it could not do, and why."""

    what: str
    error: OSError

    def __str__(self) -> str:
        return f"{self.what} ({self.error.strerror}). {remedy(self.error)}."


def _delete_failed(
    store: Store, failures: list[_Failure], done: CompactionReport
) -> DeletionFailed:
    """The error for a deletion that met ``failures`` (a failed fsync of the
    directory, and the failed unlink before it if there was one: each needs
    its own fix)."""
    return DeletionFailed(
        f"deleting data files of {store.path} failed. {' '.join(map(str, failures))} "
        "The files not deleted are retired in the index, so the next open finishes the "
        "deletion, and no compaction deletes anything until they are gone.",
        done,
    )
