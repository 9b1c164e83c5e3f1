"""priority-pin's rounds: one low-priority message, then high-priority ones until the
round has written about one data file.

A round's bytes are what it writes to msgcask's data files: the PUT record of each
of its messages, and a DELIVER and an ACK record for each high-priority one (the
consumer takes and acks those; the low one stays). They are counted from the bodies
the run's payloads hand out, so with the size mix a round of large bodies has fewer
messages than one of small bodies, and every round writes about one data file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msgcask.store import codec
from msgcask.store.format import FILE_HEADER_SIZE
from msgcask.workloads.config import BENCH_QUEUE
from msgcask.workloads.payload import Payloads

if TYPE_CHECKING:
    from msgcask.workloads.config import RunConfig

# What the consumer writes for each high-priority message: a DELIVER and an ACK record.
TAKEN_BYTES = len(codec.encode_deliver(0, 1)) + codec.ACK_RECORD_SIZE


@dataclass(frozen=True)
class Round:
    """One round: its low-priority message, its high ones, the bytes it writes."""

    low: range
    high: range
    written: int


class PinRounds:
    """The rounds of a priority-pin run of ``cfg``, in order.

    Each round takes high-priority messages while taking the next one leaves its bytes
    no farther from a data file's record room than stopping would: it lands within
    half a message's records of one data file. Body sizes repeat every
    ``payloads.period`` messages, so a round is known by where its low message sits in
    the period: ``distinct`` walks the rounds until such a place comes round again.
    """

    def __init__(self, cfg: RunConfig, payloads: Payloads | None = None) -> None:
        payloads = payloads or Payloads(cfg.size, cfg.size_mix, cfg.seed)
        self.count = cfg.pin_rounds
        self.target = cfg.max_file_size - FILE_HEADER_SIZE  # record bytes a data file holds
        self.period = payloads.period
        queue = BENCH_QUEUE.encode()
        self._put = [
            codec.put_record_size(queue, b"", payloads.size_of(i)) for i in range(self.period)
        ]
        self._most_needed = self.target // (min(self._put) + TAKEN_BYTES) + 2
        self._prefix = [0]  # high-priority bytes of messages 0 .. i - 1, over two periods
        for put in self._put + self._put:
            self._prefix.append(self._prefix[-1] + put + TAKEN_BYTES)

    def _high_bytes(self, first: int, n: int) -> int:
        """Bytes that the n high-priority messages from ``first`` write, in constant time."""
        periods, rest = divmod(n, self.period)
        x = first % self.period
        return periods * self._prefix[self.period] + self._prefix[x + rest] - self._prefix[x]

    def round_at(self, start: int) -> Round:
        """The round whose low-priority message is message ``start``."""
        low = self._put[start % self.period]

        def closer_with(k: int) -> bool:
            # The k-th high message brings the round no farther from the target:
            # bytes(k) - target <= target - bytes(k - 1).
            before = low + self._high_bytes(start + 1, k - 1)
            return 2 * before + self._high_bytes(start + k, 1) <= 2 * self.target

        lo, hi = 1, self._most_needed  # closer_with(k) holds up to some k, then never
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if closer_with(mid):
                lo = mid
            else:
                hi = mid - 1
        high = range(start + 1, start + 1 + lo)
        return Round(range(start, start + 1), high, low + self._high_bytes(high.start, lo))

    def __iter__(self) -> Iterator[Round]:
        start = 0
        for _ in range(self.count):
            r = self.round_at(start)
            yield r
            start = r.high.stop

    def _walk(self) -> tuple[list[Round], int]:
        """The rounds up to the first whose place in the period an earlier one had (or
        all of them, if fewer), and the index of that earlier one: the rounds from there
        on repeat."""
        seen: dict[int, int] = {}
        walked: list[Round] = []
        start = 0
        while len(walked) < self.count and start % self.period not in seen:
            seen[start % self.period] = len(walked)
            walked.append(self.round_at(start))
            start = walked[-1].high.stop
        return walked, seen.get(start % self.period, len(walked))

    def distinct(self) -> list[Round]:
        """Rounds whose bodies are, among them, those of every round of the run."""
        return self._walk()[0]

    def high_messages(self) -> int:
        """High-priority messages that all the rounds put."""
        walked, repeat_from = self._walk()
        if self.count <= len(walked):
            return sum(len(r.high) for r in walked[: self.count])
        cycle = walked[repeat_from:]
        cycles, rest = divmod(self.count - repeat_from, len(cycle))
        return (
            sum(len(r.high) for r in walked[:repeat_from])
            + cycles * sum(len(r.high) for r in cycle)
            + sum(len(r.high) for r in cycle[:rest])
        )
