"""ACKs of a deleted journal file's messages are not taken for the file before it.

When a journal file is deleted, its range of ids falls to the journal file before
it, whose count of ACKs in some ACK file then seemed to cover the deleted file's
ACKs in that file too. Every rewrite of the ACK file copied them all, counted none,
and left a copy as sparse as its victim: each pass copied it again and freed nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_damaged_victims import _flip_byte_of

import msgcask

MFS = 64 * 1024
PER_FILE = 63  # 1,000-byte bodies in a 64 KiB file


def _build(store: msgcask.Store) -> tuple[set[int], int]:
    """File A: 3 of 5 messages kept; files after it: all consumed; one purge puts
    every ACK in the head. Returns the kept ids and A's count of ACKs there."""
    keep, drop = store.queue("keep"), store.queue("drop")
    kept = set()
    for j in range(PER_FILE):
        if j % 5 < 3:
            kept.add(keep.put(b"x" * 1000))
        else:
            drop.put(b"x" * 1000)
    for _ in range(5 * PER_FILE):
        drop.put(b"x" * 1000)
    drop.purge()
    first = store.stats().files[0].file_id
    return kept, store._acct[first].acked_in.get(store._journal.head_id, 0)


def test_a_pass_copies_only_the_acks_still_counted_and_then_rests(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with msgcask.open(path, max_file_size=MFS, compaction_interval=None) as store:
        kept, counted = _build(store)
        ack_file = store._journal.head_id
        assert 0 < counted < PER_FILE
        passes = []
        for _ in range(10):
            passes.append(store.compact())
            if not (passes[-1].files_rewritten or passes[-1].files_deleted):
                break
        assert not (passes[-1].files_rewritten or passes[-1].files_deleted), passes
        # Every rewrite freed more than it copied (bytes_reclaimed alone counts the
        # files deleted, never less than 0); the copy of the ACK file holds what is counted.
        assert all(p.bytes_reclaimed > p.bytes_copied for p in passes if p.files_rewritten), passes
        [copy] = [f for f in store.stats().files if f.kind == "compacted"]
        assert copy.needed_acks == counted
        assert copy.size < 32 + 30 + (counted + 1) * 21  # header, MANIFEST, the ACKs
        assert ack_file not in {f.file_id for f in store.stats().files}
        assert len(store.why_kept(copy.file_id).needed_acks) == counted
        assert store.verify() == []
        assert {m.id for m in store.queue("keep").browse()} == kept
    # Nothing consumed comes back when the index is rebuilt from the files.
    shutil.rmtree(path / "index")
    with msgcask.open(path, max_file_size=MFS, compaction_interval=None) as store:
        back = {m.id for name in store.queues() for m in store.queue(name).browse()}
        assert back == kept
        assert store.verify() == []


def test_a_damaged_file_keeps_every_ack_its_range_claims(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Damage hides file A's last PUT record, of a consumed message whose ACK A
    # counts: A's highest PUT id cannot be known, so a rewrite of the ACK file
    # copies every ACK A's range claims (the deleted files' ones too), that one
    # included. Taking the highest id the damage left would leave that ACK
    # behind, and the ACK file could never go.
    path = tmp_path / "store"
    with msgcask.open(path, max_file_size=MFS, compaction_interval=None) as store:
        keep, drop = store.queue("keep"), store.queue("drop")
        kept = {keep.put(b"x" * 1000) for j in range(PER_FILE - 1) if j % 5 < 3}
        for _ in range(PER_FILE - 1 - len(kept)):
            drop.put(b"x" * 1000)
        last = drop.put(b"x" * 1000)
        assert store._journal.head_id == 1
        for _ in range(5 * PER_FILE):
            drop.put(b"x" * 1000)
        drop.purge()
        ack_file = store._journal.head_id
        counted = store._acct[1].acked_in[ack_file]
    assert _flip_byte_of(path, last) == 1
    with (
        msgcask.open(path, max_file_size=MFS, compaction_interval=None) as store,
        caplog.at_level("WARNING", logger="msgcask"),
    ):
        for _ in range(3):
            store.compact()
        files = {f.file_id: f for f in store.stats().files}
        assert ack_file not in files
        assert [f.needed_acks for f in files.values() if f.kind == "compacted"] == [counted]
        assert not [r for r in caplog.records if "did not find" in r.getMessage()]
        assert store.verify() == []
    shutil.rmtree(path / "index")
    with msgcask.open(path, max_file_size=MFS, compaction_interval=None) as store:
        back = {m.id for name in store.queues() for m in store.queue(name).browse()}
        assert back == kept
