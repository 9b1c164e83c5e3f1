"""Child process for test_crash_points.py: build a pinned store, then die at a crash point.

Usage: python compactor_crash_child.py STORE ROUNDS PHASE, with MSGCASK_CRASH_AT=<point>
in the environment. The crash point is disarmed while the store is built (a seal of the
journal happens on every roll-over) and armed just before PHASE:

* ``compact``: ``store.compact()``, which must reach the point and be SIGKILLed there;
* ``put``: keep putting (each put rolls the journal over sooner or later);
* ``drain``: ack every message left, then ``store.compact()``: files die whole, so the
  point is reached on the plain deletion path (by the pass or by the background flush
  that deletes emptied files);
* ``background``: reopen with ``compaction_interval=0.05`` and wait: the scheduled job
  reaches the point;
* ``pressure``: reopen with ``max_store_size`` just above what the store holds and run
  priority-pin rounds: the compactions that reach the point are the ones a put starts
  to make room.

Every fact the parent may rely on is printed, as one JSON object per line, only after the
call that made it true returned:

* ``{"state": {...}}``: after the build, every live message (id, queue, seq, deliveries)
  read back with browse(), and every id acked;
* ``{"armed": point}``: the crash point is armed;
* ``{"put": id, "seq": n}``: a put in the ``put`` phase returned;
* ``{"acking": id}`` / ``{"acked": id}``: an ack started / returned;
* ``{"putting": seq}``: a put of message ``seq`` started (the put line follows if it
  returned);
* ``{"survived": ...}``: the phase ended without reaching the point (a test failure).
"""

from __future__ import annotations

import json
import os
import sys
import time

import msgcask
from msgcask.store import fs

MAX_FILE_SIZE = 64 * 1024
PER_ROUND = 100
PIN_EVERY = 25  # left in the queue (a selector skips it)
DLQ_EVERY = 40  # nacked once with max_deliveries=1: moved to DLQ.work with a new id
INFLIGHT_EVERY = 50  # delivered and never acked: its DELIVER record is needed


def body_for(seq: int) -> bytes:
    return (b"%07d." % seq) * 128  # 1 KiB, different for every message


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def unpinned(headers: dict[str, str]) -> bool:
    return "pin" not in headers


def build(store: msgcask.Store, rounds: int) -> list[msgcask.Message]:
    """Build the pinned store; return the messages left delivered and unacked."""
    q = store.queue("work", max_deliveries=1)
    acked: list[int] = []
    inflight: list[msgcask.Message] = []
    seq = 0
    for _ in range(rounds):
        for _ in range(PER_ROUND):
            headers = {"seq": str(seq)}
            if seq % PIN_EVERY == 7:
                headers["pin"] = "1"
            q.put(body_for(seq), headers=headers, priority=seq % 3)
            seq += 1
        # Consume the round: its acks (and those of earlier rounds' leftovers) land in
        # later files than the PUT records they cancel, chaining files together.
        while True:
            try:
                m = q.get(block=False, selector=unpinned)
            except msgcask.Empty:
                break
            n = int(m.headers["seq"])
            if n % DLQ_EVERY == 3:
                q.nack(m)
            elif n % INFLIGHT_EVERY == 11:
                inflight.append(m)  # stays delivered
            else:
                q.ack(m)
                acked.append(m.id)
    live = [
        [m.id, name, int(m.headers["seq"]), m.deliveries]
        for name in store.queues()
        for m in store.queue(name).browse()
    ]
    emit({"state": {"live": live, "acked": acked, "next_seq": seq}})
    return inflight


def ack(q: msgcask.Queue, m: msgcask.Message) -> None:
    emit({"acking": m.id})
    q.ack(m)
    emit({"acked": m.id})


def store_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.endswith(".log")
    )


def main() -> None:
    path, rounds, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    point = os.environ.get("MSGCASK_CRASH_AT", "")
    fs.set_crash_point("")  # not while building
    store = msgcask.open(path, max_file_size=MAX_FILE_SIZE, compaction_interval=None)
    inflight = build(store, rounds)
    fs.set_crash_point(point)
    emit({"armed": point})
    if phase == "compact":
        report = store.compact()
        emit({"survived": repr(report)})
    elif phase == "put":
        q = store.queue("work")
        seq = 1_000_000
        for _ in range(4 * MAX_FILE_SIZE // len(body_for(0))):
            msg_id = q.put(body_for(seq), headers={"seq": str(seq)})
            emit({"put": msg_id, "seq": seq})
            seq += 1
        emit({"survived": "put phase"})
    elif phase == "drain":
        work = store.queue("work")
        for m in inflight:
            ack(work, m)
        for name in store.queues():
            q = store.queue(name)
            while True:
                try:
                    m = q.get(block=False)
                except msgcask.Empty:
                    break
                ack(q, m)
        report = store.compact()
        emit({"survived": repr(report)})
    elif phase == "background":
        fs.set_crash_point("")
        store.close()
        fs.set_crash_point(point)
        store = msgcask.open(path, max_file_size=MAX_FILE_SIZE, compaction_interval=0.05)
        time.sleep(60)
        emit({"survived": "background phase"})
    elif phase == "pressure":
        fs.set_crash_point("")
        store.close()
        limit = max(8 * MAX_FILE_SIZE, store_bytes(path) + 2 * MAX_FILE_SIZE)
        store = msgcask.open(
            path, max_file_size=MAX_FILE_SIZE, compaction_interval=None, max_store_size=limit
        )
        fs.set_crash_point(point)
        q = store.queue("work")
        seq = 2_000_000
        for _ in range(4 * limit // MAX_FILE_SIZE):
            for priority in [0] + [9] * 60:
                emit({"putting": seq})
                msg_id = q.put(body_for(seq), headers={"seq": str(seq)}, priority=priority)
                emit({"put": msg_id, "seq": seq})
                seq += 1
            for _ in range(60):
                m = q.get(block=False)
                if m.priority == 9:
                    ack(q, m)
        emit({"survived": "pressure phase"})
    else:
        raise SystemExit(f"unknown phase {phase!r}")
    store.close()


if __name__ == "__main__":
    main()
