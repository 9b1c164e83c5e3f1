"""A store's cost does not depend on its history (design brief, guarantee 6).

Time is not measured here (bench/history_independence.py and the drain-history
workload do that); what a put, get or ack costs is decided by what it works on,
and that is compared. A store that has carried a history of backlogs filled and
drained, then holds some live messages, must look like a fresh store holding the
same: the same index entries (no tombstones of acked messages), B-trees of the
same depth and about the same pages, the same number of data files, and an index
file no bigger than twice the fresh one (it shrinks back after a backlog).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

import msgcask

BODY = b"h" * 512
LIVE = 1_000  # messages both stores hold at the end
BACKLOG = 5_000  # messages put before a drain, in each round of the history
OPTIONS: dict[str, Any] = {"compaction_interval": None, "max_file_size": 256 * 1024}


def _what_operations_work_on(path: Path) -> dict[str, Any]:
    """The index's tables (entries, B-tree depth, pages), its file's size and the
    number of data files of the closed store at ``path``."""
    env = lmdb.open(str(path / "index"), readonly=True, lock=False, max_dbs=5)
    tables = {}
    try:
        with env.begin() as txn:
            for name in (b"order", b"msgs", b"files"):
                stat = txn.stat(env.open_db(name, txn=txn, create=False))
                pages = stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
                tables[name.decode()] = (stat["entries"], stat["depth"], pages)
    finally:
        env.close()
    return {
        "tables": tables,
        "index_bytes": (path / "index" / "data.mdb").stat().st_size,
        "data_files": len([n for n in os.listdir(path) if n.endswith(".log")]),
    }


def _end_with_live_messages(path: Path, history_rounds: int) -> dict[str, Any]:
    with msgcask.open(path, **OPTIONS) as store:
        q = store.queue("q")
        for _ in range(history_rounds):
            for _ in range(BACKLOG):
                q.put(BODY)
            for _ in range(BACKLOG):
                q.ack(q.get(block=False))
        store.compact()  # as the background job would
        for _ in range(LIVE):
            q.put(BODY)
    return _what_operations_work_on(path)


@pytest.mark.slow
def test_a_store_after_a_long_history_works_on_what_a_fresh_one_does(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    fresh = _end_with_live_messages(tmp_path / "fresh", history_rounds=0)
    rounds = scaled(10)
    after = _end_with_live_messages(tmp_path / "after", history_rounds=rounds)
    report = f"after {rounds * BACKLOG} messages of history: {after}; fresh: {fresh}"
    for table, (entries, depth, pages) in fresh["tables"].items():
        entries_after, depth_after, pages_after = after["tables"][table]
        assert (entries_after, depth_after) == (entries, depth), report
        assert pages_after <= pages + 2, report
    assert after["data_files"] == fresh["data_files"], report
    assert after["index_bytes"] <= 2 * fresh["index_bytes"], report
