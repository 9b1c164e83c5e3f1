"""Helper process: record every fsync/fdatasync of a data file while using a store.

Usage: python fsync_probe.py <store> <sync> <scenario>
The os functions are wrapped *before* msgcask is imported, so even a module that
imported them by name is observed. Prints one JSON document: the scenario's events
("put" and "ack" with start/end times) and the data-file syncs ("sync", start/end times).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

events: list[dict[str, Any]] = []
_lock = threading.Lock()


def _wrap(name: str) -> None:
    real = getattr(os, name)

    def wrapped(fd: Any) -> None:
        num = fd if isinstance(fd, int) else fd.fileno()
        try:
            target = os.readlink(f"/proc/self/fd/{num}")
        except OSError:
            target = "?"
        start = time.monotonic()
        real(fd)
        end = time.monotonic()
        if target.endswith(".log"):
            with _lock:
                events.append({"kind": "sync", "start": start, "end": end, "file": target})

    setattr(os, name, wrapped)


for _name in ("fsync", "fdatasync"):
    _wrap(_name)

import msgcask  # noqa: E402  (after the wrappers, on purpose)


def timed_put(q: Any, body: bytes) -> None:
    start = time.monotonic()
    q.put(body)
    end = time.monotonic()
    with _lock:
        events.append({"kind": "put", "start": start, "end": end})


def timed_ack(q: Any) -> None:
    m = q.get(block=False)
    start = time.monotonic()
    q.ack(m)
    end = time.monotonic()
    with _lock:
        events.append({"kind": "ack", "start": start, "end": end})


def main() -> None:
    path, sync, scenario = sys.argv[1:4]
    store = msgcask.open(path, sync=sync, sync_interval=0.05, compaction_interval=None)
    q = store.queue("q")
    marks: dict[str, float] = {}
    if scenario == "puts":
        for i in range(20):
            timed_put(q, b"single %d" % i)
        threads = [
            threading.Thread(
                target=lambda t=t: [timed_put(q, b"t%d %d" % (t, i)) for i in range(15)]
            )
            for t in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for _ in range(10):
            timed_ack(q)
        time.sleep(0.5)  # give a background syncer the chance to show itself
    marks["before_close"] = time.monotonic()
    store.close()
    print(json.dumps({"events": events, "marks": marks}))


if __name__ == "__main__":
    main()
