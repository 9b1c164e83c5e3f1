"""Throughput of a store with a long drained history against a fresh one.

Run: ``.venv/bin/python bench/history_independence.py [fill] [rounds]``. Not a
test. One store gets the drain-history workload's history (``fill`` messages,
500,000 by default, put and then all consumed, three times), then compacted;
another is fresh. Then, ``rounds`` times (5 by default), each store in turn puts
50,000 messages of 1 KiB and gets and acks them all, timed. Alternating the two
within each round spreads the machine's noise over both; the medians and their
ratio (history / fresh) are printed.
"""

from __future__ import annotations

import statistics
import time

import msgcask
from scratch import scratch_dir
from script_args import counts

BODY = b"h" * 1024
BATCH = 50_000


def fill_and_drain(queue: msgcask.Queue, n: int) -> None:
    for _ in range(n):
        queue.put(BODY)
    for _ in range(n):
        queue.ack(queue.get(block=False))


def timed_round(queue: msgcask.Queue) -> tuple[float, float]:
    started = time.perf_counter()
    for _ in range(BATCH):
        queue.put(BODY)
    put_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(BATCH):
        queue.ack(queue.get(block=False))
    return BATCH / put_s, BATCH / (time.perf_counter() - started)


def main(fill: int, rounds: int) -> None:
    options = {"max_file_size": 2**20, "compaction_interval": None}
    with (
        msgcask.open(scratch_dir(), **options) as fresh,
        msgcask.open(scratch_dir(), **options) as history,
    ):
        started = time.perf_counter()
        for _ in range(3):
            fill_and_drain(history.queue("q"), fill)
            while history.compact().files_rewritten:
                pass
        st = history.stats()
        print(
            f"history: 3 x {fill} messages drained in {time.perf_counter() - started:.0f} s; "
            f"{st.data_files} data files, {st.data_bytes} data bytes, "
            f"{st.index_bytes} index bytes"
        )
        results: dict[str, list[tuple[float, float]]] = {"fresh": [], "history": []}
        for _ in range(rounds):
            for name, store in (("fresh", fresh), ("history", history)):
                results[name].append(timed_round(store.queue("q")))
                store.compact()
        medians = {
            name: (statistics.median(p for p, _ in r), statistics.median(g for _, g in r))
            for name, r in results.items()
        }
        for name, (put, get_ack) in medians.items():
            print(f"{name:8} put {put:9.0f}/s  get+ack {get_ack:9.0f}/s  (medians of {rounds})")
        print(
            f"history / fresh: put {medians['history'][0] / medians['fresh'][0]:.3f}, "
            f"get+ack {medians['history'][1] / medians['fresh'][1]:.3f}"
        )


if __name__ == "__main__":
    main(*counts(__doc__, [500_000, 5]))
