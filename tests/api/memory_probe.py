"""Child process for the bounded-memory test: grows one queue and reports memory.

Usage: memory_probe.py STORE DEPTH [DEPTH ...]

Puts small messages into one queue until it holds each DEPTH in turn and prints,
at each, a JSON line: the depth, the process's anonymous resident memory (RssAnon:
the heaps, not the mapped index and data files, which are page cache), and the
Python heap as tracemalloc counts it. Then it closes the store, opens it again
(``"reopened": true``) and reports the same once more, after reading the whole
queue with browse().
"""

from __future__ import annotations

import json
import sys
import tracemalloc

import msgcask


def anonymous_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


def report(depth: int, **extra: object) -> None:
    print(
        json.dumps(
            {
                "depth": depth,
                "anon_kib": anonymous_kib(),
                "traced": tracemalloc.get_traced_memory()[0],
                **extra,
            }
        ),
        flush=True,
    )


def main() -> None:
    path, depths = sys.argv[1], [int(d) for d in sys.argv[2:]]
    tracemalloc.start()
    with msgcask.open(path, compaction_interval=None) as store:
        q = store.queue("q")
        held = 0
        for depth in depths:
            while held < depth:
                q.put(b"m" * 64, headers={"n": "1"})
                held += 1
            store.sync()  # the index's dirty pages are written and freed
            report(depth)
    with msgcask.open(path, compaction_interval=None) as store:
        q = store.queue("q")
        seen = sum(1 for _ in q.browse())
        report(seen, reopened=True)


if __name__ == "__main__":
    main()
