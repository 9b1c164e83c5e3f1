"""Helper process: put (and ack some) messages, reporting each after it returned.

Usage: python put_and_print.py <store> <sync> <threads> [<sync_interval>]
Lines: "R" once open; "P <id>" after a put returned; "a <id>" before an ack and
"A <id>" after it returned. With several threads, each thread puts and acks its own
messages; lines are written whole under a lock.
"""

from __future__ import annotations

import sys
import threading

import msgcask


def body_for(n: int) -> bytes:
    return b"durable %d " % n + bytes(n % 256 for _ in range(n % 3000))


def main() -> None:
    path, sync, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
    store = msgcask.open(path, sync=sync, sync_interval=interval, compaction_interval=None)
    q = store.queue("q")
    lock = threading.Lock()

    def emit(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def work(t: int) -> None:
        n = t
        while True:
            mid = q.put(body_for(n), headers={"n": str(n)})
            emit(f"P {mid}")
            if n % 3 == 0:
                m = q.get(block=False)
                emit(f"a {m.id}")
                q.ack(m)
                emit(f"A {m.id}")
            n += threads

    emit("R")
    workers = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
