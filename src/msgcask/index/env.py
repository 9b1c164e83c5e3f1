"""The LMDB environment of a store's index, and its one write transaction.

The index is opened with ``lock=False``: the store's LOCK file already makes
this process the only writer, and every index call happens under the store's
own lock. That lets one long-lived write transaction serve every thread and be
committed in batches (per ``sync_interval`` and at compaction swaps), which is
what makes an index update cost about a microsecond instead of a commit.

The index is never the source of truth: the data files are. A commit records
the journal position it reflects (the checkpoint); after a crash the records
after it are replayed, and after anything worse the index is rebuilt.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import lmdb

from msgcask.errors import FormatVersionError
from msgcask.index import keys
from msgcask.store.fs import crash_point

INDEX_FORMAT_VERSION = 2
MAP_SIZE = 2**40  # address space only; the file grows with the pages in use
_TABLES = (b"meta", b"queues", b"order", b"msgs", b"files")
SHRINK_DIR = "shrink"  # inside index/: where a compacted copy is built


class IndexUnusable(Exception):
    """The index cannot be trusted or opened; the caller rebuilds it."""


class ShrinkFailed(Exception):
    """A shrink could not make or place its copy (a full disk): the index file
    is as it was, and the index is usable."""


def boot_id() -> bytes:
    """An id of this boot of the machine (empty where the OS has none).

    A store that was not closed cleanly during an earlier boot may have lost
    unsynced index pages to a power cut, so its index is rebuilt.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read().strip()
    except OSError:
        return b""


class IndexEnv:
    """The open index: tables, the current write transaction, and meta values."""

    def __init__(self, path: str, *, readonly: bool = False):
        self.path = path
        self.readonly = readonly
        if not readonly:
            os.makedirs(path, exist_ok=True)
            shutil.rmtree(os.path.join(path, SHRINK_DIR), ignore_errors=True)
        self._open()
        self.txn = self.env.begin(write=not readonly)
        self.changes = 0  # index writes since the last commit

    def _open(self) -> None:
        readonly = self.readonly
        try:
            self.env = lmdb.open(
                # As bytes: py-lmdb encodes a str path to UTF-8, which fails for a
                # directory whose name is not UTF-8 (os.fsdecode gives such a name
                # lone surrogates); the OS takes the name's own bytes.
                os.fsencode(self.path),
                map_size=MAP_SIZE,
                max_dbs=len(_TABLES),
                lock=False,
                sync=False,
                metasync=False,
                readonly=readonly,
                create=not readonly,
                readahead=False,
            )
            self.meta = self.env.open_db(b"meta", create=not readonly)
            self.queues = self.env.open_db(b"queues", create=not readonly)
            self.order = self.env.open_db(b"order", create=not readonly)
            self.msgs = self.env.open_db(b"msgs", create=not readonly)
            self.files = self.env.open_db(b"files", create=not readonly)
        except lmdb.Error as e:
            raise IndexUnusable(f"cannot open the index at {self.path}: {e}") from e
        self._dbs = (self.meta, self.queues, self.order, self.msgs, self.files)

    # -- transactions --------------------------------------------------------------

    def commit(self) -> None:
        """Commit the current transaction and start the next one."""
        try:
            self.txn.commit()
        finally:
            # On failure LMDB has aborted the transaction: begin a fresh one so the
            # store can still close; the caller reports the lmdb.Error (the store
            # then distrusts the index and rebuilds it on the next open).
            self.txn = self.env.begin(write=True)
            self.changes = 0

    def pages(self) -> tuple[int, int]:
        """(pages in use by the tables, pages the file holds). LMDB reuses freed
        pages but never shrinks its file, so after a peak the second can be far
        larger than the first."""
        stats = [self.txn.stat(db) for db in self._dbs] + [self.env.stat()]
        used = 2 + sum(  # the 2 meta pages, then each table's pages
            s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"] for s in stats
        )
        return used, self.env.info()["last_pgno"] + 1

    def shrink(self) -> None:
        """Rewrite the index file without its free pages. Call right after a
        commit (the copy holds the committed state, which the current
        transaction must not have changed), with the store's lock held.

        The compacted copy is written beside the file and renamed over it, so a
        crash leaves either file whole; a leftover copy is removed on open.
        Raises ShrinkFailed if there is no room for the copy, or it cannot be
        renamed (the file is then as it was). Any other LMDB error while copying
        (a damaged page) is raised as it is, and a failure to open the index
        again as an lmdb.Error saying why: an index failure.
        """
        spare = os.path.join(self.path, SHRINK_DIR)
        shutil.rmtree(spare, ignore_errors=True)
        self.txn.abort()
        reopen_failure: IndexUnusable | None = None
        try:
            try:
                os.makedirs(spare)
                self.env.copy(os.fsencode(spare), compact=True)  # type: ignore[arg-type]  # takes bytes too
            except (OSError, lmdb.DiskError) as e:  # DiskError: ENOSPC
                raise ShrinkFailed(f"cannot copy the index: {e}") from e
            crash_point("index.before_shrink_swap")
            self.env.close()
            try:
                os.replace(os.path.join(spare, "data.mdb"), os.path.join(self.path, "data.mdb"))
                # Not durable if this fails; a power cut may then bring back the
                # old file, whose state the journal's replay brings up to date.
                with contextlib.suppress(OSError):
                    fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                crash_point("index.after_shrink_swap")
            except OSError as e:
                raise ShrinkFailed(f"cannot put the index copy in place: {e}") from e
            finally:
                self._open()
        except IndexUnusable as e:
            reopen_failure = e
        finally:
            shutil.rmtree(spare, ignore_errors=True)
            if reopen_failure is None:
                self.txn = self.env.begin(write=True)
                self.changes = 0
        if reopen_failure is not None:
            # No environment to go on with: an LMDB failure for the caller (the
            # store fails the index), saying why rather than that it is closed.
            raise lmdb.Error(str(reopen_failure)) from reopen_failure

    def sync(self) -> None:
        """Flush committed index pages to disk (a clean close does this)."""
        self.env.sync(True)

    def close(self) -> None:
        if self.txn is not None:
            self.txn.abort()
            self.txn = None  # type: ignore[assignment]
        self.env.close()

    # -- meta ----------------------------------------------------------------------

    def get_meta(self, key: bytes) -> bytes | None:
        value = self.txn.get(key, db=self.meta)
        return None if value is None else bytes(value)

    def put_meta(self, key: bytes, value: bytes) -> None:
        self.txn.put(key, value, db=self.meta)

    def get_u64(self, key: bytes, default: int = 0) -> int:
        """A counter or flag of the meta table; IndexUnusable if its value has the
        wrong length (LMDB has no page checksums: damage can hand one back)."""
        value = self.get_meta(key)
        if value is None:
            return default
        if len(value) != keys.U64.size:
            raise IndexUnusable(
                f"the index is damaged: meta value {key.decode()!r} has {len(value)} bytes, "
                f"not {keys.U64.size}"
            )
        return int(keys.U64.unpack(value)[0])

    def put_u64(self, key: bytes, value: int) -> None:
        self.put_meta(key, keys.U64.pack(value))

    def check_format(self) -> None:
        """Raise FormatVersionError if a newer msgcask wrote this index."""
        version = self.get_u64(keys.META_FORMAT, default=0)
        if version > INDEX_FORMAT_VERSION:
            raise FormatVersionError(
                f"the index at {self.path} has format version {version}; this msgcask "
                f"reads up to {INDEX_FORMAT_VERSION}. Upgrade msgcask to open this store."
            )
        if version == 0:
            raise IndexUnusable("the index has no format version (new or incomplete)")
        if version < INDEX_FORMAT_VERSION:
            raise IndexUnusable(
                f"the index has format version {version}, older than {INDEX_FORMAT_VERSION}"
            )

    def walk(self) -> None:
        """Read every page of every table once; raise IndexUnusable if LMDB finds
        one damaged. LMDB has no page checksums, so this catches what its own
        structure checks catch (wrong page types, bad page numbers), at the cost
        of one sequential pass (about a tenth of a second per million entries)."""
        try:
            for db in (self.meta, self.queues, self.files, self.msgs, self.order):
                with self.txn.cursor(db=db) as cur:
                    more = cur.first()
                    while more:  # next() copies nothing out: only the pages are read
                        more = cur.next()
        except lmdb.Error as e:
            raise IndexUnusable(f"the index is damaged: {e}") from e

    def items(self, db: lmdb._Database) -> Iterator[tuple[bytes, bytes]]:
        with self.txn.cursor(db=db) as cur:
            for key, value in cur:
                yield bytes(key), bytes(value)

    def clear_all(self) -> None:
        """Empty every table (before a rebuild). The format version goes too: the
        rebuild writes it once it has ended, so an index its steps committed
        says it was never completed."""
        for db in (self.meta, self.queues, self.order, self.msgs, self.files):
            self.txn.drop(db, delete=False)


def remove_index(path: str) -> None:
    """Delete an index directory that cannot be opened, so it can be rebuilt."""
    shutil.rmtree(path, ignore_errors=True)
