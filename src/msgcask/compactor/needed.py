"""What in a data file is still needed, by the index's count.

The rewrite copies exactly this out of a victim, and ``Store.why_kept`` reports
it: live PUT records (the index points at this very record), ACK records whose
message's PUT record still exists elsewhere, and DELIVER records that hold a
live message's current delivery count.

Two ways to find it. Reading the file and looking up every record it holds
(``parse`` then ``find``) works for any file. A journal file's PUT ids almost
all lie in its range of ids, from its header's id floor up to the next journal
file's (ids are handed out in the order records are appended; only a
transaction's ids, reserved at its put, can be older than the file its commit
lands in), so its live and consumed PUT records can also be found by scanning
that range of the index (``by_id``), at a fraction of the cost, provided the
counts show the range held them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from msgcask.compactor.pacing import BATCH
from msgcask.index.accounting import IdRanges
from msgcask.index.catalog import Catalog
from msgcask.index.keys import STATE_LIVE, Live
from msgcask.store import codec
from msgcask.store import format as fmt

if TYPE_CHECKING:
    from msgcask.db import Store

log = logging.getLogger("msgcask")


@dataclass
class Needed:
    file_id: int
    puts: list[tuple[int, codec.Record, Live]] = field(default_factory=list)
    acks: list[tuple[int, int]] = field(default_factory=list)  # (id, file of its PUT)
    # The ids among ``acks`` that are counted ACKs (no index entry), by the file
    # whose range holds them (its count says how many are needed, not which).
    counted: dict[int, list[int]] = field(default_factory=dict)
    delivers: list[tuple[int, int]] = field(default_factory=list)  # (id, count)
    # (id, ACK file) of the consumed messages whose PUT record is in this file:
    # their ACKs are released once the file is gone.
    dead_puts: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class FileRecords:
    """A file's records by kind, parsed without the index (no lock needed)."""

    puts: list[tuple[int, codec.Record]] = field(default_factory=list)
    acks: list[int] = field(default_factory=list)
    delivers: list[tuple[int, int]] = field(default_factory=list)
    stretches: list[codec.Damage] = field(default_factory=list)  # what did not parse

    @property
    def damaged(self) -> int:
        """Damaged stretches (the write head's unused space is none)."""
        return len(self.stretches)


# Records parsed between pauses (parsing holds no lock, only the interpreter).
PARSE_PAUSE_EVERY = 8


def parse(buf: bytes, pause: Callable[[], None] | None = None) -> FileRecords:
    """Sort a file's records by kind. In the background, pass ``pause``
    (``Pacer.pause``): it is called between batches of records, so a foreground
    put never waits a whole file's parse (the GIL would otherwise pass only
    every 5 ms)."""
    out = FileRecords()
    for n, item in enumerate(codec.scan(buf, fmt.FILE_HEADER_SIZE)):
        if pause is not None and not n % PARSE_PAUSE_EVERY:
            pause()
        if not isinstance(item, codec.Record):
            if not item.unused:
                out.stretches.append(item)
            continue
        if item.rtype == fmt.TYPE_PUT:
            out.puts.append((fmt.PUT_FIXED.unpack_from(buf, item.payload_start)[0], item))
        elif item.rtype == fmt.TYPE_ACK:
            out.acks.append(fmt.ACK_PAYLOAD.unpack_from(buf, item.payload_start)[0])
        elif item.rtype == fmt.TYPE_DELIVER:
            msg_id, count = fmt.DELIVER_PAYLOAD.unpack_from(buf, item.payload_start)
            out.delivers.append((msg_id, count))
    return out


def find(store: Store, file_id: int, records: FileRecords) -> Needed:
    """``classify`` in the background: a batch of records per hold of the
    store's lock, pausing between batches, so foreground latency does not see
    the whole file. What changes in between is the swap's compare-and-swap's
    business."""
    whole = Needed(file_id)
    longest = max(len(records.puts), len(records.acks), len(records.delivers))
    # Only a pass deletes files, and files added meanwhile hold newer ids: the
    # journal files' id ranges stay valid for every batch.
    ranges: IdRanges | None = None
    for start, end in store._pacer.spans(longest):
        batch = FileRecords(
            records.puts[start:end], records.acks[start:end], records.delivers[start:end]
        )
        with store._lock:
            if ranges is None:
                ranges = store._acct.id_ranges()
            found = classify(store._catalog, file_id, batch, ranges)
        whole.puts += found.puts
        whole.acks += found.acks
        whole.delivers += found.delivers
        whole.dead_puts += found.dead_puts
        for put_file, ids in found.counted.items():
            whole.counted.setdefault(put_file, []).extend(ids)
    whole.dead_puts = list(dict(whole.dead_puts).items())  # each released once
    drop_acks_past_their_file(store, whole, store._pacer.pause)
    return whole


def drop_acks_past_their_file(
    store: Store, needed: Needed, pause: Callable[[], None] | None = None
) -> None:
    """Leave out of ``needed.acks`` the counted ACKs (no index entry) that a
    journal file's range takes for its own but whose PUT record it cannot hold.

    A deleted journal file's range of ids falls to the file before it
    (``IdRanges.holder``), whose count of ACKs in this file then seems to cover
    the deleted file's ACKs too. Copied, they would count for nothing, and the
    copy would look as sparse as its victim: every pass would copy them again.
    Only where a file seems to hold more of them than it counts is its highest
    PUT id read (a sealed file never changes, so once); ids above it were the
    deleted file's. Takes the store's lock (re-entrant)."""
    with store._lock:
        head = store._journal.head_id
        suspect = {}
        for put_file, ids in needed.counted.items():
            account = store._acct.files.get(put_file)
            if (
                put_file != head
                and account is not None
                and len(ids) > account.acked_in.get(needed.file_id, 0)
            ):
                suspect[put_file] = ids
    drop: set[int] = set()
    for put_file, ids in suspect.items():
        highest = highest_put_id(store, put_file, pause)
        if highest is not None:
            drop.update(i for i in ids if i > highest)
    if drop:
        needed.acks = [(m, f) for m, f in needed.acks if m not in drop]
        needed.counted = {f: [m for m in ids if m not in drop] for f, ids in needed.counted.items()}


def highest_put_id(
    store: Store, file_id: int, pause: Callable[[], None] | None = None
) -> int | None:
    """The highest id of a PUT record in sealed journal file ``file_id``; None
    if it cannot be read whole (gone, an I/O error, damage), which keeps every
    ACK its range claims."""
    known = store._compactor.highest_put_ids
    if file_id in known:
        return known[file_id]
    handle = store._handles.get(file_id)
    if handle is None:
        return None
    try:
        buf = handle.read_all()
    except (OSError, ValueError):  # ValueError: closed by a deletion meanwhile
        return None
    records = parse(buf, pause)
    # Damage may hide a PUT record: no highest id then (kept, so the file is not
    # read again every pass; a sealed file's bytes never change).
    highest = None if records.damaged else max((m for m, _ in records.puts), default=0)
    known[file_id] = highest
    return highest


# Index entries scanned per hold of the store's lock, in units of the pacer's
# batch (sized for classifying records): scanning an entry costs about a
# quarter as much.
SCAN_BATCH_FACTOR = 4
# Live messages a rewrite reads one by one rather than reading the whole victim.
READ_LIVE_AT_MOST = 32


@dataclass
class ById:
    """A journal file's PUT records in its id range, as the index has them."""

    live: list[tuple[int, Live]] = field(default_factory=list)
    dead: list[tuple[int, int]] = field(default_factory=list)  # (id, ACK file)


def by_id(store: Store, file_id: int) -> ById | None:
    """Scan the index over a journal file's id range (None for other files)."""
    with store._lock:
        files = store._acct.files
        later = [
            f
            for f, a in files.items()
            if f > file_id and a.kind == fmt.KIND_JOURNAL and f in store._handles
        ]
        if files[file_id].kind != fmt.KIND_JOURNAL or not later:
            return None
        # The accounts keep each file's header floor: no header to read.
        first, end = files[file_id].id_floor, files[min(later)].id_floor
    found = ById()
    pacer = store._pacer
    while first < end:
        pacer.pause()
        with store._lock:
            first = store._catalog.entries_between(
                file_id, first, end, BATCH * SCAN_BATCH_FACTOR, found.live, found.dead
            )
    return found


def find_by_id(store: Store, file_id: int) -> tuple[bytes, Needed] | None:
    """``find`` for a journal file with no needed ACK or DELIVER record (those
    only parsing the file finds), without parsing it: its PUT records come
    from ``by_id``, and only the live ones are read (one by one if few, else
    taken from one read of the whole file).
    Returns those records (what ``Needed.puts`` points into) and what is
    needed, or None if this does not apply or the range did not hold every
    live and consumed PUT record of the file: the caller then reads it."""
    with store._lock:
        account = store._acct.peek(file_id)
        if account.needed_marks:
            return None
    found = by_id(store, file_id)
    if found is None:
        return None
    with store._lock:
        # Exact when it matters: every live entry found is still live here and
        # there are as many as the file counts (a message acked meanwhile
        # makes the numbers differ: then read the file, as before).
        still = all(store._catalog.lookup(m) == e for m, e in found.live)
        if (
            not still
            or account.needed_marks
            or len(found.live) != account.live_messages
            or len(found.dead) != account.dead_puts
        ):
            return None
    handle = store._handles[file_id]
    if len(found.live) <= READ_LIVE_AT_MOST:
        buf = b"".join(handle.read(e.offset, e.size) for _, e in found.live)
    else:
        whole = handle.read_all()
        buf = b"".join(whole[e.offset : e.offset + e.size] for _, e in found.live)
    needed = Needed(file_id, dead_puts=found.dead)
    records = list(codec.scan(buf, 0))
    if len(records) != len(found.live):
        return None  # damage: reading the whole file reports it
    for (msg_id, entry), item in zip(found.live, records, strict=True):
        if (
            not isinstance(item, codec.Record)
            or item.rtype != fmt.TYPE_PUT
            or fmt.PUT_FIXED.unpack_from(buf, item.payload_start)[0] != msg_id
        ):
            return None
        needed.puts.append((msg_id, item, entry))
    return buf, needed


def find_any(store: Store, file_id: int) -> tuple[bytes, Needed, int]:
    """What in a sealed file is needed, from the index when ``find_by_id``
    applies, else by reading the file (no lock: it never changes). Returns the
    bytes ``Needed.puts`` points into, what is needed, and how many damaged
    stretches the read found (0 when the file was not read). A file that
    cannot be read (EIO) counts as damaged: its records cannot be copied, so
    it must stay. What it finds damaged or unreadable goes to
    ``stats().corruptions`` (once: every pass finds it again)."""
    compactor = store._compactor
    try:
        from_index = find_by_id(store, file_id)
        if from_index is not None:
            return (*from_index, 0)
        buf = store._handles[file_id].read_all()
    except OSError as e:
        said = str(e.strerror or e)
        if compactor.unreadable.news(file_id, said):
            log.warning("msgcask: data file %d cannot be read (%s)", file_id, said)
        size = store._acct.peek(file_id).size
        compactor.found_damage(file_id, [(0, size, f"read error ({said})")])
        return b"", Needed(file_id), 1
    compactor.unreadable.forget(file_id)
    records = parse(buf, store._pacer.pause)
    if records.stretches:
        compactor.found_damage(file_id, [(d.offset, d.length, d.reason) for d in records.stretches])
    return buf, find(store, file_id, records), records.damaged


def classify(catalog: Catalog, file_id: int, records: FileRecords, ranges: IdRanges) -> Needed:
    """Decide, from the index, which of a file's records are needed now
    (``ranges``: the journal files' id ranges, ``Accounting.id_ranges``).
    Call with the store lock held."""
    needed = Needed(file_id)
    account = catalog.acct.peek(file_id)
    if account.live_messages or account.dead_puts:
        for msg_id, item in records.puts:
            entry = catalog.lookup(msg_id)
            if isinstance(entry, Live):
                if (
                    entry.state == STATE_LIVE
                    and entry.file_id == file_id
                    and entry.offset == item.offset
                ):
                    needed.puts.append((msg_id, item, entry))
            elif entry is not None and entry.put_file == file_id:
                needed.dead_puts.append((msg_id, entry.ack_file))
    # No ACK or DELIVER record becomes needed after it is written, so a file
    # without needed marks has none among the records parsed earlier either.
    if account.needed_marks:
        for msg_id in records.acks:
            found = catalog.needed_ack(msg_id, file_id, ranges)
            if found is not None:
                put_file, counted = found
                needed.acks.append((msg_id, put_file))
                if counted:
                    needed.counted.setdefault(put_file, []).append(msg_id)
        for msg_id, count in records.delivers:
            entry = catalog.lookup(msg_id)
            if (
                isinstance(entry, Live)
                and entry.deliver_file == file_id
                and entry.deliveries == count
            ):
                needed.delivers.append((msg_id, count))
    return needed
