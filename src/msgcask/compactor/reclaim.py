"""Deleting data files: the one guarded step that removes bytes from disk.

A file is deleted only when the index says nothing in it is needed. The order
makes that safe across crashes and power cuts:

1. release: the ACKs elsewhere that only had to outlive this file's PUT
   records stop counting as needed (this needs the file's PUT ids, so the file
   is read first);
2. retire: the file is marked retired in the index and the index is
   committed; from here a reopen finishes the deletion;
3. unlink every retired file, then fsync the directory, so that no file whose
   records depended on them can be deleted before their deletion is durable;
4. forget them in the index.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from msgcask.compactor import needed
from msgcask.store.filenames import data_file_name
from msgcask.store.fs import crash_point

if TYPE_CHECKING:
    from msgcask.db import Store

log = logging.getLogger("msgcask")


def reclaim(store: Store, file_ids: list[int]) -> tuple[int, int]:
    """Delete whole files that hold nothing needed; return (files, bytes) freed."""
    retired: list[int] = []
    with store._commits_held():
        _retire(store, file_ids, retired)
        if not retired:
            return 0, 0
        with store._lock:
            pos = store._journal.position
        # The ACKs these deletions rely on must be durable before the deletions
        # are: else a power cut could keep the deletion and lose what it followed.
        store._sync_journal_to(pos)
        with store._lock:
            store._commit_index(force=True)
    return len(retired), delete_retired(store, retired)


def _retire(store: Store, file_ids: list[int], retired: list[int]) -> None:
    """Release and mark retired each file that still holds nothing needed."""
    for file_id in file_ids:
        acct = store._acct.files.get(file_id)
        if acct is None or acct.retired:
            continue
        put_ids: list[int] = []
        if acct.dead_puts:
            # Sealed files never change, so the read needs no lock.
            records = needed.parse(store._handles[file_id].read_all())
            put_ids = [msg_id for msg_id, _ in records.puts]
        with store._lock:
            acct = store._acct[file_id]
            if not acct.reclaimable or file_id == store._journal.head_id:
                continue  # something became needed again since the plan
            store._catalog.release_dead_puts(file_id, put_ids)
            if acct.dead_puts:
                log.error(
                    "msgcask: file %d still has %d unreleased PUT records; kept",
                    file_id,
                    acct.dead_puts,
                )
                continue
            acct.retired = True
            retired.append(file_id)


def delete_retired(store: Store, file_ids: list[int]) -> int:
    """Unlink retired files, make that durable, and forget them; return bytes freed."""
    freed = 0
    for file_id in file_ids:
        crash_point("reclaim.before_unlink")
        with store._lock:
            handle = store._handles.pop(file_id)
            freed += handle.size
            handle.close()
        store._fs.unlink(os.path.join(store.path, data_file_name(file_id)))
    store._fs.fsync_dir(store.path)
    crash_point("reclaim.after_unlink")
    with store._lock:
        for file_id in file_ids:
            store._acct.forget(file_id)
        store._data_bytes -= freed
    return freed
