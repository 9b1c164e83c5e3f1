"""kill -9 right after ``store.queue()`` or ``delete_queue()`` returned, while a
compaction pass holds index commits back (docs/design.md, caveats: "Creating and
deleting a queue commits the index, so a replay keeps the change").

Queues are not journaled: only an index commit keeps a created or deleted queue. A
compaction swap defers routine commits until it commits itself, so a queue created or
deleted in the middle of one must still be in a committed index when the call returns.

And kill -9 in the middle of ``delete_queue``, between two appends of its ACK records
(crash point ``remove.after_ack_append``): the deletion is not atomic (docs/design.md,
caveats), but what it removed stays removed and nothing else changes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import msgcask
from child_process import child_process

WRITER = Path(__file__).with_name("queue_writer.py")
ROUNDS = 3  # each round aims one kill at a pair of calls made during a pass


def run_until_aimed(path: Path, out_path: Path, seed: int) -> list[str]:
    """Run the writer until it reports a pair of calls made during a pass; SIGKILL it."""
    with child_process([sys.executable, str(WRITER), str(path), str(seed)], out_path) as writer:
        writer.wait_for(
            lambda out: out.endswith(b"\nH\n"),
            "a queue call inside a compaction pass",
            seconds=40,
            poll=0.001,
        )
        assert writer.kill9()
    return out_path.read_text().split("\n")[:-1]


@pytest.mark.crash
@pytest.mark.slow
def test_kill9_keeps_queues_created_and_deleted_during_a_compaction_swap(tmp_path: Path) -> None:
    for seed in range(ROUNDS):
        path = tmp_path / f"store{seed}"
        lines = run_until_aimed(path, tmp_path / f"writer{seed}.out", seed)
        created = {line[2:] for line in lines if line.startswith("C ")}
        deleted = {line[2:] for line in lines if line.startswith("D ")}
        assert created and deleted, "the writer made no queue"
        with msgcask.open(path, max_file_size=1 << 20, compaction_interval=None) as store:
            names = set(store.queues())
            lost = sorted(created - deleted - names)
            back = sorted(deleted & names)
            assert not lost, f"round {seed}: queues store.queue() returned are gone: {lost}"
            assert not back, f"round {seed}: queues delete_queue() deleted came back: {back}"
            assert "bulk" in names


DELETER = """
import sys
import msgcask
store = msgcask.open(sys.argv[1], max_file_size=64 * 1024, compaction_interval=None)
store.delete_queue("gone")
"""


@pytest.mark.crash
@pytest.mark.parametrize("reopen", ["replay", "rebuild"])
def test_kill9_between_the_ack_appends_of_delete_queue_keeps_what_it_removed(
    store_path: Path, reopen: str
) -> None:
    # 64 KiB data files take about 3,100 ACK records an append: 5,000 need two.
    with msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None) as store:
        gone, kept = store.queue("gone"), store.queue("kept")
        for i in range(50):
            gone.put_many([b"g"] * 100, priority=i % 3)
        kept.put_many([b"k%d" % i for i in range(10)])
        order = [m.id for m in gone.browse()]  # the order its ACKs are written in
        before = [(m.id, bytes(m.body)) for m in kept.browse()]
    env = dict(os.environ, MSGCASK_CRASH_AT="remove.after_ack_append")
    child = subprocess.run(
        [sys.executable, "-c", DELETER, str(store_path)], env=env, capture_output=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    if reopen == "rebuild":
        shutil.rmtree(store_path / "index")
    with msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None) as store:
        assert store.recovery.mode == reopen
        left = [m.id for m in store.queue("gone").browse()]
        # The first append's ACKs hold, the rest were never written: the messages
        # removed are the first ones in queue order, and only those.
        assert 0 < len(left) < len(order)
        assert left == order[len(order) - len(left) :]
        assert [(m.id, bytes(m.body)) for m in store.queue("kept").browse()] == before
        assert store.verify() == []
        assert store.delete_queue("gone") == len(left)  # called again, it finishes
    with msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None) as store:
        assert store.queues() == ["kept"]
        assert store.stats().live_messages == len(before)
