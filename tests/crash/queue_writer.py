"""Crash-test writer: creates and deletes empty queues while compaction passes run.

Usage: python queue_writer.py <store> <seed>

A background thread keeps the compaction busy (sparse files with many live messages,
so passes rewrite and swap), while the main thread creates a queue with
``store.queue()`` and deletes one it created earlier with ``store.delete_queue()``.
Once such a pair of calls returned that started while a compaction pass held index
commits back (the swap of a rewrite, or the retirement of files), it reports so and
waits to be killed:

  R                  the store is open
  c <name> / C <name> store.queue(name) started / returned (the queue now exists)
  d <name> / D <name> store.delete_queue(name) started / returned (it is gone)
  H                  the last pair started during a compaction pass; kill me now

Every line is flushed before the next call starts.
"""

from __future__ import annotations

import sys
import threading
import time

import msgcask

MAX_SECONDS = 60  # never outlive a parent that forgot us


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    store = msgcask.open(
        path,
        sync="always",
        max_file_size=1 << 20,
        compaction_interval=0.01,
        compaction_threshold=0.9,
        sync_interval=0.02,
    )
    bulk = store.queue("bulk")
    deadline = time.monotonic() + MAX_SECONDS

    def churn() -> None:
        while time.monotonic() < deadline:
            bulk.put_many([b"x" * 60] * 200)
            for _ in range(150):
                try:
                    m = bulk.get(block=False)
                except msgcask.Empty:
                    break
                bulk.ack(m)

    threading.Thread(target=churn, daemon=True).start()

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    emit("R")
    made: list[str] = []
    n = 0
    while time.monotonic() < deadline:
        n += 1
        name = f"e{seed}-{n}"
        # Aim: make the calls while a pass holds commits back (store._commit_hold).
        held = store._commit_hold > 0
        emit(f"c {name}")
        store.queue(name)
        emit(f"C {name}")
        made.append(name)
        if len(made) > 3:
            old = made.pop(0)
            emit(f"d {old}")
            store.delete_queue(old)
            emit(f"D {old}")
        if held:
            emit("H")
            time.sleep(MAX_SECONDS)
        time.sleep(0.0005)
    store.close()


if __name__ == "__main__":
    main()
