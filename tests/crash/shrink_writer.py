"""Crash-test writer for the index shrink: a drained backlog, then a pass that shrinks
the index while a producer thread keeps putting, killed at a crash point of the shrink.

Usage: python shrink_writer.py <store> <crash point> <backlog> <seed>; the point is
armed only once the shrink is due. Every line is flushed; each fact
is printed only after the call that made it true returned:

  K <id>,...          the backlog's messages left after the drain (delivered, unacked)
  A <id>,...          the backlog's messages acked
  I <inode>           index/data.mdb's inode before the pass (a shrink replaces the file)
  armed               the crash point is armed; store.compact() follows
  p <n>  /  P <n> <id>   the producer's put of body_for(n) started / returned
  survived            compact() returned: the shrink never reached the point
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import msgcask
from msgcask.store import fs

BACKLOG_QUEUE = "backlog"
FRESH_QUEUE = "fresh"  # the producer's, put to while the shrink runs
KEEP_EVERY = 50  # one backlog message in this many is left delivered and unacked
PUTS_BEFORE_ARMING = 20  # the producer is well under way before the pass starts

_out_lock = threading.Lock()


def emit(line: str) -> None:
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def body_for(n: int) -> bytes:
    return b"%08d|" % n * (1 + n % 20)


def produce(queue: msgcask.Queue, stop: threading.Event, started: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        emit(f"p {n}")
        msg_id = queue.put(body_for(n))
        emit(f"P {n} {msg_id}")
        n += 1
        if n >= PUTS_BEFORE_ARMING:
            started.set()
        time.sleep(0.0002)  # leaves the main thread the locks now and then


def main() -> None:
    path, point, backlog, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    store = msgcask.open(path, compaction_interval=None)
    q = store.queue(BACKLOG_QUEUE)
    for i in range(backlog):
        q.put(body_for(i), priority=rng.randint(0, 9))
    kept, acked = [], []
    for i in range(backlog):
        m = q.get(block=False)
        if i % KEEP_EVERY:
            q.ack(m)
            acked.append(m.id)
        else:
            kept.append(m.id)
    emit("K " + ",".join(map(str, kept)))
    emit("A " + ",".join(map(str, acked)))
    emit(f"I {os.stat(os.path.join(path, 'index', 'data.mdb')).st_ino}")
    stop, started = threading.Event(), threading.Event()
    producer = threading.Thread(
        target=produce, args=(store.queue(FRESH_QUEUE), stop, started), daemon=True
    )
    producer.start()
    started.wait(60)
    fs.set_crash_point(point)
    emit("armed")
    store.compact()  # the pass ends by shrinking the sparse index
    emit("survived")
    stop.set()
    producer.join()
    store.close()


if __name__ == "__main__":
    main()
