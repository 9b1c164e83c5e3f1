"""Where the steady workload's time goes when producer and consumer are threads.

Run: ``.venv/bin/python bench/threads.py [messages]``. Not a test. msgcask and
the sqlite3 peer (the fastest Python peer in the steady runs), through the
runner's subjects with the runner's defaults (``sync="periodic"``; for msgcask
1 MiB data files and a compaction pass every second), each put ``messages`` (50,000 by default) of 1 KiB and get
and ack them:

* ``one thread``: all puts, then all gets and acks, in the main thread;
* ``two threads``: a producer and a consumer thread at once, as the steady
  workload runs them;
* ``two threads, one CPU``: the same in a child process confined to one CPU.

Each row also gives the process's CPU time (user and system) and its voluntary
context switches per message, put and get+ack together (getrusage around the
run, so the store's background threads count too).

Python threads share one interpreter lock. Every call that releases it (a
system call, an LMDB or SQLite call) lets the other thread in; on two CPUs
that hand-off wakes a thread on the other CPU, which costs more than the call.
The gap between the second and third rows is that cost.
"""

from __future__ import annotations

import multiprocessing
import resource
import threading
import time

import msgcask
from msgcask.workloads.config import RunConfig
from msgcask.workloads.definitions import POLL
from msgcask.workloads.factory import MSGCASK, make_subject
from msgcask.workloads.subjects import peer_unavailable
from msgcask.workloads.subjects.base import Subject
from scratch import scratch_dir
from script_args import counts

BODY = b"t" * 1024

# (put/s, get+ack/s, user µs, system µs and voluntary context switches per message)
Figures = tuple[float, float, float, float, float]


def make(name: str) -> Subject:
    subject = make_subject(name, scratch_dir(), RunConfig())
    subject.open()
    return subject


def consume(subject: Subject, n: int) -> None:
    """Get and ack ``n`` messages, waiting for the producer as the runner does."""
    deadline = time.monotonic() + 300
    done = 0
    while done < n:
        delivery = subject.get(POLL)
        if delivery is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{done} of {n} messages consumed in 300 s")
            continue
        subject.ack(delivery)
        done += 1


def costs(n: int, before: resource.struct_rusage) -> tuple[float, float, float]:
    """User and system µs and voluntary context switches per message since ``before``."""
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (
        (after.ru_utime - before.ru_utime) / n * 1e6,
        (after.ru_stime - before.ru_stime) / n * 1e6,
        (after.ru_nvcsw - before.ru_nvcsw) / n,
    )


def one_thread(name: str, n: int) -> Figures:
    subject = make(name)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        for _ in range(n):
            subject.put(BODY)
        put_s = time.perf_counter() - started
        started = time.perf_counter()
        consume(subject, n)
        return n / put_s, n / (time.perf_counter() - started), *costs(n, before)
    finally:
        subject.close()


def two_threads(name: str, n: int) -> Figures:
    """Rates as the steady workload reports them: messages / each side's span."""
    subject = make(name)
    try:
        ends: dict[str, float] = {}

        def produce() -> None:
            for _ in range(n):
                subject.put(BODY)
            ends["put"] = time.perf_counter()

        def drain() -> None:
            consume(subject, n)
            ends["get"] = time.perf_counter()

        workers = [threading.Thread(target=produce), threading.Thread(target=drain)]
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        rates = n / (ends["put"] - started), n / (ends["get"] - started)
        return *rates, *costs(n, before)
    finally:
        subject.close()


def _pinned(name: str, n: int, out: multiprocessing.Queue[Figures]) -> None:
    msgcask.confine_to_one_cpu()
    out.put(two_threads(name, n))


def two_threads_one_cpu(name: str, n: int) -> Figures:
    out: multiprocessing.Queue[Figures] = multiprocessing.Queue()
    child = multiprocessing.Process(target=_pinned, args=(name, n, out))
    child.start()
    result = out.get()
    child.join()
    return result


def main(n: int) -> None:
    names = [MSGCASK] + ([] if peer_unavailable("sqlite3") else ["sqlite3"])
    modes = [
        ("one thread", one_thread),
        ("two threads", two_threads),
        ("two threads, one CPU", two_threads_one_cpu),
    ]
    print(
        f"{n} messages of 1 KiB; messages/s, put and get+ack; then per message: "
        "user µs, system µs, voluntary context switches"
    )
    for label, run in modes:
        figures = {name: run(name, n) for name in names}
        cells = [
            f"{name} {p:8.0f} {g:8.0f}  cpu {u:5.1f} {s:5.1f}  csw {c:4.2f}"
            for name, (p, g, u, s, c) in figures.items()
        ]
        if len(figures) == 2:
            (mp, mg, *_), (sp, sg, *_) = figures.values()
            cells.append(f"msgcask/sqlite3 {mp / sp:5.2f} {mg / sg:5.2f}")
        print(f"{label:22s} | " + " | ".join(cells))


if __name__ == "__main__":
    main(*counts(__doc__, [50_000]))
