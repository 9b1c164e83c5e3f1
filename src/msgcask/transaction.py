"""All-or-nothing groups of puts and acks (``Store.transaction``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lmdb

from msgcask import delivery, puts, validate
from msgcask.message import Message, delivered_id
from msgcask.pending_put import PendingPut
from msgcask.puts import not_ackable
from msgcask.uncopyable import Uncopyable

if TYPE_CHECKING:
    from msgcask.db import Store


class Transaction(Uncopyable):
    """Collects puts and acks; writes them as one batch when the block ends.

    If the block raises, nothing is written and the exception propagates.
    ``put`` returns the message's id at once (ids are reserved, and an id of a
    rolled-back put is simply never used). The id also sets the message's place in
    its queue (priority, then id): it is queued as of the ``put`` call, ahead of
    messages put elsewhere between that call and the commit.
    """

    _why_uncopyable = (
        "a copy would write the same puts, ids and all, a second time. Make another "
        "with store.transaction()"
    )

    def __init__(self, store: Store):
        from msgcask.db import Store

        if not isinstance(store, Store):
            raise TypeError(
                f"a Transaction belongs to a msgcask.Store (make one with store.transaction()), "
                f"got {type(store).__name__}"
            )
        self._store = store
        self._puts: list[PendingPut] = []
        # The ids acked, in order (a dict: a second ack of one is refused at once).
        self._acks: dict[int, None] = {}
        # The acks given as Messages: the commit checks each is still the latest
        # delivery (a nack and a new delivery may come between ack and commit).
        self._delivered: list[Message] = []
        self._done = False
        self._committed = False  # written: too late for a rollback
        self._failed: BaseException | None = None  # what the commit raised
        self._maybe_written = False  # the journal grew while the failed commit ran
        self.ids: list[int] = []

    def put(
        self,
        queue: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        priority: int = 4,
    ) -> int:
        """Add a put to the transaction; return the id the message will have."""
        self._check_usable()
        pending = PendingPut(
            validate.queue_name(queue),
            validate.body(body),
            validate.headers(headers),
            validate.priority(priority),
            self._store._reserve_id(),
        )
        self._puts.append(pending)
        return pending.msg_id

    def ack(self, message: Message | int) -> None:
        """Add an ack of a delivered, unacked message (a Message get() returned, or
        its id). Refused at once (ValueError, the transaction unchanged) for a
        message that is not delivered-and-unacked now or is acked twice here; the
        commit checks again, since a nack or a new delivery may come between."""
        self._check_usable()
        if isinstance(message, Message):
            msg_id = delivered_id(message)
        elif isinstance(message, int) and not isinstance(message, bool):
            msg_id = message
        else:
            raise TypeError(
                f"expected a Message or a message id (int), got {type(message).__name__}"
            )
        store = self._store
        with store._lock:
            store._check_open()
            held = store._inflight.get(msg_id)
            if isinstance(message, Message):
                delivery.check_delivery(store, message, held)
            if held is None or msg_id in self._acks:
                raise ValueError(not_ackable(msg_id))
        self._acks[msg_id] = None
        if isinstance(message, Message):
            self._delivered.append(message)

    def commit(self) -> list[int]:
        """Write everything; return the ids of the messages put."""
        self._check_usable()
        self._done = True
        if self._puts or self._acks:
            # A failed append leaves the journal as it was, so an unchanged length
            # means the batch is not there (another thread's append only makes
            # the answer "maybe", never a wrong "no").
            journal = self._store._journal
            before = journal.bytes_written
            try:
                self.ids = puts.write_batch(
                    self._store, self._puts, list(self._acks), self._delivered
                )
            except BaseException as e:
                self._maybe_written = journal.bytes_written != before
                if not isinstance(e, lmdb.Error):
                    self._failed = e
                    raise
                self._failed = self._store._index_failed(e)
                raise self._failed from e
        self._committed = True
        return self.ids

    def rollback(self) -> None:
        """Drop the puts and acks added. Refused (ValueError) once the commit has
        written them; after a failed commit or a rollback, it does nothing."""
        if self._committed:
            raise ValueError(
                "this transaction is committed: its puts and acks are written, and a commit "
                "cannot be rolled back; call rollback() in place of commit(), not after it"
            )
        self._done = True
        self._puts.clear()
        self._acks.clear()
        self._delivered.clear()

    def _check_usable(self) -> None:
        if self._failed is not None:
            failed = f"{type(self._failed).__name__}: {self._failed}"
            if not self._maybe_written:
                then = "nothing of it was written: make a new transaction to try again"
            else:
                then = (
                    "it may have been written whole (never in part): reopen the store and "
                    "look before trying again in a new transaction"
                )
            raise ValueError(f"this transaction's commit failed ({failed}); {then}")
        if self._done:
            raise ValueError("this transaction is already committed or rolled back")
        self._store._check_open()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self._done:  # a block may commit (or roll back) by itself
            if exc_type is None:
                self.commit()
            else:
                self.rollback()
