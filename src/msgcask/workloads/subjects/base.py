"""The one small interface every subject (msgcask or a peer) implements."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

# What a workload may need beyond put/get. A subject lacking one is skipped for
# the workloads that need it, with the reason recorded in the result.
ACK = "ack"  # per-message ack, in any order (get without ack = consume)
NACK = "nack"  # return a delivered message to the queue
DEAD_LETTER = "dead-letter"  # park a message nobody consumes after max_deliveries
PRIORITY = "priority"
SELECTOR = "selector"

Selector = Callable[[dict[str, str]], bool]
T = TypeVar("T")


@dataclass
class Delivery:
    """A delivered message: the subject's own handle, the body, and the delivery count."""

    handle: Any
    body: bytes
    deliveries: int = 1


class Subject:
    """A message store under test.

    Subclasses set ``name``, ``capabilities`` and ``sync_note`` and implement
    the methods. ``get`` returns None when nothing arrived within ``timeout``
    (0 = do not wait). ``nack`` dead-letters the message once its deliveries
    reach ``max_deliveries`` if the subject can dead-letter; it returns True
    when the message was dead-lettered.
    """

    name = "subject"
    capabilities: frozenset[str] = frozenset()
    sync_note = ""
    atomic_batch = False  # put_many writes all or nothing (else: a loop of puts)

    def __init__(self, path: str, *, sync: str, max_deliveries: int) -> None:
        self.path = path
        self.sync = sync
        self.max_deliveries = max_deliveries
        # Peers without a blocking get wait on this, woken by local puts; _puts counts
        # them, so a consumer waits only if no put came since it last looked.
        self._arrived = threading.Condition()
        self._puts = 0

    def open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def put(self, body: bytes, priority: int = 4, headers: dict[str, str] | None = None) -> None:
        raise NotImplementedError

    def put_many(
        self,
        bodies: Sequence[bytes],
        priority: int = 4,
        headers: Sequence[dict[str, str] | None] | None = None,
    ) -> None:
        """An atomic batch where the subject has one; a loop of puts otherwise.
        ``headers``, if given, holds each body's headers (selector-skip's marks)."""
        for k, body in enumerate(bodies):
            self.put(body, priority, headers[k] if headers is not None else None)

    def get(self, timeout: float, selector: Selector | None = None) -> Delivery | None:
        raise NotImplementedError

    def ack(self, delivery: Delivery) -> None:
        raise NotImplementedError

    def nack(self, delivery: Delivery) -> bool:
        raise NotImplementedError

    def disk_bytes(self) -> int:
        """Bytes on disk under the subject's directory (allocated, capped at apparent size)."""
        return directory_bytes(self.path)

    def store_stats(self) -> dict[str, Any] | None:
        """msgcask's own counters (``store.stats()``) as a dict; None for peers."""
        return None

    def file_map(self) -> list[dict[str, Any]] | None:
        """Per-data-file accounting (``stats().files``); None for peers."""
        return None

    def compact(self) -> None:
        """Run a compaction pass now, where the subject has one."""

    # Helpers for peers that poll: wake waiting consumers on put.
    def _notify_put(self) -> None:
        with self._arrived:
            self._puts += 1
            self._arrived.notify_all()

    def _take_or_wait(self, take: Callable[[], T | None], timeout: float) -> T | None:
        """``take()``; if it finds nothing and ``timeout`` > 0, ``take()`` again once a
        put came after the first look (or the timeout passed). A put between the look
        and the wait does not let the wait run its whole timeout."""
        seen = self._puts  # before the look: a put it misses has counted past this
        taken = take()
        if taken is None and timeout > 0:
            with self._arrived:
                self._arrived.wait_for(lambda: self._puts != seen, timeout)
            taken = take()
        return taken


def directory_bytes(path: str) -> int:
    """Disk bytes of every file under ``path``.

    Allocated blocks, but never more than the apparent size: a sparse file
    (a memory map grown ahead of use) must not count as used disk.
    """
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue  # removed between listing and stat (compaction, WAL checkpoint)
            total += min(st.st_size, st.st_blocks * 512)
    return total
