"""A victim whose ACKs point at a file left out of the pass (damaged) must not end up
kept after its swap with stale copies of relocated messages that outlive their ACKs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_damaged_victims import MFS, _flip_byte_of

import msgcask
from draining import churn
from msgcask.index.catalog import Catalog


def test_acked_messages_do_not_resurrect_from_a_victim_kept_after_its_swap(
    tmp_path: Path,
) -> None:
    # W (file 1) holds a damaged record; V (file 2) holds the ACKs of W's messages and a
    # few live messages of its own. One pass takes both: W is skipped for its damage,
    # V's ACKs of W are not carried (their PUT file was a victim too), so V still holds
    # needed records after the swap and is kept -- while its live messages now live in
    # the copy. V's PUT records of them are stale. Once those messages are acked and the
    # copy and the ACKs are deleted, nothing cancels the stale records any more: a
    # rebuild brings the acked messages back.
    path = tmp_path / "store"

    def reopen() -> msgcask.Store:
        return msgcask.open(path, max_file_size=MFS, compaction_interval=None, sync_interval=60)

    with reopen() as store:
        q = store.queue("q")
        w_ids = [q.put(b"w" * 1000) for _ in range(58)]
        w_msgs = [q.get(block=False) for _ in w_ids]
        v_ids = [q.put(b"v" * 1000) for _ in range(40)]
        for m in w_msgs[1:]:
            q.ack(m)  # in V: ACKs of W's messages
        for i, m in enumerate([q.get(block=False) for _ in v_ids]):
            if i % 10:
                q.ack(m)  # V keeps 4 messages live (delivered)
        filler = store.queue("f")
        churn(filler, 70, b"f" * 1000)
        files = [f.file_id for f in store.stats().files if not f.active]
        assert files[:2] == [1, 2]
        assert {p for _, p in store.why_kept(2).needed_acks} == {1}
    assert _flip_byte_of(path, w_ids[5]) == 1  # damage a dead record of W

    with reopen() as store:
        store.compact(threshold=0.95)  # W and V are both victims
        q = store.queue("q")
        relocated = [m.id for m in q.browse() if m.id in v_ids]
        assert len(relocated) == 4
        for m in [q.get(block=False) for _ in range(5)]:
            if m.id in relocated:
                q.ack(m)
        filler = store.queue("f")
        churn(filler, 140, b"f" * 1000)  # seal the file holding those ACKs
        # Threshold 0.01: only whole-file deletions, which take the copy and the ACKs.
        for _ in range(3):
            store.compact(threshold=0.01)
        assert store.verify() == []
        live = {m.id for m in q.browse()}
        assert not live & set(relocated)
    shutil.rmtree(path / "index")
    with reopen() as store:
        back = sorted({m.id for m in store.queue("q").browse()} & set(relocated))
        assert back == [], f"acked messages back after a rebuild: {back}"


def _open_at_threshold(path: Path) -> msgcask.Store:
    return msgcask.open(path, max_file_size=MFS, compaction_interval=None, compaction_threshold=0.3)


def _rebuilt(path: Path) -> msgcask.Store:
    """The store opened again with its index deleted: rebuilt from the data files."""
    shutil.rmtree(path / "index")
    return _open_at_threshold(path)


def _ids(store: msgcask.Store) -> set[int]:
    """The ids of every message in the store, in any queue."""
    return {m.id for name in store.queues() for m in store.queue(name).browse()}


def _roll(store: msgcask.Store) -> None:
    with store._lock:
        store._roll_over()


def _compact_missing_needed_acks(
    store: msgcask.Store, monkeypatch: pytest.MonkeyPatch, **kw: float
) -> None:
    """A pass whose classification misses every needed ACK (the guard's case)."""
    monkeypatch.setattr(Catalog, "needed_ack", lambda *args: None)
    store.compact(**kw)
    monkeypatch.undo()


def _half_taken_then_filler(
    store: msgcask.Store,
) -> tuple[msgcask.Queue, set[int], msgcask.Queue, list[int]]:
    """File A: 50 messages of queue "q", the 25 of one half delivered (their ids
    returned, to be acked); then 50 of queue "f" (their ids returned)."""
    q = store.queue("q")
    for i in range(50):
        q.put(b"a" * 1000, headers={"half": str(i % 2)})
    taken = {q.get(block=False, selector=lambda h: h["half"] == "0").id for _ in range(25)}
    filler = store.queue("f")
    return q, taken, filler, [filler.put(b"b" * 1000) for _ in range(50)]


def test_a_victim_still_holding_needed_acks_after_its_swap_is_not_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap's last guard: if the classification missed needed records (here it is
    # made to miss every needed ACK), the accounts still count them, and the victims
    # must all be kept. A (half live, above the threshold) stays; B holds the ACKs of
    # A's other half and one live message, so B is rewritten through a swap. Deleting
    # B without its ACKs would bring A's acked half back on the next rebuild.
    path = tmp_path / "store"

    with _open_at_threshold(path) as store:
        q = store.queue("q")
        a_ids = [q.put(b"a" * 1000, headers={"half": str(i % 2)}) for i in range(50)]
        filler = store.queue("f")
        b_ids = [filler.put(b"b" * 1000) for _ in range(50)]
        acked = {q.get(block=False, selector=lambda h: h["half"] == "0").id for _ in range(25)}
        for m in [filler.get(block=False) for _ in b_ids]:
            if m.id != b_ids[-1]:
                filler.ack(m)
        for m in acked:
            q.ack(m)
        churn(filler, 50, b"f" * 1000)  # seal B
        a, b = (f.file_id for f in store.stats().files[:2])
        assert {p for _, p in store.why_kept(b).needed_acks} == {a}
        assert store.why_kept(b).live_messages == [("f", b_ids[-1])]
        expected = _ids(store)
        assert expected == (set(a_ids) - acked) | {b_ids[-1]}

        _compact_missing_needed_acks(store, monkeypatch)
        files = {f.file_id for f in store.stats().files}
        assert {a, b} <= files, "a victim holding needed ACKs was deleted"
        assert _ids(store) == expected
        assert store.verify() == []
    with _rebuilt(path) as store:
        back = _ids(store)
        assert not back & acked, f"acked messages back after a rebuild: {sorted(back & acked)}"
        assert back == expected


def test_a_victim_kept_by_the_guard_keeps_the_acks_of_its_consumed_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same guard, with a victim B that also holds PUT records of messages acked
    # after B was sealed (their ACKs are in C). B is kept, so those records stay on
    # disk: the ACKs in C must stay needed. Released before the guard decided, they
    # let C be deleted, and the next rebuild brought B's consumed messages back.
    path = tmp_path / "store"

    with _open_at_threshold(path) as store:
        q, acked, filler, b_ids = _half_taken_then_filler(store)
        for m in acked:
            q.ack(m)  # in B: needed ACKs of A's messages
        got = [filler.get(block=False) for _ in b_ids]
        _roll(store)  # seal B; C is the head
        for m in got[:-1]:
            filler.ack(m)  # in C: ACKs of B's messages
        b = store.stats().files[1].file_id

        _compact_missing_needed_acks(store, monkeypatch, threshold=0.3)
        assert b in {f.file_id for f in store.stats().files}, "the guard did not keep B"
        assert store.verify() == []
        churn(filler, 60, b"g" * 1000)  # seal C
        store.compact(threshold=0.01)
        assert store.verify() == []
        expected = _ids(store)
    with _rebuilt(path) as store:
        back = _ids(store)
        assert back == expected, f"acked messages back after a rebuild: {sorted(back - expected)}"


def test_a_kept_victim_keeps_its_live_messages_where_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The guard must decide before the swap: had the swap pointed B's live message at
    # the copy and then kept B, B's PUT record of it would stay on disk unaccounted.
    # Acked, and the copy and the ACK's file deleted, it came back on a rebuild.
    path = tmp_path / "store"

    with _open_at_threshold(path) as store:
        q, acked, filler, b_ids = _half_taken_then_filler(store)
        got = [filler.get(block=False) for _ in b_ids]
        for m in got[:-1]:
            filler.ack(m)
        for m_id in acked:
            q.ack(m_id)  # in B: needed ACKs of A's messages
        churn(filler, 50, b"f" * 1000)  # seal B
        a, b = (f.file_id for f in store.stats().files[:2])
        survivor = got[-1]
        assert survivor.id == b_ids[-1]

        _compact_missing_needed_acks(store, monkeypatch)
        files = {f.file_id: f.kind for f in store.stats().files}
        assert {a, b} <= set(files), "the guard did not keep the victims"
        assert "compacted" not in files.values(), "the guard left its copy"
        assert sorted(p.name for p in path.glob("*.tmp")) == []
        assert store.verify() == []

        _roll(store)  # a fresh head: B counts no ACKs in it
        filler.ack(survivor)  # its ACK is in the head
        churn(filler, 140, b"g" * 1000)  # seal the file holding that ACK
        for _ in range(3):
            store.compact(threshold=0.01)  # whole-file deletions only
        assert store.verify() == []
        expected = _ids(store)
        assert survivor.id not in expected
    with _rebuilt(path) as store:
        back = _ids(store)
        assert store.verify() == []
    assert not back & (acked | {survivor.id}), f"acked messages back: {sorted(back - expected)}"
    assert back == expected


def test_a_victim_the_guard_keeps_is_not_emptied_for_a_deletion_to_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two victims: B holds needed ACKs of A's messages (the classification is made to
    # miss them) and one live message; C holds one live message and nothing else
    # needed. The guard keeps both. Had the swap run, C, emptied, would have been
    # deleted whole by the same pass's reclaim round; the copy's MANIFEST names B and
    # C, so a rebuild would take B for redundant and remove it with the ACKs it was
    # kept for: A's acked messages came back.
    path = tmp_path / "store"

    with _open_at_threshold(path) as store:
        q, f = store.queue("q"), store.queue("f")
        for i in range(50):
            q.put(b"a" * 1000, headers={"half": str(i % 2)})
        _roll(store)  # A (half of it stays live)
        acked = [q.get(block=False, selector=lambda h: h["half"] == "0") for _ in range(25)]
        for m in acked:
            q.ack(m)  # in B: needed ACKs of A's messages
        f.put(b"b-live" * 100)  # B keeps one live message
        churn(f, 30, b"b" * 1000)
        _roll(store)  # B
        f.put(b"c" * 1000)  # C's live message
        b_msg = f.get(block=False)  # B's: its DELIVER record in C is needed
        churn(f, 30, b"c" * 1000)
        _roll(store)  # C
        a, b, c = (x.file_id for x in store.stats().files[:3])
        assert {p for _, p in store.why_kept(b).needed_acks} == {a}
        assert len(store.why_kept(b).live_messages) == 1
        assert len(store.why_kept(c).live_messages) == 1
        assert store.why_kept(c).needed_deliveries == [b_msg.id]

        _compact_missing_needed_acks(store, monkeypatch)
        files = {x.file_id: x.kind for x in store.stats().files}
        assert {a, b, c} <= set(files), "a victim the guard kept was deleted"
        assert "compacted" not in files.values(), "the guard left its copy"
        assert store.verify() == []

        f.ack(b_msg)
        f.ack(f.get(block=False))  # C's
        for _ in range(3):
            store.compact(threshold=0.01)
        assert store.verify() == []
        expected = _ids(store)
    with _rebuilt(path) as store:
        back = _ids(store)
        assert store.recovery.removed_files == []
        assert store.verify() == []
    gone = {m.id for m in acked}
    assert not back & gone, f"acked messages back after a rebuild: {sorted(back & gone)}"
    assert back == expected
