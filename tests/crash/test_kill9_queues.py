"""kill -9 right after ``store.queue()`` or ``delete_queue()`` returned, while a
compaction pass holds index commits back (docs/design.md, caveats: "Creating and
deleting a queue commits the index, so a replay keeps the change").

Queues are not journaled: only an index commit keeps a created or deleted queue. A
compaction swap defers routine commits until it commits itself, so a queue created or
deleted in the middle of one must still be in a committed index when the call returns.
"""

from __future__ import annotations

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
