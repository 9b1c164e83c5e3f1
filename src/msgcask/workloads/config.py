"""Parameters of one workload run, with the defaults of the workload spec."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from msgcask.options import MAX_FILE_SIZE_LIMIT, MIN_FILE_SIZE, Options
from msgcask.store.format import FILE_HEADER_SIZE, MAX_DELIVERIES_COUNTED
from msgcask.workloads.payload import SIZE_MIX

WORKLOAD_NAMES = (
    "steady",
    "dlq-heavy",
    "priority-pin",
    "slow-consumer",
    "selector-skip",
    "drain-history",
    "deep-queue",
)

SYNC_MODES = ("always", "periodic", "never")

# The parameters only some workloads read, and those workloads: the command line
# refuses one named for another workload, which would leave it unread.
READ_BY: dict[str, tuple[str, ...]] = {
    "messages": tuple(w for w in WORKLOAD_NAMES if w not in ("priority-pin", "deep-queue")),
    "pin_every": ("dlq-heavy", "selector-skip"),
    "window": ("slow-consumer",),
    "rounds": ("priority-pin",),
    "depth": ("deep-queue",),
    "fill": ("drain-history",),
    "repeat": ("drain-history",),
    "max_deliveries": ("dlq-heavy",),
}

# The queue msgcask's runs put to (its name is part of every record).
BENCH_QUEUE = "bench"

MiB = 2**20
# Bytes of a data file kept for what a message adds to its body: the file and
# record headers, the queue name and the headers a workload sets (a dead-letter
# copy's included).
RECORD_ROOM = 512
# Bounds of --interval, seconds: the sampler's period and the latency windows'
# width. Each window is a row of the result, so a tiny one made millions of rows.
MIN_INTERVAL = 0.01
MAX_INTERVAL = 3600.0
# The most producer and consumer threads: each is a Python thread sharing the
# interpreter lock, so past a few dozen a run measures the threads' contention.
MAX_THREADS = 64
# The most messages the kill -9 child puts before it is killed: it must fill the
# store within crash.FILL_TIMEOUT (600 s), about 1,700 puts a second at this bound.
MAX_CRASH_MESSAGES = 1_000_000
# The most messages, rounds or cycles a run takes: a message's index goes in 8 bytes
# of its body, and the runner slices ranges of them, which hold at most 2**63 - 1
# (one past it failed the run); a million puts a second for the longest --time-limit
# (1e9 s) come to this.
MAX_COUNT = 10**15
# The longest --time-limit, seconds (about 31 years, so "1e9" means no limit):
# threading's waits fail past threading.TIMEOUT_MAX (about 292 years).
MAX_TIME_LIMIT = 1e9


@dataclass
class RunConfig:
    """Everything a run depends on; stored verbatim in the result's ``params``.

    Defaults follow the workload spec; ``messages`` is N for steady-like
    workloads, ``depth`` is D for deep-queue and ``fill`` is M for drain-history.
    """

    workload: str = "steady"
    messages: int = 200_000
    size: int = 1024
    size_mix: bool = False
    pin_every: int | None = None  # P; None means the workload's own default
    batch: int = 1  # 1 = single puts; the batched variant of the spec uses 100
    sync: str = "periodic"
    window: int = 1000  # W of slow-consumer
    rounds: int | None = None  # priority-pin; None = 4x what max_store_size holds
    depth: int = 2_000_000  # D of deep-queue
    fill: int = 500_000  # M of drain-history
    repeat: int = 3  # R of drain-history
    max_file_size: int = 1 * MiB
    max_store_size: int | None = None
    threshold: float = 0.5
    compaction: str = "on"  # on | off | both
    compaction_interval: float = 1.0
    max_deliveries: int = 1
    producers: int = 1
    consumers: int = 1
    peers: list[str] = field(default_factory=list)
    seed: int = 0
    interval: float = 0.5  # sampler period and latency window, seconds
    crash_messages: int = 20_000
    time_limit: float | None = None  # seconds per subject; then the run stops, "incomplete"
    reopen: bool = True
    progress: bool = True
    one_cpu: bool = False  # run every thread of the process on one CPU (msgcask.confine_to_one_cpu)

    def __post_init__(self) -> None:
        if self.workload not in WORKLOAD_NAMES:
            raise ValueError(f"unknown workload {self.workload!r}; one of {WORKLOAD_NAMES}")
        if self.sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, not {self.sync!r}")
        if self.compaction not in ("on", "off", "both"):
            raise ValueError("compaction must be on, off or both")
        if self.size < 16:
            raise ValueError("size must be at least 16 bytes (the body carries its index)")
        if not MIN_FILE_SIZE <= self.max_file_size <= MAX_FILE_SIZE_LIMIT:
            # Before the bodies' check, which would ask for a larger file than 0 bytes.
            raise ValueError(
                f"max_file_size must be {MIN_FILE_SIZE} (64 KiB) to {MAX_FILE_SIZE_LIMIT} "
                f"(2 GiB) bytes, the data file sizes msgcask takes; not {self.max_file_size}"
            )
        largest = max(s for s, _ in SIZE_MIX) if self.size_mix else self.size
        if largest + RECORD_ROOM > self.max_file_size:
            smaller = (
                "leave out --size-mix"
                if self.size_mix
                else f"lower --size to at most {self.max_file_size - RECORD_ROOM}"
            )
            raise ValueError(
                f"bodies of {largest} bytes do not fit in a data file of {self.max_file_size} "
                f"bytes with their record's header and headers ({RECORD_ROOM} bytes kept for "
                f"them): {smaller}, or raise --max-file-size to at least "
                f"{largest + RECORD_ROOM} bytes"
            )
        for name in (
            "messages",
            "batch",
            "window",
            "depth",
            "fill",
            "repeat",
            "max_deliveries",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("messages", "depth", "fill", "repeat"):
            if getattr(self, name) > MAX_COUNT:
                raise ValueError(f"{name} must be at most {MAX_COUNT:,}, not {getattr(self, name)}")
        if self.max_deliveries > MAX_DELIVERIES_COUNTED:
            # Store.queue refuses it too, but only once the run has begun.
            raise ValueError(
                f"max_deliveries must be at most {MAX_DELIVERIES_COUNTED} (msgcask counts "
                f"deliveries in 16 bits), not {self.max_deliveries}"
            )
        if self.pin_every is not None and self.pin_every < 2:
            raise ValueError("pin_every must be at least 2")
        pins = self.workload in READ_BY["pin_every"]
        if pins and self.pin_every is not None and self.pin_every > self.messages:
            # Message i is pinned when i % P == P - 1: a P past N pins none of the N.
            raise ValueError(
                f"pin_every must be at most messages ({self.messages:,}), or the run pins "
                f"no message; not {self.pin_every}"
            )
        if self.rounds is not None and not 1 <= self.rounds <= MAX_COUNT:
            raise ValueError(f"rounds must be at least 1 and at most {MAX_COUNT:,}")
        # Before the batch check, which slices the run per producer.
        self._check_range("producers", 1, MAX_THREADS)
        self._check_range("consumers", 1, MAX_THREADS)
        self._check_range("crash_messages", 0, MAX_CRASH_MESSAGES)
        self._check_batch_fits()
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        self._check_seconds()
        # The store's own checks, before any run starts rather than in the middle.
        Options(
            max_file_size=self.max_file_size,
            sync=self.sync,
            compaction_threshold=self.threshold,
            compaction_interval=self.compaction_interval,
            max_store_size=self.store_size_limit,
        )

    def _check_batch_fits(self) -> None:
        """msgcask writes a batch as one record, which must fit in a data file: refuse,
        before the run rather than in the middle of msgcask's (the peers' runs then
        follow a failed one), a --batch whose largest put call of the run does not,
        naming the largest smaller batch that fits."""
        # The runner's own slicing of the run into put calls; it imports this module.
        from msgcask.workloads.batches import largest_batch, largest_fitting_batch
        from msgcask.workloads.rounds import PinRounds

        room = self.max_file_size - FILE_HEADER_SIZE
        largest = largest_batch(self)
        if largest is None or largest.record <= room:
            return
        if self.size_mix:
            bodies = f"bodies of the size mix ({largest.body_bytes} bytes in all, seed {self.seed})"
        else:
            bodies = f"bodies of {self.size} bytes"
        fitting = largest_fitting_batch(self, room)
        lower = f"the largest --batch under {self.batch} that fits is {fitting}"
        if fitting == 1:
            lower = "only single puts (--batch 1) fit"
        most = (
            max(len(r.high) for r in PinRounds(self).distinct())
            if self.workload == "priority-pin"
            else 0
        )
        if most and self.batch >= most:
            # A batch takes a whole round, and rounds grow with the data files.
            lower += (
                f" (a round puts up to {most} high-priority messages, about a data file "
                "of them, in batches of at most --batch: a larger --max-file-size makes "
                "larger rounds, so a batch of a whole round may fit in none)"
            )
        else:
            lower += ", or raise --max-file-size"
        raise ValueError(
            f"a batch of {largest.count} {bodies} is one msgcask record of {largest.record} "
            f"bytes, which does not fit in a data file of {self.max_file_size} bytes: {lower}"
        )

    def _check_range(self, name: str, low: int, high: int) -> None:
        value = getattr(self, name)
        if not low <= value <= high:
            raise ValueError(f"{name} must be {low} to {high}, not {value}")

    def _check_seconds(self) -> None:
        # NaN passes every comparison and infinity reaches the JSON (neither is valid
        # JSON); a value past what a thread's timer can wait fails in the thread.
        if not MIN_INTERVAL <= self.interval <= MAX_INTERVAL:
            raise ValueError(
                f"interval must be {MIN_INTERVAL:g} to {MAX_INTERVAL:g} seconds, "
                f"not {self.interval!r}"
            )
        limit = self.time_limit
        if limit is not None and not (math.isfinite(limit) and 0 < limit <= MAX_TIME_LIMIT):
            raise ValueError(
                f"time_limit must be more than 0 and at most {MAX_TIME_LIMIT:g} seconds, "
                f"or None; not {limit!r}"
            )

    @property
    def pin_period(self) -> int:
        """P: one message in P is pinned (dlq-heavy 1000, selector-skip 500)."""
        if self.pin_every is not None:
            return self.pin_every
        return 500 if self.workload == "selector-skip" else 1000

    @property
    def store_size_limit(self) -> int | None:
        """max_store_size; priority-pin gets 32 data files by default so it can fill up."""
        return store_size_limit(self.workload, self.max_store_size, self.max_file_size)

    @property
    def pin_rounds(self) -> int:
        """priority-pin rounds: by default four times what max_store_size holds in files."""
        if self.rounds is not None:
            return self.rounds
        limit = self.store_size_limit or 32 * self.max_file_size
        return 4 * max(1, limit // self.max_file_size)

    def compaction_variants(self) -> list[bool]:
        """The msgcask variants to run: True = compaction on."""
        return {"on": [True], "off": [False], "both": [True, False]}[self.compaction]

    def as_params(self) -> dict[str, Any]:
        """The parameters as stored in the result (resolved defaults included)."""
        params = dataclasses.asdict(self)
        params.pop("progress")
        params["pin_every"] = self.pin_period
        params["max_store_size"] = self.store_size_limit
        params["rounds"] = self.pin_rounds
        return params


def store_size_limit(workload: str, max_store_size: int | None, max_file_size: int) -> int | None:
    """``RunConfig.store_size_limit`` of a run of ``workload`` with these settings,
    known before the rest of its options are checked."""
    if max_store_size is None and workload == "priority-pin":
        return 32 * max_file_size
    return max_store_size
