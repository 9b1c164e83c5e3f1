"""litequeue: a sqlite table with ready / locked / done / failed states."""

from __future__ import annotations

import threading
from typing import Any

from msgcask.workloads.subjects.base import ACK, DEAD_LETTER, NACK, Delivery, Subject

# Done rows stay until pruned; a user prunes them now and then.
PRUNE_EVERY = 1000


class LiteQueueSubject(Subject):
    """One shared connection, so every call holds a lock; ``mark_failed`` is its dead letter."""

    name = "litequeue"
    capabilities = frozenset({ACK, NACK, DEAD_LETTER})
    sync_note = "peer default (WAL, synchronous=NORMAL)"

    def open(self) -> None:
        import os

        from litequeue import LiteQueue

        os.makedirs(self.path, exist_ok=True)
        self._lock = threading.Lock()
        self._q = LiteQueue(os.path.join(self.path, "queue.db"))
        self._deliveries: dict[str, int] = {}
        self._done = 0

    def close(self) -> None:
        self._q.close()

    def put(self, body: bytes, priority: int = 4, headers: dict[str, str] | None = None) -> None:
        with self._lock:
            self._q.put(body)
        self._notify_put()

    def get(self, timeout: float, selector: object = None) -> Delivery | None:
        m = self._take_or_wait(self._pop, timeout)
        if m is None:
            return None
        with self._lock:
            n = self._deliveries.get(m.message_id, 0) + 1
            self._deliveries[m.message_id] = n
        return Delivery(m.message_id, bytes(m.data), n)

    def _pop(self) -> Any:
        with self._lock:
            return self._q.pop()

    def ack(self, delivery: Delivery) -> None:
        with self._lock:
            self._q.done(delivery.handle)
            self._deliveries.pop(delivery.handle, None)
            self._done += 1
            if self._done % PRUNE_EVERY == 0:
                self._q.prune(include_failed=False)

    def nack(self, delivery: Delivery) -> bool:
        dead = 0 < self.max_deliveries <= delivery.deliveries
        with self._lock:
            if dead:
                self._q.mark_failed(delivery.handle)
            else:
                self._q.retry(delivery.handle)
        return dead
