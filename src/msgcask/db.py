"""The Store: the facade that ties the journal, the index and the compactor together.

Threading model: two locks, always taken in this order.

* The store's lock (``_lock``, re-entrant) guards the index's write
  transaction, the per-file accounting and the delivery state. Every operation
  but a plain put takes it for a few microseconds; a compaction pass takes it
  once per batch. ``get`` waits on a per-queue condition of it, so blocked
  consumers cost nothing while they wait.
* The append lock (``_append_lock``, re-entrant) guards the journal, the next
  message id, the data bytes count and ``_pending``: the puts in the journal
  whose index entries are not written yet. A put into an existing queue that
  fits in the write head takes only this lock (``puts._put_unlocked``), so it
  never waits for a compaction batch or for a consumer; the store's lock
  writes the pending entries each time it is taken (msgcask/catchup_lock.py),
  and a roll-over writes them first, so they all point into the write head,
  which compaction never touches.

Write path, for every operation: encode the record(s), append them to the
journal (the OS has them once ``append`` returns, so they survive a process
crash), apply them to the index's open transaction (a plain put: at the next
taking of the store's lock), and, with ``sync="always"``, wait for a group
fsync before returning. The index is committed every ``sync_interval`` with
the journal position it reflects.
"""

from __future__ import annotations

import builtins
import contextlib
import difflib
import errno
import functools
import logging
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, cast

import lmdb

from msgcask import validate
from msgcask.catchup_lock import CatchUpLock
from msgcask.compactor.failure_log import RepeatedFailureLog
from msgcask.compactor.pacing import Pacer
from msgcask.compactor.policy import MARK_COST
from msgcask.cpu import run_this_thread_on
from msgcask.errors import (
    ClosedError,
    CorruptionError,
    Error,
    IndexFailedError,
    MessageTooLargeError,
    NotAStoreError,
    StoreFullError,
)
from msgcask.index import keys
from msgcask.index.accounting import FileAccount
from msgcask.index.catalog import Catalog
from msgcask.index.env import SHRINK_DIR, IndexEnv, ShrinkFailed, boot_id, remove_index
from msgcask.index.keys import STATE_ACKED
from msgcask.made_dirs import missing_dirs, remove_made_dirs
from msgcask.message import delivered_message_type
from msgcask.options import Options, check_threshold
from msgcask.puts import CopyUnderWay
from msgcask.stats import CompactionReport, FileStats, KeptReport, StoreStats, hidden_puts
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.disk_advice import free_space_note, remedy
from msgcask.store.filenames import (
    INDEX_DIR,
    LOCK_FILE,
    data_file_ids,
    data_file_name,
    parse_data_file_name,
)
from msgcask.store.fs import TEMP_SUFFIX, DataFile, FileSystem, NoRoomForChunk, crash_point
from msgcask.store.lockfile import StoreLock
from msgcask.store.recovery import (
    CorruptionReport,
    OpenedFiles,
    Recovery,
    RecoveryReport,
    open_data_files,
)
from msgcask.store.writer import Journal, Position
from msgcask.uncopyable import Uncopyable

log = logging.getLogger("msgcask")

# Foreground work between forced index commits: bounds the open transaction.
_MAX_CHANGES_PER_COMMIT = 50_000
_PURGE_CHUNK = 10_000
# Free bytes kept for index commits on a nearly full disk (an index commit that
# finds no room fails the whole index): the write head allocates no new chunk
# for puts below _INDEX_RESERVE, and a DELIVER or ACK record written without a
# chunk must leave _MARKS_LEAVE_FREE.
_INDEX_RESERVE = 4 * 2**20
_MARKS_LEAVE_FREE = 64 * 1024
_MAP_CHUNK = 2**20  # bytes of the write head mapped (and preallocated) at a time
_BACKGROUND_PASSES_WHILE_BEHIND = 16  # back-to-back passes of one background run, at most
_WATCH_EVERY = 0.02  # seconds between two checks of whether disk use is near the space bound
_IDLE_WATCH_EVERY = 0.2  # the same while nothing is written: idle, the check is skipped
_SHRINK_MIN_FREE_PAGES = 16  # 64 KiB of free index pages: below that a shrink is not worth it
_SHRINK_RATIO = 4  # index file / pages in use that triggers a shrink while traffic flows
_SHRINK_RATIO_IDLE = 2  # the same once the store is idle
_SHRINK_RETRY_AFTER = 60.0  # seconds before a shrink that failed (a full disk) is tried again
# Far more ids than a store hands out in one sync_interval.
ID_BLOCK_AFTER_CRASH = 2**20


_Method = TypeVar("_Method", bound=Callable[..., Any])

# Stores open in this process. A child forked from it gets copies of their
# locks, index and write head, which belong to the parent: the child's copies
# are disowned at once (see Store._disown).
_open_stores: weakref.WeakSet[Store] = weakref.WeakSet()


def _disown_after_fork() -> None:
    for store in list(_open_stores):
        store._disown()


os.register_at_fork(after_in_child=_disown_after_fork)


def _describe(error: BaseException | None) -> str:
    """An error's message, or its type for one without (KeyboardInterrupt)."""
    return str(error) or type(error).__name__


def _index_errors(method: _Method) -> _Method:
    """Re-raise LMDB failures of a Store method as IndexFailedError (the index
    is then rebuilt on the next open)."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except lmdb.Error as e:
            raise self._index_failed(e) from e

    return cast(_Method, wrapper)


@dataclass
class QueueRuntime:
    """Per-queue state that lives only while the store is open."""

    name: str
    name_bytes: bytes
    qid: int
    cond: threading.Condition
    # Order key before which every message is delivered (or gone): get() starts
    # there instead of skipping over the in-flight window each time.
    cursor: bytes | None = None
    # The same per selector object: messages a selector rejected stay rejected.
    selector_cursors: weakref.WeakKeyDictionary[Any, bytes] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    waiting: int = 0  # consumers blocked in get(): notify only when there are some

    def rewind(self, key: bytes) -> None:
        """A message at ``key`` became available: no cursor may be past it."""
        if self.cursor is not None and key < self.cursor:
            self.cursor = key
        if self.selector_cursors:
            for sel, cur in list(self.selector_cursors.items()):
                if key < cur:
                    self.selector_cursors[sel] = key

    def wake(self) -> None:
        if self.waiting:
            self.cond.notify_all()


def _check_default_dead_letter_name(name: str) -> None:
    """The default dead-letter queue, DLQ.<name>, must itself be a valid name,
    or dead letters would land in a queue no call can open."""
    try:
        validate.queue_name(f"DLQ.{name}")
    except ValueError as e:
        raise ValueError(
            f"the default dead-letter queue of {name!r}, DLQ.<name>, is not a valid "
            f"queue name ({e}); pass dead_letter_queue= with a shorter name"
        ) from None


# What an index directory holds: LMDB's file, and a shrink's leftover copy.
_INDEX_ENTRIES = frozenset({"data.mdb", SHRINK_DIR})


# What a LOCK an open made can hold: a pid and its newline, nothing (killed
# before the pid was written, or closed), or zeros (a power cut lost the write).
_LOCK_BYTES = frozenset(b"0123456789\n\0")


def _lock_made_by_open(lock: str) -> bool:
    """Whether ``lock`` is a LOCK file an open made: a regular file holding only
    what StoreLock writes. Another program's LOCK holds other text."""
    if not stat.S_ISREG(os.stat(lock).st_mode):  # never opens a pipe: it would wait
        return False
    with builtins.open(lock, "rb") as f:
        return set(f.read(64)) <= _LOCK_BYTES


def _made_by_open(path: str, name: str) -> bool:
    """Whether entry ``name`` of ``path`` is one an open makes before the first
    data file: the LOCK, the index directory (LMDB's files only), a data file
    not yet published."""
    if parse_data_file_name(name.removesuffix(TEMP_SUFFIX)) is not None:
        return True
    entry = os.path.join(path, name)
    if name == LOCK_FILE:
        return _lock_made_by_open(entry)
    return name == INDEX_DIR and os.path.isdir(entry) and set(os.listdir(entry)) <= _INDEX_ENTRIES


def _check_store_path(path: str) -> None:
    if os.path.islink(path) and not os.path.exists(path):
        # Not created through the link: a link dangles when the disk it leads to
        # is not mounted, and a store made there would land on the wrong one.
        raise Error(
            f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: "
            "create that directory (or mount its disk) first, or give another path"
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotAStoreError(f"{path} is a file, not a store directory")
    if os.path.isdir(path):
        entries = os.listdir(path)
        # A data file makes a store (open checks its header). Without one, only
        # what an open that stopped early leaves does: a LOCK or an index/ beside
        # anything else is another program's, and open would truncate that LOCK
        # and delete that index/ as a damaged index.
        if data_file_ids(entries):
            return
        foreign = sorted(e for e in entries if not _made_by_open(path, e))
        if foreign:
            shown = ", ".join(foreign[:3]) + (
                f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            )
            raise NotAStoreError(
                f"{path} is a non-empty directory that is not a msgcask store (it holds "
                f"{shown}, and no data file); use an empty or new directory"
            )


class Store(Uncopyable):
    """An open msgcask store. See ``msgcask.open`` for the parameters."""

    _why_uncopyable = (
        "it holds the store's open files, index and lock. Share this one (it is "
        "thread-safe), or open the store with msgcask.open(path) in the other process"
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_file_size: int = 32 * 2**20,
        sync: str = "periodic",
        sync_interval: float = 0.1,
        compaction_threshold: float = 0.5,
        compaction_interval: float | None = 10.0,
        max_store_size: int | None = None,
        compaction_budget: int = 64 * 2**20,
        keep_data_files: bool = False,
        background_cpus: Iterable[int] | None = None,
        _fs: FileSystem | None = None,
        _clock: Callable[[], float] | None = None,
    ):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        self._options = Options(
            max_file_size=max_file_size,
            sync=sync,
            sync_interval=sync_interval,
            compaction_threshold=compaction_threshold,
            compaction_interval=compaction_interval,
            max_store_size=max_store_size,
            compaction_budget=compaction_budget,
            keep_data_files=keep_data_files,
            background_cpus=background_cpus,  # type: ignore[arg-type]  # normalized by Options
        )
        self._sync_always = self._options.sync == "always"
        fspath = os.fspath(path)
        if not isinstance(fspath, str):
            raise TypeError(
                f"path must be a str path, got {type(fspath).__name__}; decode it first"
            )
        if not fspath:
            raise ValueError("path must not be empty: pass the store's directory")
        if "\0" in fspath:
            raise ValueError(
                f"path {fspath!r} holds a NUL character, which no file name can: "
                "pass the store's directory"
            )
        self._path = fspath
        self._fs = _fs or FileSystem()
        # Where data files' creation times (and so their ages, which compaction
        # weighs) come from; a replay passes a clock counted in records.
        self._clock = _clock or time.time
        self._closed = True
        self._forked_from: int | None = None  # the opener's pid, in a forked child
        self._selecting: int | None = None  # the thread running a get's selector
        # store.queue()'s max_deliveries and dead_letter_queue, by queue name: kept
        # apart from the queue's runtime so that they outlive a delete_queue.
        self._queue_settings: dict[str, tuple[int | None, str | None]] = {}
        self._committed_position: Position | None = None  # journal position of the last commit
        made: list[str] = []  # directories this open creates
        try:
            _check_store_path(self._path)
            made = missing_dirs(self._path)
            os.makedirs(self._path, exist_ok=True)
            self._lock_file = StoreLock(os.path.join(self._path, LOCK_FILE))
        except OSError as e:
            remove_made_dirs(made)
            advice = (
                "Check the path: every part but the last must be a directory"
                if e.errno in (errno.ENOENT, errno.ENOTDIR)
                else remedy(e)
            )
            raise Error(
                f"cannot use {self._path} as a store directory: {e.strerror}. {advice}."
            ) from e
        try:
            self._open()
        except BaseException as e:
            # A failed open leaves the directory as it found it: what _open made
            # in a new store is gone by now, and so go the LOCK and the directories.
            self._lock_file.release(remove_if_created=True)
            remove_made_dirs(made)
            if isinstance(e, OSError):
                raise Error(f"cannot open the store at {self._path}: {e}. {remedy(e)}.") from e
            if isinstance(e, lmdb.Error):
                raise IndexFailedError(
                    f"cannot write the index of {self._path} while opening it "
                    f"({e}){free_space_note(self._path)}; nothing was lost, the data files "
                    "are intact. Free disk space (or check the disk) and open it again."
                ) from e
            raise
        self._closed = False
        _open_stores.add(self)
        try:
            self._start_background()
        except BaseException:
            self.close()  # stops what did start, and releases the lock
            raise

    # -- opening and closing -------------------------------------------------------

    def _open(self) -> None:
        files: OpenedFiles = open_data_files(self._fs, self._path)
        try:
            recovery = Recovery(self._fs, self._path, files, self._clock)
            env, catalog = recovery.run()
        except BaseException:
            for handle in files.handles.values():
                handle.close()
            raise
        found = set(files.handles)
        try:
            self._open_recovered(files, recovery, env, catalog)
        except BaseException as e:
            env.close()
            if recovery.report.mode == "new" or (
                isinstance(e, lmdb.Error) and recovery.report.mode == "rebuild"
            ):
                # A new store's index holds nothing yet, and a failed open leaves the
                # directory as it found it; a half-written rebuild is worth nothing
                # (the next open starts it again) and may be what fills the disk.
                remove_index(os.path.join(self._path, INDEX_DIR))
            for file_id, handle in files.handles.items():  # the journal adds its files here
                handle.close()
                if file_id not in found:
                    # A journal file this open started holds only its header: a
                    # failed open leaves the directory as it found it.
                    with contextlib.suppress(OSError):
                        self._fs.unlink(handle.path)
            raise

    def _open_recovered(
        self, files: OpenedFiles, recovery: Recovery, env: IndexEnv, catalog: Catalog
    ) -> None:
        self.recovery: RecoveryReport = recovery.report
        self._env: IndexEnv = env
        self._catalog: Catalog = catalog
        self._acct = catalog.acct
        self._handles: dict[int, DataFile] = files.handles
        self._corruptions: list[CorruptionReport] = list(recovery.report.corruptions)
        self._quarantined: set[int] = set()  # ids dropped for damage since open
        self._lock = CatchUpLock(self._apply_pending)
        self._append_lock = threading.RLock()
        # (id, queue, priority, file, offset, size) of puts not yet in the index.
        self._pending: list[tuple[int, QueueRuntime, int, int, int, int]] = []
        self._commit_hold = 0
        # The first LMDB failure since open. LMDB aborted what it was doing, so the
        # index now lacks changes the store made: from then on the store refuses
        # every call but close, and close discards the index (_index_failed).
        self._index_failure: BaseException | None = None
        self._close_lock = threading.RLock()
        self._shrink_retry_at = 0.0  # monotonic time before which no shrink is tried
        self._shrink_failures = RepeatedFailureLog("shrinking the index file")
        self._queues: dict[str, QueueRuntime] = {}
        # Delivered and unacked: id -> (queue, delivery count of that delivery).
        self._inflight: dict[int, tuple[QueueRuntime, int]] = {}
        # The type of this open store's deliveries (see delivered_message_type).
        self._message_type = delivered_message_type()
        self._next_id = max(recovery.max_msg_id + 1, env.get_u64(keys.META_NEXT_ID, 1))
        if recovery.report.unclean:
            # Ids handed out just before a crash may be lost with their records (a
            # power cut); skip a block so none of them is ever handed out again.
            self._next_id += ID_BLOCK_AFTER_CRASH
        highest_file = max(files.handles, default=0)
        self._next_file_id = max(
            highest_file + 1, env.get_u64(keys.META_NEXT_FILE, 1), recovery.next_file_id
        )
        self._bytes_put = 0
        # Sum of data-file sizes, kept up to date so space checks cost nothing.
        self._data_bytes = sum(a.size for a in self._acct.files.values() if not a.retired)
        # What puts may fill of max_store_size (None: no cap): all of it but one
        # data file. A pass writes its copy (at most a data file) before it deletes
        # its victims, so that last file's worth is what lets a pass run, and free
        # dead bytes, without ever taking the data files past the cap.
        cap = self._options.max_store_size
        self._put_limit = None if cap is None else cap - self._options.max_file_size
        # Whether a pass has started its copy and not yet deleted its victims:
        # after the swap its dead bytes are still in _data_bytes, about to go.
        self._victims_going = False
        from msgcask.compactor.runner import Compactor

        self._compactor = Compactor(self)
        # Background passes step aside while calls come in, unless behind.
        self._pacer = Pacer(self._compactor.behind)
        journal_ids = [f for f, h in files.headers.items() if h.kind == fmt.KIND_JOURNAL]
        if journal_ids:
            head_id = max(journal_ids)
        else:
            head_id = self._allocate_file_id()
            self._create_journal_file(head_id)
        self._journal = Journal(
            self._fs,
            self._path,
            head_id,
            self._handles[head_id],
            max_file_size=self._options.max_file_size,
            fsync_enabled=self._options.sync != "never",
            new_file_id=self._allocate_file_id,
            id_floor=lambda: self._next_id,
            on_new_file=self._register_journal_file,
            append_lock=self._append_lock,
            # Preallocated space would count against max_store_size: a limited
            # store's puts take the checked path and plain writes.
            map_chunk=(
                0
                if self._options.max_store_size is not None
                else min(_MAP_CHUNK, self._options.max_file_size)
            ),
            may_allocate=self._leaves_index_reserve,
        )
        if recovery.report.unclean:
            # Make the skipped id block durable where a rebuild looks: the header
            # of a new journal file records it as its id floor.
            self._journal.roll_over()
        self._env.put_u64(keys.META_CLEAN, 0)
        self._env.put_meta(keys.META_BOOT, boot_id())
        self._commit_index()
        # Durable before anything else happens: after a power cut the index on
        # disk must say "not closed cleanly" (and from which boot), never a stale
        # clean snapshot that later unsynced commits may have torn.
        self._env.sync()

    def _create_journal_file(self, file_id: int) -> None:
        path = os.path.join(self._path, data_file_name(file_id))
        with self._fs.unpublished(path) as handle:
            handle.append(codec.encode_file_header(fmt.KIND_JOURNAL, file_id, self._next_id))
            self._fs.publish(handle, path)
        self._register_journal_file(file_id, handle)

    def _register_journal_file(self, file_id: int, handle: DataFile) -> None:
        self._handles[file_id] = handle
        self._acct.add(
            FileAccount(
                file_id,
                fmt.KIND_JOURNAL,
                size=handle.size,
                created=self._clock(),
                id_floor=self._next_id,  # what its header says
            )
        )
        self._data_bytes += handle.size

    def _allocate_file_id(self) -> int:
        file_id = self._next_file_id
        self._next_file_id += 1
        return file_id

    def _start_background(self) -> None:
        from msgcask.compactor.scheduler import CompactionScheduler

        # Everything ``close`` stops exists before anything starts.
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="msgcask-flush", daemon=True)
        self._scheduler = CompactionScheduler(self)
        self._flusher.start()
        self._scheduler.start()

    def close(self) -> None:
        """Stop background work, sync, commit the index and release the lock.

        A compaction pass running in another thread (``compact()``, or a put
        making room) is let finish first; calls after close raise ClosedError.
        Messages delivered but not acked come back, redelivered, on the next
        open. Calling close twice is harmless.
        """
        if self._selecting == threading.get_ident():
            self._check_open()  # raises: a selector's close() would wait for its own get
        if self._closed:  # (a forked child's copy of the close lock may be held)
            return
        # Two threads closing at once: the second waits for the first and returns.
        with self._close_lock:
            if self._closed:
                return
            self._scheduler.shutdown()
            self._stop.set()
            if self._flusher.is_alive():
                self._flusher.join()
            # A pass started by compact() or by space pressure in another thread
            # ends first: its files and index entries go away below. The lock is
            # taken without catching up: the catch-up runs inside the try, so a
            # failing one still ends in the release below.
            with self._compactor.pass_lock(), self._lock.without_catch_up(), self._append_lock:
                try:
                    self._finish_for_close()
                except lmdb.Error as e:
                    raise self._index_failed(e) from e
                finally:
                    left_open = self._release_for_close()
                if left_open is not None:
                    raise Error(
                        f"closing a data file of {self._path} failed ({left_open.strerror}); "
                        "the store is closed and what close synced is on disk, but check the "
                        "disk (or network file system) before reopening it"
                    ) from left_open

    def _finish_for_close(self) -> None:
        """Make everything durable and mark the index clean, unless a failure
        stops that (then the next open recovers from the disk)."""
        if self._journal.sync_failure is not None:
            # Already raised to the call whose fsync failed, and nothing can be
            # made durable now: the index stays as last committed, not marked
            # clean, so the next open recovers from the disk.
            return
        try:
            if self._index_failure is None:
                self._apply_pending()
        finally:
            # Even when that failed: the puts it was about are in the journal.
            self._sync_journal_to(self._journal.position)
        if self._index_failure is not None:
            return  # discarded on release; the next open rebuilds it
        self._env.put_u64(keys.META_CLEAN, 1)
        self._commit_index(force=True)
        self._env.sync()

    def _release_for_close(self) -> OSError | None:
        """Close the index and every data file and give up the lock, whatever
        fails on the way; return the first error closing a data file."""
        left_open: OSError | None = None
        try:
            self._closed = True
            for queue in self._queues.values():
                queue.cond.notify_all()
            self._env.close()
            if self._index_failure is not None:
                remove_index(os.path.join(self._path, INDEX_DIR))
            with contextlib.suppress(OSError):  # else the next open trims it
                self._journal.head.trim()
            for handle in self._handles.values():
                try:
                    handle.close()
                except OSError as e:  # e.g. EIO on a network file system
                    left_open = left_open or e
        finally:
            self._lock_file.release()
        return left_open

    def __enter__(self) -> Store:
        if self._closed:  # a block that would find every call refused
            self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Read-only: data files are created and deleted under the path, and sized by
    # the options, of the open; another path would make compaction delete files
    # in that directory (another store's), other options would not match the files.
    @property
    def path(self) -> str:
        """The store's directory, as given to ``msgcask.open``."""
        return self._path

    @property
    def options(self) -> Options:
        """The settings the store was opened with (see docs/tuning.md)."""
        return self._options

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<msgcask.Store {self._path!r} {state}>"

    def _index_failed(self, error: BaseException) -> IndexFailedError:
        """The msgcask error for an LMDB failure at run time (raise it ``from`` it).

        LMDB has aborted the transaction it failed in, and with it index changes
        whose records are in the journal. Committing what came after would make
        a later replay start past them, and a compaction pass planned from the
        index would copy too little. So from now on the store refuses every
        call but ``close``, which deletes the index: the next open rebuilds it
        from the data files."""
        if self._index_failure is None:
            self._index_failure = error
            log.error("msgcask: index failure in %s: %s", self._path, _describe(error))
            self._wake_every_waiter()
        return self._index_refusal()

    def _wake_every_waiter(self) -> None:
        """After a failure that stops every write: a get waiting on any queue
        would wait for ever, since no put can come now. Each raises on waking.
        Takes the store's lock without catching up (the index must not be
        written): call it holding no lock, or holding the store's lock."""
        with self._lock.without_catch_up():
            for queue in self._queues.values():
                queue.cond.notify_all()

    def _index_refusal(self) -> IndexFailedError:
        reason = _describe(self._index_failure)
        return IndexFailedError(
            f"the index of {self._path} failed ({reason}){free_space_note(self._path)}; the store "
            "refuses further calls and the data files are intact. Close the store and open it "
            "again: the index is rebuilt from them."
        )

    def _check_open(self) -> None:
        if self._selecting is not None and self._selecting == threading.get_ident():
            raise Error(
                "a selector must not call the store: it runs in the middle of a get, with the "
                "store locked. Decide from the headers it is given alone, and act on the "
                "message after get() returns"
            )
        if self._closed:
            if self._forked_from is not None:
                raise ClosedError(
                    f"the store at {self._path} was opened by process {self._forked_from}, "
                    f"which this process ({os.getpid()}) was forked from: its lock, index and "
                    "files belong to that process. Open the store here instead, after that "
                    "process closes it (or open it only after forking)"
                )
            raise ClosedError(f"the store at {self._path} is closed; open it again to use it")
        if self._index_failure is not None:
            raise self._index_refusal()

    def _disown(self) -> None:
        """In a child forked from the process that opened the store: every call
        raises ClosedError from now on, and ``close()`` does nothing, since the
        parent's files, index and lock (shared with it through the fork) are
        the parent's to write and release."""
        if self._closed:
            return
        self._forked_from = os.getppid()
        self._closed = True
        # Threads are not forked: a parent thread holding one of these locks at
        # the fork would hold the child's copy for ever. Fresh ones let every
        # call reach the check that raises.
        self._pending = []
        self._lock = CatchUpLock(self._apply_pending)
        self._append_lock = threading.RLock()
        self._compactor.forget_pass_after_fork()

    # -- background flushing -------------------------------------------------------

    def _flush_loop(self) -> None:
        run_this_thread_on(self._options.background_cpus, "the background flush")
        next_sync = time.monotonic() + self._options.sync_interval
        compacting = self._options.compaction_interval is not None
        watched = self._journal.bytes_written
        watch = _IDLE_WATCH_EVERY if compacting else float("inf")  # nothing to watch for
        while not self._stop.wait(min(max(next_sync - time.monotonic(), 0.0), watch)):
            failed = self._background_failure()
            if failed:
                # Raised to the call that met it; what is left to do here (syncs,
                # passes, which sync and commit before they delete) can only fail too.
                log.error(
                    "msgcask: background work in %s stops: %s; close the store and reopen it",
                    self._path,
                    failed,
                )
                self._scheduler.halt()
                return
            try:
                if time.monotonic() >= next_sync:
                    next_sync = time.monotonic() + self._options.sync_interval
                    self.sync()
                    if self._acct.emptied and not self._options.keep_data_files:
                        self._compactor.reclaim_emptied()
                    if compacting and not self._scheduler.paused:
                        self._compactor.shrink_index_between_passes()
                    if compacting and self._compactor.due():
                        self._scheduler.run_soon()
                # Checked more often than the rest while writes come in: the last
                # files of a fast drain turn sparse faster than one sync_interval.
                # Writing nothing cannot bring disk use nearer the bound, so an
                # idle store only looks, less often, for writes starting again.
                if compacting:
                    written = self._journal.bytes_written
                    if written == watched:
                        watch = _IDLE_WATCH_EVERY
                    else:
                        watched, watch = written, _WATCH_EVERY
                        if self._compactor.urgent():
                            self._scheduler.run_soon()
            except ClosedError:
                return
            except lmdb.Error as e:
                self._index_failed(e)  # logs it; the check above stops the loop
            except IndexFailedError:
                pass  # met first by another call; the check above stops the loop
            except Error as e:  # says what failed (a failed fsync stops the loop above)
                log.error("msgcask: background sync failed: %s", e)
            except Exception:  # keep flushing; the next foreground write will raise
                log.exception("msgcask: background sync failed")

    def _background_failure(self) -> str:
        """Why background work must stop for good, or ``""``."""
        if self._journal.sync_failure is not None:
            return "an fsync of the journal failed"
        if self._index_failure is not None:
            return "its index failed"
        return ""

    @_index_errors
    def sync(self) -> None:
        """fsync the journal (unless sync="never") and commit the index."""
        self._check_open()
        self._sync_journal_to(self._journal.position)
        with self._lock:
            self._check_open()
            # Nothing journaled since the last commit: nothing to commit either
            # (an index change the journal does not record commits itself), so
            # an idle store does not rewrite its index every sync_interval.
            if self._journal.position != self._committed_position or self._catalog.queues_changed:
                self._commit_index()

    @contextlib.contextmanager
    def _commits_held(self) -> Iterator[None]:
        """Defer routine index commits (a compaction swap is in progress)."""
        with self._lock:
            self._commit_hold += 1
        try:
            yield
        finally:
            with self._lock:
                self._commit_hold -= 1

    def _commit_index(self, *, force: bool = False) -> None:
        """Commit the index with the journal position it now reflects (unless
        commits are held and this is not forced: the next commit includes it)."""
        if self._commit_hold and not force:
            return
        # After a failed index write the transaction lacks what LMDB aborted;
        # after a failed fsync the checkpoint would name journal bytes that may
        # be lost. Either way: never commit again.
        self._check_writable()
        env = self._env
        # Puts go on meanwhile; the checkpoint is where the index stops.
        with self._append_lock:
            self._apply_pending()
            self._acct.flush(
                lambda k, v: env.txn.put(k, v, db=env.files),
                lambda k: env.txn.delete(k, db=env.files),
            )
            self._catalog.flush_counts()
            env.put_u64(keys.META_NEXT_ID, self._next_id)
            env.put_u64(keys.META_NEXT_FILE, self._next_file_id)
            position = self._journal.position
            env.put_meta(keys.META_CHECKPOINT, keys.CHECKPOINT.pack(*position))
        try:
            env.commit()
        except lmdb.Error as e:
            # Recorded before the caller lets go of the store's lock: the next
            # holder (a sync in another thread) must not commit the fresh
            # transaction, which lacks what was just aborted.
            self._index_failed(e)
            raise
        self._committed_position = position
        self._catalog.queues_changed = False

    def _shrink_index_if_sparse(self, idle: bool = False) -> None:
        """Give back the index's free pages once they dwarf the pages in use
        (LMDB keeps its file at its high-water mark: a backlog that is gone
        would otherwise keep its size on disk). An ``idle`` store (no journal
        writes since the last pass) shrinks sooner: no foreground call waits."""
        with self._lock:
            if self._closed or self._commit_hold or time.monotonic() < self._shrink_retry_at:
                return
            used, total = self._env.pages()
            ratio = _SHRINK_RATIO_IDLE if idle else _SHRINK_RATIO
            if total - used < _SHRINK_MIN_FREE_PAGES or total < ratio * used:
                return
            self._commit_index(force=True)
            try:
                self._env.shrink()
            except ShrinkFailed as e:
                # Only space is lost: the committed index is intact and in use.
                self._shrink_retry_at = time.monotonic() + _SHRINK_RETRY_AFTER
                self._shrink_failures.failed(e)
            else:
                self._shrink_failures.succeeded()

    # -- writing -------------------------------------------------------------------

    def _apply_pending(self) -> None:
        """Write the index entries of the puts that took only the append lock
        (the caller holds the store's lock)."""
        if not self._pending:
            return
        with self._append_lock:
            pending, self._pending = self._pending, []
        # The entries are written without the append lock: each index call lets
        # go of the interpreter, and a put that got it would otherwise wait for
        # the lock. Nobody can miss them meanwhile: the index is read only under
        # the store's lock, which the caller holds, and only its holder rolls
        # the head over, so they still point into the head.
        by_file: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
        for msg_id, rt, priority, file_id, offset, size in pending:
            by_file.setdefault(file_id, []).append((msg_id, rt.qid, priority, offset, size, 0))
        try:
            for file_id, items in by_file.items():
                self._catalog.add_many(file_id, items, fresh=True)
        except lmdb.Error as e:
            raise self._index_failed(e) from e
        except BaseException as e:
            # Interrupted (Ctrl-C) with entries of returned puts out of the list
            # and not all in the index: a commit now would put the checkpoint
            # past their records. The index is failed instead, and rebuilt.
            self._index_failed(e)
            raise
        for msg_id, rt, priority, *_ in pending:
            if rt.cursor is not None or rt.selector_cursors:
                rt.rewind(keys.order_key(rt.qid, priority, msg_id))

    def _roll_over(self) -> None:
        """Seal the write head (the caller holds the store's lock)."""
        with self._append_lock:
            self._apply_pending()  # pending entries never point outside the head
            try:
                self._journal.roll_over()
            except Error:
                self._wake_if_writes_stopped()
                raise

    def _append(self, data: bytes, *, single_record: bool = False) -> Position:
        """Append to the journal (the caller holds the store's lock)."""
        with self._append_lock:
            if self._pending and not self._journal.fits(len(data)):
                self._apply_pending()  # a roll-over follows
            try:
                return self._append_locked(data, may_commit=True, single_record=single_record)
            except Error:
                self._wake_if_writes_stopped()
                raise

    def _append_mark(self, data: bytes) -> Position:
        """Append one DELIVER or ACK record (the caller holds the store's lock).
        When the write head may not allocate its next mapped chunk (a nearly
        full disk, ``_leaves_index_reserve``), puts fail there, but this record is
        written with pwrite instead if ``_MARKS_LEAVE_FREE`` bytes are free
        before it is: consumers can drain a nearly full disk, and the files they
        empty are deleted."""
        try:
            return self._append(data, single_record=True)
        except Error as e:
            if not isinstance(e.__cause__, NoRoomForChunk) or not self._room_for_marks():
                raise
        return self._append(data)  # the failed append left the head as it was

    def _room_for_marks(self) -> bool:
        free = self._free_bytes()
        return free is not None and free >= _MARKS_LEAVE_FREE

    def _leaves_index_reserve(self, size: int) -> bool:
        """Whether ``size`` more bytes may be written for puts (asked once per
        chunk of the write head, per batch, and per compaction output): they
        stop while ``_INDEX_RESERVE`` is still free, since an index commit that
        finds no room fails the whole index."""
        free = self._free_bytes()
        return free is None or free >= size + _INDEX_RESERVE

    def _free_bytes(self) -> int | None:
        """Bytes this process may still write on the store's file system (None
        if it cannot tell)."""
        try:
            st = os.statvfs(self._path)
        except OSError:
            return None
        if not st.f_blocks:  # a file system that reports no sizes (some FUSE ones)
            return None
        # Root may write into the blocks a file system keeps in reserve (ext4's
        # 5 %), which f_bavail leaves out: it is 0 on a disk full for others.
        blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
        return int(blocks * st.f_frsize)

    def _wake_if_writes_stopped(self) -> None:
        """After a failed append or roll-over (with the store's lock held): if
        sealing the head failed its fsync, every write stops, so blocked gets
        must hear of it."""
        if self._journal.sync_failure is not None:
            self._wake_every_waiter()

    def _check_writable(self) -> None:
        """Raise if an earlier failure stops every write: a failed fsync of the
        journal, or a failed index. Compaction checks it too: a pass that
        retired files and then failed to sync left them retired in memory only,
        and must not be finished by a later pass."""
        failure = self._journal.sync_failure
        if failure is not None:
            raise Error(
                f"the store at {self._path} refuses writes: an earlier fsync of the journal "
                f"failed ({failure.strerror}). Close it, check the disk, and reopen."
            )
        if self._index_failure is not None:
            raise self._index_refusal()

    def _append_locked(
        self, data: bytes, *, may_commit: bool = False, single_record: bool = False
    ) -> Position:
        self._check_writable()
        if may_commit and self._env.changes > _MAX_CHANGES_PER_COMMIT:
            # Before the write: every earlier operation is fully applied, so the
            # index and the checkpoint agree (after the write they would not).
            self._commit_index()
        file_id, offset = self._journal.append(data, single_record=single_record)
        self._acct[file_id].size += len(data)
        self._data_bytes += len(data)
        return file_id, offset

    def _wait_durable(self, pos: Position) -> None:
        if self._sync_always:
            self._sync_journal_to(pos)

    def _sync_journal_to(self, pos: Position) -> None:
        """fsync the journal up to ``pos`` (unless sync="never"); call without the lock."""
        if self._options.sync == "never":
            return
        try:
            self._journal.sync_to(pos)
        except OSError as e:
            # After a failed fsync the OS may have dropped the dirty pages, so a
            # retry proves nothing: the journal keeps the failure, and the store
            # refuses further writes until it is reopened (_append_locked).
            self._wake_every_waiter()
            raise Error(
                f"fsync of the journal in {self._path} failed ({e.strerror}): what was written "
                "may not be durable, and the store refuses further writes. Close it, check "
                "the disk, and reopen: recovery keeps what reached the disk."
            ) from e

    def _reserve_id(self) -> int:
        with self._lock, self._append_lock:
            self._check_open()
            msg_id = self._next_id
            self._next_id += 1
            return msg_id

    def _check_record_size(self, size: int) -> None:
        limit = self._options.max_file_size - fmt.FILE_HEADER_SIZE
        if size > limit:
            raise MessageTooLargeError(
                f"a record of {size} bytes does not fit in a data file ({limit} bytes after "
                "the header); raise max_file_size or send smaller messages/batches"
            )

    def _ensure_room(self, size: int) -> None:
        """Space pressure (call without the lock): if ``size`` more bytes do not
        fit under the puts' limit, compact first."""
        if not self._fits(size):
            self._check_open()  # closed (or disowned after a fork): do not wait for a pass
            self._compactor.make_room(size)

    def _wait_for_pass(self) -> None:
        """Wait (without the store's locks) for the running compaction pass to end."""
        self._compactor.wait_for_pass()

    def _fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit under the puts' limit (with the header
        of a new data file they may need)."""
        limit = self._put_limit
        return limit is None or self._data_bytes + size + fmt.FILE_HEADER_SIZE <= limit

    def _check_fits(self, size: int) -> None:
        """Raise StoreFullError (changing nothing) if ``size`` bytes cannot fit;
        CopyUnderWay if a pass is writing a copy meanwhile, or has swapped it in
        and not yet deleted its victims (which may make room: the caller lets go
        of the locks, waits for the pass and tries again, space pressure included)."""
        if self._fits(size):
            return
        if self._victims_going:
            # Refused now, the put would be refused for dead bytes the pass is
            # about to free.
            raise CopyUnderWay
        limit = self._options.max_store_size
        live = sum(a.live_bytes for a in self._acct.files.values())
        raise StoreFullError(
            f"cannot store {size} more bytes: puts may fill max_store_size={limit} but for one "
            f"data file (max_file_size={self._options.max_file_size}) kept for compaction's "
            f"copies, and the data files take {self._data_bytes} bytes, of which {live} bytes "
            "are live messages and the rest could not be reclaimed yet. Consume (ack) "
            "messages or raise max_store_size."
        )

    # -- queues ----------------------------------------------------------------------

    @_index_errors
    def queue(
        self,
        name: str,
        max_deliveries: int | None = None,
        dead_letter_queue: str | None = None,
    ) -> Queue:
        """Return the queue ``name``, creating it if needed.

        ``max_deliveries``: after that many deliveries a nacked message moves to
        ``dead_letter_queue`` (default ``"DLQ.<name>"``). Settings given here
        apply to this open store; they are not stored on disk. One left out
        keeps what an earlier call set, and they outlive ``delete_queue``.
        """
        validate.queue_name(name)
        max_deliveries = validate.optional_positive_int("max_deliveries", max_deliveries)
        if max_deliveries is not None and max_deliveries > fmt.MAX_DELIVERIES_COUNTED:
            raise ValueError(
                f"max_deliveries must be at most {fmt.MAX_DELIVERIES_COUNTED} (the delivery "
                f"count is stored in 16 bits), got {max_deliveries}; or None for no limit"
            )
        if dead_letter_queue is not None:
            validate.queue_name(dead_letter_queue)
            if dead_letter_queue == name:
                raise ValueError("a queue cannot be its own dead-letter queue")
        with self._lock:
            self._check_open()
            # What is left out keeps what an earlier call set.
            earlier_max, earlier_dlq = self._queue_settings.get(name, (None, None))
            if max_deliveries is None:
                max_deliveries = earlier_max
            if dead_letter_queue is None:
                dead_letter_queue = earlier_dlq
            if dead_letter_queue is None and max_deliveries is not None:
                _check_default_dead_letter_name(name)
            self._queue_settings[name] = (max_deliveries, dead_letter_queue)
            created = name not in self._catalog.queue_ids
            self._runtime(name)
        if created:
            self._keep_queue_change()
        from msgcask.queue import Queue

        return Queue._of(self, name)

    def _runtime(self, name: str) -> QueueRuntime:
        rt = self._queues.get(name)
        if rt is None:
            created = name not in self._catalog.queue_ids
            if created:
                self._check_writable()  # its commit would refuse, after the change
            qid = self._catalog.queue_id(name)
            if created:
                # Queues are not journaled: commit now so a crash keeps the new queue.
                self._commit_index()
            rt = QueueRuntime(name, name.encode(), qid, threading.Condition(self._lock))  # type: ignore[arg-type]
            self._queues[name] = rt
        return rt

    def _existing_runtime(self, name: str) -> QueueRuntime | None:
        """The queue's runtime, or None if no queue has that name (a handle
        whose queue was deleted): a read must not bring the queue back."""
        rt = self._queues.get(name)
        if rt is None and name in self._catalog.queue_ids:
            rt = self._runtime(name)
        return rt

    @_index_errors
    def queues(self) -> list[str]:
        """Names of the queues in the store, sorted."""
        with self._lock:
            self._check_open()
            return sorted(self._catalog.queue_ids)

    @_index_errors
    def delete_queue(self, name: str) -> int:
        """Delete queue ``name`` and every message in it (delivered or not).

        Returns how many messages were removed. Raises ValueError for an
        unknown queue. Its handles stay usable: reading through them (``len``,
        ``browse``, ``purge``, a ``get`` that does not wait) finds nothing and
        does not create the queue again; a put, or a ``get`` that waits, does.
        """
        validate.queue_name(name)
        with self._lock:
            self._check_open()
            if name not in self._catalog.queue_ids:
                raise ValueError(f"no queue named {name!r}; store.queues() lists them")
            rt = self._runtime(name)
            with self._append_lock:
                self._apply_pending()
                del self._queues[name]  # later puts to it wait for the store's lock
            try:
                removed = self._remove_messages(rt, include_delivered=True)
            except BaseException:
                self._queues[name] = rt
                raise
            self._catalog.drop_queue(name)
            try:
                self._commit_index()  # so a crash cannot bring the queue back
            finally:
                # Its waiters are no longer in _queues, where an index failure
                # looks for them to wake.
                rt.cond.notify_all()
            pos = self._journal.position
        self._keep_queue_change()
        self._wait_durable(pos)
        return removed

    def _keep_queue_change(self) -> None:
        """Return once the queue this call created or deleted is in a committed
        index (call without the store's lock). The commit that ``_runtime`` or
        ``delete_queue`` makes is skipped while a compaction swap holds commits
        back, and a kill before the swap's own commit would then lose a queue
        that ``store.queue()`` returned, or bring back one ``delete_queue``
        deleted: so wait for the hold to end (a pass's swap, in short lock holds)
        and commit, unless a commit meanwhile did."""
        wait = 0.0005
        while True:
            with self._lock:
                if not self._catalog.queues_changed or self._closed:
                    return  # (close commits the index)
                if not self._commit_hold:
                    self._commit_index()
                    return
            time.sleep(wait)
            wait = min(wait * 2, 0.01)

    def _remove_messages(self, rt: QueueRuntime, *, include_delivered: bool) -> int:
        """Ack every message of ``rt`` (optionally sparing delivered ones)."""
        removed = 0
        # Each append fits in a data file after its header, like any record or batch.
        ack_size = fmt.RECORD_HEADER_SIZE + fmt.ACK_PAYLOAD.size
        per_append = min(
            _PURGE_CHUNK, (self._options.max_file_size - fmt.FILE_HEADER_SIZE) // ack_size
        )
        while True:
            chunk = []
            for key in self._catalog.queue_order(rt.qid):
                msg_id = keys.order_key_id(key)
                if msg_id in self._inflight and not include_delivered:
                    continue
                chunk.append(msg_id)
                if len(chunk) >= per_append:
                    break
            if not chunk:
                return removed
            file_id, _ = self._append(b"".join(codec.encode_ack(m) for m in chunk))
            for msg_id in chunk:
                self._catalog.ack(msg_id, file_id)
                self._inflight.pop(msg_id, None)
            removed += len(chunk)
            crash_point("remove.after_ack_append")
            if not include_delivered and len(chunk) < per_append:
                return removed

    def _forget_queues(self, names: list[str]) -> None:
        """Undo the creation of queues by a call that failed before writing."""
        for name in names:
            rt = self._queues.pop(name, None)
            if name in self._catalog.queue_ids:
                self._catalog.drop_queue(name)
            if rt is not None:
                rt.cond.notify_all()
        if self._journal.sync_failure is None:  # else it cannot commit: the error that
            self._commit_index()  # stopped writes goes on instead of the refusal

    # -- queue operations (called by Queue) ------------------------------------------

    def _len(self, name: str) -> int:
        with self._lock:
            self._check_open()
            qid = self._catalog.queue_ids.get(name)
            return 0 if qid is None else self._catalog.counts.get(qid, 0)

    def _purge(self, name: str) -> int:
        with self._lock:
            self._check_open()
            rt = self._existing_runtime(name)
            if rt is None:
                return 0
            removed = self._remove_messages(rt, include_delivered=False)
            pos = self._journal.position
        self._wait_durable(pos)
        return removed

    # -- transactions ----------------------------------------------------------------

    def transaction(self) -> Transaction:
        """Return a transaction: ``with store.transaction() as tx: tx.put(...); tx.ack(m)``.

        Nothing is written until the block ends without an exception; then all
        its puts and acks are written as one all-or-nothing batch.
        """
        self._check_open()
        from msgcask.transaction import Transaction

        return Transaction(self)

    # -- inspection ------------------------------------------------------------------

    @_index_errors
    def stats(self) -> StoreStats:
        """Sizes, live data and per-file accounting (see ``StoreStats``)."""
        with self._lock:
            self._check_open()
            head = self._journal.head_id
            damage = self._compactor.damage
            files = [
                FileStats(
                    a.file_id,
                    "compacted" if a.kind == fmt.KIND_COMPACTED else "journal",
                    a.size,
                    a.live_bytes,
                    a.live_messages,
                    a.needed_marks,
                    a.file_id == head,
                    a.retired,
                    damage(a.file_id),
                )
                for a in sorted(self._acct.files.values(), key=lambda a: a.file_id)
            ]
            data_bytes = sum(f.size for f in files)
            index_bytes = _dir_bytes(os.path.join(self._path, INDEX_DIR))
            return StoreStats(
                disk_bytes=data_bytes + index_bytes,
                data_bytes=data_bytes,
                index_bytes=index_bytes,
                live_bytes=sum(f.live_bytes for f in files),
                live_messages=sum(self._catalog.counts.values()),
                needed_bytes=MARK_COST * sum(f.needed_acks for f in files),
                data_files=len(files),
                files=files,
                bytes_written=self._journal.bytes_written + self._compactor.copy_bytes_written,
                bytes_put=self._bytes_put,
                compaction=self._compactor.totals,
                corruptions=list(self._corruptions),
            )

    # -- compaction --------------------------------------------------------------------

    @_index_errors
    def compact(self, threshold: float | None = None) -> CompactionReport:
        """Run one compaction pass now and report what it did.

        ``threshold`` overrides ``compaction_threshold`` for this pass: files
        whose live fraction is below it are rewritten, if that frees at least
        ``max_file_size / 64`` (and 4 KiB): 1.0 rewrites every sealed file with
        that many dead bytes. Files holding nothing needed are always deleted.
        """
        if threshold is not None:
            check_threshold("threshold", threshold)
        self._check_open()
        if self._options.keep_data_files:
            raise Error(
                f"{self._path} was opened with keep_data_files=True, which keeps every data "
                "file: nothing is compacted. Reopen it without that option to compact it."
            )
        return self._compactor.run(threshold=threshold)

    def _compact_in_background(self) -> None:
        # While compaction is behind, passes follow each other at once rather
        # than waiting for the next check: each frees its victims as it ends.
        for _ in range(_BACKGROUND_PASSES_WHILE_BEHIND):
            if self._closed or self._scheduler.paused:
                return
            report = self._compactor.run(background=True)
            self._scheduler.pass_succeeded()
            if not (report.files_rewritten or report.files_deleted) or not self._compactor.behind():
                return

    def pause_compaction(self) -> None:
        """Stop background passes (a running pass finishes); space pressure still compacts."""
        self._check_open()
        self._scheduler.pause()

    def resume_compaction(self) -> None:
        self._check_open()
        self._scheduler.resume()

    @property
    def last_compaction(self) -> CompactionReport | None:
        """The report of the most recent pass (background or not), or None."""
        return self._compactor.last

    @_index_errors
    def why_kept(self, file_id: int) -> KeptReport:
        """Say what keeps data file ``file_id`` on disk: live messages (queue, id),
        ACKs still needed (id, file of the PUT they cancel) and delivery counts."""
        from msgcask.compactor import needed

        if isinstance(file_id, bool) or not isinstance(file_id, int):
            raise TypeError(f"file_id must be an int, got {type(file_id).__name__}")
        with self._lock:
            self._check_open()
            account = self._acct.files.get(file_id)
            if account is not None and account.retired:
                raise ValueError(
                    f"data file {file_id} holds nothing needed: it is being deleted (or its "
                    "deletion failed and the next compaction pass or open retries it)"
                )
            if account is None:
                known = sorted(f for f, a in self._acct.files.items() if not a.retired)
                raise ValueError(f"no data file {file_id}; the store has files {known}")
            handle = self._handles[file_id]
            try:
                raw = handle.read_all()
            except OSError as e:  # a bad sector: say which file, not a bare OSError
                raise CorruptionError(
                    f"{handle.path}: cannot be read ({e.strerror or e}), so what keeps it "
                    f"cannot be told. Check the disk; `msgcask check {self._path}` lists "
                    "every file it cannot read",
                    path=handle.path,
                ) from e
            records = needed.parse(raw)
            found = needed.classify(self._catalog, file_id, records, self._acct.id_ranges())
            needed.drop_acks_past_their_file(self, found)
            names = {qid: name for name, qid in self._catalog.queue_ids.items()}
            # A compaction pass deletes the file only once it finds every consumed
            # PUT record in it (reclaim._release): damage may hide some.
            dead_puts = len(dict(found.dead_puts))
            hidden = dead_puts < account.dead_puts
            return KeptReport(
                file_id,
                [(names.get(e.queue_id, "?"), msg_id) for msg_id, _, e in found.puts],
                found.acks,
                [msg_id for msg_id, _ in found.delivers],
                file_id == self._journal.head_id,
                hidden_puts(dead_puts, account.dead_puts) if hidden else "",
            )

    @_index_errors
    def verify(self) -> list[str]:
        """Check the index against the data files; return the problems found
        (empty when the store is consistent). Reads every data file: slow on
        big stores, meant for tests and ``msgcask check``. Every other call,
        puts included, waits for it."""
        from msgcask.check import verify

        return verify(self)

    def _message_state(self, msg_id: int) -> str:
        """ "live", "delivered", "acked", "quarantined" or "unknown" (for tests and check)."""
        with self._lock:
            entry = self._catalog.lookup(msg_id)
            if msg_id in self._quarantined:
                return "quarantined"
            if entry is None:
                return "unknown"
            if entry.state == STATE_ACKED:
                return "acked"
            return "delivered" if msg_id in self._inflight else "live"


def _dir_bytes(path: str) -> int:
    """Bytes a directory's files occupy on disk (allocated blocks, not apparent size)."""
    total = 0
    try:
        for entry in os.scandir(path):
            if entry.is_file():
                total += entry.stat().st_blocks * 512
    except FileNotFoundError:
        pass
    return total


def open(path: str | os.PathLike[str], **options: Any) -> Store:
    """Open (or create) the store at ``path``; see docs/tuning.md for the options.

    >>> import tempfile, msgcask
    >>> with msgcask.open(tempfile.mkdtemp()) as store:
    ...     q = store.queue("orders")
    ...     _ = q.put(b"hello")
    ...     m = q.get(timeout=1)
    ...     q.ack(m)
    ...     m.body
    b'hello'
    """
    for name in options:
        if name not in _OPTIONS and name not in ("_fs", "_clock"):
            # Not Store.__init__'s own TypeError: it names a call the caller did not make.
            close = difflib.get_close_matches(name, _OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"msgcask.open() got an unknown option {name!r}{hint}; the options are "
                f"{', '.join(_OPTIONS)} (docs/tuning.md)"
            )
    return Store(path, **options)


_OPTIONS = [f.name for f in fields(Options)]


# Imported at the end for the type annotations above; the modules import Store lazily.
from msgcask.queue import Queue  # noqa: E402
from msgcask.transaction import Transaction  # noqa: E402

__all__ = ["Queue", "Store", "Transaction", "open"]
