"""A deleted queue must stay deleted when the index is rebuilt from the data files."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgcask


def test_deleted_queue_stays_deleted_after_index_rebuild(store_path: Path) -> None:
    with msgcask.open(store_path) as store:
        store.queue("gone").put_many([b"1", b"2"])
        store.queue("kept").put(b"3")
        store.delete_queue("gone")
        assert store.queues() == ["kept"]
    shutil.rmtree(store_path / "index")
    with msgcask.open(store_path) as store:
        assert store.queues() == ["kept"]
        assert store.stats().live_messages == 1
