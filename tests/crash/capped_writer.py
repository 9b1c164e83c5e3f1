"""Crash-test writer: producers and a consumer against background compaction under a
tight ``max_store_size``, with puts waiting for a pass's copy.

Usage: python capped_writer.py <store> <seed>

Three producer threads put to "work" (each holding back while the backlog is long,
so the live data stays bounded); the main thread consumes it, acking the large
messages and dead-lettering the small ones (``max_deliveries=1``, so a nack moves it
to DLQ.work), and acks the oldest dead letters beyond PINS: a small pinned set spread
over the files, which compaction has to copy. Passes run every few milliseconds and
the cap is a few data files above the live data.

A put waits for a pass (``Store._wait_for_pass``) only when, between the put's
space-pressure check and its write (a gap of microseconds), other puts took the room
the check found while a pass has started its copy and not yet deleted its victims. So that it happens every second or so rather than every few minutes,
each put that passed the check lingers in that gap (as a preempted thread would)
until a copy is under way, for at most LINGER seconds.

Lines, each flushed before the next call starts (threads take turns):

  R                          the store is open, the threads start
  p <tok>    /  P <tok> <id> a put started / returned (durable: sync="always")
  F <tok>                    that put raised StoreFullError
  a <id>     /  A <id>       an ack started / returned (<id>: the id put returned,
                             also for a dead letter, whose own id is another)
  n <id>     /  N <id>       a nack that dead-letters started / returned
  F n <id>                   that nack raised StoreFullError (the message is acked)
  w          /  W            a put that found no room while a pass wrote its copy
                             starts / stops waiting for that pass

A body is derived from its token alone (``body_for``).
"""

from __future__ import annotations

import random
import sys
import threading
import time

import msgcask

MAX_FILE_SIZE = 64 * 1024
MAX_STORE_SIZE = 6 * MAX_FILE_SIZE  # puts may fill all but one file of it
PRODUCERS = 3
# Large messages, so that the other puts landing in one put's gap can take the room
# its check found; yet they stay well under a data file (two producers' and a dead
# letter's, under 52 KB), so that the pass they then wait for frees enough for all.
LARGE = (8_000, 24_000)
SMALL = (500, 3_000)
SMALL_SHARE = 0.2
BACKLOG = 8  # producers hold back while "work" has more messages than this
PINS = 40  # small dead letters kept; older ones are acked
DLQ = "DLQ.work"
LINGER = 0.005
MAX_SECONDS = 60  # never outlive a parent that forgot us


def body_for(tok: str) -> bytes:
    rng = random.Random(tok)
    n = rng.randint(*SMALL) if rng.random() < SMALL_SHARE else rng.randint(*LARGE)
    return b"tok:" + tok.encode() + b":" + bytes((i * 7 + n) % 251 for i in range(n))


def token_of(body: bytes) -> str:
    return body.split(b":", 2)[1].decode()


def original_id(m: msgcask.Message) -> int:
    return int((m.headers or {}).get("x-original-id", m.id))


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    store = msgcask.open(
        path,
        sync="always",
        max_file_size=MAX_FILE_SIZE,
        max_store_size=MAX_STORE_SIZE,
        compaction_interval=0.005,
    )
    work = store.queue("work", max_deliveries=1)
    dlq = store.queue(DLQ)
    deadline = time.monotonic() + MAX_SECONDS
    out_lock = threading.Lock()

    def emit(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    wait_for_pass = store._wait_for_pass

    def reported_wait_for_pass() -> None:
        emit("w")
        wait_for_pass()
        emit("W")

    store._wait_for_pass = reported_wait_for_pass  # type: ignore[method-assign]
    ensure_room = store._ensure_room

    def ensure_room_then_linger(size: int) -> None:
        ensure_room(size)
        until = time.monotonic() + LINGER
        while not store._victims_going and time.monotonic() < until:
            time.sleep(0.0002)

    store._ensure_room = ensure_room_then_linger  # type: ignore[method-assign]

    def produce(producer: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            if len(work) > BACKLOG:
                time.sleep(0.001)
                continue
            n += 1
            tok = f"{seed}-{producer}-{n}"
            emit(f"p {tok}")
            try:
                msg_id = work.put(body_for(tok), headers={"tok": tok})
            except msgcask.StoreFullError:
                emit(f"F {tok}")
                continue
            emit(f"P {tok} {msg_id}")

    def ack(q: msgcask.Queue, m: msgcask.Message) -> None:
        emit(f"a {original_id(m)}")
        q.ack(m)
        emit(f"A {original_id(m)}")

    emit("R")
    for producer in range(PRODUCERS):
        threading.Thread(target=produce, args=(producer,), daemon=True).start()
    while time.monotonic() < deadline:
        try:
            m = work.get(timeout=0.05)
        except msgcask.Empty:
            continue
        if len(m.body) > SMALL[1] + 100:
            ack(work, m)
            continue
        emit(f"n {m.id}")
        try:
            work.nack(m)
        except msgcask.StoreFullError:
            emit(f"F n {m.id}")
            ack(work, m)
        else:
            emit(f"N {m.id}")
        if len(dlq) > PINS:
            ack(dlq, dlq.get(block=False))
    store.close()


if __name__ == "__main__":
    main()
