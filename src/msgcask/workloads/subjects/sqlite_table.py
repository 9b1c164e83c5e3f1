"""Plain sqlite3 as a queue: WAL, one table, a row per message.

The baseline a user would write by hand: get marks the next row delivered
(priority first, then id) in one UPDATE ... RETURNING, ack deletes the row,
nack puts it back or marks it dead once it reached max_deliveries.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence

from msgcask.workloads.subjects.base import ACK, DEAD_LETTER, NACK, PRIORITY, Delivery, Subject

READY, DELIVERED, DEAD = 0, 1, 2
CHECKPOINT_EVERY = 5000
SYNCHRONOUS = {"always": "FULL", "periodic": "NORMAL", "never": "OFF"}
SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT, priority INTEGER NOT NULL,
    state INTEGER NOT NULL, deliveries INTEGER NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS queue_next ON queue (state, priority DESC, id);
"""
TAKE = """
UPDATE queue SET state = 1, deliveries = deliveries + 1
WHERE id = (SELECT id FROM queue WHERE state = 0 ORDER BY priority DESC, id LIMIT 1)
RETURNING id, body, deliveries
"""


class SqliteSubject(Subject):
    """One connection per thread: a sqlite3 connection must not be shared by threads."""

    name = "sqlite3"
    atomic_batch = True
    capabilities = frozenset({ACK, NACK, DEAD_LETTER, PRIORITY})

    def open(self) -> None:
        os.makedirs(self.path, exist_ok=True)
        self.sync_note = f"WAL, synchronous={SYNCHRONOUS[self.sync]}"
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._acks = 0
        self._conn().executescript(SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                os.path.join(self.path, "queue.db"),
                isolation_level=None,
                timeout=60.0,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={SYNCHRONOUS[self.sync]}")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns = []
        self._local = threading.local()

    def put(self, body: bytes, priority: int = 4, headers: dict[str, str] | None = None) -> None:
        self._conn().execute(
            "INSERT INTO queue (priority, state, deliveries, body) VALUES (?, 0, 0, ?)",
            (priority, body),
        )
        self._notify_put()

    def put_many(
        self,
        bodies: Sequence[bytes],
        priority: int = 4,
        headers: Sequence[dict[str, str] | None] | None = None,
    ) -> None:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO queue (priority, state, deliveries, body) VALUES (?, 0, 0, ?)",
            [(priority, b) for b in bodies],
        )
        conn.execute("COMMIT")
        self._notify_put()

    def get(self, timeout: float, selector: object = None) -> Delivery | None:
        row = self._take_or_wait(lambda: self._conn().execute(TAKE).fetchone(), timeout)
        return None if row is None else Delivery(row[0], row[1], row[2])

    def ack(self, delivery: Delivery) -> None:
        conn = self._conn()
        conn.execute("DELETE FROM queue WHERE id = ?", (delivery.handle,))
        with self._conns_lock:
            self._acks += 1
            checkpoint = self._acks % CHECKPOINT_EVERY == 0
        if checkpoint:
            # A reader and a writer that never pause starve the automatic checkpoint and the
            # WAL grows without bound; a user who watches disk truncates it now and then.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def nack(self, delivery: Delivery) -> bool:
        dead = 0 < self.max_deliveries <= delivery.deliveries
        self._conn().execute(
            "UPDATE queue SET state = ? WHERE id = ?", (DEAD if dead else READY, delivery.handle)
        )
        return dead
