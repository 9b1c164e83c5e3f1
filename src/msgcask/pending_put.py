"""A put waiting to be written as part of a batch: ``put_many``, a transaction, or
the dead-letter move of a nacked message. A module of its own so that the
modules that make one need not import the Store facade."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class PendingPut:
    queue: str
    body: bytes
    headers: dict[str, str] | None
    priority: int
    msg_id: int = 0  # reserved by a transaction; 0 = assign when written
