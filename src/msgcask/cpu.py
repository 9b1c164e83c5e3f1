"""Where a process's threads run: all on one CPU, or the store's own
background threads on chosen CPUs (the ``background_cpus`` setting).

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
import logging
import os
import threading
from collections.abc import Iterable

from msgcask.errors import Error

log = logging.getLogger("msgcask")

_MOST_CPUS = 1 << 16  # above Linux's largest NR_CPUS


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


def check_cpus(name: str, value: object) -> frozenset[int] | None:
    """A set of CPU numbers this process may run threads on, or None. Raises
    TypeError or ValueError (saying what to pass instead) otherwise."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be a collection of CPU numbers (ints), such as {{1}}, or None; "
            f"got {type(value).__name__}"
        )
    cpus = []
    for cpu in value:
        # Only ints, as every integer the API takes (priorities, sizes).
        if isinstance(cpu, bool) or not isinstance(cpu, int):
            raise TypeError(
                f"{name} must hold CPU numbers (ints), got {type(cpu).__name__}; "
                "convert other integer types (NumPy's) with int()"
            )
        cpus.append(int(cpu))  # an int subclass's value, kept as an int
    if not cpus:
        raise ValueError(f"{name} must name at least one CPU, or be None (run anywhere)")
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError(f"{name} needs Linux (os.sched_setaffinity); leave it None here")
    refused = _cpus_refused(sorted(set(cpus)))
    if refused:
        raise ValueError(
            f"{name}: this process may not run threads on CPUs {refused}; pass CPUs it "
            f"may use (os.cpu_count() is {os.cpu_count()}, and a cgroup's cpuset may "
            "allow fewer)"
        )
    return frozenset(cpus)


def _cpus_refused(cpus: list[int]) -> list[int]:
    """Which of ``cpus`` a thread of this process cannot be kept on. Tried in a
    thread of its own, so no thread of the caller's changes CPUs (a thread already
    kept on one CPU may still start threads that run on another)."""
    # Past the most CPUs Linux numbers, a mask would only cost time and memory.
    refused = [cpu for cpu in cpus if not 0 <= cpu < _MOST_CPUS]

    def attempt() -> None:
        for cpu in cpus:
            if 0 <= cpu < _MOST_CPUS:
                try:
                    os.sched_setaffinity(0, {cpu})
                except (OSError, OverflowError):
                    refused.append(cpu)

    trial = threading.Thread(target=attempt, name="msgcask-cpu-check", daemon=True)
    trial.start()
    trial.join()
    return sorted(refused)


def run_this_thread_on(cpus: frozenset[int] | None, what: str) -> None:
    """Keep the calling thread on ``cpus`` (None: leave it be). A failure (the
    CPUs went offline, the cgroup changed) is logged, and the thread keeps its CPUs."""
    if cpus is None:
        return
    try:
        os.sched_setaffinity(0, cpus)  # 0: the calling thread
    except OSError as e:
        log.warning(
            "msgcask: %s keeps the CPUs it had: it cannot be kept on CPUs %s (%s)",
            what,
            sorted(cpus),
            e.strerror or e,
        )
