"""The journal's write head: appends records, rolls over to new files, syncs.

Appends happen under the store's append lock (see msgcask/db.py). The head
is written through a memory map ``map_chunk`` bytes at a time (store/fs.py),
its written pages are unmapped before it is fsynced, and it is trimmed to its
last record when sealed. Syncing needs no lock: ``sync_to``
implements group commit, where one waiting thread fsyncs on behalf of every
thread whose records were written before the fsync started, so N threads in
``sync="always"`` pay for far fewer than N fsyncs.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from msgcask.errors import Error
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.disk_advice import remedy
from msgcask.store.filenames import data_file_name
from msgcask.store.fs import DataFile, FileSystem, crash_point

Position = tuple[int, int]  # (file id, offset just past the last byte written)

_UNMAP_LOCK_WAIT = 0.01  # seconds a sync waits for the append lock to unmap the head
_UNMAP_LOCK_POLL = 0.0005  # seconds between two looks for a seal waiting meanwhile


class Journal:
    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        head_id: int,
        head: DataFile,
        *,
        max_file_size: int,
        fsync_enabled: bool,
        new_file_id: Callable[[], int],
        id_floor: Callable[[], int],
        on_new_file: Callable[[int, DataFile], None],
        map_chunk: int = 0,
        may_allocate: Callable[[int], bool] | None = None,
        append_lock: threading.RLock | None = None,
    ):
        self.fs = fs
        self.directory = directory
        self.head_id = head_id
        self.head = head
        self._map_chunk = map_chunk
        self._may_allocate = may_allocate
        # The lock appends are made under (the store's), taken here only to
        # unmap the head's written pages before an fsync (store/fs.py).
        self._append_lock = append_lock if append_lock is not None else threading.RLock()
        if map_chunk:
            head.map_appends(map_chunk, may_allocate)
        # (file, id) swapped as one object, so a thread syncing without the
        # store lock never pairs one file's handle with another file's id.
        self._head_state = (head, head_id)
        self.max_file_size = max_file_size
        self.fsync_enabled = fsync_enabled
        self._new_file_id = new_file_id
        self._id_floor = id_floor
        self._on_new_file = on_new_file
        self.bytes_written = 0
        # Set by the first failed fsync, for good: the OS may have dropped the
        # dirty pages, so no later fsync can prove that what was written is on disk.
        self.sync_failure: OSError | None = None
        self._durable: Position = (head_id, head.size)
        self._syncing = False
        self._seal_waiting = False  # a seal waits for the fsync in flight
        self._sync_cond = threading.Condition()

    @property
    def position(self) -> Position:
        return (self.head_id, self.head.size)

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes go into the head without a roll-over."""
        return self.head.size + size <= self.max_file_size or self.head.size <= fmt.FILE_HEADER_SIZE

    def append(self, data: bytes, *, single_record: bool = False) -> Position:
        """Append ``data`` (whole records) and return (file id, offset) where it
        starts. Rolls over to a new file first if it would not fit. On an I/O
        error the file is cut back to where it was and Error is raised.
        ``single_record``: see ``DataFile.append``."""
        if not self.fits(len(data)):
            self.roll_over()
        before = self.head.size
        try:
            offset = self.head.append(data, single_record=single_record)
        except OSError as e:
            self._undo(before)
            raise Error(
                f"cannot write to {self.head.path}: {e.strerror}. {remedy(e)}, then retry; "
                "nothing of this call was stored."
            ) from e
        self.bytes_written += len(data)
        return (self.head_id, offset)

    def _undo(self, size: int) -> None:
        try:
            self.head.truncate(size)
        except OSError:
            # The partial record stays; recovery treats it as a torn tail.
            self.head.size = size

    def give_back_allocated(self) -> None:
        """Free the head's space allocated ahead of writes (up to a chunk of
        zeros on disk): for a store gone quiet. The next append allocates again.
        Raises OSError if the file cannot be cut."""
        with self._append_lock:
            self.head.trim()

    def roll_over(self) -> None:
        """Seal the head (fsync it) and start a new journal file. Raises Error
        (the head stays as it was) if the OS fails."""
        try:
            self._roll_over()
        except OSError as e:
            if e is self.sync_failure:
                raise Error(
                    f"cannot seal {self.head.path}: its fsync failed ({e.strerror}), so what "
                    "was written to it may not be on disk. The store refuses writes from now "
                    "on: close it, check the disk, and reopen."
                ) from e
            raise Error(
                f"cannot start a new data file in {self.directory}: {e.strerror}. "
                f"{remedy(e)}, then retry; nothing of this call was stored."
            ) from e

    def _roll_over(self) -> None:
        self.head.trim()  # a sealed file ends at its last record
        if self.fsync_enabled:
            crash_point("journal.before_seal_fsync")
            self._fsync_alone(self.head)
            self._mark_durable(self.position)
        file_id = self._new_file_id()
        path = os.path.join(self.directory, data_file_name(file_id))
        with self.fs.unpublished(path) as new:
            new.append(codec.encode_file_header(fmt.KIND_JOURNAL, file_id, self._id_floor()))
            # Durable even with sync="never" (one fsync per file, not per record):
            # a power cut must never leave a data file name without its header.
            self.fs.publish(new, path)
        if self._map_chunk:
            new.map_appends(self._map_chunk, self._may_allocate)
        self.head_id, self.head = file_id, new
        self._head_state = (new, file_id)
        self._on_new_file(file_id, new)

    # -- durability ----------------------------------------------------------------

    def _mark_durable(self, pos: Position) -> None:
        with self._sync_cond:
            if pos > self._durable:
                self._durable = pos
            self._sync_cond.notify_all()

    def sync(self) -> None:
        """fsync everything written so far (callable without the store lock)."""
        self.sync_to(self.position)

    def _fsync(self, handle: DataFile) -> None:
        """fsync ``handle``; a failure is kept (``sync_failure``) and raised."""
        if self.sync_failure is not None:
            raise self.sync_failure
        try:
            handle.fsync()
        except OSError as e:
            self.sync_failure = e
            raise

    def _fsync_alone(self, handle: DataFile) -> None:
        """``_fsync`` while no other fsync of the journal runs. Linux reports a
        write-back error once per open file: of two fsyncs at once, one could
        see it and the other succeed, counting lost bytes as durable."""
        with self._sync_cond:
            while self._syncing:
                # The syncing thread must not wait for the append lock, which
                # this caller holds: it skips the unmap instead.
                self._seal_waiting = True
                self._sync_cond.wait()
            self._seal_waiting = False
            self._syncing = True
        try:
            self._fsync(handle)
        finally:
            with self._sync_cond:
                self._syncing = False
                self._sync_cond.notify_all()

    def _take_append_lock_briefly(self) -> bool:
        """Take the append lock within ``_UNMAP_LOCK_WAIT``, giving up at once
        if a seal (which holds it) starts waiting for this fsync."""
        deadline = time.monotonic() + _UNMAP_LOCK_WAIT
        while not self._seal_waiting:
            if self._append_lock.acquire(timeout=_UNMAP_LOCK_POLL):
                return True
            if time.monotonic() >= deadline:
                break
        return False

    def sync_to(self, pos: Position) -> None:
        """Return once every byte up to ``pos`` is on disk (group commit).
        Raises OSError if an fsync failed, this one or any before it: the
        threads waiting for a failed fsync are woken to raise it too."""
        with self._sync_cond:
            while self._durable < pos:
                if self.sync_failure is not None:
                    raise self.sync_failure
                if self._syncing:
                    self._sync_cond.wait()
                    continue
                self._syncing = True
                # Read the head and its size together: sealed files are synced
                # by roll_over, so syncing the current head covers the rest.
                handle, file_id = self._head_state
                target = (file_id, handle.size)
                self._sync_cond.release()
                synced = False
                try:
                    # Only briefly: a thread holding the lock may be waiting for
                    # this very fsync (close() or a seal does); the unmap only
                    # saves time.
                    if self._take_append_lock_briefly():
                        try:
                            handle.unmap_written()
                        finally:
                            self._append_lock.release()
                    self._fsync(handle)
                    synced = True
                finally:
                    self._sync_cond.acquire()
                    self._syncing = False
                    if synced and target > self._durable:
                        self._durable = target
                    self._sync_cond.notify_all()
