"""A journal file's PUT records are found from the index, by id range.

A journal file's PUT ids lie in its range of ids (its header's id floor up to
the next journal file's), so deleting a drained file finds the ACKs that only
had to outlive its PUT records by scanning that range of the index, and a
rewrite of a sparse file without needed ACK or DELIVER records finds its live
messages there and reads only them, instead of reading and parsing the file.
A transaction's ids are reserved at its put and may be older than the file its
commit lands in: then the range misses them and the file's records are read.
Either way the file must go, with every ACK released and every live message
kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import msgcask
from draining import churn
from msgcask.compactor import needed

MAX_FILE_SIZE = 64 * 1024
BODY = b"r" * 1000


def _open(path: Path) -> msgcask.Store:
    # No background flush during a test: it deletes files that drained within
    # sync_interval, and the passes under test must find them still there.
    return msgcask.open(
        path, max_file_size=MAX_FILE_SIZE, compaction_interval=None, sync_interval=3600
    )


def _parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the files the compactor parses."""
    calls: list[int] = []
    real = needed.parse

    def counting(buf: bytes, pause: object = None) -> needed.FileRecords:
        calls.append(len(buf))
        return real(buf, pause)  # type: ignore[arg-type]

    monkeypatch.setattr(needed, "parse", counting)
    return calls


def _drain_through_later_files(store: msgcask.Store, q: msgcask.Queue, count: int) -> None:
    """Put ``count`` messages, then put as many again while consuming the first
    ones, so their ACKs land in later files than their PUT records."""
    for _ in range(count):
        q.put(BODY)
    for _ in range(count):
        q.ack(q.get(block=False))
        q.put(BODY)
    for _ in range(count):
        q.ack(q.get(block=False))


def _sealed_journal_files(store: msgcask.Store) -> list[int]:
    return [f.file_id for f in store.stats().files if f.kind == "journal" and not f.active]


def _files(store: msgcask.Store) -> set[int]:
    return {f.file_id for f in store.stats().files}


def _assert_reopens_drained(path: Path) -> None:
    """A reopen agrees: a consistent index, and queue "q" empty."""
    with _open(path) as store:
        assert store.verify() == []
        assert len(store.queue("q")) == 0


def _compact_away(
    store: msgcask.Store,
    sealed: list[int],
    monkeypatch: pytest.MonkeyPatch,
    threshold: float | None = None,
) -> tuple[msgcask.CompactionReport, list[int]]:
    """One pass that must delete every ``sealed`` file and leave the store
    consistent; returns its report and the files it parsed."""
    parses = _parses(monkeypatch)
    report = store.compact(threshold=threshold)
    assert not set(sealed) & _files(store)
    assert store.verify() == []
    return report, parses


def _head(store: msgcask.Store) -> int:
    (head,) = [f.file_id for f in store.stats().files if f.active]
    return head


def test_drained_journal_files_go_without_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(tmp_path / "s") as store:
        q = store.queue("q")
        _drain_through_later_files(store, q, 300)
        sealed = _sealed_journal_files(store)
        assert len(sealed) >= 8
        report, parses = _compact_away(store, sealed, monkeypatch)
        assert report.files_deleted >= len(sealed)
        assert parses == []  # every deletion found its ids in the index
    _assert_reopens_drained(tmp_path / "s")


def test_a_transaction_older_than_its_file_falls_back_to_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(tmp_path / "s") as store:
        q = store.queue("q")
        txn = store.transaction()
        early = txn.put("q", BODY)  # its id is reserved now...
        for _ in range(150):  # ...and other puts fill more than two files
            q.put(BODY)
        (committed,) = txn.commit()  # ...before it is written, past its file's floor
        assert committed == early
        home = _head(store)
        assert home != 1
        _drain_through_later_files(store, q, 150)
        while len(q):
            q.ack(q.get(block=False))
        sealed = _sealed_journal_files(store)
        assert home in sealed  # so the transaction's file must go too
        _, parses = _compact_away(store, sealed, monkeypatch)
        assert parses  # found by reading it
    _assert_reopens_drained(tmp_path / "s")


def test_consumed_messages_of_journal_files_leave_no_index_entries(tmp_path: Path) -> None:
    # Their ACKs are counted per file pair instead (and released with the file).
    with _open(tmp_path / "s") as store:
        q = store.queue("q")
        _drain_through_later_files(store, q, 300)
        assert list(store._env.items(store._env.msgs)) == []
        counted = sum(sum(a.acked_in.values()) for a in store._acct.files.values())
        assert counted > 500  # nearly every ACK landed after its PUT record's file
        assert store.verify() == []
    _assert_reopens_drained(tmp_path / "s")


@pytest.mark.parametrize("read_live_at_most", [32, 1], ids=["one-by-one", "whole-file"])
def test_a_sparse_victim_is_rewritten_reading_only_its_live_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_live_at_most: int
) -> None:
    # Three live messages per file: read one by one, or sliced out of one read.
    monkeypatch.setattr(needed, "READ_LIVE_AT_MOST", read_live_at_most)
    with _open(tmp_path / "s") as store:
        live = store.queue("live")
        work = store.queue("work")
        for i in range(6 * 60):
            if i % 20 == 0:
                live.put(BODY, headers={"i": str(i)})
            else:
                churn(work, 1, BODY)
        sealed = _sealed_journal_files(store)
        assert len(sealed) >= 4
        assert all(f.needed_acks == 0 for f in store.stats().files if f.file_id in sealed)
        report, parses = _compact_away(store, sealed, monkeypatch, threshold=0.5)
        assert report.files_rewritten >= len(sealed)
        assert parses == []  # no victim was read whole
    with _open(tmp_path / "s") as store:
        q = store.queue("live")
        got = [q.get(block=False) for _ in range(len(q))]
        assert [m.headers["i"] for m in got] == [str(i) for i in range(0, 6 * 60, 20)]
        assert all(m.body == BODY for m in got)
        assert store.verify() == []


def test_a_live_transaction_message_older_than_its_victim_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(tmp_path / "s") as store:
        work = store.queue("work")
        txn = store.transaction()
        early = txn.put("live", BODY, headers={"txn": "1"})
        churn(work, 150, BODY)  # more than two files pass before the commit
        txn.commit()
        home = _head(store)
        churn(work, 130, BODY)  # the rest of its file, consumed at once, and more to seal it
        assert home in _sealed_journal_files(store)
        _, parses = _compact_away(store, [home], monkeypatch, threshold=0.5)
        assert parses  # the range missed the message: its file was read
    with _open(tmp_path / "s") as store:
        m = store.queue("live").get(block=False)
        assert (m.id, m.headers, m.body) == (early, {"txn": "1"}, BODY)
