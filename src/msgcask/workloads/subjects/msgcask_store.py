"""The msgcask subject: one store, one queue named "bench"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgcask.workloads.config import BENCH_QUEUE
from msgcask.workloads.subjects.base import (
    ACK,
    DEAD_LETTER,
    NACK,
    PRIORITY,
    SELECTOR,
    Delivery,
    Selector,
    Subject,
)

QUEUE = BENCH_QUEUE

STAT_FIELDS = (
    "disk_bytes",
    "data_bytes",
    "index_bytes",
    "live_bytes",
    "live_messages",
    "data_files",
    "bytes_written",
    "bytes_put",
)
COMPACTION_FIELDS = (
    "passes",
    "files_deleted",
    "files_rewritten",
    "bytes_copied",
    "bytes_reclaimed",
)
FILE_FIELDS = ("file_id", "kind", "size", "live_bytes", "live_messages", "needed_acks", "active")


class MsgcaskSubject(Subject):
    """msgcask as a subject; ``compaction=False`` opens it with no compaction schedule."""

    name = "msgcask"
    atomic_batch = True
    capabilities = frozenset({ACK, NACK, DEAD_LETTER, PRIORITY, SELECTOR})

    def __init__(
        self,
        path: str,
        *,
        sync: str,
        max_deliveries: int | None,
        max_file_size: int,
        max_store_size: int | None,
        threshold: float,
        compaction: bool,
        compaction_interval: float,
    ) -> None:
        super().__init__(path, sync=sync, max_deliveries=max_deliveries or 0)
        self._dlq_limit = max_deliveries
        self.compaction = compaction
        self.options: dict[str, Any] = {
            "max_file_size": max_file_size,
            "sync": sync,
            "compaction_threshold": threshold,
            # None turns the background schedule off; compact() is then never called.
            "compaction_interval": compaction_interval if compaction else None,
            "max_store_size": max_store_size,
        }
        self.sync_note = f"sync={sync}"
        self.store: Any = None
        self.queue: Any = None

    def open(self) -> None:
        import msgcask

        self.store = msgcask.open(self.path, **self.options)
        self.queue = self.store.queue(QUEUE, max_deliveries=self._dlq_limit)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        self.store = self.queue = None

    def put(self, body: bytes, priority: int = 4, headers: dict[str, str] | None = None) -> None:
        self.queue.put(body, headers=headers, priority=priority)

    def put_many(
        self,
        bodies: Sequence[bytes],
        priority: int = 4,
        headers: Sequence[dict[str, str] | None] | None = None,
    ) -> None:
        if headers is None or not any(headers):
            self.queue.put_many(list(bodies), priority=priority)
            return
        # Headers differ per message (selector-skip): still one all-or-nothing batch.
        with self.store.transaction() as tx:
            for body, h in zip(bodies, headers, strict=True):
                tx.put(QUEUE, body, h, priority)

    def get(self, timeout: float, selector: Selector | None = None) -> Delivery | None:
        import msgcask

        try:
            if timeout <= 0:
                m = self.queue.get(block=False, selector=selector)
            else:
                m = self.queue.get(timeout=timeout, selector=selector)
        except msgcask.Empty:
            return None
        return Delivery(m, m.body, m.deliveries)

    def ack(self, delivery: Delivery) -> None:
        self.queue.ack(delivery.handle)

    def nack(self, delivery: Delivery) -> bool:
        self.queue.nack(delivery.handle)
        return self._dlq_limit is not None and delivery.deliveries >= self._dlq_limit

    # disk_bytes: the base class's walk of the directory, as for every peer. The
    # store's stats().disk_bytes counts the data files' written length, not the
    # chunk of the write head allocated ahead (up to 1 MiB), nor the LOCK file.

    def store_stats(self) -> dict[str, Any] | None:
        if self.store is None:
            return None
        return stats_dict(self.store.stats())

    def file_map(self) -> list[dict[str, Any]] | None:
        if self.store is None:
            return None
        return [_pick(f, FILE_FIELDS) for f in self.store.stats().files]

    def compact(self) -> None:
        if self.compaction:
            self.store.compact()


def stats_dict(stats: Any) -> dict[str, Any]:
    """The scalar fields of ``store.stats()`` plus its compaction counters."""
    out = _pick(stats, STAT_FIELDS)
    out["compaction"] = _pick(getattr(stats, "compaction", None), COMPACTION_FIELDS)
    return out


def _pick(obj: Any, fields: Sequence[str]) -> dict[str, Any]:
    # A field the core does not have reads as None (noted in the result, not a crash).
    return {f: getattr(obj, f, None) for f in fields}
