"""Background work gives way to foreground calls.

Threads of one Python process share the interpreter lock, and the compactor
shares the store's lock with every call: while a pass parses or swaps, a put
waits for it, once per system call it makes. So background work runs in
batches (``Pacer.spans``) and pauses between them, sleeping once the work
since the last sleep exceeds a time slice: a short one while foreground calls
keep coming (one started within the last ``POLITE_WINDOW`` seconds), a long
one when no call came in, and one in between when compaction is behind
(disk use is past what the space guarantee allows, and space comes before
latency: checked every ``RECHECK_EVERY`` seconds) or when a put waits for the
work (``forced``: a put that waits for a pass, or space pressure's own pass).

A sleep hands both locks to whoever waits for them; it costs about 0.08 ms
even for zero seconds (the kernel's timer slack on Linux), which is why a pass
does not sleep after every batch. Batches have one size whatever the mode:
under load each acquisition of the store's lock waits for foreground calls
(about 0.7 ms on average in dlq-heavy), and each index call in a batch may
hand the interpreter to a foreground thread until those threads block on the
lock the pass holds (bench/gil_handoff.py), so small batches made passes
about twice as slow there without making foreground calls faster.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

BATCH = 64  # records per batch, and per hold of the store's lock
POLITE_WINDOW = 0.001  # seconds after a foreground call during which work steps aside
POLITE_SLICE = 0.00005  # seconds of background work between sleeps while stepping aside
URGENT_SLICE = 0.0002  # the same while calls come in but compaction is behind
FULL_SLICE = 0.001  # the same while no call comes in (one that starts waits about this)
RECHECK_EVERY = 0.02  # seconds between checks of whether compaction is behind


class Pacer:
    def __init__(self, behind: Callable[[], bool] = lambda: False) -> None:
        self._behind = behind
        # Foreground calls started. Only its changes matter, so the unlocked
        # increments (which may collide) are good enough.
        self.calls = 0
        self._waiting_puts = 0  # puts waiting for this work (``forcing``)
        self._waiting_lock = threading.Lock()
        self._seen = 0
        self._last_call = float("-inf")
        self._last_sleep = time.perf_counter()
        self._urgent = False
        self._checked = float("-inf")

    @property
    def forced(self) -> bool:
        """Whether a put waits for this work: it then steps aside no more often
        than while compaction is behind."""
        return self._waiting_puts > 0

    @contextlib.contextmanager
    def forcing(self) -> Iterator[None]:
        """Background work is forced while this is held: a put waits for it.
        Counted, so that one put done waiting does not unforce another's wait."""
        with self._waiting_lock:
            self._waiting_puts += 1
        try:
            yield
        finally:
            with self._waiting_lock:
                self._waiting_puts -= 1

    def pause(self) -> None:
        """Call between batches of background work (without the store's lock)."""
        now = time.perf_counter()
        if self.calls != self._seen:
            self._seen = self.calls
            self._last_call = now
        if now - self._checked >= RECHECK_EVERY:
            self._urgent = self._behind()
            self._checked = now
        if now - self._last_call >= POLITE_WINDOW:
            slice_ = FULL_SLICE
        elif self.forced or self._urgent:
            slice_ = URGENT_SLICE
        else:
            slice_ = POLITE_SLICE
        if now - self._last_sleep >= slice_:
            time.sleep(0)
            self._last_sleep = time.perf_counter()

    def spans(self, count: int) -> Iterator[tuple[int, int]]:
        """(start, end) of consecutive batches covering ``count`` items, with a
        pause before each."""
        start = 0
        while start < count:
            self.pause()
            end = min(start + BATCH, count)
            yield start, end
            start = end
