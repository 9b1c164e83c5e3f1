"""Read errors (EIO, a bad sector) through the I/O seam.

Like a flipped bit, an unreadable record must be reported and skipped so its queue keeps
moving; like every OS error, it must reach the caller as a msgcask.Error naming the file,
never as a raw OSError.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt

SMALL_FILE = 64 * 1024


def open_store(path: Path, fs: FaultyFileSystem) -> msgcask.Store:
    return msgcask.Store(path, _fs=fs, max_file_size=SMALL_FILE, compaction_interval=None)


def put_offsets(path: Path) -> dict[int, int]:
    buf = path.read_bytes()
    return {
        codec.decode_put_meta(buf, r.payload_start, r.end).msg_id: r.offset
        for r in codec.scan(buf, fmt.FILE_HEADER_SIZE)
        if isinstance(r, codec.Record) and r.rtype == fmt.TYPE_PUT
    }


def two_file_store(path: Path, fs: FaultyFileSystem) -> list[int]:
    """Messages in a sealed file 1 and a journal head 2, closed cleanly (so a reopen
    reads only the head)."""
    with open_store(path, fs) as store:
        q = store.queue("q")
        ids = [q.put(b"%04d" % i + bytes(300)) for i in range(300)]
        assert store.stats().data_files == 2
    return ids


def faulty_two_file_store(path: Path) -> tuple[FaultyFileSystem, list[int], Path]:
    """``two_file_store`` on a fault-injecting file system: the file system, the
    ids, and the sealed file 1."""
    fs = FaultyFileSystem()
    return fs, two_file_store(path, fs), path / "0000000001.log"


def test_read_error_on_get_skips_the_message_and_reports_it(store_path: Path) -> None:
    fs, ids, first = faulty_two_file_store(store_path)
    bad = put_offsets(first)[ids[1]] + 5
    fs.bad_sectors[str(first)] = {bad}
    with open_store(store_path, fs) as store:
        q = store.queue("q")
        assert q.get(block=False).id == ids[0]
        assert q.get(block=False).id == ids[2]  # the queue is not wedged
        [report] = store.stats().corruptions
        assert report.path == str(first) and report.offset <= bad
        fs.bad_sectors.clear()


def test_read_error_in_browse_skips_the_message_and_reports_it(store_path: Path) -> None:
    fs, ids, first = faulty_two_file_store(store_path)
    fs.bad_sectors[str(first)] = {put_offsets(first)[ids[1]] + 5}
    with open_store(store_path, fs) as store:
        assert [m.id for m in store.queue("q").browse()] == [ids[0], *ids[2:]]
        assert [c.path for c in store.stats().corruptions] == [str(first)]
        fs.bad_sectors.clear()


@pytest.mark.parametrize("index", ["index kept", "index lost"])
def test_read_error_during_open_raises_msgcask_error_and_changes_nothing(
    store_path: Path, index: str
) -> None:
    fs = FaultyFileSystem()
    ids = two_file_store(store_path, fs)
    if index == "index lost":
        shutil.rmtree(store_path / "index")
    head = store_path / "0000000002.log"
    fs.bad_sectors[str(head)] = {0}  # its header
    with pytest.raises(msgcask.Error, match=head.name):
        open_store(store_path, fs)
    fs.bad_sectors.clear()  # the disk recovers: everything is still there
    with open_store(store_path, fs) as store:
        assert [m.id for m in store.queue("q").browse()] == ids
        assert store.verify() == []


def _sparse_files(store: msgcask.Store) -> list[int]:
    q = store.queue("q")
    for i in range(600):
        q.put(b"%04d" % i + bytes(400))
    for i in range(600):
        m = q.get(block=False)
        if i % 10:
            q.ack(m)  # every tenth stays, delivered: each sealed file is sparse
    return [f.file_id for f in store.stats().files if f.file_id != store._journal.head_id]


def test_an_unreadable_victim_is_left_alone_and_the_others_are_compacted(
    store_path: Path,
) -> None:
    fs = FaultyFileSystem()
    with open_store(store_path, fs) as store:
        sealed = _sparse_files(store)
        assert len(sealed) >= 3
        bad = store_path / f"{sealed[0]:010d}.log"
        fs.bad_sectors[str(bad)] = set(range(0, SMALL_FILE, 512))
        report = store.compact(threshold=0.5)  # not an OSError
        assert report.files_rewritten == len(sealed) - 1
        left = [f.file_id for f in store.stats().files]
        assert sealed[0] in left and not set(sealed[1:]) & set(left)
        fs.bad_sectors.clear()
        assert store.verify() == []


def _consumed_through_a_transaction(store: msgcask.Store) -> tuple[int, int]:
    """A compacted file C whose messages are all consumed (its dead PUT records
    hold ACKs elsewhere), and a sealed file A of messages that were acked and
    forwarded in transactions not yet synced; returns (C, number of A's messages)."""
    c = store.queue("c")
    for _ in range(250):
        c.put(b"c" * 500)
    got = [c.get(block=False) for _ in range(250)]
    for i, m in enumerate(got):
        (c.nack if i % 10 == 0 else c.ack)(m)
    store.compact(threshold=1.0)
    [compacted] = [f.file_id for f in store.stats().files if f.kind == "compacted"]
    a = store.queue("a")
    for _ in range(150):
        a.put(b"a" * 500)  # fills and seals a file of their own
    while len(c):
        c.ack(c.get(block=False))
    while len(a):
        m = a.get(block=False)
        with store.transaction() as tx:
            tx.ack(m)
            tx.put("fwd", m.body)
    return compacted, 150


@contextlib.contextmanager
def _a_consumed_file(
    store_path: Path,
) -> Iterator[tuple[FaultyFileSystem, msgcask.Store, int]]:
    """A store on a faulty disk with a compacted file whose messages were all
    consumed, and that file's id. Once the block is done with it, the file reads
    again: the next pass must delete it, and the store stay consistent."""
    fs = FaultyFileSystem()
    # No background sync meanwhile: it deletes emptied files (reclaim_emptied), and
    # could take the consumed file before the disk fails under it.
    options = {"max_file_size": SMALL_FILE, "compaction_interval": None, "sync_interval": 3600}
    with msgcask.Store(store_path, _fs=fs, **options) as store:  # type: ignore[arg-type]
        compacted, _ = _consumed_through_a_transaction(store)
        yield fs, store, compacted
        fs.bad_sectors.clear()
        fs.bad_bytes.clear()
        store.compact()
        assert compacted not in {f.file_id for f in store.stats().files}
        assert store.verify() == []


def test_a_consumed_file_that_cannot_be_read_is_kept_and_logged_once(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Its consumed PUT records cannot be found while it cannot be read: it stays.
    # Pass after pass meets the same error, and the log says so once; once the
    # file reads again, the next pass deletes it.
    with _a_consumed_file(store_path) as (fs, store, compacted):
        dead = store._acct.files[compacted].dead_puts
        assert dead > 1
        fs.bad_sectors[str(store_path / f"{compacted:010d}.log")] = set(range(0, 200_000, 512))
        with caplog.at_level("WARNING", logger="msgcask"):
            for _ in range(3):
                store.compact()
        assert compacted in {f.file_id for f in store.stats().files}
        # Its counts say nothing keeps it; stats() says what does, and why_kept(), which
        # reads the file, cannot tell more than that.
        [stats] = [f for f in store.stats().files if f.file_id == compacted]
        assert (stats.live_messages, stats.needed_acks) == (0, 0)
        eio = "cannot be read (Input/output error)"
        assert stats.kept_by == f"{eio}: run msgcask check"
        assert stats.damage == eio
        with pytest.raises(msgcask.CorruptionError, match=re.escape(eio)):
            store.why_kept(compacted)
        # Reported once, not once per pass.
        [report] = store.stats().corruptions
        name = store_path / f"{compacted:010d}.log"
        size = name.stat().st_size
        assert (
            str(report) == f"{name}: read error (Input/output error) at offset 0, {size} bytes kept"
        )
        assert [r.getMessage() for r in caplog.records] == [
            f"msgcask: data file {compacted} cannot be read (Input/output error)",
            f"msgcask: file {compacted}: found 0 of its {dead} consumed PUT records "
            "(damaged?); kept",
        ]


def test_a_consumed_file_that_reads_again_but_damaged_is_kept_for_the_damage(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # First it cannot be read; then it reads, but a flipped bit hides one of its
    # consumed PUT records. What keeps it is then that damage, not the read
    # error it no longer has; and a read error that comes back is news again.
    with _a_consumed_file(store_path) as (fs, store, compacted):
        dead = store._acct.files[compacted].dead_puts
        path = store_path / f"{compacted:010d}.log"
        unreadable = f"msgcask: data file {compacted} cannot be read (Input/output error)"
        with caplog.at_level("WARNING", logger="msgcask"):
            fs.bad_sectors[str(path)] = {0}
            store.compact()
            [stats] = [f for f in store.stats().files if f.file_id == compacted]
            assert stats.damage == "cannot be read (Input/output error)"
            fs.bad_sectors.clear()
            fs.bad_bytes[str(path)] = {min(put_offsets(path).values()) + 20}
            store.compact()
            [stats] = [f for f in store.stats().files if f.file_id == compacted]
            assert stats.damage == f"damage hides 1 of its {dead} consumed PUT records"
            fs.bad_bytes.clear()
            fs.bad_sectors[str(path)] = {0}
            store.compact()
        assert [r.getMessage() for r in caplog.records].count(unreadable) == 2


@pytest.mark.parametrize("fault", ["read error", "other error"])
def test_a_failing_file_among_deletions_loses_nothing_to_a_power_cut(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # An unreadable file is left alone like a damaged one. Any other error cuts the
    # deletion short: files are retired one by one, and those retired before the
    # failing one are deleted by the next pass, so their retirement (and the ACKs it
    # relies on) must be durable first, or a power cut keeps the deletion and loses
    # the acks.
    from faulty_fs import abandon

    from msgcask.compactor import needed

    fs = FaultyFileSystem()
    options = {"max_file_size": SMALL_FILE, "compaction_interval": None, "sync_interval": 3600}
    store = msgcask.Store(store_path, _fs=fs, **options)  # type: ignore[arg-type]
    compacted, count = _consumed_through_a_transaction(store)
    if fault == "read error":
        fs.bad_sectors[str(store_path / f"{compacted:010d}.log")] = set(range(0, 200_000, 512))
    else:
        real = needed.find_any

        def find_any(store: msgcask.Store, file_id: int) -> object:
            if file_id == compacted:
                raise msgcask.Error("injected")
            return real(store, file_id)

        monkeypatch.setattr(needed, "find_any", find_any)
    for _ in range(2):
        with contextlib.suppress(msgcask.Error):
            store.compact()
    abandon(store)
    fs.power_cut()
    shutil.rmtree(store_path / "index")
    fs.bad_sectors.clear()
    monkeypatch.undo()
    with msgcask.Store(store_path, **options) as reopened:  # type: ignore[arg-type]
        assert len(reopened.queue("a")) + len(reopened.queue("fwd")) == count


@pytest.mark.parametrize("settle", ["ack", "nack"])
def test_a_browse_that_cannot_read_a_delivered_message_leaves_it_to_its_consumer(
    store_path: Path, settle: str
) -> None:
    fs = FaultyFileSystem()
    with open_store(store_path, fs) as store:
        q = store.queue("q")
        q.put(b"delivered")
        q.put(b"waiting")
        m = q.get(block=False)
        fs.bad_sectors[str(store_path / "0000000001.log")] = set(range(SMALL_FILE))
        assert list(q.browse()) == []  # neither can be read now
        [report] = store.stats().corruptions  # only the undelivered one is quarantined
        assert report.reason.startswith(f"message {m.id + 1}: read error")
        fs.bad_sectors.clear()
        getattr(q, settle)(m)
        assert [x.body for x in q.browse()] == ([] if settle == "ack" else [b"delivered"])
        assert store.verify() == []


def test_why_kept_of_a_file_that_cannot_be_read_raises_a_msgcask_error_naming_it(
    store_path: Path,
) -> None:
    fs, ids, first = faulty_two_file_store(store_path)
    with open_store(store_path, fs) as store:
        fs.bad_sectors[str(first)] = set(range(0, SMALL_FILE, 512))
        with pytest.raises(msgcask.CorruptionError, match=f"{first}.*Input/output error") as e:
            store.why_kept(1)
        assert e.value.path == str(first)
        fs.bad_sectors.clear()  # the disk recovers: the answer comes, and nothing changed
        assert len(store.why_kept(1).live_messages) == len(ids) - len(
            put_offsets(store_path / "0000000002.log")
        )
        assert [m.id for m in store.queue("q").browse()] == ids


def test_a_nack_that_cannot_read_the_message_to_dead_letter_it_puts_it_back(
    store_path: Path,
) -> None:
    # A delivered message stays its consumer's: a read error (perhaps passing) when
    # its last nack would copy it to the dead-letter queue must not drop it. It goes
    # back, and the next get reads it again.
    fs, ids, first = faulty_two_file_store(store_path)
    with open_store(store_path, fs) as store:
        q = store.queue("q", max_deliveries=1)
        m = q.get(block=False)
        fs.bad_sectors[str(first)] = set(range(SMALL_FILE))
        q.nack(m)
        assert store.stats().corruptions == []
        fs.bad_sectors.clear()
        assert len(q) == len(ids)
        again = q.get(block=False)
        assert (again.id, again.deliveries) == (m.id, 2)
        q.nack(again)  # readable now: dead-lettered
        [dead] = store.queue("DLQ.q").browse()
        assert (dead.body, dead.headers["x-original-id"]) == (m.body, str(m.id))
        assert store.verify() == []


def test_a_rebuild_cut_short_by_a_read_error_leaves_no_half_index(store_path: Path) -> None:
    # With the index lost, the open rebuilds it from every data file; a bad sector in
    # the middle of the sealed file stops the rebuild after the index has been
    # started. The half-built index must go: the next open rebuilds all of it, and a
    # half index trusted as clean would hide the messages it never read.
    fs, ids, sealed = faulty_two_file_store(store_path)
    shutil.rmtree(store_path / "index")
    fs.bad_sectors[str(sealed)] = {SMALL_FILE // 2}
    with pytest.raises(msgcask.Error, match=sealed.name):
        open_store(store_path, fs)
    assert not (store_path / "index").exists()
    fs.bad_sectors.clear()
    with open_store(store_path, fs) as store:
        assert store.recovery.mode == "rebuild"
        assert [m.id for m in store.queue("q").browse()] == ids
        assert store.verify() == []


def settle(store: msgcask.Store) -> list[msgcask.CompactionReport]:
    """Run passes until one does nothing (at most 10); return them."""
    reports = [store.compact()]
    while len(reports) < 10 and (reports[-1].files_rewritten or reports[-1].files_deleted):
        reports.append(store.compact())
    return reports


def test_acks_whose_put_file_cannot_be_read_are_all_kept(store_path: Path) -> None:
    # A pass rewriting an ACK file reads the highest PUT id of a journal file that
    # seems to count more of those ACKs than it holds (those of a deleted file after
    # it). While that file cannot be read, every such ACK is copied (none may be taken
    # for a deleted file's and dropped, or a rebuild would bring messages back); once
    # it reads again, the passes settle with only the ACKs it counts.
    fs = FaultyFileSystem()
    # No background flush: its deletions between the passes below would leave some
    # pass nothing to do, which the counts of passes here take for settled.
    options: dict[str, object] = {
        "max_file_size": SMALL_FILE,
        "compaction_interval": None,
        "sync_interval": 3600,
    }
    with msgcask.Store(store_path, _fs=fs, **options) as store:  # type: ignore[arg-type]
        keep, drop = store.queue("keep"), store.queue("drop")
        kept = set()
        for j in range(63):  # file 1: three of every five messages kept
            if j % 5 < 3:
                kept.add(keep.put(b"x" * 1000))
            else:
                drop.put(b"x" * 1000)
        for _ in range(5 * 63):  # files after it: all consumed
            drop.put(b"x" * 1000)
        drop.purge()  # every ACK in the head
        ack_file = store._journal.head_id
        counted = store._acct[1].acked_in[ack_file]
        first = store_path / "0000000001.log"
        dropped = put_offsets(first)[min(set(put_offsets(first)) - kept)]
        fs.bad_sectors[str(first)] = {dropped + 100}  # in a consumed message's body
        unreadable = settle(store)
        # Each pass copies all the ACKs again: what it copies is as big as what it frees.
        assert unreadable[-1].files_rewritten == 1
        assert unreadable[-1].bytes_copied >= unreadable[-1].bytes_reclaimed
        assert {m.id for m in keep.browse()} == kept
        fs.bad_sectors.clear()
        readable = settle(store)
        assert not (readable[-1].files_rewritten or readable[-1].files_deleted), readable
        [copy] = [f for f in store.stats().files if f.kind == "compacted"]
        assert copy.needed_acks == counted
        assert store.verify() == []
    shutil.rmtree(store_path / "index")
    with msgcask.Store(store_path, **options) as reopened:  # type: ignore[arg-type]
        assert reopened.recovery.mode == "rebuild"
        back = {m.id for name in reopened.queues() for m in reopened.queue(name).browse()}
        assert back == kept
        assert reopened.verify() == []
