"""kill -9 while ``open`` is rebuilding the index (design brief, guarantees 2 and 4).

Recovery itself can be interrupted: a rebuild killed half-way must leave something the
next open recognises as unfinished, and the store must end in the journal's state however
many rebuilds were cut short.
"""

from __future__ import annotations

import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import msgcask
from child_process import child_process
from draining import each_available

OPENER = Path(__file__).with_name("open_store.py")
FILE_SIZE = 64 * 1024

State = dict[str, list[tuple[int, bytes, int]]]


def build_history(path: Path, n: int) -> tuple[State, dict[int, int]]:
    """A store with n messages over many files, some acked, some delivered and unacked."""
    deliveries: dict[int, int] = {}
    with msgcask.open(path, max_file_size=FILE_SIZE, compaction_interval=None) as store:
        qs = [store.queue("a"), store.queue("b")]
        for i in range(n):
            qs[i % 2].put(b"%07d" % i + bytes(i % 256 for _ in range(i % 900)), priority=i % 10)
        for q in qs:
            for k in range(n // 5):
                m = q.get(block=False)
                if k % 3:
                    q.ack(m)
                else:
                    deliveries[m.id] = m.deliveries
        state = {
            name: [(m.id, bytes(m.body), m.priority) for m in store.queue(name).browse()]
            for name in store.queues()
        }
    return state, deliveries


def open_and_kill(path: Path, out: Path, delay: float | None) -> float | None:
    """Run the opener; kill it ``delay`` s after "S", or let it finish (delay None).

    Returns how long open took when it finished, else None.
    """
    with child_process([sys.executable, str(OPENER), str(path)], out) as opener:
        opener.wait_for(lambda output: output.startswith(b"S\n"), "its start", poll=0.001)
        started = time.monotonic()
        if delay is None:
            assert opener.proc.wait(timeout=120) == 0, f"open failed: {opener.stderr()}"
            return time.monotonic() - started
        time.sleep(delay)
        opener.kill9()  # it may have finished first: the caller tells by its output
        return None


@pytest.mark.crash
@pytest.mark.slow
def test_kill9_during_index_rebuild_converges_to_the_journal_state(
    store_path: Path,
    tmp_path: Path,
    scaled: Callable[[int], int],
    verify: Callable[[msgcask.Store], None],
    unexpected_entries: Callable[[Path], list[str]],
) -> None:
    state, deliveries = build_history(store_path, 3000)
    assert len(list(store_path.glob("*.log"))) >= 5, "test setup: many data files"
    # How long does a full rebuild take here? The kills are spread over that window.
    shutil.copytree(store_path, tmp_path / "probe")
    shutil.rmtree(tmp_path / "probe" / "index")
    took = open_and_kill(tmp_path / "probe", tmp_path / "probe.out", None)
    assert took is not None

    rng = random.Random(3000)
    interrupted = 0
    window = took * 0.8
    shutil.rmtree(store_path / "index")
    for i in range(scaled(6)):
        out = tmp_path / f"kill{i}.out"
        open_and_kill(store_path, out, rng.uniform(0, window))
        if out.read_bytes().endswith(b"O\n"):
            # That open finished before the kill: start the next one from scratch again,
            # and aim earlier (the machine may be faster now than when it was measured).
            shutil.rmtree(store_path / "index")
            window /= 2
        else:
            interrupted += 1  # the next open starts from what this one left behind
    assert interrupted, "no kill landed inside open(): nothing was tested"

    with msgcask.open(store_path, max_file_size=FILE_SIZE, compaction_interval=None) as store:
        assert unexpected_entries(store_path) == []
        after = {
            name: [(m.id, bytes(m.body), m.priority) for m in store.queue(name).browse()]
            for name in store.queues()
        }
        assert after == state
        verify(store)
        for name in store.queues():
            q = store.queue(name)
            for m in each_available(q):
                # Deliveries are counted once, however many rebuilds replayed them.
                assert m.deliveries == deliveries.get(m.id, 0) + 1, m.id
                q.ack(m)


@pytest.mark.crash
def test_kill9_after_a_committed_rebuild_step_starts_the_rebuild_over(
    store_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    verify: Callable[[msgcask.Store], None],
) -> None:
    # A rebuild commits the index in steps of about 200,000 changes (two per message):
    # more messages than that make it commit before it ends.
    per_batch, batches = 1000, 110
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        for b in range(batches):
            q.put_many([b"%07d" % (b * per_batch + i) for i in range(per_batch)])
        ids = [m.id for m in q.browse()]
    shutil.rmtree(store_path / "index")

    monkeypatch.setenv("MSGCASK_CRASH_AT", "recovery.after_rebuild_step")  # the child's
    out = tmp_path / "opener.out"
    with child_process([sys.executable, str(OPENER), str(store_path)], out) as opener:
        opener.proc.wait(timeout=120)
        assert opener.proc.returncode == -signal.SIGKILL, opener.stderr()
    assert out.read_bytes() == b"S\n", "the open was killed before it returned"

    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == "the index has no format version (new or incomplete)"
        assert [m.id for m in store.queue("q").browse()] == ids
        verify(store)
