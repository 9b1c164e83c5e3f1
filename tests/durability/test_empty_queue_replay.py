"""Which queues exist after a reopen, a crash, and a rebuild.

Queues are not journaled (docs/design.md, "Caveats and limitations"): creating or
deleting a queue commits the index at once, so a clean reopen and a crash followed by a
replay keep the change; a rebuild from the data files knows queues only through their
messages, so it keeps every queue that holds one, never brings back a deleted one, and
may forget an empty one, which ``store.queue(name)`` then creates again.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import msgcask

CHILD = """
import sys
import msgcask
store = msgcask.open(sys.argv[1], compaction_interval=None)
store.queue("created-empty")
store.queue("full").put(b"y")
store.queue("doomed").put(b"z")
store.delete_queue("doomed")
print("R", flush=True)
sys.stdin.read()
"""


def _history(store: msgcask.Store) -> None:
    store.queue("created-empty")
    drained = store.queue("drained")
    drained.put(b"x")
    drained.ack(drained.get(block=False))
    store.queue("full").put(b"y")
    store.queue("doomed").put(b"z")
    store.delete_queue("doomed")


def test_clean_reopen_keeps_empty_queues(store_path: Path) -> None:
    with msgcask.open(store_path) as store:
        _history(store)
        before = store.queues()
    assert before == ["created-empty", "drained", "full"]
    with msgcask.open(store_path) as store:
        assert store.queues() == before


def test_kill9_with_the_index_kept_keeps_created_and_deleted_queues(store_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"R\n", "child did not get ready"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with msgcask.open(store_path) as store:
        # Creating and deleting a queue committed the index at once: the crash kept both.
        assert store.queues() == ["created-empty", "full"]
        assert [m.body for m in store.queue("full").browse()] == [b"y"]


def test_rebuild_keeps_queues_with_messages_and_never_brings_back_deleted_ones(
    store_path: Path,
) -> None:
    with msgcask.open(store_path) as store:
        _history(store)
    shutil.rmtree(store_path / "index")
    with msgcask.open(store_path) as store:
        names = store.queues()
        assert "full" in names
        assert "doomed" not in names
        assert set(names) <= {"created-empty", "drained", "full"}
        # A forgotten empty queue is simply created again, empty and usable.
        for name in ("created-empty", "drained"):
            q = store.queue(name)
            assert len(q) == 0
            mid = q.put(b"again")
            assert [m.id for m in q.browse()] == [mid]
