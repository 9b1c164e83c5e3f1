"""``msgcask.confine_to_one_cpu``: every thread of the process, and threads started
later, run on one CPU; a bad CPU changes nothing.

Confining is process-wide, so the checks that confine run in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import msgcask

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="confining threads needs Linux"
)

CHILD = textwrap.dedent(
    """
    import json, os, sys, threading
    import msgcask

    def masks():
        return sorted(sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task"))

    store = msgcask.open(sys.argv[1], compaction_interval=0.1)  # its background threads run
    stop = threading.Event()
    waiting = threading.Thread(target=stop.wait)
    waiting.start()
    before = masks()
    cpu = msgcask.confine_to_one_cpu(int(sys.argv[2]) if len(sys.argv) > 2 else None)
    after = masks()
    later = []
    t = threading.Thread(target=lambda: later.append(sorted(os.sched_getaffinity(0))))
    t.start(); t.join()
    q = store.queue("q")
    q.put(b"still works")
    body = q.get(timeout=5).body.decode()
    stop.set(); waiting.join(); store.close()
    print(json.dumps({"cpu": cpu, "before": before, "after": after, "later": later, "body": body}))
    """
)


def _child(tmp_path: Path, *args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "store"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_every_thread_and_every_later_one_runs_on_the_chosen_cpu(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1]
    seen = _child(tmp_path, str(cpu))
    assert seen["cpu"] == cpu
    if len(allowed) > 1:
        assert seen["before"] != seen["after"]
    threads = seen["after"]
    assert isinstance(threads, list) and len(threads) >= 3  # main, waiting, the store's
    assert threads == [[cpu]] * len(threads)
    assert seen["later"] == [[cpu]]
    assert seen["body"] == "still works"


def test_by_default_the_lowest_allowed_cpu(tmp_path: Path) -> None:
    seen = _child(tmp_path)
    assert seen["cpu"] == min(os.sched_getaffinity(0))
    assert seen["later"] == [[seen["cpu"]]]


@pytest.mark.parametrize(
    ("cpu", "error", "says"),
    [
        (10**6, ValueError, "may run on CPUs"),
        (-1, ValueError, "may run on CPUs"),
        ("0", TypeError, "must be an int"),
        (True, TypeError, "must be an int"),
        (0.0, TypeError, "must be an int"),
    ],
)
def test_a_bad_cpu_is_refused_and_changes_nothing(cpu: object, error: type, says: str) -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(error, match=says):
        msgcask.confine_to_one_cpu(cpu)  # type: ignore[arg-type]
    assert os.sched_getaffinity(0) == before
