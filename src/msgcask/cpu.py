"""Running a process's threads on one CPU.

CPython threads take turns holding one interpreter lock, and msgcask's get and
ack release it about ten times together (every py-lmdb call, every ``pread`` of
an older file); a plain put, which writes through a memory map, none. With two
CPUs, each release lets a thread waiting on the other CPU in: the caller then
waits to get the lock back, and background work (a compaction pass, the flush)
takes it at every system call a foreground call makes. Confined to one CPU, a
thread that releases the lock for a short call keeps running and takes it back
first, so a call finishes without handing the lock over; other threads get their
turn when it blocks.
docs/tuning.md gives the figures measured with and without it.
"""

from __future__ import annotations

import contextlib
import os

from msgcask.errors import Error


def confine_to_one_cpu(cpu: int | None = None) -> int:
    """Run every thread of this process on ``cpu`` (by default the lowest CPU
    it may use now); threads started later inherit it from the thread that
    starts them. Returns the CPU. Linux only (``os.sched_setaffinity``).

    Call it early, before other threads start, or at least while none is
    starting one: a thread started meanwhile by a thread not yet confined is
    not. Raises ValueError for a CPU the process may not use, and changes
    nothing then.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise Error("confining threads to one CPU needs Linux (os.sched_setaffinity)")
    if cpu is not None and (isinstance(cpu, bool) or not isinstance(cpu, int)):
        raise TypeError(f"cpu must be an int or None, got {type(cpu).__name__}")
    allowed = os.sched_getaffinity(0)
    if cpu is None:
        cpu = min(allowed)
    elif cpu not in allowed:
        raise ValueError(f"this process may run on CPUs {sorted(allowed)}, not on CPU {cpu}")
    before: dict[int, set[int]] = {}
    try:
        for tid in _thread_ids():
            try:
                before[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, {cpu})
            except ProcessLookupError:
                continue  # the thread ended meanwhile
    except OSError:
        for tid, cpus in before.items():  # all threads or none
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)
        raise
    return cpu


def _thread_ids() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]
