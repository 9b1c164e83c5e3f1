"""Consistency checks: the data files against themselves and against the index.

``scan_files`` reads every data file read-only (safe on a live store: data
files are append-only and never rewritten in place) and reports damage.
``verify`` goes further on an open store: it recomputes, from the files alone,
which messages are live (PUT records minus ACK records, by id) and checks that
the index agrees: same live set, same queues and order keys, and per-file
accounting equal to what the index's entries add up to. Tests run it after
every scenario, so a bookkeeping bug cannot hide behind a passing assertion.
"""

from __future__ import annotations

import os
import stat
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from msgcask.errors import Error
from msgcask.index import keys
from msgcask.index.keys import Acked, Live
from msgcask.plural import counted
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import parse_data_file_name
from msgcask.store.fs import FileSystem
from msgcask.store.manifest_rule import MAX_MANIFEST_BYTES, parse_manifest, redundant_files

if TYPE_CHECKING:
    from msgcask.db import Store


@dataclass
class FileScan:
    file_id: int
    path: str
    kind: int = -1
    size: int = 0  # bytes up to the last record (a write head's zero tail is not counted)
    records: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    damage: list[codec.Damage] = field(default_factory=list)
    header_error: str = ""
    read_error: str = ""  # why the file could not be read at all ("not a regular file")
    # Why its records do not count, as recovery would leave the file out (a
    # compaction made it redundant: store/manifest_rule.py), or "".
    redundant: str = ""
    # A compacted file whose first record is not an intact MANIFEST: recovery keeps
    # it and every file it may have replaced, and reports it (action "kept").
    manifest_damaged: bool = False


@dataclass
class ScanReport:
    files: list[FileScan]
    puts: dict[int, list[tuple[int, int, int, str, int]]]  # id -> (file, offset, size, queue, prio)
    acks: dict[int, list[int]]  # id -> the files holding an ACK record of it

    @property
    def problems(self) -> list[str]:
        return self._problems(skip=None)

    def problems_while_written(self) -> tuple[list[str], list[str]]:
        """(problems, notes) for a store another process has open: a torn tail
        of the newest journal file is an append caught half-way, not damage (a
        crash would have it truncated on open), so it is a note."""
        journals = [f for f in self.files if f.kind == fmt.KIND_JOURNAL]
        if not journals:
            return self.problems, []
        head = max(journals, key=lambda f: f.file_id)
        tail = [d for d in head.damage if d.at_tail]
        notes = [f"{head.path}: {_describe(d)} (an append in progress)" for d in tail]
        return self._problems(skip=tail[0] if tail else None), notes

    def _problems(self, skip: codec.Damage | None) -> list[str]:
        out = []
        for f in self.files:
            if f.read_error:
                out.append(f"{f.path}: {f.read_error}")
            if f.header_error:  # its message names the file already
                out.append(f.header_error)
            out += [f"{f.path}: {_describe(d)}" for d in f.damage if d is not skip]
            if f.manifest_damaged and not f.redundant:  # a redundant one goes: not kept
                out.append(
                    f"{f.path}: compacted file without an intact MANIFEST"
                    " (kept; its victims are kept too)"
                )
        return out

    @property
    def live_ids(self) -> set[int]:
        """PUT ids minus ACK ids, over the files recovery would keep."""
        left_out = {f.file_id for f in self.files if f.redundant}
        put = {i for i, where in self.puts.items() if any(w[0] not in left_out for w in where)}
        acked = {i for i, files in self.acks.items() if any(f not in left_out for f in files)}
        return put - acked


def _describe(d: codec.Damage) -> str:
    where = "torn tail" if d.at_tail else "damage"
    text = f"{where} at offset {d.offset}, {counted(d.length, 'byte')}: {d.reason}"
    if d.zeros > 16:  # the write head's space allocated ahead of writes, not written data
        text += f" (the last {d.zeros} of them zero bytes: space allocated ahead of writes)"
    return text


def scan_files(path: str, fs: FileSystem | None = None, only: set[int] | None = None) -> ScanReport:
    """Read every data file of the store at ``path`` (read-only) and parse it
    (only the files ``only`` names, if given). A file that disappears while the
    scan runs (the store's owner deleted it) is skipped. Files a compaction made
    redundant are read too, and marked (``FileScan.redundant``): their records
    do not count in ``live_ids``, as recovery removes them."""
    fs = fs or FileSystem()
    if not os.path.isdir(path):
        raise Error(f"{path} is not a store directory")
    files: list[FileScan] = []
    puts: dict[int, list[tuple[int, int, int, str, int]]] = defaultdict(list)
    acks: dict[int, list[int]] = defaultdict(list)
    on_disk: set[int] = set()
    manifests: dict[int, list[int] | None] = {}  # compacted file id: its victims
    head_found = False
    # Newest first: the first journal file met is the write head, read as recovery
    # reads it (a damaged record at its end is an append cut short, whole).
    for name in sorted(fs.listdir(path), reverse=True):
        file_id = parse_data_file_name(name)
        if file_id is None or (only is not None and file_id not in only):
            # Left out, a file does not count for the MANIFEST rule either: verify()
            # leaves out retired files, which the index already takes for gone.
            continue
        on_disk.add(file_id)
        scan = FileScan(file_id, os.path.join(path, name))
        buf = _read(fs, scan)
        if buf is None:
            continue
        files.append(scan)
        if scan.read_error:
            continue
        scan.size = len(buf)
        try:
            header = codec.decode_file_header(buf[: fmt.FILE_HEADER_SIZE], scan.path)
            codec.check_file_id(header, file_id, scan.path)  # open refuses such a file too
        except Error as e:
            scan.header_error = str(e)
            continue
        scan.kind = header.kind
        if header.kind == fmt.KIND_COMPACTED:
            manifests[file_id] = parse_manifest(
                buf[fmt.FILE_HEADER_SIZE : fmt.FILE_HEADER_SIZE + MAX_MANIFEST_BYTES]
            )
            scan.manifest_damaged = manifests[file_id] is None
        head = header.kind == fmt.KIND_JOURNAL and not head_found
        head_found = head_found or head
        for item in codec.scan(buf, fmt.FILE_HEADER_SIZE, head=head):
            if isinstance(item, codec.Damage):
                if item.unused:  # a live store's write head ends in zeros
                    scan.size = item.offset
                else:
                    scan.damage.append(item)
                continue
            scan.records[fmt.RECORD_TYPE_NAMES[item.rtype]] += 1
            if item.rtype == fmt.TYPE_PUT:
                try:
                    meta = codec.decode_put_meta(buf, item.payload_start, item.end)
                    # Recovery indexes such a record, and the store quarantines it
                    # when it first reads it: damage all the same.
                    codec.decode_put_headers(buf, item.payload_start)
                except (ValueError, struct.error) as e:
                    scan.damage.append(
                        codec.Damage(item.offset, item.size, f"malformed PUT: {e}", False)
                    )
                    continue
                puts[meta.msg_id].append(
                    (file_id, item.offset, item.size, meta.queue, meta.priority)
                )
            elif item.rtype == fmt.TYPE_ACK:
                acks[fmt.ACK_PAYLOAD.unpack_from(buf, item.payload_start)[0]].append(file_id)
    redundant = redundant_files(on_disk, manifests, manifests.__getitem__)
    for scan in files:
        scan.redundant = redundant.get(scan.file_id, "")
    files.sort(key=lambda f: f.file_id)
    return ScanReport(files, dict(puts), dict(acks))


def _read(fs: FileSystem, scan: FileScan) -> bytes | None:
    """The bytes of ``scan``'s file; None if it is gone (deleted by the store's
    owner meanwhile); b"" with ``scan.read_error`` set if it cannot be read."""
    try:
        # Never open what is not a regular file: opening a FIFO waits for a writer.
        if not stat.S_ISREG(os.stat(scan.path).st_mode):
            scan.read_error = "not a regular file"
            return b""
        handle = fs.open(scan.path, writable=False)
    except FileNotFoundError:
        if not os.path.lexists(scan.path):
            return None
        scan.read_error = "cannot read: a symbolic link to a missing file"
        return b""
    except OSError as e:
        scan.read_error = f"cannot read: {e.strerror or e}"
        return b""
    try:
        return handle.read_all()
    except OSError as e:  # a bad sector, say: the other files are still scanned
        scan.read_error = f"cannot read: {e.strerror or e}"
        return b""
    finally:
        handle.close()


def verify(store: Store) -> list[str]:
    """Return every disagreement between the data files and the index (empty if none).

    Holds the store's lock while it runs, and first waits for a running
    compaction pass: a pass publishes its copy before the index knows it, and
    the copy would look like an orphan. Holds the append lock too, so puts wait
    for it to end. Meant for tests and ``msgcask check``.
    """
    problems: list[str] = []
    # A plain put takes only the append lock and leaves its index entry for the
    # next holder of the store's lock: one appended during the scan would be in
    # the data files and not in the index. So no put may append meanwhile, and
    # the entries of those appended before are written first.
    with store._compactor.pass_lock(), store._lock, store._append_lock:
        store._check_open()
        store._apply_pending()
        # Retired files may vanish at any moment (they are unlinked outside the
        # lock) and no longer count: leave them out.
        known = {f for f, a in store._acct.files.items() if not a.retired}
        scan = scan_files(store.path, store._fs, only=known)
        catalog = store._catalog
        env = store._env
        names = {qid: name for name, qid in catalog.queue_ids.items()}
        live_index: dict[int, Live] = {}
        expected = {f: [0, 0, 0, 0] for f in store._acct.files}  # live b, live n, marks, dead
        for key, value in env.items(env.msgs):
            (msg_id,) = keys.MSG_KEY.unpack(key)
            entry = keys.unpack_msg(value)
            if isinstance(entry, Acked):
                for f, slot in ((entry.put_file, 3), (entry.ack_file, 2)):
                    if f not in expected:
                        problems.append(f"acked message {msg_id} refers to unknown file {f}")
                    else:
                        expected[f][slot] += 1
                continue
            if entry.state == keys.STATE_LIVE:
                live_index[msg_id] = entry
            # A DELIVER record is a needed mark of its own file, whichever file the PUT
            # record is in (deliver_file 0: the PUT record itself carries the count).
            if entry.deliver_file and entry.deliver_file not in expected:
                problems.append(
                    f"message {msg_id}'s delivery count is in unknown file {entry.deliver_file}"
                )
            elif entry.deliver_file:
                expected[entry.deliver_file][2] += 1
            if entry.file_id not in expected:
                problems.append(f"message {msg_id} is in unknown file {entry.file_id}")
                continue
            expected[entry.file_id][0] += entry.size
            expected[entry.file_id][1] += 1
        # A file that could not be read is reported once, as that, and counts as damaged.
        unread = {f.file_id for f in scan.files if f.read_error}
        problems += [f"{f.path}: {f.read_error}" for f in scan.files if f.read_error]
        # An accounted file missing on disk (reported below) counts as damaged too: its
        # live messages and counted ACKs went with it, no differences of their own.
        gone = known - {f.file_id for f in scan.files}
        damaged_files = {f.file_id for f in scan.files if f.damage} | unread | gone
        problems += _check_counted_acks(store, scan, expected, damaged_files)
        quarantined = set(store._quarantined)
        file_live = scan.live_ids - quarantined
        missing = file_live - set(live_index)
        extra = set(live_index) - file_live
        for msg_id in sorted(missing)[:20]:
            problems.append(f"message {msg_id} is live in the data files but not in the index")
        for msg_id in sorted(extra)[:20]:
            # A live message whose record sits in a damaged stretch is damage
            # (reported as such), not an index disagreement.
            if live_index[msg_id].file_id not in damaged_files:
                problems.append(
                    f"message {msg_id} is live in the index but acked or absent in the data files"
                )
        order = {bytes(k) for k, _ in env.items(env.order)}
        counts: dict[int, int] = defaultdict(int)
        for msg_id, entry in live_index.items():
            counts[entry.queue_id] += 1
            if keys.order_key(entry.queue_id, entry.priority, msg_id) not in order:
                problems.append(f"live message {msg_id} has no order key")
            locations = {(p[0], p[1]): p[2] for p in scan.puts.get(msg_id, [])}
            size = locations.get((entry.file_id, entry.offset))
            if locations and size is None:
                problems.append(f"message {msg_id} points at no PUT record of its id")
            elif size is not None and size != entry.size:
                problems.append(
                    f"message {msg_id}'s index entry says {counted(entry.size, 'byte')}, "
                    f"its PUT record is {size}"
                )
            # Said once per message, however many PUT records (copies) it has.
            wrong = sorted({p[3] for p in scan.puts.get(msg_id, [])} - {names.get(entry.queue_id)})
            if wrong:
                problems.append(
                    f"message {msg_id} is in queue {_queue_name(names, entry.queue_id)} in the "
                    f"index but in queue {' and '.join(map(repr, wrong))} in its PUT record"
                )
        strays = []
        for key in sorted(order):
            msg_id = keys.order_key_id(key)
            live = live_index.get(msg_id)
            if live is None:
                strays.append(
                    f"order key of message {msg_id} in queue {_queue(names, key)}, "
                    "which is not live in the index"
                )
            elif keys.order_key(live.queue_id, live.priority, msg_id) != key:
                strays.append(
                    f"order key of message {msg_id} in queue {_queue(names, key)}, "
                    "which does not match its index entry's queue and priority"
                )
        problems += strays[:20]
        if len(strays) > 20:
            problems.append(f"{len(strays) - 20} more order keys like these")
        for qid, name in names.items():
            if catalog.counts.get(qid, 0) != counts.get(qid, 0):
                problems.append(
                    f"queue {name!r} counts {catalog.counts.get(qid, 0)} messages, "
                    f"index holds {counts.get(qid, 0)}"
                )
        for file_id, (lb, ln, marks, dead) in expected.items():
            acct = store._acct.files[file_id]  # expected has the accounted files only
            got = (acct.live_bytes, acct.live_messages, acct.needed_marks, acct.dead_puts)
            wrong = [
                f"{what} {have} (its index entries add up to {want})"
                for what, have, want in zip(
                    _ACCOUNT_FIELDS, got, (lb, ln, marks, dead), strict=True
                )
                if have != want
            ]
            if wrong:
                problems.append(f"file {file_id}'s account in the index says " + ", ".join(wrong))
        on_disk = {f.file_id: f.size for f in scan.files}
        for file_id, acct in store._acct.files.items():
            if acct.retired or file_id in unread:
                continue
            if file_id not in on_disk:
                problems.append(f"file {file_id} is accounted but missing on disk")
            elif on_disk[file_id] != acct.size:
                problems.append(
                    f"file {file_id} is {on_disk[file_id]} bytes, accounted {acct.size}"
                )
        for name in store._fs.listdir(store.path):
            found = parse_data_file_name(name)
            if found is not None and found not in store._acct.files:
                problems.append(f"file {found} is on disk but unknown to the index")
    return problems


_ACCOUNT_FIELDS = ("live bytes", "live messages", "needed ACK marks", "dead PUTs")


def _queue(names: dict[int, str], key: bytes) -> str:
    """The name of the queue an order key is in, quoted, or its id if no queue has it."""
    (qid,) = keys.ORDER_PREFIX.unpack_from(key)
    return _queue_name(names, qid)


def _queue_name(names: dict[int, str], qid: int) -> str:
    """The name of queue ``qid``, quoted, or its id if no queue has it."""
    return repr(names[qid]) if qid in names else f"id {qid} (no such queue)"


def _check_counted_acks(
    store: Store, scan: ScanReport, expected: dict[int, list[int]], damaged: set[int]
) -> list[str]:
    """Add the ACKs the files count (``acked_in``) to ``expected``'s needed
    marks, and check each count against the data files: the consumed messages
    without an index entry whose PUT record lies in the counting file's range
    of ids and whose ACK record is in the counted file. Counts involving a
    ``damaged`` file are not compared: what the damage hides is reported as such."""
    problems = []
    accounts = store._acct.files
    on_disk: dict[tuple[int, int], int] = defaultdict(int)
    for msg_id, ack_files in scan.acks.items():
        if store._catalog.lookup(msg_id) is not None:
            continue
        # Copies of one message in one file (each PUT record) count as one.
        for put_file in {put[0] for put in scan.puts.get(msg_id, [])}:
            account = accounts.get(put_file)
            if account is None or not account.in_id_range(msg_id):
                continue
            for ack_file in ack_files:
                if ack_file != put_file:
                    on_disk[put_file, ack_file] += 1
    for put_file, account in accounts.items():
        if account.retired:
            continue
        for ack_file, count in account.acked_in.items():
            if ack_file not in expected:
                problems.append(f"file {put_file} counts ACKs in unknown file {ack_file}")
                continue
            expected[ack_file][2] += count
            held = on_disk.pop((put_file, ack_file), 0)
            if held != count and not {put_file, ack_file} & damaged:
                problems.append(
                    f"file {put_file} counts {counted(count, 'ACK')} of its messages in file "
                    f"{ack_file}, the data files hold {held}"
                )
    for (put_file, ack_file), count in sorted(on_disk.items())[:20]:
        if {put_file, ack_file} & damaged:
            continue
        problems.append(
            f"file {ack_file} holds {counted(count, 'ACK')} of messages in file {put_file} "
            "that nothing in the index accounts for"
        )
    return problems
