"""Rewriting victims: copy what is still needed into a compacted file, swap, delete.

Steps, with the crash point after each (see docs/design.md for why each crash
is safe):

1. read each victim (sealed files never change, so without the lock) and ask
   the index, under the lock, what in it is needed (compactor/needed.py); a
   journal victim with no needed ACK or DELIVER record is not parsed: the
   index's entries in its id range name its records, and only the live ones
   are read (one by one, when there are few);
2. write a new compacted file: header, MANIFEST (the victims' ids), then the
   live PUT records (re-encoded with the current delivery count), the needed
   ACK and DELIVER records; fsync it and the directory;
3. check, under the lock, that each victim's account counts nothing its
   classification missed (else keep every victim, swap nothing, and remove
   the copy); then swap, under the lock, in one index transaction: each copied
   message is pointed at its copy only if the index still has it in the victim
   (compare-and-swap; a message acked meanwhile keeps its ACK, and the copy is
   dead), carried ACK/DELIVER records take over from the victim's, the victims'
   dead PUT records release their ACKs, and the victims are retired; commit;
4. delete the victims (compactor/reclaim.py).

Compacted files are never the journal's write head, so messages that survive
long enough to be copied end up together, apart from fresh traffic, and are
not copied again until they are consumed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msgcask.compactor import needed
from msgcask.compactor.pacing import BATCH
from msgcask.compactor.reclaim import delete_retired, reclaim, release
from msgcask.errors import Error
from msgcask.index.accounting import FileAccount
from msgcask.stats import CompactionReport
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import data_file_name
from msgcask.store.fs import DataFile, crash_point

if TYPE_CHECKING:
    from msgcask.db import Store

log = logging.getLogger("msgcask")


@dataclass
class _Copy:
    rtype: int
    msg_id: int
    victim: int
    data: bytes
    count: int  # deliveries carried by the copy
    put_file: int = 0  # an ACK's: the file holding the PUT record it cancels


@dataclass(frozen=True, slots=True)
class RewriteResult:
    # The victims deleted (those whose records all died since the plan count as
    # deleted whole); the copy's bytes went to ``rewrite``'s ``wrote`` and ``copied``.
    done: CompactionReport
    skipped: tuple[int, ...] = ()  # victims with damaged records, left alone


@dataclass(frozen=True, slots=True)
class _Found:
    """What the classification found in one victim, as its account counts it
    (for ``_unaccounted``)."""

    records: int  # live PUT records, and consumed ones with ACKED entries
    marks: int  # needed ACK records with an ACKED entry, and needed DELIVER records
    counted: dict[int, int]  # PUT file -> needed ACK records its acked_in counts here


def _found(found: needed.Needed) -> _Found:
    counted = {put_file: len(ids) for put_file, ids in found.counted.items() if ids}
    return _Found(
        len(found.puts) + len(found.dead_puts),
        len(found.acks) - sum(counted.values()) + len(found.delivers),
        counted,
    )


def rewrite(
    store: Store,
    victims: list[int],
    between: Callable[[], object],
    wrote: Callable[[int], object],
    copied: Callable[[CompactionReport], object],
) -> RewriteResult:
    """Rewrite ``victims`` into one compacted file; ``between`` runs after
    each victim is read (the runner deletes files drained meanwhile).
    ``wrote`` is told the copy's size once it is written (they were written,
    whatever happens to the copy after: ``stats().bytes_written``), and
    ``copied`` a report of its ``bytes_copied`` once the swap adds it to the
    store's files (it is there whatever fails after: the swap's commit, the
    victims' deletion). A copy removed again before is not ``bytes_copied``."""
    with store._lock:
        store._acct.rewriting.update(victims)
    try:
        return _rewrite(store, victims, between, wrote, copied)
    finally:
        with store._lock:
            store._acct.rewriting.difference_update(victims)
            with store._append_lock:
                store._victims_going = False  # deleted, or kept for a later pass


def _rewrite(
    store: Store,
    victims: list[int],
    between: Callable[[], object],
    wrote: Callable[[int], object],
    copied: Callable[[CompactionReport], object],
) -> RewriteResult:
    skipped: list[int] = []
    copies: list[_Copy] = []
    co_victim_acks: list[tuple[int, int, int]] = []  # (id, victim, PUT file) of ACKs
    dead_puts: dict[int, list[tuple[int, int]]] = {}  # victim -> (id, ACK file)
    classified: dict[int, _Found] = {}
    pacer = store._pacer
    for victim in victims:
        with store._lock:
            if victim == store._journal.head_id or store._acct.peek(victim).retired:
                continue  # no longer a victim since the plan
        buf, found, damaged = needed.find_any(store, victim)
        if damaged:
            # What the damage hides (a live message, a needed ACK) could not be
            # copied, so the file could not be deleted after the swap; and every
            # victim named in the MANIFEST must be. Leave it out of this pass.
            log.warning(
                "msgcask: data file %d has damaged or unreadable records; not compacted", victim
            )
            skipped.append(victim)
            continue
        dead_puts[victim] = found.dead_puts
        classified[victim] = _found(found)
        for n, (msg_id, item, entry) in enumerate(found.puts):
            if not n % BATCH:
                pacer.pause()
            data = buf[item.offset : item.end]
            put = codec.decode_put_meta(buf, item.payload_start, item.end)
            if put.deliveries != entry.deliveries:
                full = codec.decode_put(buf, item.payload_start, item.end)
                data = codec.encode_put(
                    msg_id,
                    full.queue.encode(),
                    full.priority,
                    entry.deliveries,
                    codec.encode_headers(full.headers),
                    full.body,
                )
            copies.append(_Copy(fmt.TYPE_PUT, msg_id, victim, data, entry.deliveries))
        for msg_id, put_file in found.acks:
            if put_file in victims:
                co_victim_acks.append((msg_id, victim, put_file))  # decided below
                continue
            copies.append(
                _Copy(fmt.TYPE_ACK, msg_id, victim, codec.encode_ack(msg_id), 0, put_file)
            )
        for msg_id, count in found.delivers:
            copies.append(
                _Copy(fmt.TYPE_DELIVER, msg_id, victim, codec.encode_deliver(msg_id, count), count)
            )
        pacer.pause()
        between()
    victims = list(dead_puts)
    for msg_id, victim, put_file in co_victim_acks:
        # An ACK whose PUT record goes away in this pass too cancels nothing after
        # it; but if that file was left out (damage, or it became the head), the
        # ACK must be carried like any other.
        if put_file not in dead_puts:
            copies.append(
                _Copy(fmt.TYPE_ACK, msg_id, victim, codec.encode_ack(msg_id), 0, put_file)
            )
    if not victims:
        return RewriteResult(CompactionReport(), tuple(skipped))
    if not copies:  # everything died since the plan: plain deletion will do
        return RewriteResult(reclaim(store, victims), tuple(skipped))

    with store._lock, store._append_lock:
        # A put that does not fit from now on waits for the pass to delete its
        # victims. The copy needs no room check: puts leave a data file's worth
        # under max_store_size for it (Store._put_limit).
        store._victims_going = True
    out_id, id_floor, out, offsets = _write_output(store, victims, copies)
    wrote(out.size)

    with store._lock:
        # Decided before anything is relocated, carried or released: once the
        # swap has moved a kept victim's live messages to the copy, their PUT
        # records in the victim are stale, and nothing accounts for them.
        kept = _unaccounted(store, victims, classified)
    if kept:
        log.error(
            "msgcask: victims %s hold needed records their classification did not find; "
            "all victims kept, nothing swapped (the copy is removed, and a later pass retries)",
            kept,
        )
        _discard(store, out)
        return RewriteResult(CompactionReport(), tuple(skipped))

    # The swap runs in chunks under short lock holds. Index commits are held
    # back until it is complete, so a crash anywhere in it reverts to the state
    # before it (the copy is then an orphan, removed on open).
    with store._commits_held():
        with store._lock:
            store._handles[out_id] = out
            store._acct.add(
                FileAccount(
                    out_id,
                    fmt.KIND_COMPACTED,
                    size=out.size,
                    created=store._clock(),
                    id_floor=id_floor,  # as in its header, as a rebuild reads it
                )
            )
            with store._append_lock:  # puts add to it under that lock alone
                store._data_bytes += out.size
        # In the store's files now (stats() lists it): what the pass copied.
        copied(CompactionReport(bytes_copied=out.size))
        catalog = store._catalog
        for start, end in pacer.spans(len(copies)):
            with store._lock:
                for copy, offset in zip(copies[start:end], offsets[start:end], strict=True):
                    if copy.rtype == fmt.TYPE_PUT:
                        catalog.relocate(
                            copy.msg_id, copy.victim, out_id, offset, len(copy.data), copy.count
                        )
                    elif copy.rtype == fmt.TYPE_ACK:
                        catalog.carry_ack(copy.msg_id, copy.victim, out_id, copy.put_file)
                    else:
                        catalog.carry_deliver(copy.msg_id, copy.count, copy.victim, out_id)
        with store._lock:
            # Decided before anything is released: a kept victim keeps its
            # consumed PUT records on disk, so the ACKs cancelling them must stay
            # needed (released, their files could go, and a rebuild would bring
            # those messages back).
            held = _held(store, victims, dead_puts)
        if not held:
            for victim in victims:
                # Consumed messages stay consumed, so what was found during the
                # classification still holds; those acked since were moved to the copy.
                release(store, victim, dead_puts[victim])
        with store._lock:
            # All victims go, or none: the MANIFEST names them all, and a rebuild
            # that finds some gone treats the others as redundant.
            held = held or [
                v
                for v in victims
                if not store._acct[v].reclaimable
                or store._acct[v].dead_puts
                or store._acct[v].acked_in
            ]
            if held:
                log.error(
                    "msgcask: victims %s still hold needed records after the swap; "
                    "all victims kept (the copy stays, and a later pass retries)",
                    held,
                )
                retired = []
            else:
                retired = list(victims)
                for victim in victims:
                    store._acct[victim].retired = True
                store._acct.swapped.update(victims)
            pos = store._journal.position
        # ACKs that made victims' records dead must be durable before the swap is
        # (see reclaim.reclaim).
        store._sync_journal_to(pos)
        with store._lock:
            crash_point("compact.before_swap_commit")
            store._commit_index(force=True)
    crash_point("compact.after_swap_commit")
    # If this fails, the victims deleted so far are gone, and the error says
    # what they freed; a later pass deletes (and counts) the others.
    return RewriteResult(delete_retired(store, retired), tuple(skipped))


def _unaccounted(store: Store, victims: list[int], classified: dict[int, _Found]) -> list[int]:
    """The victims whose accounts count records their classification did not
    find (wrong counters): the swap would not empty them. Call with the store's
    lock held, before the swap.

    Foreground calls change the accounts meanwhile, but only so: an ACK of a
    victim's live message moves it from ``live_messages`` to ``dead_puts`` (an
    ACKED entry, the victim being rewritten), a quarantined one leaves
    ``live_messages``, and a sealed file's ``needed_marks`` and the ``acked_in``
    counts of its ACKs only fall."""
    files = store._acct.files
    held = []
    for victim in victims:
        account, found = files[victim], classified[victim]
        counted = 0  # at most what each PUT file still counts in the victim
        for put_file, n in found.counted.items():
            puts = files.get(put_file)
            if puts is not None and not puts.retired:
                counted += min(n, puts.acked_in.get(victim, 0))
        if (
            account.live_messages + account.dead_puts > found.records
            or account.needed_marks > found.marks + counted
        ):
            held.append(victim)
    return held


def _discard(store: Store, out: DataFile) -> None:
    """Remove a published copy that no swap pointed at. Nothing refers to it:
    the index does not know it, and its MANIFEST names victims that are all
    still on disk, so on open it is an unfinished compaction's copy either way
    (which is what it stays if the unlink fails)."""
    out.close()
    try:
        store._fs.unlink(out.path)
        store._fs.fsync_dir(store.path)
    except OSError as e:
        log.warning(
            "msgcask: could not remove %s (%s); the next open removes it",
            out.path,
            e.strerror or e,
        )


def _held(
    store: Store, victims: list[int], dead_puts: dict[int, list[tuple[int, int]]]
) -> list[int]:
    """The victims that would still hold something needed once every victim's
    consumed PUT records released their ACKs (some of which may sit in other
    victims). Call with the store's lock held, after the swap's moves."""
    acct = store._acct
    released: dict[int, int] = {}  # needed marks the releases would take from each file
    for victim in victims:
        for _, ack_file in dead_puts[victim]:
            released[ack_file] = released.get(ack_file, 0) + 1
        for ack_file, count in acct[victim].acked_in.items():
            released[ack_file] = released.get(ack_file, 0) + count
    return [
        v
        for v in victims
        if acct[v].live_messages
        or acct[v].needed_marks > released.get(v, 0)
        or acct[v].dead_puts != len(dead_puts[v])
    ]


def _write_output(
    store: Store, victims: list[int], copies: list[_Copy]
) -> tuple[int, int, DataFile, list[int]]:
    """Write and publish the compacted file; return its id, its header's id
    floor, its handle and the offset of each copy."""
    size = sum(len(c.data) for c in copies)
    if not store._leaves_index_reserve(size):
        # The swap's index commit would find no room, and fail the whole index.
        raise Error(
            f"compaction of {store.path} needs {size} bytes free beside the space kept "
            "for the index; nothing changed. Free disk space: files that empty are "
            "still deleted meanwhile"
        )
    with store._lock, store._append_lock:
        out_id = store._allocate_file_id()
        id_floor = store._next_id
    path = os.path.join(store.path, data_file_name(out_id))
    try:
        # Nothing points at the copy yet: if this fails, it goes and the victims stay.
        with store._fs.unpublished(path) as out:
            out.append(codec.encode_file_header(fmt.KIND_COMPACTED, out_id, id_floor))
            out.append(codec.encode_manifest(victims))
            offsets: list[int] = []
            batch: list[bytes] = []
            pos = out.size
            for copy in copies:
                offsets.append(pos)
                pos += len(copy.data)
                batch.append(copy.data)
                if len(batch) >= 256:
                    out.append(b"".join(batch))
                    batch.clear()
                    store._pacer.pause()
            if batch:
                out.append(b"".join(batch))
            crash_point("compact.before_output_fsync")
            store._fs.publish(out, path)
    except OSError as e:
        raise Error(f"compaction could not write {path}: {e.strerror}; nothing changed") from e
    crash_point("compact.after_output_fsync")
    return out_id, id_floor, out, offsets
