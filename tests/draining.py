"""Taking every available message of a queue, for tests that drain a store."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgcask


def each_available(
    queue: msgcask.Queue, selector: Callable[[dict[str, str]], bool] | None = None
) -> Iterator[msgcask.Message]:
    """Deliver the queue's messages one at a time, without waiting, until none is
    available; the caller acks or nacks each before asking for the next (a
    message left delivered is not delivered again, so the loop still ends)."""
    while True:
        try:
            yield queue.get(block=False, selector=selector)
        except msgcask.Empty:
            return


def churn(queue: msgcask.Queue, count: int, body: bytes) -> None:
    """Put ``count`` messages of ``body``, each consumed at once: dead bytes that
    fill the write head (to seal it, or make a file sparse)."""
    for _ in range(count):
        queue.put(body)
        queue.ack(queue.get(block=False))
