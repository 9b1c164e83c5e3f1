"""persist-queue's file Queue: chunk files of pickled items, no per-message ack."""

from __future__ import annotations

from msgcask.workloads.subjects.base import Delivery, Subject


class PersistQueueFileSubject(Subject):
    """get + task_done stands for get + ack; there is no nack, priority or selector."""

    name = "persistqueue-file"
    capabilities: frozenset[str] = frozenset()
    sync_note = "peer default (no fsync)"

    def open(self) -> None:
        from persistqueue import Queue

        self._q = Queue(self.path, chunksize=1000)

    def close(self) -> None:
        # The file Queue has no close(); its __del__ closes the chunk files.
        self._q.__del__()

    def put(self, body: bytes, priority: int = 4, headers: dict[str, str] | None = None) -> None:
        self._q.put(body)

    def get(self, timeout: float, selector: object = None) -> Delivery | None:
        from persistqueue.exceptions import Empty

        try:
            if timeout <= 0:
                return Delivery(None, self._q.get(block=False))
            return Delivery(None, self._q.get(timeout=timeout))
        except Empty:
            return None

    def ack(self, delivery: Delivery) -> None:
        self._q.task_done()
