"""Which messages go into each put call of a run, and the largest batch record it makes.

The workloads put through these functions (``producer_shares``, ``put_calls``,
``drain_history_span``, ``skip_headers``), and ``largest_batch``
reads the same ranges before the run: msgcask writes a ``put_many`` batch as one
record, which must fit in one data file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msgcask.store import codec
from msgcask.workloads.config import BENCH_QUEUE
from msgcask.workloads.payload import Payloads
from msgcask.workloads.rounds import PinRounds

if TYPE_CHECKING:
    from msgcask.workloads.config import RunConfig

# The headers selector-skip puts on the messages its consumers skip; no other
# workload puts headers (dlq-heavy's dead-letter copies are the store's own records).
SKIP_HEADERS = {"skip": "1"}


def skip_headers(period: int) -> Callable[[int], dict[str, str] | None]:
    """selector-skip's headers of message ``i``: one in ``period`` is to be skipped."""

    def headers_for(i: int) -> dict[str, str] | None:
        return SKIP_HEADERS if i % period == period - 1 else None

    return headers_for


def producer_shares(start: int, stop: int, producers: int) -> list[range]:
    """The messages of [start, stop) each of ``producers`` producers puts, in strides."""
    return [range(start + p, stop, producers) for p in range(producers)]


def put_calls(indices: range, batch: int) -> Iterator[range]:
    """The messages of each put call a producer makes for ``indices``, in order."""
    for k in range(0, len(indices), batch):
        yield indices[k : k + batch]  # a range: no list of every index up front


def drain_history_span(cfg: RunConfig, phase: int) -> tuple[int, int]:
    """[start, stop) of the messages of drain-history's put phase ``phase``: 0 is
    "fresh", 1 to R the fills, R + 1 "after_history"."""
    n, m, repeat = cfg.messages, cfg.fill, cfg.repeat
    if phase == 0:
        return 0, n
    if phase <= repeat:
        start = n + (phase - 1) * m
        return start, start + m
    start = n + repeat * m
    return start, start + n


def put_ranges(cfg: RunConfig, payloads: Payloads) -> Iterator[range]:
    """The index ranges one producer passes to ``produce`` in a run of ``cfg``, but
    the rounds (priority-pin) and fills (drain-history) whose messages sit a multiple
    of ``payloads.period`` after an earlier one's: they repeat its body sizes."""
    if cfg.workload == "priority-pin":  # one producer, whatever cfg.producers
        for r in PinRounds(cfg, payloads).distinct():
            yield from (r.low, r.high)
        return
    if cfg.workload == "deep-queue":
        spans = [(0, cfg.depth)]
    elif cfg.workload == "drain-history":
        phases = [*range(1 + min(cfg.repeat, payloads.period)), cfg.repeat + 1]
        spans = [drain_history_span(cfg, phase) for phase in phases]
    else:
        spans = [(0, cfg.messages)]
    for start, stop in spans:
        yield from producer_shares(start, stop, cfg.producers)


def batch_record_size(count: int, body_bytes: int, headed: int = 0) -> int:
    """The size of the record msgcask writes for a batch of ``count`` messages to the
    bench queue, with ``body_bytes`` of bodies in all, ``headed`` of them with
    SKIP_HEADERS (a PUT record's size is its overhead plus its body's length)."""
    queue = BENCH_QUEUE.encode()
    plain = codec.put_record_size(queue, b"", 0)
    with_headers = codec.put_record_size(queue, codec.encode_headers(SKIP_HEADERS), 0)
    return codec.BATCH_RECORD_SIZE + (count - headed) * plain + headed * with_headers + body_bytes


@dataclass(frozen=True)
class Batch:
    """A put call of a run: how many messages, their bodies' bytes, its record's size."""

    count: int
    body_bytes: int
    record: int


def largest_batch(cfg: RunConfig) -> Batch | None:
    """The put call of ``cfg``'s run that makes the largest msgcask batch record
    (None if the run puts one message a call)."""
    if cfg.batch <= 1:
        return None
    return RunCalls(cfg).largest(cfg.batch)


def largest_fitting_batch(cfg: RunConfig, room: int) -> int:
    """The largest batch under ``cfg.batch`` whose every put call of the run makes a
    record of at most ``room`` bytes (1: single puts, which make no batch record).
    A smaller batch need not fit when a larger one does (its calls start elsewhere in
    the size mix), so this tries each batch down from the largest that can matter."""
    calls = RunCalls(cfg)
    # No batch of more messages than a range, or than room for the smallest bodies.
    smallest = batch_record_size(1, min(calls.sizes)) - codec.BATCH_RECORD_SIZE
    most = min(cfg.batch - 1, calls.longest, (room - codec.BATCH_RECORD_SIZE) // smallest)
    for batch in range(most, 1, -1):
        if calls.first_record(batch) <= room and calls.largest(batch).record <= room:
            return batch
    return 1


class RunCalls:
    """The put calls of a run of ``cfg``, sliced at any batch: its ranges and body sizes.

    Body sizes repeat every ``Payloads.period`` messages, so two calls of as many
    messages, the same step apart, whose first messages are the period apart have the
    same bodies' bytes: ``largest`` looks at each place in the period where a call
    starts, in time bounded by the period and the number of ranges, not by the messages.
    """

    def __init__(self, cfg: RunConfig) -> None:
        payloads = Payloads(cfg.size, cfg.size_mix, cfg.seed)
        self.period = payloads.period
        self.sizes = [payloads.size_of(i) for i in range(self.period)]
        self.ranges = [r for r in put_ranges(cfg, payloads) if r]
        self.longest = max(len(r) for r in self.ranges)
        self.skip_period = cfg.pin_period if cfg.workload == "selector-skip" else None
        self._strided: dict[int, _StridedSums] = {}

    def _sums(self, step: int) -> _StridedSums:
        if step not in self._strided:
            self._strided[step] = _StridedSums(self.sizes, step)
        return self._strided[step]

    def _call(self, call: range) -> tuple[int, int, int]:
        """(count, bodies' bytes, headed) of one put call, in constant time."""
        headed = _headed(call, self.skip_period) if self.skip_period else 0
        return len(call), self._sums(call.step).total(call.start % self.period, len(call)), headed

    def first_record(self, batch: int) -> int:
        """The record of the longest range's first call: at most the largest's."""
        longest = next(r for r in self.ranges if len(r) == self.longest)
        return batch_record_size(*self._call(longest[:batch]))

    def largest(self, batch: int) -> Batch:
        """The put call that makes the largest record when the run puts ``batch``
        messages a call."""
        calls: list[tuple[int, int, int]] = []  # (count, body bytes, headed) looked at
        # The full calls of a range start at its start, then every batch * step
        # messages: grouped by step, but selector-skip's by range (their headers differ).
        full_calls: dict[tuple[int, int], list[range]] = {}
        for n, indices in enumerate(self.ranges):
            full, rest = divmod(len(indices), batch)
            if full:
                key = (indices.step, n if self.skip_period else 0)
                full_calls.setdefault(key, []).append(indices)
            if rest:  # the last call, shorter
                calls.append(self._call(indices[full * batch :]))
        for (step, _), ranges in full_calls.items():
            calls.extend(self._largest_full_calls(step, ranges, batch))
        count, body_bytes, headed = max(calls, key=lambda c: batch_record_size(*c))
        return Batch(count, body_bytes, batch_record_size(count, body_bytes, headed))

    def _largest_full_calls(
        self, step: int, ranges: list[range], batch: int
    ) -> list[tuple[int, int, int]]:
        """(count, body bytes, headed) of full calls of ``ranges`` (all of ``step``)
        among which is the one with the largest record."""
        period, sums = self.period, self._sums(step)
        starts = _Cycles(period, step * batch)
        covered = [0] * (period + 1)  # a difference array over the slots of ``starts``
        for indices in ranges:
            starts.cover(covered, indices.start % period, len(indices) // batch)
        bodies: dict[int, int] = {}  # slot -> bodies' bytes of the calls starting there
        running = 0
        for slot in range(period):
            running += covered[slot]
            if running:
                bodies[slot] = sums.total(starts.at[slot], batch)
        most = max(bodies.values())
        if not self.skip_period:
            return [(batch, most, 0)]
        # selector-skip, one range: its calls have the fewest headed messages or one
        # more, so only a call whose bodies are within one message's headers of the
        # most can make the largest record; count those calls' headers exactly.
        (indices,) = ranges
        extra = batch_record_size(1, 0, 1) - batch_record_size(1, 0, 0)
        return [
            (batch, body_bytes, self._most_headed_at(indices, batch, starts, slot))
            for slot, body_bytes in bodies.items()
            if body_bytes >= most - extra
        ]

    def _most_headed_at(self, indices: range, batch: int, starts: _Cycles, slot: int) -> int:
        """The most SKIP_HEADERS in a full call of ``indices`` starting at ``slot`` of
        ``starts``: the calls k, k + length, k + 2 * length, ... of the range, whose
        first messages go round the skip period with a step of length * batch * step."""
        assert self.skip_period
        skip_period, length = self.skip_period, starts.length
        first = (slot - starts.slot[indices.start % self.period]) % length
        full = len(indices) // batch
        cycle = skip_period // math.gcd(length * batch * indices.step, skip_period)
        top = _most_headed(indices, batch, skip_period)
        most = 0
        for k in range(first, min(full, first + cycle * length), length):
            most = max(most, _headed(indices[k * batch : (k + 1) * batch], skip_period))
            if most == top:
                break
        return most


def _headed(call: range, period: int) -> int:
    """How many messages of ``call`` have SKIP_HEADERS (i % period == period - 1)."""
    g = math.gcd(call.step, period)
    wanted = (period - 1 - call.start) % period  # call.step * t must be this, mod period
    if wanted % g:
        return 0
    every = period // g
    first = wanted // g * pow(call.step // g, -1, every) % every
    return 0 if first >= len(call) else 1 + (len(call) - 1 - first) // every


def _most_headed(indices: range, count: int, period: int) -> int:
    """The most messages with SKIP_HEADERS among ``count`` messages in a row of
    ``indices`` (at most one more than the fewest)."""
    if _headed(indices[:period], period) == 0:  # the step never reaches them
        return 0
    every = period // math.gcd(indices.step, period)
    return -(-count // every)


class _Cycles:
    """The cycles of x -> (x + step) % period over 0 .. period - 1, laid end to end:
    ``slot[x]`` is where x is, ``at[slot]`` the x there; every cycle is as long."""

    def __init__(self, period: int, step: int) -> None:
        self.count = math.gcd(step, period)  # gcd(0, period) == period: cycles of one
        self.length = period // self.count
        self.slot = [0] * period
        self.at = [0] * period
        for c in range(self.count):
            x = c
            for k in range(self.length):
                self.slot[x] = c * self.length + k
                self.at[c * self.length + k] = x
                x = (x + step) % period

    def cover(self, covered: list[int], x: int, n: int) -> None:
        """Mark (in ``covered``, a difference array over the slots) the first ``n``
        values from x along its cycle, which go round it once at most."""
        n = min(n, self.length)
        slot = self.slot[x]
        first = slot - slot % self.length
        end = slot + n
        covered[slot] += 1
        if end <= first + self.length:
            covered[end] -= 1
        else:  # round the end of the cycle to its first slot
            covered[first + self.length] -= 1
            covered[first] += 1
            covered[end - self.length] -= 1


class _StridedSums:
    """Sums of ``sizes`` (cyclic) over runs of values ``step`` apart, in constant time."""

    def __init__(self, sizes: list[int], step: int) -> None:
        self.cycles = _Cycles(len(sizes), step)
        length = self.cycles.length
        self.prefix: list[list[int]] = []
        for c in range(self.cycles.count):
            along = [sizes[x] for x in self.cycles.at[c * length : (c + 1) * length]]
            prefix = [0]
            for size in along + along:
                prefix.append(prefix[-1] + size)
            self.prefix.append(prefix)

    def total(self, x: int, n: int) -> int:
        """sizes[x] + sizes[x + step] + ... , n of them (indices mod the period)."""
        length = self.cycles.length
        c, k = divmod(self.cycles.slot[x], length)
        prefix = self.prefix[c]
        rounds, rest = divmod(n, length)
        return rounds * prefix[length] + prefix[k + rest] - prefix[k]
