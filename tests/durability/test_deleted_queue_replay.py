"""A deleted queue must stay deleted when the store is reopened, whether the index
is kept or rebuilt from the data files: the ACK records ``delete_queue`` writes are
what a rebuild reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import msgcask


@pytest.mark.parametrize("reopen", ["clean", "rebuild"])
def test_deleted_queue_stays_deleted_and_other_queues_keep_their_messages(
    store_path: Path, reopen: str
) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        gone, kept = store.queue("gone"), store.queue("kept")
        for i in range(10):
            gone.put(b"g%d" % i, priority=i % 3)
            kept.put(b"k%d" % i, priority=i % 3)
        gone.get(block=False)  # a delivered message goes with its queue
        taken = kept.get(block=False)  # and one of another queue stays, delivered
        before = [(m.id, bytes(m.body), m.priority) for m in kept.browse()]
        assert store.delete_queue("gone") == 10
    if reopen == "rebuild":
        shutil.rmtree(store_path / "index")
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.recovery.mode == reopen
        assert store.queues() == ["kept"]
        assert store.stats().live_messages == 10
        kept = store.queue("kept")
        assert [(m.id, bytes(m.body), m.priority) for m in kept.browse()] == before
        assert [m.id for m in kept.browse()].count(taken.id) == 1
        again = store.queue("gone")  # the name is free: a new, empty queue
        assert len(again) == 0
        with pytest.raises(msgcask.Empty):
            again.get(block=False)
        new = again.put(b"new")
        assert [m.body for m in again.browse()] == [b"new"]
        assert new > max(m_id for m_id, _, _ in before)
        assert store.verify() == []
