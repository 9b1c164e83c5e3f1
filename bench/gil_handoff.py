"""What one call that releases the interpreter lock costs while another thread runs.

Run: ``.venv/bin/python bench/gil_handoff.py [calls]``. Not a test. It times the
calls msgcask's hot paths and compaction passes are made of (py-lmdb
``get``/``put``/``delete``/``Cursor.next`` in a write transaction, and a 1 KiB
``os.pwrite``/``os.pread``), in microseconds per call, three ways:

* ``alone``: no other thread;
* ``busy thread``: another thread runs Python without pause (the worst case);
* ``worker thread``: another thread alternates about 20 us of Python with a
  1 KiB ``os.pwrite``, roughly what a producer or consumer thread does.

Every one of these calls releases the interpreter lock, so each is a chance for
the other thread to take it; the call's caller then waits to get it back. The
gap between the rows is what compaction's per-record index work pays under load
(each rewrite looks up, scans or deletes index entries one call at a time), and
why larger batches per hold of the store's lock help: while a pass holds it,
foreground threads soon block on it and stop competing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import lmdb

from scratch import scratch_dir
from script_args import counts

KEYS = [i.to_bytes(8, "big") for i in range(4096)]
VALUE = b"v" * 40
BLOCK = b"p" * 1024


def busy(stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1


def worker(stop: threading.Event) -> None:
    fd = os.open(os.path.join(scratch_dir(), "block"), os.O_CREAT | os.O_RDWR)
    try:
        while not stop.is_set():
            sum(range(200))  # about 20 us of Python
            os.pwrite(fd, BLOCK, 0)
    finally:
        os.close(fd)


def timed(call: Callable[[int], object], calls: int) -> float:
    """Microseconds per call."""
    started = time.perf_counter()
    for i in range(calls):
        call(i)
    return (time.perf_counter() - started) / calls * 1e6


def main(calls: int) -> None:
    env = lmdb.open(scratch_dir(), map_size=1 << 30)
    with env.begin(write=True) as txn:
        for k in KEYS:
            txn.put(k, VALUE)
    txn = env.begin(write=True)
    cursor = txn.cursor()
    cursor.first()
    fd = os.open(os.path.join(scratch_dir(), "block"), os.O_CREAT | os.O_RDWR)
    os.pwrite(fd, BLOCK * 64, 0)

    def cursor_next(i: int) -> None:
        if not cursor.next():
            cursor.first()

    def delete_and_put(i: int) -> None:
        key = KEYS[i % len(KEYS)]
        txn.delete(key)
        txn.put(key, VALUE)

    kinds: list[tuple[str, Callable[[int], object]]] = [
        ("lmdb get", lambda i: txn.get(KEYS[i % len(KEYS)])),
        ("lmdb put", lambda i: txn.put(KEYS[i % len(KEYS)], VALUE)),
        ("lmdb delete + put (2 calls)", delete_and_put),
        ("lmdb cursor next", cursor_next),
        ("pwrite 1 KiB", lambda i: os.pwrite(fd, BLOCK, (i % 64) * 1024)),
        ("pread 1 KiB", lambda i: os.pread(fd, 1024, (i % 64) * 1024)),
    ]
    competitors: list[tuple[str, Callable[[threading.Event], None] | None]] = [
        ("alone", None),
        ("busy thread", busy),
        ("worker thread", worker),
    ]
    rows: dict[str, list[float]] = {name: [] for name, _ in kinds}
    for _, run in competitors:
        stop = threading.Event()
        other = threading.Thread(target=run, args=(stop,)) if run else None
        if other:
            other.start()
            time.sleep(0.05)
        try:
            for name, call in kinds:
                rows[name].append(timed(call, calls))
        finally:
            stop.set()
            if other:
                other.join()
    txn.abort()
    env.close()
    os.close(fd)
    header = ["call (us per call)"] + [name for name, _ in competitors]
    print(" | ".join(header))
    for name, figures in rows.items():
        print(" | ".join([name] + [f"{f:.1f}" for f in figures]))


if __name__ == "__main__":
    main(*counts(__doc__, [2000]))
