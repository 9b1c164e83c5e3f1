"""The standard workloads: producer and consumer threads driving one subject.

Every workload is a function ``run_<name>(ctx)`` that drives ``ctx.subject``
and records into recorders from ``ctx.phase(...)``. Message ``i`` carries
``i`` in its body, so a consumer knows which messages to pin whatever the
subject. Latency of get+ack counts only gets that found a message waiting: a
get that had to wait for a producer measures the producer, not the store.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from msgcask.workloads.batches import (
    drain_history_span,
    producer_shares,
    put_calls,
    skip_headers,
)
from msgcask.workloads.config import RunConfig
from msgcask.workloads.payload import Payloads, index_of
from msgcask.workloads.recorder import GET_ACK, PUT, OpLog, Recorder, summarize
from msgcask.workloads.rounds import PinRounds, Round
from msgcask.workloads.subjects.base import (
    ACK,
    DEAD_LETTER,
    NACK,
    PRIORITY,
    SELECTOR,
    Delivery,
    Subject,
)

# What each workload needs from a subject beyond put and get.
REQUIRES: dict[str, frozenset[str]] = {
    "steady": frozenset(),
    "dlq-heavy": frozenset({ACK, NACK, DEAD_LETTER}),
    "priority-pin": frozenset({ACK, PRIORITY}),
    "slow-consumer": frozenset({ACK}),
    "selector-skip": frozenset({ACK, SELECTOR}),
    "drain-history": frozenset(),
    "deep-queue": frozenset(),
}

LOW, HIGH, NORMAL = 0, 9, 4
POLL = 0.05  # seconds a consumer waits for a put before looking again
IDLE_LIMIT = 30.0  # a consumer idle this long after the producers finished gives up


def missing_capabilities(workload: str, capabilities: frozenset[str]) -> list[str]:
    """What a subject with ``capabilities`` lacks to express ``workload`` (empty if nothing)."""
    return sorted(REQUIRES[workload] - capabilities)


class StopRun(Exception):
    """Raised inside a worker to end the run early (another worker failed)."""


# Seconds a run waits for the compaction schedule's passes, however long its interval.
MAX_SETTLE = 60.0
_SETTLE_POLL = 0.05  # seconds between two looks at the passes ended while it waits


@dataclass
class Context:
    """State shared by the workers of one run."""

    subject: Subject
    cfg: RunConfig
    payloads: Payloads
    t0: float = field(default_factory=time.perf_counter)
    recorders: dict[str, Recorder] = field(default_factory=dict)
    phases: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    buffers: list[array[float]] = field(default_factory=list)  # extra latency arrays
    lock: threading.Lock = field(default_factory=threading.Lock)

    def phase(self, name: str) -> Recorder:
        """A recorder for a phase; all share the run's clock."""
        rec = Recorder(self.t0)
        self.recorders[name] = rec
        return rec

    def add(self, key: str, n: int = 1) -> int:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n
            return self.counts[key]

    def totals(self) -> tuple[int, int, int, int]:
        """(messages put, bytes put, messages acked, bytes acked) over every phase so far."""
        recs = list(self.recorders.values())
        return (
            sum(r.messages(PUT) for r in recs),
            sum(r.bytes(PUT) for r in recs),
            sum(r.messages(GET_ACK) for r in recs),
            sum(r.bytes(GET_ACK) for r in recs),
        )

    def buffer_bytes(self) -> int:
        """Bytes the runner itself holds in latency arrays (it grows with the run)."""
        recs = list(self.recorders.values())
        extra = sum(a.itemsize * len(a) for a in list(self.buffers))
        return sum(r.buffer_bytes() for r in recs) + extra

    def fail(self, where: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{where}: {type(exc).__name__}: {exc}")
        self.stop.set()

    def wait_for_compaction(self, passes: int) -> float:
        """Wait while the compaction schedule ends ``passes`` more passes, but at
        most MAX_SETTLE seconds (noted when it cuts the wait); the seconds waited.
        Passes are counted, not intervals: on a loaded machine a pass takes longer,
        and a store settles only in the second pass that starts after the writes
        stop (the first still sees them)."""
        started = time.perf_counter()
        target = self._passes_ended() + passes
        while self._passes_ended() < target:
            if time.perf_counter() - started >= MAX_SETTLE:
                note = (
                    f"waited at most {MAX_SETTLE:g} s for compaction at a time (compaction_interval "
                    f"{self.cfg.compaction_interval:g} s): the schedule may have run fewer passes "
                    "than the run waits for"
                )
                if note not in self.notes:
                    self.notes.append(note)
                break
            time.sleep(min(self.cfg.compaction_interval, _SETTLE_POLL))
        return time.perf_counter() - started

    def _passes_ended(self) -> int:
        stats = self.subject.store_stats() or {}
        return int((stats.get("compaction") or {}).get("passes") or 0)


def run_threads(ctx: Context, workers: list[tuple[str, Callable[[], None]]]) -> None:
    """Run workers in threads; the first failure stops the others."""
    finished = [threading.Event() for _ in workers]

    def guard(name: str, fn: Callable[[], None], done: threading.Event) -> None:
        try:
            fn()
        except StopRun:
            pass
        except Exception as e:  # noqa: BLE001 - recorded in the result, never swallowed
            ctx.fail(name, e)
        finally:
            done.set()

    threads = [
        threading.Thread(target=guard, args=(*w, done), name=f"msgcask-bench-{w[0]}")
        for w, done in zip(workers, finished, strict=True)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except BaseException:
        # Ctrl-C in the main thread: stop the workers as the time limit does, or they
        # would go on putting into the stores that the runner goes on to remove. Wait
        # on their events, not join(): a join that Ctrl-C interrupted can mark a
        # running thread as stopped, and the next join returns at once.
        ctx.stop.set()
        for t, done in zip(threads, finished, strict=True):
            if t.ident is not None:  # started
                done.wait()
        raise


# --- producers ----------------------------------------------------------------------------


def produce(
    ctx: Context,
    log: OpLog,
    indices: range,
    headers_for: Callable[[int], dict[str, str] | None] | None = None,
    priority: int = NORMAL,
    depth_log: list[array[float]] | None = None,
) -> None:
    """Put ``indices`` in batches of ``cfg.batch``; time each call."""
    subject, payloads, batch = ctx.subject, ctx.payloads, ctx.cfg.batch
    for chunk in put_calls(indices, batch):
        if ctx.stop.is_set():
            raise StopRun
        bodies = [payloads.body(i) for i in chunk]
        start = time.perf_counter()
        if batch == 1:
            subject.put(bodies[0], priority, headers_for(chunk[0]) if headers_for else None)
        else:
            subject.put_many(
                bodies, priority, [headers_for(i) for i in chunk] if headers_for else None
            )
        end = time.perf_counter()
        log.done(start, end, len(chunk), sum(len(b) for b in bodies))
        if depth_log is not None:
            # deep-queue: the decile of the target depth this put landed in
            decile = min(9, chunk[0] * 10 // ctx.cfg.depth)
            depth_log[decile].append(end - start)


def producers(
    ctx: Context,
    rec: Recorder,
    start: int,
    stop: int,
    headers_for: Callable[[int], dict[str, str] | None] | None = None,
    depth_logs: list[list[array[float]]] | None = None,
) -> list[tuple[str, Callable[[], None]]]:
    """``cfg.producers`` workers sharing [start, stop) in strides."""
    out: list[tuple[str, Callable[[], None]]] = []
    for p, rng in enumerate(producer_shares(start, stop, ctx.cfg.producers)):
        log = rec.log(PUT)
        dl = depth_logs[p] if depth_logs is not None else None
        out.append(
            (f"producer-{p}", functools.partial(produce, ctx, log, rng, headers_for, NORMAL, dl))
        )
    return out


# --- consumers ----------------------------------------------------------------------------


class Consumer:
    """Gets and acks until ``target`` messages are settled by all consumers together.

    ``decide(delivery)`` returns "ack", "nack" or "hold" (slow-consumer window).
    Settled = acked or dead-lettered; held messages are acked later.
    """

    def __init__(
        self,
        ctx: Context,
        rec: Recorder,
        target: int,
        producers_done: threading.Event,
        settled_key: str,
        selector: Callable[[dict[str, str]], bool] | None = None,
        window: int = 0,
        seed: int = 0,
    ) -> None:
        self.ctx = ctx
        self.log = rec.log(GET_ACK)
        self.target = target
        self.producers_done = producers_done
        self.settled_key = settled_key
        self.selector = selector
        self.window = window
        self.held: list[Delivery] = []
        self.rng = random.Random(seed)

    def settled(self) -> int:
        with self.ctx.lock:
            return self.ctx.counts.get(self.settled_key, 0)

    def __call__(self) -> None:
        ctx, subject, period = self.ctx, self.ctx.subject, self.ctx.cfg.pin_period
        dlq = ctx.cfg.workload == "dlq-heavy"
        idle_since: float | None = None
        while self.settled() < self.target:
            if ctx.stop.is_set():
                raise StopRun
            start = time.perf_counter()
            d = subject.get(0.0, self.selector)
            timed = d is not None
            if d is None:
                d = subject.get(POLL, self.selector)
                if d is None:
                    if self._idle(idle_since):
                        return
                    idle_since = idle_since or time.perf_counter()
                    continue
                start = time.perf_counter()  # the wait is the producer's, not ours
            idle_since = None
            if dlq and index_of(d.body) % period == period - 1:
                if subject.nack(d):
                    ctx.add("dead_lettered")
                    ctx.add(self.settled_key)
                else:
                    ctx.add("nacked")
                continue
            if self.window:
                d = self._swap_into_window(d)
                if d is None:
                    continue
            # Without per-message acks (ACK capability) this finishes the get in the
            # subject's own way: task_done for the file queue, nothing for a deque.
            subject.ack(d)
            end = time.perf_counter()
            self.log.done(start, end, 1, len(d.body), timed)
            ctx.add(self.settled_key)
        self.flush()

    def _swap_into_window(self, d: Delivery) -> Delivery | None:
        """Hold ``d``; once the window is full, return a random held one to ack (late, out of
        order)."""
        self.held.append(d)
        if len(self.held) <= self.window:
            # settled counts received-and-held too, so the run ends when all arrived
            self.ctx.add(self.settled_key)
            return None
        i = self.rng.randrange(len(self.held))
        self.held[i], self.held[-1] = self.held[-1], self.held[i]
        return self.held.pop()

    def flush(self) -> None:
        """Ack what is still held (slow-consumer) once all messages arrived."""
        while self.held:
            d = self.held.pop()
            start = time.perf_counter()
            self.ctx.subject.ack(d)
            end = time.perf_counter()
            self.log.done(start, end, 1, len(d.body))

    def _idle(self, idle_since: float | None) -> bool:
        if not self.producers_done.is_set() or idle_since is None:
            return False
        if time.perf_counter() - idle_since < IDLE_LIMIT:
            return False
        self.ctx.notes.append(
            f"a consumer found nothing for {IDLE_LIMIT:.0f} s after the "
            f"producers finished; {self.settled()} of {self.target} settled"
        )
        self.ctx.stop.set()
        return True


def produce_and_consume(
    ctx: Context,
    phase: str,
    start: int,
    stop: int,
    target: int,
    headers_for: Callable[[int], dict[str, str] | None] | None = None,
    selector: Callable[[dict[str, str]], bool] | None = None,
    window: int = 0,
    with_producers: bool = True,
    with_consumers: bool = True,
) -> Recorder:
    """One phase: producers put [start, stop) while consumers settle ``target`` messages."""
    rec = ctx.phase(phase)
    done = threading.Event()
    workers = producers(ctx, rec, start, stop, headers_for) if with_producers else []
    if not with_producers:
        done.set()
    inner = list(workers)

    def producing() -> None:
        run_threads(ctx, inner)
        done.set()

    jobs: list[tuple[str, Callable[[], None]]] = [("producers", producing)] if inner else []
    key = f"settled:{phase}"
    if with_consumers:
        for c in range(ctx.cfg.consumers):
            jobs.append(
                (
                    f"consumer-{c}",
                    Consumer(
                        ctx, rec, target, done, key, selector, window, ctx.cfg.seed * 1000 + c
                    ),
                )
            )
    run_threads(ctx, jobs)
    return rec


# --- the workloads ------------------------------------------------------------------------


def run_steady(ctx: Context) -> None:
    n = ctx.cfg.messages
    produce_and_consume(ctx, "main", 0, n, n)


def note_unpinned(ctx: Context) -> None:
    """Note a run that pins no message because -n is below the default period.
    (A --pin-every past -n is refused; the default is taken, for tiny runs.)"""
    cfg = ctx.cfg
    n = cfg.messages
    if cfg.pin_every is None and cfg.pin_period > n:
        # One message takes no --pin-every (2 at least, -n at most).
        fix = (
            f"pass --pin-every 2 to {n:,}"
            if n >= 2
            else "run 2 messages or more with --pin-every 2"
        )
        are = "message is" if n == 1 else "messages are"
        ctx.notes.append(
            f"{n:,} {are} fewer than the default pin period ({cfg.pin_period:,}): "
            "no message was pinned, so the disk figures say nothing about pinned "
            f"messages; {fix} to pin some"
        )


def run_dlq_heavy(ctx: Context) -> None:
    # Settled = acked + dead-lettered, so every message counts once.
    n = ctx.cfg.messages
    note_unpinned(ctx)
    produce_and_consume(ctx, "main", 0, n, n)


def run_slow_consumer(ctx: Context) -> None:
    n = ctx.cfg.messages
    produce_and_consume(ctx, "main", 0, n, n, window=ctx.cfg.window)


def run_selector_skip(ctx: Context) -> None:
    n, period = ctx.cfg.messages, ctx.cfg.pin_period
    # Messages i with i % P == P - 1 in [0, n): counted, not listed (n may be huge,
    # and nothing may hold the run up before the time limit can stop it).
    skipped = n // period
    ctx.counts["skipped"] = skipped
    note_unpinned(ctx)

    def selector(headers: dict[str, str] | None) -> bool:
        return not headers or "skip" not in headers

    produce_and_consume(ctx, "main", 0, n, n - skipped, skip_headers(period), selector)


@contextlib.contextmanager
def _stop_and_wake_on_failure(ctx: Context, peer: threading.Semaphore) -> Iterator[None]:
    """If the block fails, stop the run and release ``peer``, which the other
    thread may be waiting on."""
    try:
        yield
    except BaseException:
        ctx.stop.set()
        peer.release()
        raise


def run_priority_pin(ctx: Context) -> None:
    """Per round: 1 low-priority message, then about one data file of high-priority ones;
    the consumer takes as many as there were high ones, so every low one stays."""
    cfg, subject = ctx.cfg, ctx.subject
    rounds = PinRounds(cfg, ctx.payloads)
    put: list[Round] = []  # the rounds the producer put, for their sizes in the result
    ctx.phases["priority_pin"] = {"rounds": cfg.pin_rounds, "rounds_completed": 0}
    if cfg.producers > 1 or cfg.consumers > 1:
        ctx.notes.append("priority-pin runs one producer and one consumer (rounds are ordered)")
    rec = ctx.phase("main")
    put_log, get_log = rec.log(PUT), rec.log(GET_ACK)
    ready, taken = threading.Semaphore(0), threading.Semaphore(1)

    def producer() -> None:
        # On failure, wake the consumer waiting on a round that never comes.
        with _stop_and_wake_on_failure(ctx, ready):
            for r in rounds:
                taken.acquire()
                if ctx.stop.is_set():
                    raise StopRun
                produce(ctx, put_log, r.low, priority=LOW)
                produce(ctx, put_log, r.high, priority=HIGH)
                put.append(r)
                ready.release()

    def consumer() -> None:
        # On failure, wake the producer waiting for a round to be taken.
        with _stop_and_wake_on_failure(ctx, taken):
            take_rounds()

    def take_rounds() -> None:
        for r, this in enumerate(rounds):
            ready.acquire()
            if ctx.stop.is_set():
                raise StopRun
            for _ in this.high:
                start = time.perf_counter()
                d = subject.get(0.0)
                timed = d is not None
                if d is None:
                    d = subject.get(5.0)
                    if d is None:
                        raise RuntimeError(f"round {r}: a high-priority message is missing")
                if index_of(d.body) not in this.high:
                    raise RuntimeError(
                        f"round {r}: got message {index_of(d.body)} before the round's "
                        f"high-priority ones ({this.high.start} to {this.high.stop - 1})"
                    )
                subject.ack(d)
                get_log.done(start, time.perf_counter(), 1, len(d.body), timed)
            ctx.phases["priority_pin"]["rounds_completed"] = r + 1
            taken.release()

    run_threads(ctx, [("producer", producer), ("consumer", consumer)])
    ctx.counts["pinned"] = ctx.phases["priority_pin"]["rounds_completed"]
    ctx.phases["priority_pin"].update(
        high_messages_per_round=_spread([len(r.high) for r in put]),
        round_bytes=_spread([r.written for r in put]),
    )


def _spread(values: list[int]) -> dict[str, float | None]:
    """min, mean and max of ``values`` (None for none)."""
    if not values:
        return {"min": None, "mean": None, "max": None}
    return {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}


def run_drain_history(ctx: Context) -> None:
    """Steady on a fresh store, R x (fill M, drain M), steady again; compare the two."""
    cfg, n, m = ctx.cfg, ctx.cfg.messages, ctx.cfg.fill
    fresh = produce_and_consume(ctx, "fresh", *drain_history_span(cfg, 0), n)
    drains: list[dict[str, Any]] = []
    for r in range(cfg.repeat):
        if ctx.stop.is_set():
            return
        fill = drain_history_span(cfg, r + 1)
        produce_and_consume(ctx, f"fill-{r}", *fill, 0, with_consumers=False)
        produce_and_consume(ctx, f"drain-{r}", 0, 0, m, with_producers=False)
        stats = ctx.subject.store_stats() or {}
        drain: dict[str, Any] = {
            "round": r,
            "disk_bytes": ctx.subject.disk_bytes(),
            "data_files": stats.get("data_files"),
        }
        if getattr(ctx.subject, "compaction", False):
            # Right after the drain the schedule has not had its turn yet; look again after
            # two more passes, which is what the spec's "about one file" means.
            ctx.wait_for_compaction(2)
            drain["data_files_settled"] = (ctx.subject.store_stats() or {}).get("data_files")
            drain["disk_bytes_settled"] = ctx.subject.disk_bytes()
        drains.append(drain)
    after = produce_and_consume(ctx, "after_history", *drain_history_span(cfg, cfg.repeat + 1), n)
    ctx.phases["drain_history"] = {
        "fresh": phase_summary(fresh),
        "after_history": phase_summary(after),
        "drains": drains,
        "put_throughput_ratio": _ratio(after.throughput(PUT), fresh.throughput(PUT)),
        "get_ack_throughput_ratio": _ratio(after.throughput(GET_ACK), fresh.throughput(GET_ACK)),
        "put_p99_ratio": _ratio(after.summary(PUT)["p99"], fresh.summary(PUT)["p99"]),
        "get_ack_p99_ratio": _ratio(after.summary(GET_ACK)["p99"], fresh.summary(GET_ACK)["p99"]),
    }


def run_deep_queue(ctx: Context) -> None:
    """Put D messages, consume none; put latency per tenth of the depth."""
    cfg = ctx.cfg
    rec = ctx.phase("main")
    # arrays, not lists of floats: the runner's own memory must not hide the store's
    depth_logs = [[array("d") for _ in range(10)] for _ in range(cfg.producers)]
    ctx.buffers.extend(a for per in depth_logs for a in per)
    run_threads(ctx, producers(ctx, rec, 0, cfg.depth, None, depth_logs))
    deciles = []
    for k in range(10):
        lats = [x for per in depth_logs for x in per[k]]
        s = summarize(lats)
        deciles.append(
            {
                "depth_upto": (k + 1) * cfg.depth // 10,
                "count": s["count"],
                "put_p50": s["p50"],
                "put_p99": s["p99"],
            }
        )
    ctx.phases["deep_queue"] = {"deciles": deciles}


def phase_summary(rec: Recorder) -> dict[str, Any]:
    return {
        "put_per_s": rec.throughput(PUT),
        "get_ack_per_s": rec.throughput(GET_ACK),
        "put": rec.summary(PUT),
        "get_ack": rec.summary(GET_ACK),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


WORKLOADS: dict[str, Callable[[Context], None]] = {
    "steady": run_steady,
    "dlq-heavy": run_dlq_heavy,
    "priority-pin": run_priority_pin,
    "slow-consumer": run_slow_consumer,
    "selector-skip": run_selector_skip,
    "drain-history": run_drain_history,
    "deep-queue": run_deep_queue,
}


def expected_operations(cfg: RunConfig) -> int:
    """Puts plus gets a run will do (for the progress bar)."""
    n = cfg.messages
    if cfg.workload == "deep-queue":
        return cfg.depth
    if cfg.workload == "drain-history":
        return 4 * n + 2 * cfg.repeat * cfg.fill
    if cfg.workload == "priority-pin":
        return cfg.pin_rounds + 2 * PinRounds(cfg).high_messages()
    if cfg.workload in ("dlq-heavy", "selector-skip"):
        return 2 * n - n // cfg.pin_period  # one in P is never acked
    return 2 * n
