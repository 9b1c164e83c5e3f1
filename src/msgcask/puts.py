"""Puts: storing messages, one at a time or as an all-or-nothing batch.

A plain put into an existing queue, with room in the write head and no
``max_store_size``, takes only the append lock (``_put_unlocked``) and leaves its
index entry pending; every other put and every batch takes the store's lock
too. Under ``max_store_size`` a write checks its room first, and when refused
waits for a pass that is about to free room or tries again after space
pressure has run (``making_room``).

These are the Store's own operations, kept apart from the facade in
msgcask/db.py: they use its state directly (see the threading model there).
The room checks they call (``Store._ensure_room``, ``_check_fits``,
``_wait_for_pass``) stay methods of the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from msgcask import delivery
from msgcask.errors import Error, StoreFullError
from msgcask.index import keys
from msgcask.message import Message
from msgcask.pending_put import PendingPut
from msgcask.store import codec

if TYPE_CHECKING:
    from msgcask.db import Store

# Times a write refused for want of room under max_store_size is tried again, each
# after space pressure has run anew: other threads' puts may have taken the room
# its check found, or acks emptied files since.
ROOM_RETRIES = 2
MAX_PENDING = 1024  # puts whose index entries wait for the store's lock, at most

_T = TypeVar("_T")


class CopyUnderWay(Exception):
    """A put does not fit under the puts' limit (``Store._put_limit``) while a
    compaction pass is writing its copy or has yet to delete its victims: it
    waits for the pass, then tries again."""


def not_ackable(msg_id: int) -> str:
    """Why an ack in a transaction is refused (at the call, or at the commit)."""
    return (
        f"message {msg_id} is not delivered and unacked (or is acked twice in this "
        "transaction); only messages returned by get() can be acked, once"
    )


def put(store: Store, name: str, body: bytes, headers: dict[str, str] | None, priority: int) -> int:
    """Store one message in queue ``name`` (arguments already validated); return its id."""
    if store._options.max_store_size is None:  # no room to wait or retry for
        return _put_once(store, name, body, headers, priority)
    return making_room(
        store,
        lambda: _put_once(store, name, body, headers, priority),
        lambda: codec.put_record_size(name.encode(), codec.encode_headers(headers), len(body)),
    )


def write_batch(
    store: Store, puts: list[PendingPut], acks: list[int], delivered: Iterable[Message] = ()
) -> list[int]:
    """Write puts and acks as one all-or-nothing batch; return the new ids.
    ``delivered``: the Messages among the acks (a transaction's), checked
    again here since each may have been delivered again after its ``ack``."""
    if store._options.max_store_size is None:  # no room to wait or retry for
        return _write_batch_once(store, puts, acks, delivered)
    delivered = list(delivered)  # looked at again if the batch is tried again
    return making_room(
        store,
        lambda: _write_batch_once(store, puts, acks, delivered),
        lambda: batch_record_size([(p, codec.encode_headers(p.headers)) for p in puts], acks),
    )


def making_room(store: Store, write: Callable[[], _T], size: Callable[[], int]) -> _T:
    """Run ``write``, a call that checks its room under max_store_size for
    ``size()`` bytes and changes nothing when refused: while a pass is about
    to free room, wait for it; refused, try again (space pressure runs anew)
    up to ROOM_RETRIES times before the StoreFullError goes to the caller,
    unless nothing a pass could free would make room."""
    refusals = 0
    while True:
        try:
            return write()
        except CopyUnderWay:
            store._wait_for_pass()
        except StoreFullError:
            refusals += 1
            if refusals > ROOM_RETRIES or not store._compactor.may_make_room(size()):
                raise


def batch_record_size(encoded: list[tuple[PendingPut, bytes]], acks: list[int]) -> int:
    """The size of the batch record of ``encoded`` puts (with their headers
    encoded) and ``acks``."""
    return (
        codec.BATCH_RECORD_SIZE
        + sum(codec.put_record_size(p.queue.encode(), h, len(p.body)) for p, h in encoded)
        + len(acks) * codec.ACK_RECORD_SIZE
    )


def _put_once(
    store: Store, name: str, body: bytes, headers: dict[str, str] | None, priority: int
) -> int:
    store._pacer.calls += 1
    hbytes = codec.encode_headers(headers)
    size = codec.put_record_size(name.encode(), hbytes, len(body))
    store._check_record_size(size)
    limited = store._options.max_store_size is not None
    if limited:
        store._ensure_room(size)
    else:
        msg_id = _put_unlocked(store, name, body, hbytes, priority, size)
        if msg_id:
            return msg_id
    with store._lock, store._append_lock:
        if store._closed or store._selecting is not None:
            store._check_open()
        rt = store._queues.get(name)
        created = rt is None and name not in store._catalog.queue_ids
        if rt is None:
            rt = store._runtime(name)
        msg_id = store._next_id
        try:
            if limited:
                store._check_fits(size)
            record = codec.encode_put(msg_id, rt.name_bytes, priority, 0, hbytes, body)
            file_id, offset = store._append(record, single_record=True)
        except BaseException:
            if created:  # a failed call changes nothing, not even the queue list
                store._forget_queues([name])
            raise
        store._next_id = msg_id + 1
        store._catalog.add(msg_id, rt.qid, priority, file_id, offset, size, 0, fresh=True)
        store._bytes_put += size
        if rt.cursor is not None or rt.selector_cursors:
            rt.rewind(keys.order_key(rt.qid, priority, msg_id))
        rt.wake()
        pos = store._journal.position
    if store._sync_always:
        store._sync_journal_to(pos)
    return msg_id


def _put_unlocked(
    store: Store, name: str, body: bytes, hbytes: bytes, priority: int, size: int
) -> int:
    """A put that takes only the append lock: into an existing queue, with
    room in the write head and no space limit to check. Returns its id, or
    0 if the put must take the store's lock instead."""
    rt = store._queues.get(name)
    if rt is None:
        return 0
    with store._append_lock:
        if store._closed or store._selecting is not None:
            store._check_open()
        if (
            store._queues.get(name) is not rt  # deleted meanwhile
            or len(store._pending) >= MAX_PENDING
            or not store._journal.fits(size)
        ):
            return 0
        msg_id = store._next_id
        record = codec.encode_put(msg_id, rt.name_bytes, priority, 0, hbytes, body)
        file_id, offset = store._append_locked(record, single_record=True)
        store._next_id = msg_id + 1
        store._pending.append((msg_id, rt, priority, file_id, offset, size))
        store._bytes_put += size
        # Read here: a consumer counts itself waiting under this lock too.
        waiting = rt.waiting
        pos = store._journal.position
    if waiting:
        with store._lock:  # taking it writes the entry the consumer looks for
            rt.wake()
    if store._sync_always:
        store._sync_journal_to(pos)
    return msg_id


def _write_batch_once(
    store: Store, puts: list[PendingPut], acks: list[int], delivered: Iterable[Message]
) -> list[int]:
    store._pacer.calls += 1
    encoded = [(p, codec.encode_headers(p.headers)) for p in puts]
    size = batch_record_size(encoded, acks)
    store._check_record_size(size)
    # Acks alone only free space: like a plain ack, they go past max_store_size
    # (a full store must stay consumable).
    if puts:
        store._ensure_room(size)
        if not store._leaves_index_reserve(size):  # a syscall: not under the locks
            raise Error(
                f"cannot write to {store._path}: no room for this batch beside the space "
                "kept for the index. Free disk space, then retry; nothing of this call "
                "was stored."
            )
    with store._lock, store._append_lock:
        store._check_open()
        seen: set[int] = set()
        for msg_id in acks:
            if msg_id not in store._inflight or msg_id in seen:
                raise ValueError(not_ackable(msg_id))
            seen.add(msg_id)
        for message in delivered:
            delivery.check_delivery(store, message, store._inflight.get(message.id))
        created = sorted(
            {p.queue for p, _ in encoded} - set(store._catalog.queue_ids) - set(store._queues)
        )
        runtimes = [store._runtime(p.queue) for p, _ in encoded]
        records: list[bytes] = []
        ids: list[int] = []
        next_id = store._next_id
        for (p, hbytes), rt in zip(encoded, runtimes, strict=True):
            msg_id = p.msg_id
            if not msg_id:
                msg_id, next_id = next_id, next_id + 1
            records.append(codec.encode_put(msg_id, rt.name_bytes, p.priority, 0, hbytes, p.body))
            ids.append(msg_id)
        records += [codec.encode_ack(m) for m in acks]
        length = sum(len(r) for r in records)
        header = codec.encode_batch_header(len(records), length)
        put_bytes = sum(len(r) for r in records[: len(puts)])
        try:
            if puts:
                store._check_fits(size)
            file_id, offset = store._append(header + b"".join(records))
        except BaseException:
            if created:  # a failed call changes nothing, not even the queue list
                store._forget_queues(created)
            raise
        store._next_id = next_id
        offset += len(header)
        added = []
        for i, record in enumerate(records):
            if i < len(puts):
                p, rt = puts[i], runtimes[i]
                added.append((ids[i], rt.qid, p.priority, offset, len(record), 0))
                if rt.cursor is not None or rt.selector_cursors:
                    rt.rewind(keys.order_key(rt.qid, p.priority, ids[i]))
            offset += len(record)
        store._catalog.add_many(file_id, added, fresh=True)
        for msg_id in acks:
            store._catalog.ack(msg_id, file_id)
            del store._inflight[msg_id]
        for rt in {id(r): r for r in runtimes}.values():
            rt.wake()
        store._bytes_put += put_bytes
        pos = store._journal.position
    store._wait_durable(pos)
    return ids
