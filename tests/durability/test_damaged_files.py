"""Torn tails, flipped bits and lost or stale indexes (design brief, guarantees 3 and 4).

Each test builds a store through the API, damages the real files the way a crash, a bad
disk or an operator would, reopens, and compares with what the test itself put there.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from msgcask_records import (
    assert_file_is_clean,
    find_record_with,
    flip_byte,
    read_records,
)

import msgcask
from draining import each_available

SMALL_FILE = 64 * 1024  # the smallest max_file_size the store accepts
Verify = Callable[[msgcask.Store], None]
DataFiles = Callable[[Path], list[Path]]


def body(i: int, size: int = 300) -> bytes:
    """A body that occurs nowhere else in the store (unique marker, then filler)."""
    head = b"<msg %06d>" % i
    return head + bytes((i * 31 + k) % 256 for k in range(size - len(head)))


def put_bodies(path: Path, n: int, max_file_size: int, size: int = 300) -> dict[int, bytes]:
    with msgcask.open(path, max_file_size=max_file_size, compaction_interval=None) as store:
        q = store.queue("q")
        return {q.put(body(i, size)): body(i, size) for i in range(n)}


def browse_all(store: msgcask.Store, name: str = "q") -> list[tuple[int, bytes]]:
    return [(m.id, bytes(m.body)) for m in store.queue(name).browse()]


def mentions(report: Any, path: Path, offset: int | None = None) -> bool:
    """Does a corruption report (exception or stats entry) name this file (and offset)?"""
    text = str(report) + " " + repr(report)
    named = path.name in text or str(path) in text
    for attr in ("file", "path", "filename", "file_name"):
        value = getattr(report, attr, None)
        if value is not None and Path(str(value)).name == path.name:
            named = True
    file_id = getattr(report, "file_id", None)
    if file_id is not None and int(file_id) == int(path.name[:10]):
        named = True
    if offset is None:
        return named
    at = getattr(report, "offset", None)
    return named and (at == offset or str(offset) in text)


class TestTornTail:
    def test_partial_record_appended_to_last_file_is_truncated_on_open(
        self, store_path: Path, data_files: DataFiles, verify: Verify
    ) -> None:
        expected = put_bodies(store_path, 30, SMALL_FILE, size=3000)
        last = data_files(store_path)[-1]
        original = last.read_bytes()
        records, end = read_records(last)
        assert end == len(original) and records, "test setup: last file ends on a record"
        # Half of a real record: a valid-looking header whose payload never arrived.
        victim = records[-1]
        last.write_bytes(original + original[victim.start : victim.start + 13 + 40])

        with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as store:
            assert browse_all(store) == sorted(expected.items())
            after = store.queue("q").put(b"written after recovery")
            verify(store)
        # The torn bytes are gone: the file holds the old prefix and then whole records.
        assert last.read_bytes()[: len(original)] == original
        for f in data_files(store_path):
            assert_file_is_clean(f)
        with msgcask.open(store_path) as store:
            assert browse_all(store)[-1] == (after, b"written after recovery")

    @pytest.mark.parametrize("keep_index", [False, True], ids=["index_removed", "index_kept"])
    def test_last_record_cut_in_half_is_dropped_and_the_rest_kept(
        self, store_path: Path, data_files: DataFiles, verify: Verify, keep_index: bool
    ) -> None:
        # keep_index: the index may be ahead of the journal (power loss lost unsynced
        # journal bytes); the journal is the truth.
        expected = put_bodies(store_path, 30, SMALL_FILE, size=3000)
        last = data_files(store_path)[-1]
        puts = [(mid, find_record_with(last, b)) for mid, b in expected.items()]
        in_last = [(mid, r) for mid, r in puts if r is not None]
        assert in_last, "test setup: the last data file holds at least one message"
        torn_id, torn = max(in_last, key=lambda x: x[1].start)
        cut = torn.start + (torn.end - torn.start) // 2
        original = last.read_bytes()
        with open(last, "r+b") as f:
            f.truncate(cut)
        if not keep_index:
            shutil.rmtree(store_path / "index")

        with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as store:
            want = sorted((mid, b) for mid, b in expected.items() if mid != torn_id)
            assert browse_all(store) == want
            new = store.queue("q").put(b"after the cut")
            assert new > max(want)[0]
            verify(store)
        # Only the torn record went: everything before it is byte for byte the same.
        assert last.read_bytes()[: torn.start] == original[: torn.start]
        for f in data_files(store_path):
            assert_file_is_clean(f)


class TestBitFlip:
    def _damage_middle_file(
        self, store_path: Path, data_files: DataFiles, where: str = "body"
    ) -> tuple[dict[int, bytes], int, Path, int]:
        expected = put_bodies(store_path, 60, SMALL_FILE, size=4000)
        files = data_files(store_path)
        assert len(files) >= 3, "test setup: the messages span several files"
        target = files[1]  # not the last file: no torn-tail rule applies to it
        hits = [(mid, find_record_with(target, b)) for mid, b in expected.items()]
        in_target = [(mid, r) for mid, r in hits if r is not None]
        assert len(in_target) >= 2, "test setup: the middle file holds several messages"
        damaged_id, rec = in_target[len(in_target) // 2]
        if where == "body":
            at = rec.payload.find(expected[damaged_id]) + len(expected[damaged_id]) // 2
            flip_byte(target, rec.start + 13 + at)
        else:
            # Record header fields: checksum at +0 (8 bytes), payload length at +8 (4).
            flip_byte(target, rec.start + {"checksum": 3, "length": 8}[where])
        return expected, damaged_id, target, rec.start

    @pytest.mark.parametrize("where", ["body", "checksum", "length"])
    def test_flipped_byte_in_old_file_is_reported_and_the_queue_moves_on(
        self, store_path: Path, data_files: DataFiles, where: str
    ) -> None:
        expected, damaged_id, target, offset = self._damage_middle_file(
            store_path, data_files, where
        )
        # Opening must not fail: the index is intact and the damage is in one record.
        with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as store:
            q = store.queue("q")
            got: list[tuple[int, bytes]] = []
            raised: list[msgcask.CorruptionError] = []
            for _ in range(len(expected) + 5):
                try:
                    m = q.get(block=False)
                except msgcask.Empty:
                    break
                except msgcask.CorruptionError as e:
                    raised.append(e)
                    continue
                got.append((m.id, bytes(m.body)))
                q.ack(m)
            # Not wedged: every intact message was delivered, intact, in order.
            assert got == sorted((mid, b) for mid, b in expected.items() if mid != damaged_id)
            with pytest.raises(msgcask.Empty):
                q.get(block=False)
            reports = list(raised) + list(store.stats().corruptions)
            assert reports, "the damaged record was neither raised nor reported"
            assert any(mentions(r, target, offset) for r in reports), (
                f"no report names {target.name} at offset {offset}: {reports}"
            )

    def test_flipped_byte_found_by_rebuild_is_reported_and_the_rest_kept(
        self, store_path: Path, data_files: DataFiles, verify: Verify
    ) -> None:
        expected, damaged_id, target, offset = self._damage_middle_file(store_path, data_files)
        shutil.rmtree(store_path / "index")
        with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as store:
            want = sorted((mid, b) for mid, b in expected.items() if mid != damaged_id)
            assert browse_all(store) == want
            reports = list(store.stats().corruptions)
            assert any(mentions(r, target, offset) for r in reports), (
                f"rebuild did not report {target.name} at offset {offset}: {reports}"
            )
            verify(store)
        # The intact records after the damaged one in the same file were kept, not cut off.
        assert target.exists()


def test_bad_record_inside_the_last_file_is_not_mistaken_for_a_torn_tail(
    store_path: Path, data_files: DataFiles, verify: Verify
) -> None:
    # A checksum mismatch followed by good records is damage, not a torn write: cutting
    # the file there would throw away every intact record after it.
    expected = put_bodies(store_path, 12, SMALL_FILE, size=2000)
    files = data_files(store_path)
    last = files[-1]
    hits = [(mid, find_record_with(last, b)) for mid, b in expected.items()]
    in_last = [(mid, r) for mid, r in hits if r is not None]
    assert len(in_last) >= 5, "test setup: the last file holds several messages"
    damaged_id, rec = in_last[2]
    at = rec.payload.find(expected[damaged_id]) + 100
    flip_byte(last, rec.start + 13 + at)
    size = last.stat().st_size
    shutil.rmtree(store_path / "index")  # the rebuild scans the whole last file
    with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as store:
        want = sorted((mid, b) for mid, b in expected.items() if mid != damaged_id)
        assert browse_all(store) == want
        reports = list(store.stats().corruptions)
        assert any(mentions(r, last, rec.start) for r in reports), reports
        verify(store)
    assert last.stat().st_size >= size, "intact records after the damage were cut off"


def mixed_history(store: msgcask.Store, *, delete_a_queue: bool = True) -> dict[int, int]:
    """Puts, gets, acks, nacks, dead-lettering, a transaction, a purge and a deleted queue
    (one with a delivered message), spread over several files. Replaying a deleted queue
    from an older index has its own test (test_deleted_queue_older_index.py).

    Returns id -> deliveries so far for the messages still live."""
    deliveries: dict[int, int] = {}
    work = store.queue("work", max_deliveries=2)
    other = store.queue("other")
    gone = store.queue("gone")
    gone.put_many([body(i, 100) for i in range(5)])
    in_gone = gone.get(block=False)
    deliveries[in_gone.id] = in_gone.deliveries
    for i in range(40):
        work.put(body(1000 + i, 4000), headers={"i": str(i)}, priority=i % 10)
        if i % 3 == 0:
            other.put(body(2000 + i, 1800))
    for _ in range(12):
        m = work.get(block=False)
        deliveries[m.id] = m.deliveries
        if m.id % 3 == 0:
            work.ack(m)
            del deliveries[m.id]
        elif m.id % 3 == 1:
            work.nack(m)  # some of these reach max_deliveries later and dead-letter
    for _ in range(6):
        m = work.get(block=False)
        deliveries[m.id] = m.deliveries
        if m.deliveries == 2:
            work.nack(m)  # to DLQ.work under a new id
            del deliveries[m.id]
    m = other.get(block=False)
    with store.transaction() as tx:
        tx.put("other", b"from the transaction", priority=9)
        tx.ack(m)
    m = other.get(block=False)  # stays delivered, unacked
    deliveries[m.id] = m.deliveries
    purge_me = store.queue("purged")
    purge_me.put_many([b"p1", b"p2"])
    purge_me.purge()
    purge_me.put(b"after purge")
    if delete_a_queue:
        store.delete_queue("gone")
        del deliveries[in_gone.id]
    return deliveries


def state(store: msgcask.Store) -> dict[str, list[tuple[int, bytes, dict[str, str], int]]]:
    return {
        name: [
            (m.id, bytes(m.body), dict(m.headers or {}), m.priority)
            for m in store.queue(name).browse()
        ]
        for name in store.queues()
    }


def check_redeliveries(store: msgcask.Store, deliveries: dict[int, int]) -> None:
    """Drain every queue: a message's delivery count continues from before the reopen."""
    for name in store.queues():
        q = store.queue(name)
        for m in each_available(q):
            before = deliveries.get(m.id, 0)
            assert (m.deliveries, m.redelivered) == (before + 1, before > 0), (
                f"message {m.id} in {name!r}: deliveries {m.deliveries}, had {before}"
            )
            q.ack(m)


OPTS: dict[str, Any] = {"max_file_size": SMALL_FILE, "compaction_interval": None}


class TestIndexLoss:
    def test_deleted_index_is_rebuilt_to_the_same_state(
        self, store_path: Path, verify: Verify
    ) -> None:
        with msgcask.open(store_path, **OPTS) as store:
            deliveries = mixed_history(store)
            before = state(store)
        assert len(list(store_path.glob("*.log"))) >= 3, "test setup: several data files"
        shutil.rmtree(store_path / "index")
        with msgcask.open(store_path, **OPTS) as store:
            assert state(store) == before
            verify(store)
            check_redeliveries(store, deliveries)

    def test_index_older_than_the_journal_is_caught_up(
        self, store_path: Path, tmp_path: Path, verify: Verify
    ) -> None:
        with msgcask.open(store_path, **OPTS) as store:
            q = store.queue("q")
            first = [q.put(body(i)) for i in range(20)]
            for _ in range(3):
                q.ack(q.get(block=False))
        shutil.copytree(store_path / "index", tmp_path / "index.old")
        with msgcask.open(store_path, **OPTS) as store:
            # Acks of messages the old index still counts as live, and new puts.
            deliveries = mixed_history(store, delete_a_queue=False)
            q = store.queue("q")
            for _ in range(5):
                q.ack(q.get(block=False))
            q.put_many([body(500 + i) for i in range(10)])
            before = state(store)
        assert set(first) - {m[0] for m in before["q"]}, "test setup: old messages were acked"
        shutil.rmtree(store_path / "index")
        shutil.copytree(tmp_path / "index.old", store_path / "index")
        with msgcask.open(store_path, **OPTS) as store:
            assert state(store) == before
            verify(store)
            check_redeliveries(store, deliveries)

    @pytest.mark.parametrize("damage", ["meta_pages_overwritten", "truncated_to_zero"])
    def test_corrupted_index_is_rebuilt(
        self, store_path: Path, verify: Verify, damage: str
    ) -> None:
        with msgcask.open(store_path, **OPTS) as store:
            deliveries = mixed_history(store)
            before = state(store)
        mdb = store_path / "index" / "data.mdb"
        assert mdb.exists(), "test setup: the LMDB environment lives in index/"
        if damage == "meta_pages_overwritten":
            with open(mdb, "r+b") as f:
                f.write(b"\xab" * 8192)  # both LMDB meta pages (page size 4096)
        else:
            with open(mdb, "r+b") as f:
                f.truncate(0)
        with msgcask.open(store_path, **OPTS) as store:
            assert state(store) == before
            verify(store)
            check_redeliveries(store, deliveries)


def test_recreated_queue_holds_only_its_new_messages_after_rebuild(store_path: Path) -> None:
    with msgcask.open(store_path) as store:
        store.queue("q").put(b"old")
        store.delete_queue("q")
        new = store.queue("q").put(b"new")
    shutil.rmtree(store_path / "index")
    with msgcask.open(store_path) as store:
        assert [(m.id, m.body) for m in store.queue("q").browse()] == [(new, b"new")]


def test_ids_are_not_reused_after_compaction_deleted_every_old_file_and_the_index(
    store_path: Path, data_files: DataFiles
) -> None:
    # Once every message is acked and compaction has deleted the files that held them,
    # only the data files themselves can remember how far the ids got.
    with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as store:
        q = store.queue("q")
        ids = [q.put(body(i, 3000)) for i in range(80)]
        for _ in ids:
            q.ack(q.get(block=False))
        before = {p.name for p in data_files(store_path)}
        for _ in range(3):
            store.compact(threshold=1.0)
    after = {p.name for p in data_files(store_path)}
    assert before - after, "test setup: compaction deleted the old files"
    shutil.rmtree(store_path / "index")
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.stats().live_messages == 0
        new = store.queue("q").put(b"fresh")
    assert new > max(ids), f"id {new} reused (earlier ids went up to {max(ids)})"
