"""persist-queue's SQLiteAckQueue: a sqlite table with per-message ack status."""

from __future__ import annotations

import threading
from typing import Any

from msgcask.workloads.subjects.base import ACK, DEAD_LETTER, NACK, Delivery, Subject

# Acked rows stay in the table until cleared; a user clears them now and then.
CLEAR_EVERY = 1000


class PersistQueueAckSubject(Subject):
    """``ack_failed`` is persist-queue's dead letter: the row stays, nobody gets it again."""

    name = "persistqueue-ack"
    capabilities = frozenset({ACK, NACK, DEAD_LETTER})
    sync_note = "peer default (WAL)"

    def open(self) -> None:
        from persistqueue import SQLiteAckQueue

        self._q = SQLiteAckQueue(self.path, multithreading=True, auto_resume=True)
        self._deliveries: dict[int, int] = {}
        self._lock = threading.Lock()
        self._acks = 0

    def close(self) -> None:
        self._q.close()

    def put(self, body: bytes, priority: int = 4, headers: dict[str, str] | None = None) -> None:
        self._q.put(body)
        self._notify_put()

    def get(self, timeout: float, selector: object = None) -> Delivery | None:
        item = self._take_or_wait(self._get_now, timeout)
        if item is None:
            return None
        pqid = item["pqid"]
        with self._lock:
            n = self._deliveries.get(pqid, 0) + 1
            self._deliveries[pqid] = n
        return Delivery(pqid, item["data"], n)

    def _get_now(self) -> Any:
        from persistqueue.exceptions import Empty

        try:
            return self._q.get(block=False, raw=True)
        except Empty:
            return None

    def ack(self, delivery: Delivery) -> None:
        self._q.ack(id=delivery.handle)
        with self._lock:
            self._deliveries.pop(delivery.handle, None)
            self._acks += 1
            clear = self._acks % CLEAR_EVERY == 0
        if clear:
            self._q.clear_acked_data(max_delete=None, keep_latest=None)

    def nack(self, delivery: Delivery) -> bool:
        dead = 0 < self.max_deliveries <= delivery.deliveries
        if dead:
            self._q.ack_failed(id=delivery.handle)
        else:
            self._q.nack(id=delivery.handle)
        return dead
