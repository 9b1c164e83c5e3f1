"""Crash-test writer: random operations on a store, each one reported on stdout.

Usage: python crash_writer.py <store> <sync> <seed> <max_file_size> <workload>
workload: "mixed" (put/put_many/get/ack/nack/transactions), "compact" (the same plus
store.compact() every few operations, with mostly acks so there is garbage to reclaim) or
"background" (like "compact", but the background scheduler compacts, concurrently).

Every line is flushed before the next operation starts. A lower-case line announces an
operation (it may or may not have happened when the process is killed); the upper-case
line follows once it returned:

  R                          the store is open, the loop starts
  p <tok>    /  P <tok> <id> put of the body for <tok>
  m <toks>   /  M <tok>:<id>,... put_many
  G <id> <tok>               get returned (the message is now delivered)
  a <id>     /  A <id>       ack
  n <id>     /  N <id>       nack (on q2 the second one dead-letters to DLQ.q2)
  t <toks>|<ids> / T <tok>:<id>,...   transaction: puts | acks
  c          /  C            compact

A body is derived from its token alone (see ``body_for``), so the parent can check
contents without knowing anything the writer did not print.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable

import msgcask

QUEUES = ("q1", "q2")  # the writer puts to and gets from these
MAX_DELIVERIES = 2  # q2 only: a second nack moves the message to DLQ.q2
ALL_QUEUES = (*QUEUES, "DLQ.q2")
MAX_SECONDS = 120  # never outlive a parent that forgot us


def body_for(tok: str) -> bytes:
    n = sum(tok.encode()) * 37 % 4000
    return b"tok:" + tok.encode() + b":" + bytes((i * 7 + n) % 251 for i in range(n))


def token_of(body: bytes) -> str:
    return body.split(b":", 2)[1].decode()


def main() -> None:
    path, sync, seed_s, mfs, workload = sys.argv[1:6]
    seed = int(seed_s)
    rng = random.Random(seed)
    background = workload == "background"
    store = msgcask.open(
        path,
        sync=sync,
        max_file_size=int(mfs),
        sync_interval=0.05,
        # "background": the scheduler compacts often, concurrently with the operations.
        compaction_interval=0.05 if background else None,
        compaction_threshold=0.8 if background else 0.5,
    )
    queues = {"q1": store.queue("q1"), "q2": store.queue("q2", max_deliveries=MAX_DELIVERIES)}
    delivered: dict[int, str] = {}  # id -> queue name
    counter = 0
    out = sys.stdout

    def emit(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    def token() -> str:
        nonlocal counter
        counter += 1
        return f"{seed}-{counter}"

    def settle_one(verb: str, settle: Callable[[msgcask.Queue, int], object]) -> None:
        """Ack or nack a delivered message, reported before and after."""
        mid = rng.choice(sorted(delivered))
        emit(f"{verb} {mid}")
        settle(queues[delivered.pop(mid)], mid)
        emit(f"{verb.upper()} {mid}")

    emit("R")
    deadline = time.monotonic() + MAX_SECONDS
    ops = 0
    while time.monotonic() < deadline:
        ops += 1
        roll = rng.random()
        name = rng.choice(QUEUES)
        q = queues[name]
        if workload == "compact" and ops % 15 == 0:
            emit("c")
            store.compact()
            emit("C")
        elif roll < 0.30:
            tok = token()
            emit(f"p {tok}")
            mid = q.put(body_for(tok), headers={"tok": tok}, priority=rng.randint(0, 9))
            emit(f"P {tok} {mid}")
        elif roll < 0.38:
            toks = [token() for _ in range(rng.randint(1, 4))]
            emit("m " + ",".join(toks))
            # put_many shares one header set, so the token travels in the body only.
            ids = q.put_many([body_for(t) for t in toks], priority=rng.randint(0, 9))
            emit("M " + ",".join(f"{t}:{i}" for t, i in zip(toks, ids, strict=True)))
        elif roll < 0.65:
            try:
                m = q.get(block=False)
            except msgcask.Empty:
                continue
            delivered[m.id] = name
            emit(f"G {m.id} {token_of(bytes(m.body))}")
        elif roll < 0.85 or (workload != "mixed" and roll < 0.95):
            if delivered:
                settle_one("a", msgcask.Queue.ack)
        elif roll < 0.90:
            if delivered:
                settle_one("n", msgcask.Queue.nack)
        else:
            toks = [token() for _ in range(rng.randint(0, 3))]
            acks = rng.sample(sorted(delivered), k=min(len(delivered), rng.randint(0, 2)))
            emit("t " + ",".join(toks) + "|" + ",".join(map(str, acks)))
            with store.transaction() as tx:
                ids = [tx.put(rng.choice(QUEUES), body_for(t)) for t in toks]
                for mid in acks:
                    tx.ack(mid)
            for mid in acks:
                delivered.pop(mid)
            emit("T " + ",".join(f"{t}:{i}" for t, i in zip(toks, ids, strict=True)))
    store.close()


if __name__ == "__main__":
    main()
