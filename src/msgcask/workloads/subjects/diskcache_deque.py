"""diskcache's Deque: append / popleft on a sqlite-backed cache; no ack."""

from __future__ import annotations

from msgcask.workloads.subjects.base import Delivery, Subject


class DiskcacheDequeSubject(Subject):
    """popleft is get and ack in one: a consumer crash loses the message."""

    name = "diskcache-deque"
    capabilities: frozenset[str] = frozenset()
    sync_note = "peer default (WAL, synchronous=NORMAL)"

    def open(self) -> None:
        from diskcache import Deque

        self._q = Deque(directory=self.path)

    def close(self) -> None:
        self._q.cache.close()

    def put(self, body: bytes, priority: int = 4, headers: dict[str, str] | None = None) -> None:
        self._q.append(body)
        self._notify_put()

    def get(self, timeout: float, selector: object = None) -> Delivery | None:
        body = self._take_or_wait(self._popleft, timeout)
        return None if body is None else Delivery(None, body)

    def _popleft(self) -> bytes | None:
        try:
            body: bytes = self._q.popleft()
        except IndexError:
            return None
        return body

    def ack(self, delivery: Delivery) -> None:
        """Nothing to do: popleft already removed it."""
