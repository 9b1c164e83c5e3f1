"""The Queue handle returned by ``Store.queue``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import lmdb

from msgcask import delivery, puts, validate
from msgcask.message import Message
from msgcask.pending_put import PendingPut

if TYPE_CHECKING:
    from msgcask.db import Store


class Queue:
    """A named queue of a store. Thread-safe; cheap to create.

    Delivery order is priority first (9 before 0), then first in, first out.
    """

    # Each method turns LMDB failures into IndexFailedError inline, not through a
    # wrapper like the Store's ``_index_errors``: a wrapper call would add about
    # half a microsecond to every put, get and ack.
    __slots__ = ("_store", "_name")

    def __init__(self, store: Store, name: str):
        from msgcask.db import Store

        if not isinstance(store, Store):
            raise TypeError(f"a Queue belongs to a msgcask.Store, got {type(store).__name__}")
        # Checked here too, not only by Store.queue: every record of this handle
        # carries the name, and one the format cannot hold would fail the index or
        # be dropped by a rebuild.
        self._name = validate.queue_name(name)
        self._store = store

    @classmethod
    def _of(cls, store: Store, name: str) -> Queue:
        """A handle for ``name``, which ``store`` has checked already (Store.queue)."""
        handle = cls.__new__(cls)
        handle._store, handle._name = store, name
        return handle

    @property
    def name(self) -> str:
        """The queue's name (fixed: a handle always reaches the same queue)."""
        return self._name

    def __repr__(self) -> str:
        return f"<msgcask.Queue {self._name!r}>"

    def put(self, body: bytes, headers: dict[str, str] | None = None, priority: int = 4) -> int:
        """Store a message and return its id.

        With ``sync="always"`` the message is on disk when this returns; in
        every mode it survives a crash of this process.

        Raises TypeError/ValueError for bad arguments, MessageTooLargeError if
        the record does not fit in a data file, StoreFullError if the data files
        would exceed ``max_store_size`` even after compaction freed what it could,
        ClosedError after ``close()``.
        """
        b, h, p = validate.body(body), validate.headers(headers), validate.priority(priority)
        try:
            return puts.put(self._store, self._name, b, h, p)
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e

    def put_many(
        self,
        bodies: Iterable[bytes],
        headers: dict[str, str] | None = None,
        priority: int = 4,
    ) -> list[int]:
        """Store several messages atomically (all or none after a crash); return their ids."""
        if isinstance(bodies, (bytes, bytearray, memoryview, str)):
            raise TypeError("put_many takes an iterable of message bodies, not one body")
        if not isinstance(bodies, Iterable):
            raise TypeError(
                f"put_many takes an iterable of message bodies (a list of bytes), "
                f"got {type(bodies).__name__}"
            )
        hdrs = validate.headers(headers)
        prio = validate.priority(priority)
        pending = [PendingPut(self._name, validate.body(b), hdrs, prio) for b in bodies]
        if not pending:
            self._store._check_open()  # nothing to write, but a closed store says so
            return []
        try:
            return puts.write_batch(self._store, pending, [])
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e

    def get(
        self,
        block: bool = True,
        timeout: float | None = None,
        selector: Callable[[dict[str, str]], bool] | None = None,
    ) -> Message:
        """Deliver the next available message.

        ``selector(headers) -> bool`` skips messages it rejects (pass the same
        callable each time: the queue remembers where it got to). It runs with
        the store locked and must not call the store (msgcask.Error). It gets a
        copy of the headers, so it cannot change the delivered ones. The message
        stays invisible to other consumers until ``ack`` or ``nack``.

        Raises ``msgcask.Empty`` (also a ``queue.Empty``) if nothing is
        available: at once with ``block=False``, else after ``timeout`` seconds.
        """
        if not isinstance(block, bool):
            raise TypeError(f"block must be a bool, got {type(block).__name__}")
        wait = validate.timeout(timeout)
        if selector is not None and not callable(selector):
            raise TypeError("selector must be a callable taking the headers dict, or None")
        try:
            return delivery.get(self._store, self._name, block, wait, selector)
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e

    def ack(self, message: Message | int) -> None:
        """Consume a delivered message for good.

        ValueError if it is not delivered, or if ``message`` is a Message of an
        earlier delivery (the message was delivered again since) or one another
        store delivered (ids repeat across stores)."""
        try:
            delivery.ack(self._store, self._name, message)
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e

    def nack(self, message: Message | int) -> None:
        """Give a delivered message back to the queue, or to the dead-letter queue
        once it has been delivered ``max_deliveries`` times. The dead-letter copy
        carries ``x-dead-letter-from`` and ``x-original-id`` headers, unless they
        would not fit in a data file (logged); MessageTooLargeError if even the
        copy without them does not fit, and the message stays delivered."""
        try:
            delivery.nack(self._store, self._name, message)
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e

    def __len__(self) -> int:
        """Live messages in the queue: available plus delivered-but-unacked."""
        try:
            return self._store._len(self._name)
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e

    def browse(self) -> Iterator[Message]:
        """Iterate over the queue's messages in delivery order without delivering them."""
        try:
            yield from delivery.browse(self._store, self._name)
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e

    def purge(self) -> int:
        """Remove every available (not delivered) message; return how many."""
        try:
            return self._store._purge(self._name)
        except lmdb.Error as e:
            raise self._store._index_failed(e) from e
