"""Delivery: handing a queue's messages to consumers and settling them.

``get`` takes the next available message (in priority, then FIFO order, past
the queue's cursor and what a selector rejects), writes its DELIVER record and
holds it as in flight; ``ack`` consumes it for good; ``nack`` puts it back, or
moves it to its dead-letter queue once it was delivered ``max_deliveries``
times; ``browse`` lists the queue without delivering. A message whose record
cannot be read back intact is quarantined, not delivered.

These are the Store's own operations, kept apart from the facade in
msgcask/db.py: they run under the store's lock and use its state directly
(see the threading model there).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from msgcask import puts
from msgcask.errors import Empty, MessageTooLargeError
from msgcask.index import keys
from msgcask.index.keys import Live
from msgcask.message import Message, delivered_id
from msgcask.pending_put import PendingPut
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.recovery import CorruptionReport

if TYPE_CHECKING:
    from msgcask.db import QueueRuntime, Store

log = logging.getLogger("msgcask")

Selector = Callable[[dict[str, str]], bool]


def get(
    store: Store, name: str, block: bool, timeout: float | None, selector: Selector | None
) -> Message:
    """``Queue.get`` (its contract is there): deliver the next available message
    of queue ``name``, waiting on the queue's condition while there is none."""
    store._pacer.calls += 1
    deadline = None if timeout is None else time.monotonic() + timeout
    waits = block and timeout != 0
    with store._lock:
        while True:
            store._check_open()
            # A get that waits creates the queue: a put to it must find its waiters.
            rt = store._runtime(name) if waits else store._existing_runtime(name)
            message = None if rt is None else _deliver_next(store, rt, selector)
            if message is not None:
                return message
            if rt is None or not block:
                raise Empty(f"queue {name!r} has no message available")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise Empty(f"no message arrived on queue {name!r} within {timeout} s")
            # No put can come once writes stop (and this get could not
            # write its DELIVER record anyway).
            store._check_writable()
            with store._append_lock:
                if store._pending:  # a put came in since this lock was taken
                    store._apply_pending()  # (a wait catches up by itself)
                    continue
                # Counted under the append lock: a put that appends after
                # this sees it and wakes this consumer.
                rt.waiting += 1
            try:
                rt.cond.wait(remaining)
            finally:
                rt.waiting -= 1


def _deliver_next(store: Store, rt: QueueRuntime, selector: Selector | None) -> Message | None:
    found = _find_next(store, rt, selector)
    if found is None:
        return None
    msg_id, entry, put = found
    deliveries = min(entry.deliveries + 1, fmt.MAX_DELIVERIES_COUNTED)
    file_id, _ = store._append_mark(codec.encode_deliver(msg_id, deliveries))
    store._catalog.deliver(msg_id, deliveries, file_id, entry)
    store._inflight[msg_id] = (rt, deliveries)
    return store._message_type(msg_id, rt.name, put.body, put.headers, entry.priority, deliveries)


def _find_next(
    store: Store, rt: QueueRuntime, selector: Selector | None
) -> tuple[int, Live, codec.Put] | None:
    """The next available message for ``selector``, moving the queue's cursor."""
    try:
        start = rt.cursor if selector is None else rt.selector_cursors.get(selector)
    except TypeError:  # a selector that cannot be weakly referenced has no cursor
        start = None
    prefix = keys.ORDER_PREFIX.pack(rt.qid)
    inflight = store._inflight
    last_key = None
    # The cursor is closed before anything is written: a write may commit the
    # index transaction, which would invalidate it.
    with store._env.txn.cursor(db=store._env.order) as cursor:
        more = cursor.set_range(start or prefix)
        while more:
            key = cursor.key()
            if key[:4] != prefix:
                break
            last_key = key
            msg_id = keys.order_key_id(key)
            more = cursor.next()
            if msg_id in inflight:
                continue
            entry = store._catalog.lookup(msg_id)
            put = _read_put(store, msg_id, entry) if isinstance(entry, Live) else None
            if put is None or (
                selector is not None and not _run_selector(store, selector, put.headers)
            ):
                continue
            assert isinstance(entry, Live)
            _set_cursor(rt, selector, bytes(key))
            return msg_id, entry, put
    if last_key is not None:
        _set_cursor(rt, selector, bytes(last_key))
    return None


def _run_selector(store: Store, selector: Selector, headers: dict[str, str]) -> bool:
    """``selector(headers)`` on a copy of the headers; a store call it makes
    raises (``_check_open``)."""
    store._selecting = threading.get_ident()
    try:
        # A copy: the dict is the one the delivered Message gets, so what the
        # selector does with its headers must not reach it. (A read-only view
        # would break selectors typed or written for a dict.)
        return bool(selector(dict(headers)))
    finally:
        store._selecting = None


def _set_cursor(rt: QueueRuntime, selector: Selector | None, key: bytes) -> None:
    if selector is None:
        rt.cursor = key
    else:
        # A selector that is not weak-referenceable simply gets no cursor.
        with contextlib.suppress(TypeError):
            rt.selector_cursors[selector] = key


def _read_put(
    store: Store, msg_id: int, entry: Live, *, quarantine: bool = True
) -> codec.Put | None:
    """Read and check a live message's record; quarantine it if damaged
    (unless not ``quarantine``: then only None says it could not be read)."""
    handle = store._handles[entry.file_id]
    try:
        raw = handle.read(entry.offset, entry.size)
    except OSError as e:  # a bad sector is damage too: do not wedge the queue
        raw, read_error = b"", f"read error ({e.strerror})"
    else:
        read_error = ""
    put = codec.read_put(raw) if raw else None
    if put is not None and put.msg_id == msg_id:
        return put
    if not quarantine:
        return None
    problem = read_error or (
        "checksum mismatch or unparsable record"
        if put is None
        else (f"record holds message {put.msg_id}")
    )
    report = CorruptionReport(
        entry.file_id,
        handle.path,
        entry.offset,
        entry.size,
        f"message {msg_id}: {problem}",
        "quarantined",
    )
    store._corruptions.append(report)
    log.error("msgcask: %s", report)
    store._catalog.quarantine(msg_id, entry)
    store._quarantined.add(msg_id)
    return None


def _resolve_delivered(store: Store, name: str, target: object) -> tuple[QueueRuntime, int]:
    """The queue and id of ``target``, a message delivered on queue ``name``
    and not acked since. Looks the queue up without creating it: a refused
    ack or nack must not bring back a queue deleted meanwhile."""
    if isinstance(target, Message):
        msg_id = delivered_id(target)
    elif isinstance(target, int) and not isinstance(target, bool):
        msg_id = target
    else:
        raise TypeError(f"expected a Message or a message id (int), got {type(target).__name__}")
    rt = store._queues.get(name)
    held = store._inflight.get(msg_id)
    if rt is None or held is None or held[0] is not rt:
        raise ValueError(
            f"message {msg_id} is not delivered-and-unacked on queue {name!r}; only "
            "messages returned by get() on this queue can be acked or nacked, once"
        )
    if isinstance(target, Message):
        check_delivery(store, target, held)
    return rt, msg_id


def check_delivery(store: Store, message: Message, held: tuple[QueueRuntime, int] | None) -> None:
    """Refuse a Message another store delivered (ids repeat across stores),
    or one of an earlier delivery of a message delivered again since: acking
    it would consume a delivery its consumer never saw. ``held`` is what
    ``_inflight`` holds for its id (the caller holds the store's lock)."""
    if type(message) is not store._message_type and type(message) is not Message:
        raise ValueError(
            f"message {message.id} was delivered by another store, or by an earlier "
            f"open of {store._path}: ack or nack it through the store that delivered it"
        )
    if held is None:
        return
    deliveries = message.deliveries
    # Checked before the count is compared: True and 1.0 equal a delivery 1.
    if isinstance(deliveries, bool) or not isinstance(deliveries, int):
        raise TypeError(
            f"a Message's deliveries must be an int, got {type(deliveries).__name__}; "
            "pass the Message get() returned, or its id"
        )
    if held[1] != deliveries:
        raise ValueError(_not_the_latest_delivery(message.id, deliveries, held[1]))


def ack(store: Store, name: str, target: object) -> None:
    """``Queue.ack``: consume ``target`` (a delivered Message or its id) for good."""
    store._pacer.calls += 1
    with store._lock:
        if store._closed or store._selecting is not None:
            store._check_open()
        _, msg_id = _resolve_delivered(store, name, target)
        file_id, _ = store._append_mark(codec.encode_ack(msg_id))
        store._catalog.ack(msg_id, file_id)
        del store._inflight[msg_id]
        pos = store._journal.position
    if store._sync_always:
        store._sync_journal_to(pos)


def nack(store: Store, name: str, target: object) -> None:
    """``Queue.nack``: put ``target`` back in its queue, or move it to the dead-letter
    queue once it was delivered ``max_deliveries`` times."""
    store._pacer.calls += 1
    with store._lock:
        store._check_open()
        rt, msg_id = _resolve_delivered(store, name, target)
        entry = store._catalog.lookup(msg_id)
        if not isinstance(entry, Live):  # gone while delivered: nothing to put back
            del store._inflight[msg_id]
            return
        max_deliveries, dead_letter_queue = store._queue_settings.get(name, (None, None))
        due = max_deliveries is not None and entry.deliveries >= max_deliveries
        # A delivered message is its consumer's until settled: one that cannot
        # be read for its dead-letter copy (an I/O error may pass) goes back,
        # not to quarantine; the next get reads it again, and quarantines it
        # only if it still cannot.
        put = _read_put(store, msg_id, entry, quarantine=False) if due else None
        if put is None:
            del store._inflight[msg_id]
            rt.rewind(keys.order_key(rt.qid, entry.priority, msg_id))
            rt.wake()
            return
        dlq = dead_letter_queue or f"DLQ.{name}"
    # Dead-letter: one batch of PUT (a new id, in the DLQ) and ACK of the original.
    # Written outside the lock, since a batch may first wait for space.
    try:
        _dead_letter(store, rt, msg_id, put, dlq)
    except ValueError as e:
        if isinstance(e, MessageTooLargeError) or msg_id in store._inflight:
            raise
        # The batch's ACK was refused: meanwhile another thread acked the
        # message or deleted its queue. Said as a nack, not as the batch's ack
        # (whose message speaks of transactions).
        raise ValueError(
            f"message {msg_id} is not delivered-and-unacked on queue {name!r} any more: "
            "it was acked, or its queue deleted, while it was being dead-lettered; "
            "nothing was dead-lettered"
        ) from None


def _dead_letter(store: Store, rt: QueueRuntime, msg_id: int, put: codec.Put, dlq: str) -> None:
    """Write the dead-letter move of a delivered message (without the lock)."""
    headers = {**put.headers, "x-dead-letter-from": rt.name, "x-original-id": str(msg_id)}
    # Keeping the message matters more than the two headers that say where it
    # came from: it goes without them when they would not fit.
    if len(headers) > fmt.MAX_HEADERS:
        without_them = (
            f"it carries {len(put.headers)} headers, and a message may carry {fmt.MAX_HEADERS}"
        )
    else:
        try:
            puts.write_batch(store, [PendingPut(dlq, put.body, headers, put.priority)], [msg_id])
            return
        except MessageTooLargeError:
            without_them = "with them it would not fit in a data file"
    try:
        puts.write_batch(store, [PendingPut(dlq, put.body, put.headers, put.priority)], [msg_id])
        log.warning(
            "msgcask: message %d dead-lettered into %r without x-dead-letter-from and "
            "x-original-id: %s",
            msg_id,
            dlq,
            without_them,
        )
    except MessageTooLargeError as e:
        raise MessageTooLargeError(
            f"message {msg_id} is due for dead-lettering into {dlq!r}, but its copy there "
            f"does not fit in a data file ({e}). It stays delivered and unacked: ack it "
            "to drop it, or reopen the store with a larger max_file_size and nack it again"
        ) from None


def browse(store: Store, name: str) -> Iterator[Message]:
    """``Queue.browse``: yield the queue's messages in delivery order, a chunk at a
    time, without delivering them."""
    start: bytes | None = None
    qid: int | None = None
    while True:
        chunk: list[Message] = []
        with store._lock:
            store._check_open()
            rt = store._existing_runtime(name)
            # Deleted between chunks (and perhaps made again: a new queue id,
            # whose keys all sort after ``start``): the queue browsed is gone.
            if rt is None or qid not in (None, rt.qid):
                return
            qid = rt.qid
            for key in store._catalog.queue_order(rt.qid, start):
                if key == start:
                    continue
                start = key
                msg_id = keys.order_key_id(key)
                entry = store._catalog.lookup(msg_id)
                if not isinstance(entry, Live):  # pragma: no cover
                    continue
                # A delivered message stays its consumer's to ack or nack:
                # if it cannot be read here it is left out, not quarantined
                # (a nack puts it back, and the next get quarantines it).
                put = _read_put(store, msg_id, entry, quarantine=msg_id not in store._inflight)
                if put is not None:
                    chunk.append(
                        store._message_type(  # so another store's ack refuses it
                            msg_id,
                            name,
                            put.body,
                            put.headers,
                            entry.priority,
                            entry.deliveries,
                        )
                    )
                if len(chunk) >= 256:
                    break
        if not chunk:
            return
        yield from chunk


def _not_the_latest_delivery(msg_id: int, deliveries: int, latest: int) -> str:
    """Why a Message of delivery ``deliveries`` cannot settle message ``msg_id``,
    delivered ``latest`` times: an earlier delivery's, a listing of browse() made
    before the delivery, or a count no get() gave (a Message built or changed)."""
    if 0 < deliveries < latest:
        what = (
            f"this Message is delivery {deliveries} of message {msg_id}, which was delivered "
            f"again since (delivery {latest})"
        )
    elif deliveries == 0:
        what = (
            f"this Message of message {msg_id} was listed by browse() before the message was "
            f"delivered (delivery {latest} is unacked)"
        )
    else:
        what = (
            f"this Message says it is delivery {deliveries} of message {msg_id}, whose latest "
            f"delivery is {latest}: get() did not return it"
        )
    return f"{what}; ack or nack the latest delivery's Message (or the message's id)"
