"""Room kept for the index on a nearly full disk: batches of puts and compaction
output are refused while less than ``_INDEX_RESERVE`` would stay free, cleanly, so
that the index's next commit still finds room (a commit that does not fails the
whole index). The mapped write head's side of it is in tests/store/test_mapped_head.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import msgcask
from disk_files import statvfs_reporting
from msgcask import db as db_module


def _disk_with(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(db_module.os, "statvfs", statvfs_reporting(free, free))


def test_a_batch_of_puts_leaves_the_reserve_alone(
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot: Callable[..., dict[str, Any]],
) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        ids = q.put_many([b"a", b"b"])
        before = snapshot(store, store_path)
        _disk_with(monkeypatch, db_module._INDEX_RESERVE)
        with pytest.raises(msgcask.Error, match="space kept for the index"):
            q.put_many([b"c", b"d"])
        with pytest.raises(msgcask.Error, match="space kept for the index"):
            with store.transaction() as t:
                t.put("elsewhere", b"e")  # a queue the failed batch must not create
        assert snapshot(store, store_path) == before
        # Acks alone only free space: a transaction of them still goes through.
        first = q.get(block=False)
        with store.transaction() as t:
            t.ack(first)
        monkeypatch.undo()
        ids += q.put_many([b"c"])
        assert [m.id for m in q.browse()] == ids[1:]


def test_compaction_output_leaves_the_reserve_alone(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with msgcask.open(store_path, max_file_size=2**16, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(300):
            q.put(b"x" * 1000)
        delivered = [q.get(block=False) for _ in range(300)]
        for i, m in enumerate(delivered):
            if i % 10:
                q.ack(m)  # sparse files, one message in ten live
        store.sync()
        files = {f.name for f in store_path.glob("*.log")}
        live = sorted(m.id for m in q.browse())
        _disk_with(monkeypatch, db_module._INDEX_RESERVE + 1024)
        with pytest.raises(msgcask.Error, match="beside the space kept for the index"):
            store.compact(threshold=0.5)
        assert files <= {f.name for f in store_path.glob("*.log")}  # no victim deleted
        assert store.stats().compaction.files_rewritten == 0
        assert store.verify() == []
        monkeypatch.undo()
        report = store.compact(threshold=0.5)
        assert report.files_rewritten > 0
        assert sorted(m.id for m in q.browse()) == live
