"""Put latency while compaction passes run, against the same store when quiet.

Run: ``.venv/bin/python bench/compaction_latency.py [repeats]``. Not a test: it
prints p50 / p99 / max of single puts (1 KiB) from a steady producer, first with
no compaction, then while back-to-back ``compact()`` calls rewrite 80 sparse
1 MiB files (10 % live), and the ratio of the two p99s.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

import msgcask


def make_sparse(queue: msgcask.Queue, files: int) -> None:
    """About ``files`` 1 MiB data files, each with 10 % of its messages left live."""
    for _ in range(files * 1000):
        queue.put(b"y" * 1000)
    delivered = [queue.get(block=False) for _ in range(files * 1000)]
    for i, m in enumerate(delivered):
        if i % 10:
            queue.ack(m)


def measure(probe: msgcask.Queue, until: threading.Event | None, n: int) -> tuple[float, ...]:
    latencies = []
    i = 0
    while (until is None and i < n) or (until is not None and not until.is_set()):
        started = time.perf_counter()
        probe.put(b"z" * 1024)
        latencies.append(time.perf_counter() - started)
        if i % 50 == 0:
            time.sleep(0.0005)  # a steady producer, not a saturating one
        i += 1
    latencies.sort()
    ms = [x * 1e3 for x in latencies]
    return len(ms), ms[len(ms) // 2], ms[int(len(ms) * 0.99)], ms[-1]


def compact_until_done(store: msgcask.Store, done: threading.Event, rewritten: list[int]) -> None:
    while (report := store.compact(threshold=0.5)).files_rewritten:
        rewritten[0] += report.files_rewritten
    done.set()


def one_run() -> str:
    with msgcask.open(tempfile.mkdtemp(), max_file_size=2**20, compaction_interval=None) as s:
        make_sparse(s.queue("load"), 80)
        probe = s.queue("probe")
        q_n, q_p50, q_p99, q_max = measure(probe, None, 20_000)
        done = threading.Event()
        rewritten = [0]
        worker = threading.Thread(target=compact_until_done, args=(s, done, rewritten))
        worker.start()
        b_n, b_p50, b_p99, b_max = measure(probe, done, 0)
        worker.join()
    return (
        f"quiet: {q_n} puts p50 {q_p50:.3f} p99 {q_p99:.3f} max {q_max:.1f} ms | "
        f"during passes: {b_n} puts p50 {b_p50:.3f} p99 {b_p99:.3f} max {b_max:.1f} ms | "
        f"files rewritten {rewritten[0]} | p99 ratio {b_p99 / q_p99:.2f}"
    )


def main(repeats: int) -> None:
    for _ in range(repeats):
        print(one_run())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
