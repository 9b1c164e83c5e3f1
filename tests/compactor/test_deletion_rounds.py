"""An ACK file is never unlinked in the same round as the PUT file its ACKs cancel.

A round unlinks its files and then fsyncs the directory once, so two files of one
round may reach the disk in either order. The file of ACKs must therefore wait for a
later round (design.md, "Deleting files"), even when the list given to the round
holds it: a rewrite whose victims all died since its plan hands them all to
``reclaim``, the PUT file and the file of its ACKs alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import msgcask
from msgcask.compactor import reclaim as reclaim_mod
from msgcask.compactor.rewrite import rewrite


def test_ack_file_made_reclaimable_by_a_release_waits_for_a_later_round(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds: list[list[int]] = []
    unlink = reclaim_mod.delete_retired

    def spy(store: msgcask.Store, file_ids: list[int]) -> int:
        rounds.append(list(file_ids))
        return unlink(store, file_ids)

    monkeypatch.setattr(reclaim_mod, "delete_retired", spy)
    with msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(10):
            q.put(b"p" * 1000)  # file 1: P
        got = [q.get(block=False) for _ in range(10)]
        with store._lock:
            store._roll_over()  # file 2: A
        for m in got[1:]:
            q.ack(m)  # ACKs of P's messages, in A
        for _ in range(20):
            q.put(b"a" * 1000)
            q.ack(q.get(block=False))
        with store._lock:
            store._roll_over()  # file 3: the head
        q.ack(got[0])  # P's last live message: nothing in P or A needs copying now
        # as planned while P still had a live message
        rewrite(store, [1, 2], between=lambda: None, wrote=lambda size: None, copied=lambda r: None)
        assert [1, 2] not in [sorted(r) for r in rounds]
        assert rounds[0] == [1]
        store.compact()  # a later round takes A
        assert {f.file_id for f in store.stats().files} == {3}
        assert store.verify() == []
