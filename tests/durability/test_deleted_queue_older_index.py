"""A queue deleted after the index was last committed must stay deleted when the journal
is replayed onto that older index (guarantee 4: the state the journal says)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import msgcask


@pytest.mark.parametrize("delivered", [False, True], ids=["available", "delivered"])
def test_deleted_queue_stays_deleted_after_replay_onto_an_older_index(
    store_path: Path, tmp_path: Path, delivered: bool
) -> None:
    with msgcask.open(store_path) as store:
        store.queue("kept").put(b"1")
    shutil.copytree(store_path / "index", tmp_path / "index.old")
    with msgcask.open(store_path) as store:
        gone = store.queue("gone")
        gone.put_many([b"a", b"b"])
        if delivered:
            gone.get(block=False)
        store.delete_queue("gone")
        assert store.queues() == ["kept"]
    shutil.rmtree(store_path / "index")
    shutil.copytree(tmp_path / "index.old", store_path / "index")
    with msgcask.open(store_path) as store:
        assert store.queues() == ["kept"]
        assert store.stats().live_messages == 1


def test_deleted_queue_stays_deleted_after_replay_onto_an_older_unclean_index(
    store_path: Path, tmp_path: Path
) -> None:
    # An index committed while the store was open (as a crash leaves it, say one
    # whose last commits a power cut lost): opening replays the journal onto it,
    # and the ACKs of the deletion empty the queue, which must then go.
    with msgcask.open(store_path) as store:
        store.queue("kept").put(b"1")
        store.queue("gone").put_many([b"a", b"b"])
        store.sync()  # commits the index: "gone" holds two messages there
        shutil.copytree(store_path / "index", tmp_path / "index.old")
        store.delete_queue("gone")
    shutil.rmtree(store_path / "index")
    shutil.copytree(tmp_path / "index.old", store_path / "index")
    with msgcask.open(store_path) as store:
        assert store.recovery.mode == "replay"
        assert store.queues() == ["kept"]
        assert store.stats().live_messages == 1
