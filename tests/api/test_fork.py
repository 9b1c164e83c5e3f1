"""A child forked from a process with an open store cannot use that store.

The child shares the parent's lock, index and write head through the fork, so a
put there would be written where the parent writes too, and lost or duplicated.
Every call raises ClosedError, saying why, and the child's close() leaves the
parent's lock and files alone.
"""

from __future__ import annotations

import json
import os
import select
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

import msgcask


def run_in_child(calls: dict[str, Callable[[], object]]) -> dict[str, str]:
    """Fork; in the child run each call, then close the store's copy; return
    what each call did ("ok" or the error's type and message)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running any cleanup
        try:
            outcomes: dict[str, str] = {}
            for name, call in calls.items():
                try:
                    call()
                    outcomes[name] = "ok"
                except Exception as e:  # reported to the parent
                    outcomes[name] = f"{type(e).__name__}: {e}"
            os.write(write_end, json.dumps(outcomes).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while True:
        ready, _, _ = select.select([read_end], [], [], 60)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung")
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return dict(json.loads(b"".join(chunks)))


def test_a_forked_child_gets_closed_error_and_the_parent_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = msgcask.open(path, sync_interval=0.001)  # the flush often holds the locks
    q = store.queue("q")
    q.put(b"delivered")
    q.put(b"waiting")
    held = q.get(block=False)
    outcomes = run_in_child(
        {
            "put": lambda: q.put(b"child"),
            "put_many": lambda: q.put_many([b"child"]),
            "get": lambda: q.get(block=False),
            "ack": lambda: q.ack(held),
            "len": lambda: len(q),
            "queue": lambda: store.queue("other"),
            "stats": store.stats,
            "sync": store.sync,
            "compact": store.compact,
            "close": store.close,
        }
    )
    calls_that_raise = {name: out for name, out in outcomes.items() if name != "close"}
    for name, out in calls_that_raise.items():
        assert out.startswith("ClosedError") and "forked" in out, (name, out)
    assert outcomes["close"] == "ok"
    # The parent still holds the store: its lock was not released by the child's close.
    with pytest.raises(msgcask.StoreLockedError):
        msgcask.open(path)
    q.ack(held)
    after = q.put(b"after")
    store.close()
    with msgcask.open(path) as reopened:
        messages = list(reopened.queue("q").browse())
    assert [m.body for m in messages] == [b"waiting", b"after"]
    assert messages[-1].id == after


def test_a_forked_child_does_not_wait_for_a_pass_running_in_the_parent(tmp_path: Path) -> None:
    # A pass in the parent holds the compactor's lock at the fork; the child's copy
    # of it is never released. A put that must make room would wait for it for ever.
    kib = 1024
    store = msgcask.open(
        tmp_path / "store", max_file_size=64 * kib, max_store_size=256 * kib, sync="never"
    )
    try:
        q = store.queue("q")
        while store._fits(kib + 100):  # until a put of a KiB must make room
            q.put(b"x" * kib)
        with store._compactor.pass_lock():  # as a running pass holds it
            outcomes = run_in_child(
                {"put": lambda: q.put(b"y" * kib), "verify": store.verify, "compact": store.compact}
            )
        for name, out in outcomes.items():
            assert out.startswith("ClosedError") and "forked" in out, (name, out)
    finally:
        store.close()
