"""Put latency while compaction runs, against the same load without it.

Run: ``.venv/bin/python bench/compaction_latency.py [repeats] [--one-cpu]``
(``--one-cpu``: every thread on one CPU, ``msgcask.confine_to_one_cpu``). Not a test: it
prints p50 / p99 / max of single 1 KiB puts from a steady prober, and the ratio
of the p99s, in two situations:

* ``steady``: another thread keeps turning data files sparse (it fills one
  1 MiB file, consumes 90 % of it, rests 0.2 s, and again) while the prober runs
  for a fixed time; once with the background job compacting every 0.2 s, once
  with compaction off. Compaction keeps up here, so passes step aside for the
  foreground calls (compactor/pacing.py).
* ``backlog``: 80 sparse files are already there; back-to-back ``compact()``
  calls rewrite them all while the prober runs, against the same store when
  quiet; it also prints how long the passes took to clear the backlog. This
  is compaction behind the space bound, where it takes the CPU it
  needs and latency is expected to suffer.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

import msgcask

STEADY_SECONDS = 8.0
Measured = tuple[int, float, float, float]  # puts, p50, p99, max (ms)


def make_sparse(queue: msgcask.Queue, files: int) -> None:
    """About ``files`` 1 MiB data files, each with 10 % of its messages left live."""
    for _ in range(files * 1000):
        queue.put(b"y" * 1000)
    delivered = [queue.get(block=False) for _ in range(files * 1000)]
    for i, m in enumerate(delivered):
        if i % 10:
            queue.ack(m)


def measure(probe: msgcask.Queue, until: threading.Event) -> Measured:
    latencies = []
    i = 0
    while not until.is_set():
        started = time.perf_counter()
        probe.put(b"z" * 1024)
        latencies.append(time.perf_counter() - started)
        if i % 50 == 0:
            time.sleep(0.0005)  # a steady producer, not a saturating one
        i += 1
    latencies.sort()
    ms = [x * 1e3 for x in latencies]
    return len(ms), ms[len(ms) // 2], ms[int(len(ms) * 0.99)], ms[-1]


def after(seconds: float) -> threading.Event:
    done = threading.Event()
    threading.Timer(seconds, done.set).start()
    return done


def churn(store: msgcask.Store, stop: threading.Event) -> None:
    queue = store.queue("churn")
    while not stop.is_set():
        make_sparse(queue, 1)
        stop.wait(0.2)


def steady_run(compaction: bool) -> tuple[Measured, int]:
    interval = 0.2 if compaction else None
    with msgcask.open(tempfile.mkdtemp(), max_file_size=2**20, compaction_interval=interval) as s:
        stop = after(STEADY_SECONDS)
        worker = threading.Thread(target=churn, args=(s, stop))
        worker.start()
        result = measure(s.queue("probe"), stop)
        worker.join()
        return result, s.stats().compaction.files_rewritten


def compact_until_done(store: msgcask.Store, done: threading.Event, rewritten: list[int]) -> None:
    while (report := store.compact(threshold=0.5)).files_rewritten:
        rewritten[0] += report.files_rewritten
    done.set()


def backlog_run() -> tuple[Measured, Measured, int, float]:
    """Quiet and busy measurements, files rewritten, and the seconds the
    passes took to clear the backlog."""
    with msgcask.open(tempfile.mkdtemp(), max_file_size=2**20, compaction_interval=None) as s:
        make_sparse(s.queue("load"), 80)
        probe = s.queue("probe")
        quiet = measure(probe, after(1.0))
        done = threading.Event()
        rewritten = [0]
        worker = threading.Thread(target=compact_until_done, args=(s, done, rewritten))
        started = time.perf_counter()
        worker.start()
        busy = measure(probe, done)
        worker.join()
        seconds = time.perf_counter() - started
    return quiet, busy, rewritten[0], seconds


def line(name: str, m: Measured) -> str:
    return f"{name}: {m[0]} puts p50 {m[1]:.3f} p99 {m[2]:.3f} max {m[3]:.1f} ms"


def main(repeats: int) -> None:
    for _ in range(repeats):
        off, _ = steady_run(compaction=False)
        on, rewritten = steady_run(compaction=True)
        print(
            f"steady  | {line('compaction off', off)} | {line('on', on)} | "
            f"files rewritten {rewritten} | p99 ratio {on[2] / off[2]:.2f}"
        )
    for _ in range(repeats):
        quiet, busy, rewritten, seconds = backlog_run()
        print(
            f"backlog | {line('quiet', quiet)} | {line('during passes', busy)} | "
            f"files rewritten {rewritten} in {seconds:.2f} s | p99 ratio {busy[2] / quiet[2]:.2f}"
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--one-cpu" in args:
        args.remove("--one-cpu")
        print(f"every thread runs on CPU {msgcask.confine_to_one_cpu()}")
    main(int(args[0]) if args else 3)
