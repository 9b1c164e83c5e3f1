"""Latency samples and the counters workers keep, summarised after the run.

Each worker thread owns its logs and counters (no lock on the hot path);
readers sum them. Latencies are seconds, times are seconds since the run's
start.
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections.abc import Iterable
from typing import Any

PUT = "put"
GET_ACK = "get_ack"
OPS = (PUT, GET_ACK)


class OpLog:
    """End times and latencies of one kind of operation in one thread."""

    __slots__ = ("t0", "ends", "lats", "messages", "bytes", "first", "last")

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.ends = array("d")
        self.lats = array("d")
        self.messages = 0  # messages done (a batch counts its size)
        self.bytes = 0  # body bytes done
        self.first = math.inf  # start of the first op, perf_counter seconds
        self.last = -math.inf  # end of the last op

    def done(
        self, start: float, end: float, messages: int, nbytes: int, timed: bool = True
    ) -> None:
        """One call that did ``messages`` messages; ``timed=False`` keeps it out of latency."""
        if timed:
            self.ends.append(end - self.t0)
            self.lats.append(end - start)
        self.messages += messages
        self.bytes += nbytes
        if start < self.first:
            self.first = start
        self.last = end


class Recorder:
    """All op logs of one run (or one phase of a run)."""

    def __init__(self, t0: float | None = None) -> None:
        self.t0 = time.perf_counter() if t0 is None else t0
        self._logs: dict[str, list[OpLog]] = {op: [] for op in OPS}
        self._lock = threading.Lock()

    def log(self, op: str) -> OpLog:
        """A new log for the calling worker."""
        lg = OpLog(self.t0)
        with self._lock:
            self._logs[op].append(lg)
        return lg

    def messages(self, op: str) -> int:
        return sum(lg.messages for lg in list(self._logs[op]))

    def bytes(self, op: str) -> int:
        return sum(lg.bytes for lg in list(self._logs[op]))

    def extend(self, other: Recorder) -> None:
        """Take in the logs of ``other`` (to summarise several phases as one run)."""
        with self._lock:
            for op in OPS:
                self._logs[op].extend(other._logs[op])

    def buffer_bytes(self) -> int:
        """Bytes held in this recorder's latency arrays."""
        return sum(
            lg.ends.itemsize * len(lg.ends) + lg.lats.itemsize * len(lg.lats)
            for op in OPS
            for lg in list(self._logs[op])
        )

    def samples(self, op: str) -> tuple[list[float], list[float]]:
        """(end times, latencies) of ``op`` over every thread, in time order."""
        pairs: list[tuple[float, float]] = []
        for lg in self._logs[op]:
            pairs.extend(zip(lg.ends, lg.lats, strict=True))
        pairs.sort()
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def span(self, op: str) -> float:
        """Seconds from the first start to the last end of ``op`` (0 if it never ran)."""
        logs = [lg for lg in list(self._logs[op]) if lg.messages]
        if not logs:
            return 0.0
        return max(lg.last for lg in logs) - min(lg.first for lg in logs)

    def throughput(self, op: str) -> float | None:
        """Messages per second over the span from the first start to the last end of ``op``."""
        return phased_throughput([self], op)

    def summary(self, op: str) -> dict[str, Any]:
        return summarize(self.samples(op)[1])

    def windows(self, width: float) -> list[dict[str, Any]]:
        """p50/p99/max and counts of every op per window of ``width`` seconds."""
        per_op = {op: self.samples(op) for op in OPS}
        last_ends = [s[0][-1] for s in per_op.values() if s[0]]  # each timed op's last
        # One window at least once anything was timed, even an op that ended at 0.0.
        n_windows = max(1, math.ceil(max(last_ends) / width)) if last_ends else 0
        buckets: dict[str, list[list[float]]] = {op: [[] for _ in range(n_windows)] for op in OPS}
        for op, (ends, lats) in per_op.items():
            for t, lat in zip(ends, lats, strict=True):
                buckets[op][min(int(t / width), n_windows - 1)].append(lat)
        out = []
        for i in range(n_windows):
            row: dict[str, Any] = {"t": round((i + 1) * width, 6)}
            for op in OPS:
                s = summarize(buckets[op][i])
                row[op] = {"count": s["count"], "p50": s["p50"], "p99": s["p99"], "max": s["max"]}
            out.append(row)
        return out


def phased_throughput(recorders: Iterable[Recorder], op: str) -> float | None:
    """Messages of ``op`` per second of the phases that did ``op``: each phase's span
    counts, the time between phases (a wait for compaction, a phase without ``op``) not."""
    recs = list(recorders)
    n = sum(r.messages(op) for r in recs)
    span = sum(r.span(op) for r in recs)
    return n / span if n and span > 0 else None


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 1]) of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(values: list[float]) -> dict[str, Any]:
    """count, p50, p99, max and mean of latencies (None when there are none)."""
    s = sorted(values)
    return {
        "count": len(s),
        "p50": percentile(s, 0.50),
        "p99": percentile(s, 0.99),
        "max": s[-1] if s else None,
        "mean": (sum(s) / len(s)) if s else None,
    }
