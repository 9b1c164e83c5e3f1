"""Opening a store: make the index agree with the data files.

The data files are the truth; the index is a cache of them that is committed
now and then together with the journal position it reflects (the checkpoint).
On open one of three things happens:

- clean / replay: the index is usable, so the journal records after the
  checkpoint are applied in order (none after a clean close);
- rebuild: the index is missing, unreadable, from another boot after an
  unclean close (a power cut may have lost index pages), or inconsistent with
  the files on disk (for example an older copy), so it is built again from
  every data file;
- in both, a torn tail of the last journal file is cut off, damage elsewhere is
  reported, and files a crashed compaction left behind are removed.

A compacted file starts with a MANIFEST naming the files it replaced. If all of
them still exist, the compaction never committed (or committed but deleted
nothing yet) and the copy is redundant; if any is gone, the copy is the real
home of those messages and the remaining victims are redundant.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import lmdb
from tqdm import tqdm

from msgcask.errors import CorruptionError
from msgcask.index import keys
from msgcask.index.accounting import Accounting, FileAccount
from msgcask.index.catalog import Catalog
from msgcask.index.env import INDEX_FORMAT_VERSION, IndexEnv, IndexUnusable, boot_id, remove_index
from msgcask.plural import counted
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import INDEX_DIR, data_file_ids, data_file_name, parse_data_file_name
from msgcask.store.fs import TEMP_SUFFIX, DataFile, FileSystem, crash_point
from msgcask.store.manifest_rule import MAX_MANIFEST_BYTES, parse_manifest, redundant_files

log = logging.getLogger("msgcask")

_PUTS = frozenset({fmt.TYPE_PUT})
_MARKS = frozenset({fmt.TYPE_ACK, fmt.TYPE_DELIVER})
_ALL = _PUTS | _MARKS


class _RebuildBar(tqdm):
    """The rebuild's progress bar, without tqdm's monitor thread: tqdm starts one
    on its first bar and keeps it for the life of the process, an extra thread in
    every program that ever opened a store without an index. The bar is updated
    once per data file, so nothing needs watching."""

    monitor_interval = 0


@dataclass(frozen=True, slots=True)
class CorruptionReport:
    """One damaged stretch of a data file."""

    file_id: int
    path: str
    offset: int
    length: int
    reason: str
    # "truncated" (a torn tail), "skipped" (kept on disk, not used), "removed" (an
    # empty file a crash left), "kept" (a compacted file without its MANIFEST, or
    # damage or a read error a compaction pass found: the file is not compacted, and
    # kept if what the damage hides is needed to delete it) or "quarantined" (a
    # message whose record was found damaged when read).
    action: str

    def __str__(self) -> str:
        length = counted(self.length, "byte")
        if self.action == "truncated":  # most often a write a crash cut short
            return (
                f"{self.path}: torn or damaged tail at offset {self.offset} ({self.reason}), "
                f"{length} truncated"
            )
        return f"{self.path}: {self.reason} at offset {self.offset}, {length} {self.action}"


@dataclass
class RecoveryReport:
    mode: str = "clean"  # "new", "clean", "replay" or "rebuild"
    reason: str = ""
    unclean: bool = False  # the store was not closed cleanly (or its index was lost)
    records: int = 0
    corruptions: list[CorruptionReport] = field(default_factory=list)
    removed_files: list[int] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class OpenedFiles:
    """Data files found on disk: handles and parsed headers."""

    handles: dict[int, DataFile]
    headers: dict[int, codec.FileHeader]
    # Newest files that a crash left without a complete header (removed).
    torn: list[CorruptionReport] = field(default_factory=list)


class NeedsRebuild(Exception):
    pass


_PAST_CLEAN = "goes on past what the index saw at its clean close"


def open_data_files(fs: FileSystem, directory: str, *, writable: bool = True) -> OpenedFiles:
    handles: dict[int, DataFile] = {}
    headers: dict[int, codec.FileHeader] = {}
    torn: list[CorruptionReport] = []
    names = sorted(fs.listdir(directory))
    try:
        for name in names:
            file_id = parse_data_file_name(name)
            if file_id is None:
                if writable and parse_data_file_name(name.removesuffix(TEMP_SUFFIX)):
                    # A file a crash caught before it was published: never used.
                    fs.unlink(os.path.join(directory, name))
                continue
            path = os.path.join(directory, name)
            handle = fs.open(path, writable=writable)
            handles[file_id] = handle
            raw = _read_whole(handle, fmt.FILE_HEADER_SIZE)
            try:
                header = codec.decode_file_header(raw, path)
            except CorruptionError as e:
                if not (writable and _torn_creation(handle, raw, file_id, names)):
                    raise CorruptionError(
                        f"{e}. Run `msgcask check {directory}` to list every problem; then "
                        "restore the store from a backup, or move the file out and reopen "
                        "(see CorruptionError in docs/operations.md for what that loses)",
                        path=e.path,
                        offset=e.offset,
                        length=e.length,
                    ) from e
                # The newest file, created just before a crash (its bytes never
                # reached the disk, only its name): it holds nothing; remove it.
                del handles[file_id]
                handle.close()
                fs.unlink(path)
                reason = str(e).removeprefix(f"{path}: ")  # the report names the file
                torn.append(CorruptionReport(file_id, path, 0, handle.size, reason, "removed"))
                continue
            codec.check_file_id(header, file_id, path)
            headers[file_id] = header
    except BaseException:
        for handle in handles.values():
            handle.close()
        raise
    return OpenedFiles(handles, headers, torn)


def _read_whole(handle: DataFile, size: int | None = None) -> bytes:
    """Read a data file (or its first ``size`` bytes); an I/O error becomes a
    CorruptionError naming the file."""
    try:
        return handle.read(0, handle.size if size is None else size)
    except OSError as e:
        raise CorruptionError(
            f"{handle.path}: cannot be read ({e.strerror}); copy what can be read of the "
            "store elsewhere, or move this file out of the store and open it again",
            path=handle.path,
        ) from e


def _records_past(handle: DataFile, end: int) -> bool:
    """Whether ``handle`` holds an intact record past ``end``. (Zeros there are
    space allocated ahead of writes, a partial record a torn append: neither
    is one.)"""
    if handle.size <= end:
        return False
    buf = _read_whole(handle)
    return any(isinstance(item, codec.Record) for item in codec.scan(buf, end, head=True))


def _bound_transaction(env: IndexEnv) -> None:
    """Commit a rebuild in steps so its transaction (held in memory) stays small.
    Safe: the index has no checkpoint until the rebuild ends, so an interrupted
    rebuild is simply started again on the next open."""
    if env.changes > 200_000:
        env.commit()
        crash_point("recovery.after_rebuild_step")


def _torn_creation(handle: DataFile, raw: bytes, file_id: int, names: list[str]) -> bool:
    """A bad header is a torn creation only in the newest data file, and only if
    the file is all zeros (a name whose data never reached the disk)."""
    newest = max(data_file_ids(names), default=0)
    if file_id != newest or handle.size > 2 * 2**20:
        return False
    return not any(handle.read_all()) if raw else True


def _missing(accounts: list[FileAccount]) -> str:
    """The rebuild's reason when data files the index accounts for are missing:
    which ones, and what the index says they held. The rebuild reads only the
    files on disk, so a user who removed or restored files by hand learns what
    that cost."""
    names = [data_file_name(a.file_id) for a in accounts]
    if len(names) == 1:
        said = f"data file {names[0]} is missing"
    else:
        shown = names[:3] if len(names) > 3 else names[:-1]
        rest = f"{len(names) - 3} more" if len(names) > 3 else names[-1]
        said = f"data files {', '.join(shown)} and {rest} are missing"
    live = sum(a.live_messages for a in accounts)
    if not live:
        return said
    live_bytes = sum(a.live_bytes for a in accounts)
    return (
        f"{said}; the index counted {counted(live, 'live message')} ({live_bytes} bytes) "
        f"in {'it' if len(names) == 1 else 'them'}, and those no other data file holds are lost"
    )


class Recovery:
    """Brings the index in line with the data files (see the module docstring)."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        files: OpenedFiles,
        clock: Callable[[], float] = time.time,
    ):
        self.fs = fs
        self.clock = clock  # what data files' creation times are read from
        self.directory = directory
        self.files = files
        self.report = RecoveryReport()
        self.report.corruptions += files.torn
        self.max_msg_id = 0
        # The first data file id not handed out (1: none the files tell of).
        self.next_file_id = 1
        self._lost_files = False  # the index accounts for data files not on disk
        # Each compacted file's MANIFEST, once read: an open that gives up replaying
        # reads them again to rebuild, and a damaged one is reported once.
        self._manifests: dict[int, list[int] | None] = {}

    # -- entry point ---------------------------------------------------------------

    def run(self) -> tuple[IndexEnv, Catalog]:
        started = time.monotonic()
        index_path = os.path.join(self.directory, INDEX_DIR)
        env: IndexEnv | None = None
        catalog: Catalog | None = None
        if os.path.isdir(index_path) and os.listdir(index_path):
            try:
                env = IndexEnv(index_path)
                env.check_format()
                env.walk()
                catalog = self._replay(env)
            except (IndexUnusable, NeedsRebuild, lmdb.Error) as e:
                # lmdb.Error: an index damaged on disk in a way LMDB detects while
                # being read (it has no page checksums, so not every damage is).
                self.report.reason = str(e)
                if env is not None:
                    env.close()
                env = None
        else:
            self.report.reason = "no index"
        if env is None or catalog is None:
            remove_index(index_path)
            env = IndexEnv(index_path)
            # No data file and an index that knew none: a new store. An index that
            # accounted for files now all missing is rebuilt, as with some missing.
            lost = self._lost_files
            self.report.mode = "rebuild" if self.files.handles or lost else "new"
            self.report.unclean = bool(self.files.handles) or lost
            try:
                catalog = self._rebuild(env)
            except BaseException:
                # Half a rebuild is worth nothing (the next open starts it again)
                # and may be what filled the disk.
                env.close()
                remove_index(index_path)
                raise
        if self.report.mode == "rebuild":
            # The journal records queues only through their messages: after a
            # rebuild, a queue exists if it holds messages.
            catalog.prune_empty_queues()
        elif self.report.mode == "replay":
            # Likewise for the queues the replayed records touched (this is what
            # keeps a queue deleted after the checkpoint from coming back).
            catalog.prune_empty_queues(only=catalog.touched_queues())
        self.report.seconds = time.monotonic() - started
        return env, catalog

    # -- replay from the checkpoint --------------------------------------------------

    def _replay(self, env: IndexEnv) -> Catalog:
        clean = env.get_u64(keys.META_CLEAN, default=0)
        self.report.unclean = not clean
        if not clean and env.get_meta(keys.META_BOOT) != boot_id():
            raise NeedsRebuild("the store was not closed cleanly before the last reboot")
        # Every counter is read here, so one of the wrong length (LMDB has no page
        # checksums) makes the index rebuilt rather than fail the open or a later call.
        for counter in (keys.META_NEXT_ID, keys.META_NEXT_QUEUE, keys.META_NEXT_FILE):
            env.get_u64(counter)
        raw = env.get_meta(keys.META_CHECKPOINT)
        if raw is None:
            raise NeedsRebuild("the index has no checkpoint")
        if len(raw) != keys.CHECKPOINT.size:
            raise NeedsRebuild(f"the index's checkpoint is damaged ({len(raw)} bytes)")
        cp_file, cp_offset = keys.CHECKPOINT.unpack(raw)
        try:
            acct = Accounting.load(list(env.items(env.files)))
        except (ValueError, struct.error) as e:
            raise NeedsRebuild(f"a file account in the index is damaged ({e})") from e
        on_disk = self.files.handles
        # Finish deletions that a crash interrupted.
        for file_id in [f for f, s in acct.files.items() if s.retired]:
            self._remove(file_id)
            acct.forget(file_id)
        missing = [a for f, a in sorted(acct.files.items()) if f not in on_disk]
        if missing:
            self._lost_files = True
            # Their ids, and their file ids, are handed out no more, even if no
            # file left records them: files moved out and put back clash with none.
            self.max_msg_id = env.get_u64(keys.META_NEXT_ID, default=1) - 1
            self.next_file_id = env.get_u64(keys.META_NEXT_FILE, default=1)
            raise NeedsRebuild(_missing(missing))
        for file_id, account in acct.files.items():
            if on_disk[file_id].size < account.size:
                raise NeedsRebuild(f"data file {data_file_name(file_id)} is shorter than indexed")
        if cp_file not in on_disk or on_disk[cp_file].size < cp_offset:
            raise NeedsRebuild("the journal ends before the index's checkpoint")
        unknown = sorted(set(on_disk) - set(acct.files))
        to_replay: list[int] = []
        for file_id in unknown:
            header = self.files.headers[file_id]
            if header.kind == fmt.KIND_COMPACTED:
                if not self._compaction_is_orphan(file_id):
                    raise NeedsRebuild(f"compacted file {file_id} is not in the index")
                self._remove(file_id)
            elif file_id > cp_file:
                to_replay.append(file_id)
            else:
                raise NeedsRebuild(f"journal file {file_id} is older than the checkpoint")
        if clean:
            # A clean close committed everything journaled: records past what the
            # index saw are not this index's (data files restored beside it).
            for file_id, account in sorted(acct.files.items()):
                end = cp_offset if file_id == cp_file else account.size
                if _records_past(on_disk[file_id], end):
                    raise NeedsRebuild(f"data file {data_file_name(file_id)} {_PAST_CLEAN}")
            for file_id in to_replay:
                if _records_past(on_disk[file_id], fmt.FILE_HEADER_SIZE):
                    raise NeedsRebuild(f"journal file {data_file_name(file_id)} {_PAST_CLEAN}")
        catalog = Catalog(env, acct)
        self.max_msg_id = env.get_u64(keys.META_NEXT_ID, default=1) - 1
        plan = [(cp_file, cp_offset)] + [(f, fmt.FILE_HEADER_SIZE) for f in to_replay]
        for file_id in to_replay:
            acct.add(
                FileAccount(
                    file_id,
                    fmt.KIND_JOURNAL,
                    size=on_disk[file_id].size,
                    created=self.clock(),
                    id_floor=self.files.headers[file_id].id_floor,
                )
            )
        last_journal = plan[-1][0]
        for file_id, start in plan:
            self._apply_file(catalog, file_id, start, _ALL, truncate_tail=file_id == last_journal)
        if self.report.records or to_replay:
            self.report.mode = "replay"
        return catalog

    def _compaction_is_orphan(self, file_id: int) -> bool:
        """True if every victim of this compacted file still exists (so nothing
        depends on the copy); reads the MANIFEST record that starts the file.
        A file whose MANIFEST is unreadable is never taken for an orphan."""
        victims = self._manifest(file_id)
        return victims is not None and all(v in self.files.handles for v in victims)

    def _manifest(self, file_id: int) -> list[int] | None:
        """The victims named by a compacted file's MANIFEST, or None if that
        record is damaged (``_settle_compactions`` reports it)."""
        if file_id not in self._manifests:
            handle = self.files.handles[file_id]
            head = handle.read(fmt.FILE_HEADER_SIZE, MAX_MANIFEST_BYTES)
            self._manifests[file_id] = parse_manifest(head)
        return self._manifests[file_id]

    def _report_kept(self, file_id: int) -> None:
        """Report a compacted file without an intact MANIFEST, which is kept whole."""
        handle = self.files.handles[file_id]
        report = CorruptionReport(
            file_id,
            handle.path,
            fmt.FILE_HEADER_SIZE,
            handle.size - fmt.FILE_HEADER_SIZE,  # every record in it is kept
            "compacted file without an intact MANIFEST (kept; its victims are kept too)",
            "kept",
        )
        self.report.corruptions.append(report)
        log.error("msgcask: %s", report)

    # -- rebuild from every file ------------------------------------------------------

    def _rebuild(self, env: IndexEnv) -> Catalog:
        if self.report.mode == "rebuild":  # a new store has nothing to say
            log.warning(
                "msgcask: rebuilding the index of %s (%s)", self.directory, self.report.reason
            )
        env.clear_all()
        self._settle_compactions()
        acct = Accounting()
        for file_id, header in sorted(self.files.headers.items()):
            acct.add(
                FileAccount(
                    file_id,
                    header.kind,
                    size=self.files.handles[file_id].size,
                    created=self.clock(),
                    id_floor=header.id_floor,
                )
            )
            self.max_msg_id = max(self.max_msg_id, header.id_floor - 1)
        catalog = Catalog(env, acct)
        journal = [f for f, h in self.files.headers.items() if h.kind == fmt.KIND_JOURNAL]
        last_journal = max(journal) if journal else -1
        total = sum(h.size for h in self.files.handles.values())
        with _RebuildBar(
            total=total,
            unit="B",
            unit_scale=True,
            delay=1.0,
            leave=False,
            disable=None,  # not on a non-terminal stderr: no bar in a service's logs
            desc="msgcask: rebuilding index",
        ) as bar:
            # Two passes: copies made by compaction can sit in files newer than the
            # ACK and DELIVER records that refer to them.
            with_marks = []
            for file_id in sorted(self.files.handles):
                if self._apply_file(
                    catalog,
                    file_id,
                    fmt.FILE_HEADER_SIZE,
                    _PUTS,
                    truncate_tail=file_id == last_journal,
                ):
                    with_marks.append(file_id)
                bar.update(self.files.handles[file_id].size)
                _bound_transaction(env)
            for file_id in with_marks:
                self._apply_file(
                    catalog,
                    file_id,
                    fmt.FILE_HEADER_SIZE,
                    _MARKS,
                    truncate_tail=False,
                    report=False,
                )
        env.put_u64(keys.META_FORMAT, INDEX_FORMAT_VERSION)
        return catalog

    def _settle_compactions(self) -> None:
        """Remove the files the MANIFEST rule makes redundant (store/manifest_rule.py),
        and report each compacted file kept without an intact MANIFEST (one that a
        newer compacted file replaced is redundant like any victim: not kept)."""
        compacted = [f for f, h in self.files.headers.items() if h.kind == fmt.KIND_COMPACTED]
        redundant = redundant_files(set(self.files.handles), compacted, self._manifest)
        for file_id in redundant:
            self._remove(file_id)
        for file_id in sorted(compacted):
            if file_id not in redundant and self._manifest(file_id) is None:
                self._report_kept(file_id)

    # -- shared ----------------------------------------------------------------------

    def _apply_file(
        self,
        catalog: Catalog,
        file_id: int,
        start: int,
        kinds: frozenset[int],
        *,
        truncate_tail: bool,
        report: bool = True,
    ) -> bool:
        """Apply the records of ``kinds`` in one file, in file order. Returns
        whether the file holds ACK or DELIVER records (rebuild's second pass
        skips files without them)."""
        handle = self.files.handles[file_id]
        buf = _read_whole(handle)
        max_id = self.max_msg_id
        records = 0
        has_marks = False
        # Consecutive PUT records go to the index in batches (far fewer calls);
        # a batch is flushed before any other record so file order is kept.
        puts: list[tuple[int, int, int, int, int, int]] = []
        queue_ids: dict[str, int] = {}
        for item in codec.scan(buf, start, head=truncate_tail):
            if isinstance(item, codec.Damage):
                if report:
                    self._damage(file_id, item, truncate_tail)
                continue
            rtype = item.rtype
            if rtype not in (fmt.TYPE_PUT, fmt.TYPE_MANIFEST):
                has_marks = True
            if rtype not in kinds:
                continue
            records += 1
            ps = item.payload_start
            if rtype == fmt.TYPE_PUT:
                try:
                    meta = codec.decode_put_meta(buf, ps, item.end)
                except ValueError as e:  # intact bytes, impossible fields: a writer bug
                    if report:
                        bad = codec.Damage(item.offset, item.size, f"malformed PUT: {e}", False)
                        self._damage(file_id, bad, False)
                    continue
                qid = queue_ids.get(meta.queue)
                if qid is None:
                    qid = queue_ids[meta.queue] = catalog.queue_id(meta.queue)
                puts.append(
                    (meta.msg_id, qid, meta.priority, item.offset, item.size, meta.deliveries)
                )
                max_id = max(max_id, meta.msg_id)
                continue
            if puts:
                catalog.add_many(file_id, puts, fresh=False)
                puts = []
            if rtype == fmt.TYPE_ACK:
                (msg_id,) = fmt.ACK_PAYLOAD.unpack_from(buf, ps)
                catalog.ack(msg_id, file_id)
                max_id = max(max_id, msg_id)
            elif rtype == fmt.TYPE_DELIVER:
                msg_id, deliveries = fmt.DELIVER_PAYLOAD.unpack_from(buf, ps)
                catalog.deliver(msg_id, deliveries, file_id)
        if puts:
            catalog.add_many(file_id, puts, fresh=False)
        self.max_msg_id = max_id
        self.report.records += records
        catalog.acct[file_id].size = handle.size
        return has_marks

    def _damage(self, file_id: int, item: codec.Damage, last: bool) -> None:
        handle = self.files.handles[file_id]
        if item.at_tail and last:
            handle.truncate(item.offset)
            handle.fsync()
            action = "truncated"
        else:
            action = "skipped"
        if item.unused:
            return  # the write head's preallocated space, not damage
        report = CorruptionReport(
            file_id, handle.path, item.offset, item.length, item.reason, action
        )
        self.report.corruptions.append(report)
        log.warning("msgcask: %s", report)

    def _remove(self, file_id: int) -> None:
        handle = self.files.handles.pop(file_id, None)
        self.files.headers.pop(file_id, None)
        if handle is not None:
            handle.close()
        with contextlib.suppress(FileNotFoundError):
            self.fs.unlink(os.path.join(self.directory, data_file_name(file_id)))
        self.fs.fsync_dir(self.directory)
        self.report.removed_files.append(file_id)
