"""Put latency while compaction runs, against the same load without it.

Run: ``.venv/bin/python bench/compaction_latency.py [repeats] [--one-cpu]
[--switch-interval SECONDS]`` (``--one-cpu``: every thread on one CPU,
``msgcask.confine_to_one_cpu``; ``--switch-interval``: the interpreter's
``sys.setswitchinterval``, how long a thread may keep the interpreter lock while
another waits for it, 0.005 by default; ``--lock-holds``: in the backlog
runs, also time every hold of the store's lock by the compacting thread and
print them by the line that took the lock). Not a test: it
prints p50 / p99 / max of single 1 KiB puts from a steady prober, and the ratio
of the p99s, in two situations. The prober pauses after every 50th put, and the
first put after a pause runs on cold caches: those puts are 2 % of all, so the
p99 falls among them. Each line also gives their p50 (``after a pause``) and
the p99 of the other puts (``others``), to tell the two apart.

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
import threading
import time
from typing import Any

import msgcask
from scratch import scratch_dir
from script_args import exit_if_help_asked

STEADY_SECONDS = 8.0
PAUSE_EVERY = 50  # puts between two pauses of the prober
# puts, p50, p99, max, p50 of the first puts after a pause, p99 of the others (ms)
Measured = tuple[int, float, float, float, float, float]


def make_sparse(queue: msgcask.Queue, files: int) -> None:
    """About ``files`` 1 MiB data files, each with 10 % of its messages left live."""
    for _ in range(files * 1000):
        queue.put(b"y" * 1000)
    delivered = [queue.get(block=False) for _ in range(files * 1000)]
    for i, m in enumerate(delivered):
        if i % 10:
            queue.ack(m)


def measure(probe: msgcask.Queue, until: threading.Event) -> Measured:
    latencies: list[float] = []
    after_pause: list[float] = []
    others: list[float] = []
    i = 0
    while not until.is_set():
        started = time.perf_counter()
        probe.put(b"z" * 1024)
        latency = (time.perf_counter() - started) * 1e3
        latencies.append(latency)
        (after_pause if i % PAUSE_EVERY == 1 else others).append(latency)
        if i % PAUSE_EVERY == 0:
            time.sleep(0.0005)  # a steady producer, not a saturating one
        i += 1
    for ms in (latencies, after_pause, others):
        ms.sort()
    return (
        len(latencies),
        latencies[len(latencies) // 2],
        latencies[int(len(latencies) * 0.99)],
        latencies[-1],
        after_pause[len(after_pause) // 2],
        others[int(len(others) * 0.99)],
    )


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
    with msgcask.open(scratch_dir(), max_file_size=2**20, compaction_interval=interval) as s:
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


class TimedLock:
    """The store's lock, timing the outermost holds taken by one thread, by the
    line that took it (the lock is reentrant: nested holds are part of the outer)."""

    def __init__(self, inner: Any, thread_name: str) -> None:
        self.inner = inner
        self.thread_name = thread_name
        self.holds: dict[str, list[float]] = {}
        self._local = threading.local()

    def __enter__(self) -> TimedLock:
        self.inner.acquire()
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth == 0:
            caller = sys._getframe(1)
            name = caller.f_code.co_filename.rsplit("/", 1)[-1]
            self._local.site = f"{name}:{caller.f_lineno}"
            self._local.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1
        if self._local.depth == 0 and threading.current_thread().name == self.thread_name:
            held = time.perf_counter() - self._local.started
            self.holds.setdefault(self._local.site, []).append(held)
        self.inner.release()

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self.inner.acquire(*args, **kwargs))

    def release(self) -> None:
        self.inner.release()

    def report(self) -> str:
        everything = sorted(x for holds in self.holds.values() for x in holds)
        lines = [f"  lock holds by the passes: {len(everything)}, {sum(everything) * 1e3:.1f} ms"]
        by_total = sorted(self.holds.items(), key=lambda item: -sum(item[1]))
        for site, holds in by_total[:8]:
            holds.sort()
            lines.append(
                f"    {site:24} {len(holds):5} holds, {sum(holds) * 1e3:6.1f} ms, "
                f"p50 {holds[len(holds) // 2] * 1e3:.3f} p90 {holds[int(len(holds) * 0.9)] * 1e3:.3f} "
                f"max {holds[-1] * 1e3:.3f} ms"
            )
        return "\n".join(lines)


def backlog_run(lock_holds: bool) -> tuple[Measured, Measured, int, float, str]:
    """Quiet and busy measurements, files rewritten, the seconds the passes
    took to clear the backlog, and (with ``lock_holds``) the passes' lock holds."""
    with msgcask.open(scratch_dir(), max_file_size=2**20, compaction_interval=None) as s:
        make_sparse(s.queue("load"), 80)
        # The first commit after the fill writes its 160,000 index changes: let
        # it happen now, not in the middle of the quiet measurement.
        s.sync()
        probe = s.queue("probe")
        quiet = measure(probe, after(1.0))
        done = threading.Event()
        rewritten = [0]
        worker = threading.Thread(
            target=compact_until_done, args=(s, done, rewritten), name="passes"
        )
        timed = TimedLock(s._lock, worker.name) if lock_holds else None
        if timed is not None:
            s._lock = timed  # type: ignore[assignment]
        started = time.perf_counter()
        worker.start()
        busy = measure(probe, done)
        worker.join()
        seconds = time.perf_counter() - started
        if timed is not None:
            s._lock = timed.inner
    return quiet, busy, rewritten[0], seconds, timed.report() if timed else ""


def line(name: str, m: Measured) -> str:
    return (
        f"{name}: {m[0]} puts p50 {m[1]:.3f} p99 {m[2]:.3f} max {m[3]:.1f} ms "
        f"(after a pause p50 {m[4]:.3f}, others p99 {m[5]:.3f})"
    )


def main(repeats: int, lock_holds: bool) -> None:
    for _ in range(repeats):
        off, _ = steady_run(compaction=False)
        on, rewritten = steady_run(compaction=True)
        print(
            f"steady  | {line('compaction off', off)} | {line('on', on)} | "
            f"files rewritten {rewritten} | p99 ratio {on[2] / off[2]:.2f}"
        )
    for _ in range(repeats):
        quiet, busy, rewritten, seconds, holds = backlog_run(lock_holds)
        print(
            f"backlog | {line('quiet', quiet)} | {line('during passes', busy)} | "
            f"files rewritten {rewritten} in {seconds:.2f} s | p99 ratio {busy[2] / quiet[2]:.2f}"
        )
        if holds:
            print(holds)


if __name__ == "__main__":
    exit_if_help_asked(__doc__)
    args = sys.argv[1:]
    if "--switch-interval" in args:
        at = args.index("--switch-interval")
        sys.setswitchinterval(float(args[at + 1]))
        del args[at : at + 2]
        print(f"switch interval {sys.getswitchinterval()} s")
    if "--one-cpu" in args:
        args.remove("--one-cpu")
        print(f"every thread runs on CPU {msgcask.confine_to_one_cpu()}")
    lock_holds = "--lock-holds" in args
    if lock_holds:
        args.remove("--lock-holds")
    main(int(args[0]) if args else 3, lock_holds)
