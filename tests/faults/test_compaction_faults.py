"""Faults while compacting: the disk fills up under the copy, a read of a victim returns
a flipped bit, the power goes after the swap. Compaction may fail, but it never loses
a live message, never brings back an acked one, and leaves no stray file behind.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faulty_fs import FaultyFileSystem, abandon

import msgcask
from disk_files import written_size
from msgcask.store import codec
from msgcask.store import format as fmt

SMALL_FILE = 64 * 1024


def open_store(path: Path, fs: FaultyFileSystem, **kw: Any) -> msgcask.Store:
    kw.setdefault("compaction_interval", None)
    kw.setdefault("sync_interval", 3600)
    kw.setdefault("max_file_size", SMALL_FILE)
    return msgcask.Store(path, _fs=fs, **kw)


def body(i: int) -> bytes:
    return b"%06d" % i + bytes(i % 251 for _ in range(300))


def sparse_store(store: msgcask.Store, n: int = 600, keep_every: int = 10) -> dict[int, bytes]:
    """Fill several files, then ack all but every ``keep_every``-th message."""
    q = store.queue("q")
    bodies = {q.put(body(i)): body(i) for i in range(n)}
    keep = set(list(bodies)[::keep_every])
    delivered = [q.get(block=False) for _ in range(n)]
    for m in delivered:
        if m.id in keep:
            q.nack(m)
        else:
            q.ack(m)
    assert len(q) == len(keep)
    return {i: b for i, b in bodies.items() if i in keep}


def contents(store: msgcask.Store) -> dict[int, bytes]:
    return {m.id: bytes(m.body) for m in store.queue("q").browse()}


def test_enospc_while_writing_the_copy_changes_nothing(
    store_path: Path, unexpected_entries: Callable[[Path], list[str]]
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs)
    live = sparse_store(store)
    store.sync()
    files = sorted(p.name for p in store_path.glob("*.log"))
    fs.no_space = True
    with pytest.raises(msgcask.Error, match="nothing changed"):
        store.compact(threshold=1.0)
    assert sorted(p.name for p in store_path.glob("*.log")) == files
    assert unexpected_entries(store_path) == []  # the half-written copy is gone
    assert contents(store) == live
    assert store.verify() == []
    fs.no_space = False
    report = store.compact(threshold=1.0)
    assert report.files_deleted + report.files_rewritten > 0
    assert contents(store) == live
    assert store.verify() == []
    store.close()


def test_short_write_of_the_copy_changes_nothing(store_path: Path) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs)
    live = sparse_store(store)
    fs.short_write = 1000  # the first append of the copy: header + manifest, or records
    with pytest.raises(msgcask.Error):
        store.compact(threshold=1.0)
    assert contents(store) == live
    assert store.verify() == []
    store.close()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert contents(reopened) == live
        assert reopened.verify() == []


def test_bit_flip_in_a_victim_keeps_the_victim(store_path: Path) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs)
    live = sparse_store(store)
    first = store_path / "0000000001.log"
    buf = first.read_bytes()
    puts = [
        item
        for item in codec.scan(buf, fmt.FILE_HEADER_SIZE)
        if isinstance(item, codec.Record) and item.rtype == fmt.TYPE_PUT
    ]
    damaged = next(
        p for p in puts if codec.decode_put_meta(buf, p.payload_start, p.end).msg_id in live
    )
    msg_id = codec.decode_put_meta(buf, damaged.payload_start, damaged.end).msg_id
    fs.bad_bytes[str(first)] = {damaged.offset + 40}
    report = store.compact(threshold=1.0)
    assert fs.flipped_reads > 0
    # The copy could not include the unreadable message: the victim must stay its home,
    # while the other victims went.
    assert first.exists()
    assert report.files_rewritten > 0 and not (store_path / "0000000002.log").exists()
    fs.bad_bytes.clear()  # a later read succeeds
    assert contents(store) == live
    assert store._message_state(msg_id) == "live"
    assert store.verify() == []
    store.close()


@pytest.mark.parametrize("index", ["index kept", "index lost"])
@pytest.mark.parametrize("sync", ["periodic", "never"])
def test_power_cut_after_compaction_keeps_synced_state(
    store_path: Path, index: str, sync: str
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync=sync)
    live = sparse_store(store)
    store.sync()
    if sync == "never":
        fs.writeback()  # the OS wrote everything so far; nothing after this
    report = store.compact(threshold=1.0)
    assert report.files_rewritten > 0
    q = store.queue("q")
    unsynced = {q.put(body(10_000 + i)) for i in range(50)}
    m = q.get(block=False)
    q.ack(m)  # unsynced ack of a synced message: it may come back
    abandon(store)
    fs.power_cut()
    if index == "index lost":
        shutil.rmtree(store_path / "index")
    with msgcask.open(store_path, compaction_interval=None) as store:
        got = contents(store)
        assert set(live) - {m.id} <= set(got) <= set(live) | unsynced
        assert all(got[i] == live[i] for i in live if i in got)
        assert store.verify() == []


@pytest.mark.parametrize("index", ["index kept", "index lost"])
def test_power_cut_with_sync_always_between_compactions(store_path: Path, index: str) -> None:
    # Puts, acks and compaction passes interleave; whatever returned is on disk.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="always")
    q = store.queue("q")
    live: dict[int, bytes] = {}
    acked: set[int] = set()
    for round_ in range(5):
        for i in range(80):
            b = body(round_ * 1000 + i)
            live[q.put(b)] = b
        delivered = [q.get(block=False) for _ in range(60)]
        for n, m in enumerate(delivered):
            if n % 4:
                q.ack(m)
                acked.add(m.id)
                del live[m.id]
            else:
                q.nack(m)
        store.compact(threshold=0.7)
    assert store.stats().compaction.passes == 5
    assert store.stats().compaction.files_rewritten > 0
    abandon(store)
    fs.power_cut()
    if index == "index lost":
        shutil.rmtree(store_path / "index")
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert contents(store) == live
        assert all(store._message_state(i) in ("acked", "unknown") for i in acked)
        assert store.verify() == []


def test_failed_directory_fsync_after_deleting_files_raises_msgcask_error(
    store_path: Path,
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs)
    q = store.queue("q")
    for _ in range(500):
        q.put(bytes(300))
    delivered = [q.get(block=False) for _ in range(500)]
    for m in delivered[:400]:
        q.ack(m)  # the first files hold nothing live: deleted whole
    for m in delivered[400:]:
        q.nack(m)
    fs.fail_fsync_dir = True
    with pytest.raises(msgcask.Error):
        store.compact(threshold=1.0)
    fs.fail_fsync_dir = False
    assert len(q) == 100
    assert store.verify() == []
    store.close()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert len(reopened.queue("q")) == 100
        assert reopened.verify() == []


@pytest.mark.parametrize("pass_", ["deletes whole", "rewrites"])
def test_the_acks_a_pass_relies_on_are_fsynced_before_it_commits_a_retirement(
    store_path: Path, fs: FaultyFileSystem, monkeypatch: pytest.MonkeyPatch, pass_: str
) -> None:
    # sync="periodic" and no background flush: the ACKs that make the files dead
    # are in the page cache only, until the pass makes them durable itself.
    store = open_store(store_path, fs)
    if pass_ == "rewrites":
        sparse_store(store)
    else:
        q = store.queue("q")
        for i in range(500):
            q.put(body(i))
        delivered = [q.get(block=False) for _ in range(500)]
        with store._lock:
            store._roll_over()  # a head of needed ACKs, which no pass seals
        for m in delivered:
            q.ack(m)
    head = store._journal.head
    assert fs.synced[head.path] < head.size, "test setup: ACKs not yet durable"
    unsynced_at_commits: list[int] = []  # bytes of the journal not durable, per commit
    commit = store._env.commit

    def spy() -> None:
        if any(a.retired for a in store._acct.files.values()):
            unsynced_at_commits.append(head.size - fs.synced[head.path])
        commit()

    monkeypatch.setattr(store._env, "commit", spy)
    report = store.compact(threshold=0.5)
    assert report.files_deleted if pass_ == "deletes whole" else report.files_rewritten
    assert store._journal.head is head  # not sealed (which would fsync it)
    assert unsynced_at_commits and set(unsynced_at_commits) == {0}
    store.close()


class FailsFsyncsAfterACopy(FaultyFileSystem):
    """Every fsync fails (EIO) once a compacted file has been published."""

    def publish(self, handle: Any, path: str, *, durable: bool = True) -> None:
        super().publish(handle, path, durable=durable)
        header = codec.decode_file_header(handle.read(0, fmt.FILE_HEADER_SIZE), path)
        self.fail_fsync = self.fail_fsync or header.kind == fmt.KIND_COMPACTED


def test_a_swap_that_fails_after_the_copy_is_written_counts_the_copy(store_path: Path) -> None:
    # The journal's fsync before the swap's commit fails: the store refuses
    # writes from then on, and the copy stays on disk (a reopen removes it).
    # The totals count it, as stats() lists it: its bytes were written.
    fs = FailsFsyncsAfterACopy()
    store = open_store(store_path, fs)
    live = sparse_store(store)
    before = {p.name for p in store_path.glob("*.log")}
    with pytest.raises(msgcask.Error, match="fsync of the journal"):
        store.compact(threshold=0.5)
    (copy,) = {p.name for p in store_path.glob("*.log")} - before
    (listed,) = [f for f in store.stats().files if f.kind == "compacted"]
    assert copy == f"{listed.file_id:010d}.log"
    assert store.stats().compaction.bytes_copied == listed.size == written_size(store_path / copy)
    abandon(store)
    fs.fail_fsync = False
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert contents(reopened) == live


def test_a_failed_pass_is_counted_with_its_error_in_stats(store_path: Path) -> None:
    # A background pass that fails only logs it: stats() is where a monitor sees
    # that compaction keeps failing while disk use grows.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs)
    live = sparse_store(store)
    files = {p.name: p.stat().st_size for p in store_path.iterdir()}
    fs.no_space = True
    with pytest.raises(msgcask.Error) as failure:
        store.compact(threshold=1.0)
    # It names the copy it could not write, why, and that nothing changed; so it is.
    assert re.fullmatch(
        rf"compaction could not write {re.escape(str(store_path))}/\d{{10}}\.log: "
        "No space left on device; nothing changed",
        str(failure.value),
    )
    assert {p.name: p.stat().st_size for p in store_path.iterdir()} == files
    totals = store.stats().compaction
    assert (totals.passes, totals.failed_passes) == (0, 1)
    assert totals.last_failure == f"Error: {failure.value}"
    fs.no_space = False
    assert store.compact(threshold=1.0).files_rewritten > 0
    totals = store.stats().compaction
    assert (totals.passes, totals.failed_passes) == (1, 1)  # the failure stays on record
    assert totals.last_failure == f"Error: {failure.value}"
    assert contents(store) == live
    store.close()


def test_a_pass_cut_short_by_close_is_not_a_failure(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = msgcask.open(store_path, compaction_interval=None, max_file_size=SMALL_FILE)
    sparse_store(store)

    def closed_meanwhile(*args: object) -> None:
        raise msgcask.ClosedError("the store was closed while the pass ran")

    monkeypatch.setattr(store._compactor, "_reclaim_all", closed_meanwhile)
    with pytest.raises(msgcask.ClosedError):
        store.compact(threshold=1.0)
    totals = store.stats().compaction
    assert (totals.passes, totals.failed_passes, totals.last_failure) == (0, 0, None)
    monkeypatch.undo()
    store.close()
