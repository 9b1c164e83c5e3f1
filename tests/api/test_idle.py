"""An idle store costs next to nothing: with nothing written, the background flush
neither commits the index nor checks the space bound, and both resume as soon as
writes do. Waits are bounded polling loops; the idle spells give a misbehaving
flush dozens of chances to show itself, and nothing asserts a duration."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import msgcask

SYNC_INTERVAL = 0.01
IDLE = 0.5  # 50 sync intervals, 2 idle looks for writes
WAIT = 20.0  # generous: a loaded CI machine may be slow, a broken flush never gets there


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up after {WAIT} s waiting for {what}"
        time.sleep(0.01)


def _commits(store: msgcask.Store) -> int:
    """LMDB's count of committed write transactions."""
    return int(store._env.env.info()["last_txnid"])


def test_an_idle_store_commits_nothing_until_it_is_written_again(tmp_path: Path) -> None:
    with msgcask.open(
        tmp_path / "store", sync_interval=SYNC_INTERVAL, compaction_interval=None
    ) as store:
        q = store.queue("q")
        q.put(b"first")
        _wait_for(lambda: store._committed_position == store._journal.position, "a commit")
        before = _commits(store)
        time.sleep(IDLE)
        assert _commits(store) == before
        q.ack(q.get(block=False))
        _wait_for(lambda: _commits(store) > before, "the commit of the ack")
        after_ack = _commits(store)
        time.sleep(IDLE)
        assert _commits(store) == after_ack
    with msgcask.open(tmp_path / "store", compaction_interval=None) as store:
        assert store.recovery.mode == "clean"
        assert len(store.queue("q")) == 0


_IDLE_CHILD = f"""
import sys, time, msgcask
store = msgcask.open(sys.argv[1], sync_interval={SYNC_INTERVAL}, compaction_interval=None)
q = store.queue("q")
ids = [q.put(b"m%d" % i) for i in range(20)]
q.ack(q.get(block=False))
while store._committed_position != store._journal.position:
    time.sleep(0.01)
print(" ".join(map(str, ids[1:])), flush=True)
time.sleep(3600)
"""


def test_an_idle_store_killed_after_skipped_commits_replays_nothing(tmp_path: Path) -> None:
    # The commits an idle store skips had nothing to add: the last one it made
    # holds every message, so a kill -9 during the idle spell leaves nothing to replay.
    path = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", _IDLE_CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        expected = [int(i) for i in child.stdout.readline().split()]
        time.sleep(IDLE)
    finally:
        child.kill()
        child.wait()
    assert len(expected) == 19
    with msgcask.open(path, compaction_interval=None) as store:
        assert store.recovery.records == 0
        assert [m.id for m in store.queue("q").browse()] == expected


def test_an_idle_store_does_not_check_the_space_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with msgcask.open(
        tmp_path / "store", sync_interval=SYNC_INTERVAL, compaction_interval=3600
    ) as store:
        checks = []
        urgent = store._compactor.urgent

        def counted() -> bool:
            checks.append(time.monotonic())
            return urgent()

        monkeypatch.setattr(store._compactor, "urgent", counted)
        q = store.queue("q")
        q.put(b"first")
        _wait_for(lambda: len(checks) > 0, "the check after the first put")
        checks.clear()  # the flush checks once per change it sees, then looks only for writes
        time.sleep(IDLE)
        assert checks == []
        q.put(b"second")
        _wait_for(lambda: len(checks) > 0, "the check after the second put")
