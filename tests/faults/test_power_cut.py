"""Power cuts through the I/O seam: every data-file byte not fsynced is lost.

A test runs a store on a FaultyFileSystem, abandons it (no sync, no index commit, as a
crash would), then calls ``power_cut()``, which truncates each data file to its size at
its last fsync and removes files whose directory entry was never made durable. What
must survive depends on the sync mode (design brief, guarantee 1):

* ``always``: every put/ack that returned;
* ``periodic``: everything before the last sync (``store.sync()`` or the background one);
* ``never``: whatever the OS happened to write back, and the store must still open
  consistent, never resurrecting a message whose ack reached the disk.

The index is not behind the seam, so it survives the simulated cut intact; each test also
runs with ``index/`` deleted, which is what a real power cut can amount to.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest
from faulty_fs import FaultyFileSystem, abandon

import msgcask
from disk_files import written_size
from msgcask.index import keys
from msgcask.store import codec
from msgcask.store import format as fmt

SMALL_FILE = 64 * 1024
INDEX = ["index kept", "index lost"]


def open_store(path: Path, fs: FaultyFileSystem, **kw: Any) -> msgcask.Store:
    kw.setdefault("compaction_interval", None)
    kw.setdefault("sync_interval", 3600)  # only the test's own store.sync() calls sync
    return msgcask.Store(path, _fs=fs, **kw)


def power_cut(
    store: msgcask.Store, fs: FaultyFileSystem, index: str, *, torn: int = 0
) -> list[str]:
    abandon(store)
    changed = fs.power_cut(torn=torn)
    if index == "index lost":
        shutil.rmtree(Path(store.path) / "index")
    return changed


def reopen(path: Path, **kw: Any) -> msgcask.Store:
    store = msgcask.open(path, compaction_interval=None, **kw)
    assert store.verify() == []
    return store


def live_ids(store: msgcask.Store, queue: str = "q") -> set[int]:
    return {m.id for m in store.queue(queue).browse()}


def body(i: int) -> bytes:
    return b"%06d" % i + bytes(i % 251 for _ in range(200))


# -- sync="always" ---------------------------------------------------------------------


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_always_keeps_every_returned_put_and_ack(
    store_path: Path, index: str
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="always", max_file_size=SMALL_FILE)
    q = store.queue("q")
    ids = [q.put(body(i)) for i in range(400)]  # several files
    acked = set()
    for _ in range(150):
        m = q.get(block=False)
        q.ack(m)
        acked.add(m.id)
    delivered = q.get(block=False)  # delivered, not acked: comes back
    assert store.stats().data_files > 1
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        assert live_ids(store) == set(ids) - acked
        for msg_id in acked:
            assert store._message_state(msg_id) in ("acked", "unknown")
        bodies = {m.id: bytes(m.body) for m in store.queue("q").browse()}
        assert all(bodies[i] == body(n) for n, i in enumerate(ids) if i not in acked)
        first = store.queue("q").get(block=False)
        assert first.id == delivered.id


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_always_and_concurrent_writers(store_path: Path, index: str) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="always")
    returned: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            q = store.queue("q")
            for i in range(40):
                msg_id = q.put(body(n * 100 + i))
                with lock:
                    returned.append(msg_id)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        assert live_ids(store) == set(returned)


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("operation", ["purge", "delete_queue", "dead-letter move"])
def test_power_cut_with_sync_always_keeps_what_a_purge_delete_or_dead_letter_move_did(
    store_path: Path, fs: FaultyFileSystem, operation: str, index: str
) -> None:
    # Each writes its ACK records (and a dead-letter move its copy) and must have
    # fsynced them before it returns, like a single put or ack.
    store = open_store(store_path, fs, sync="always")
    q = store.queue("q", max_deliveries=1)
    ids = [q.put(body(i)) for i in range(20)]
    if operation == "purge":
        assert q.purge() == len(ids)
    elif operation == "delete_queue":
        assert store.delete_queue("q") == len(ids)
    else:
        m = q.get(block=False)
        q.nack(m)  # its one delivery was its last: into DLQ.q
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        if operation == "dead-letter move":
            assert live_ids(store) == set(ids) - {m.id}
            [copy] = store.queue("DLQ.q").browse()
            assert (bytes(copy.body), copy.headers["x-original-id"]) == (body(0), str(m.id))
        else:
            assert "q" not in store.queues()


def test_power_cut_without_sync_loses_unsynced_puts(store_path: Path) -> None:
    # The control: the fault injection really drops bytes, so the tests above can fail.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="periodic")
    q = store.queue("q")
    for i in range(10):
        q.put(body(i))
    changed = power_cut(store, fs, "index kept")
    assert changed == [f"truncated 0000000001.log to {fmt.FILE_HEADER_SIZE}"]
    with reopen(store_path) as store:
        assert live_ids(store) == set()


# -- sync="periodic" -----------------------------------------------------------------


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_periodic_loses_only_what_followed_the_last_sync(
    store_path: Path, index: str
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="periodic")
    q = store.queue("q")
    synced = [q.put(body(i)) for i in range(30)]
    m = q.get(block=False)
    q.ack(m)
    store.sync()  # everything above is on disk from here on
    later = [q.put(body(100 + i)) for i in range(30)]
    m2 = q.get(block=False)
    q.ack(m2)  # not synced: may be lost, so m2 may come back
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        survivors = live_ids(store)
        assert set(synced) - {m.id} <= survivors  # nothing synced is lost
        assert m.id not in survivors  # a synced ack is never undone
        assert survivors <= set(synced) | set(later)
        # In this simulation nothing after the sync reached the disk.
        assert survivors == set(synced) - {m.id}


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_periodic_across_roll_overs(store_path: Path, index: str) -> None:
    # Rolling over seals (fsyncs) the old file: the sealed files survive whole.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="periodic", max_file_size=SMALL_FILE)
    q = store.queue("q")
    synced = [q.put(body(i)) for i in range(100)]
    store.sync()
    later = [q.put(body(1000 + i)) for i in range(600)]
    files_before = store.stats().data_files
    assert files_before >= 3
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        survivors = live_ids(store)
        assert set(synced) <= survivors <= set(synced) | set(later)
        # ids are handed out in order, so what survives is a prefix of what was put.
        assert sorted(survivors) == (synced + later)[: len(survivors)]
        # Sealed files were fsynced by the roll-over: all but the last file's puts survive.
        assert len(survivors) > len(synced)


# -- sync="never" --------------------------------------------------------------------


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_never_reopens_consistent(store_path: Path, index: str) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="never", max_file_size=SMALL_FILE)
    q = store.queue("q")
    early = [q.put(body(i)) for i in range(200)]
    acked_early = set()
    for _ in range(50):
        m = q.get(block=False)
        q.ack(m)
        acked_early.add(m.id)
    store.sync()  # commits the index; sync="never" does not fsync the journal
    fs.writeback()  # ...but the OS writes the pages back on its own
    late = [q.put(body(1000 + i)) for i in range(300)]
    for _ in range(50):
        q.ack(q.get(block=False))
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        survivors = live_ids(store)
        assert not survivors & acked_early  # an ack on disk is never undone
        assert set(early) - acked_early <= survivors
        assert survivors <= set(early) | set(late)
        # After the cut the store works as usual.
        store.queue("q").put(b"after")


def test_power_cut_with_sync_never_and_no_writeback_loses_everything(store_path: Path) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="never", max_file_size=SMALL_FILE)
    q = store.queue("q")
    for i in range(300):
        q.put(body(i))
    store.sync()
    changed = power_cut(store, fs, "index kept")
    assert changed  # roll-over files vanished, the first file lost its records
    with reopen(store_path) as store:
        assert live_ids(store) == set()


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_never_keeps_every_roll_over_file_header(
    store_path: Path, index: str
) -> None:
    # Even if the OS commits directory entries before data (delayed allocation), a file
    # the journal rolled over to has its header on disk: it was published durably.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="never", max_file_size=SMALL_FILE)
    q = store.queue("q")
    for i in range(900):
        q.put(body(i))
    files = store.stats().data_files
    assert files >= 3
    fs.writeback_names()
    power_cut(store, fs, index)
    assert [p.stat().st_size for p in sorted(store_path.glob("*.log"))] == [32] * files
    with reopen(store_path) as store:
        assert live_ids(store) == set()
        store.queue("q").put(b"after")


# -- a cut inside a write ---------------------------------------------------------------


@pytest.mark.parametrize("torn", [1, 20, 21, 200, 1000, 4000, 10**6])
@pytest.mark.parametrize("index", INDEX)
def test_power_cut_tearing_a_transaction_keeps_none_of_it(
    store_path: Path, index: str, torn: int
) -> None:
    # Part of the batch reached the disk, maybe whole member records: all or nothing.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="periodic")
    q = store.queue("q")
    before = [q.put(body(i)) for i in range(5)]
    m = q.get(block=False)
    store.sync()
    with store.transaction() as tx:
        tx_ids = [tx.put("q", body(100 + i)) for i in range(20)]
        tx.ack(m)
    [head] = sorted(store_path.glob("*.log"))
    whole = torn >= written_size(head) - fs.synced[str(head)]  # all of the batch got there
    power_cut(store, fs, index, torn=torn)
    with reopen(store_path) as store:
        if whole:
            assert live_ids(store) == (set(before) - {m.id}) | set(tx_ids)
        else:  # m is back: its ack was part of the batch
            assert live_ids(store) == set(before)


@pytest.mark.parametrize("torn", [1, 13, 100, 250])
def test_power_cut_tearing_a_put_drops_only_that_put(store_path: Path, torn: int) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="periodic")
    q = store.queue("q")
    synced = [q.put(body(i)) for i in range(5)]
    store.sync()
    q.put(body(99))
    size = codec.put_record_size(b"q", b"", len(body(99)))  # 237: only torn=250 keeps it
    power_cut(store, fs, "index kept", torn=torn)
    with reopen(store_path) as store:
        survivors = sorted(live_ids(store))
        assert survivors[: len(synced)] == synced
        assert len(survivors) == len(synced) + (torn >= size)


def test_the_truncation_of_a_torn_tail_is_fsynced_even_with_sync_never(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    # Appends after the open go where the torn bytes were: the cut must be on disk first.
    with msgcask.open(store_path, compaction_interval=None) as store:
        store.queue("q").put(body(0))
    [head] = sorted(store_path.glob("*.log"))
    with head.open("ab") as f:
        f.write(codec.encode_put(99, b"q", 4, 0, b"", body(99))[:100])
    store = open_store(store_path, fs, sync="never")
    try:
        [report] = store.recovery.corruptions
        assert (report.action, report.length) == ("truncated", 100)
        # A clean open with sync="never" fsyncs no data file but for the cut.
        assert fs.fsyncs == 1
    finally:
        store.close()


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_never_keeps_what_was_written_back(
    store_path: Path, index: str
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="never", max_file_size=SMALL_FILE)
    q = store.queue("q")
    early = [q.put(body(i)) for i in range(400)]
    fs.writeback()  # the OS wrote everything so far
    late = [q.put(body(1000 + i)) for i in range(600)]  # rolls over; data never written
    fs.writeback_names()
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        survivors = live_ids(store)
        assert set(early) <= survivors <= set(early) | set(late)


@pytest.mark.parametrize("index", INDEX)
def test_power_cut_with_sync_never_after_a_compaction(store_path: Path, index: str) -> None:
    # The compaction's copy is durable (and its directory fsync makes every earlier name
    # durable too): the messages it holds survive even though nothing else was synced.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="never", max_file_size=SMALL_FILE)
    q = store.queue("q")
    for i in range(300):
        q.put(body(i))
    kept = set()
    for n, m in enumerate([q.get(block=False) for _ in range(300)]):
        if n % 10:
            q.ack(m)
        else:
            q.nack(m)
            kept.add(m.id)
    assert store.compact(threshold=1.0).files_rewritten == 1
    copied = set()
    for path in store_path.glob("*.log"):
        buf = path.read_bytes()
        if codec.decode_file_header(buf, str(path)).kind == fmt.KIND_COMPACTED:
            copied |= {
                codec.decode_put_meta(buf, r.payload_start, r.end).msg_id
                for r in codec.scan(buf, fmt.FILE_HEADER_SIZE)
                if isinstance(r, codec.Record) and r.rtype == fmt.TYPE_PUT
            }
    assert copied and copied < kept  # the head's messages are not copied
    power_cut(store, fs, index)
    assert all(p.stat().st_size >= fmt.FILE_HEADER_SIZE for p in store_path.glob("*.log"))
    with reopen(store_path) as store:
        assert copied <= live_ids(store) <= kept


# -- ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("sync", ["periodic", "never"])
def test_ids_of_puts_lost_in_a_power_cut_are_not_handed_out_again(
    store_path: Path, index: str, sync: str
) -> None:
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync=sync)
    q = store.queue("q")
    kept = [q.put(body(i)) for i in range(3)]
    store.sync()
    fs.writeback()
    lost = [q.put(body(100 + i)) for i in range(3)]  # returned, then lost with the power
    power_cut(store, fs, index)
    with reopen(store_path) as store:
        assert live_ids(store) == set(kept)
        new = store.queue("q").put(b"after the cut")
        assert new > max(lost)


def reboot(store_path: Path) -> None:
    """What the next open sees after a reboot: the index came from another boot."""
    env = lmdb.open(str(store_path / "index"), max_dbs=8, lock=False, map_size=2**30)
    try:
        with env.begin(write=True) as txn:
            txn.put(keys.META_BOOT, b"an-earlier-boot", db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


@pytest.mark.parametrize("after_cut", ["reboot", "index lost"])
def test_ids_stay_unique_across_repeated_power_cuts(store_path: Path, after_cut: str) -> None:
    # After a real cut the machine reboots and the index is rebuilt from the data files
    # (its next id forgotten): the id block skipped after one cut must be on disk for
    # the next.
    fs = FaultyFileSystem()
    store = open_store(store_path, fs, sync="periodic")
    given = [store.queue("q").put(b"synced")]
    store.sync()
    for cut in range(3):
        given.append(store.queue("q").put(b"lost in cut %d" % cut))  # returned, never synced
        abandon(store)
        fs.power_cut()
        if after_cut == "reboot":
            reboot(store_path)
        else:
            shutil.rmtree(store_path / "index")
        store = open_store(store_path, fs, sync="periodic")
        assert store.recovery.mode == "rebuild"
    given.append(store.queue("q").put(b"after the cuts"))
    store.close()
    assert given == sorted(set(given)), f"ids handed out twice: {given}"


@pytest.mark.parametrize("index", INDEX)
def test_a_zeroed_page_in_a_sealed_file_costs_only_its_own_records(
    store_path: Path, index: str
) -> None:
    # A sealed journal file was fsynced when it was sealed, so damage in it is not a
    # torn append: a page of zeros in its middle (a bad sector read back as zeros)
    # skips the records on that page and keeps every intact record after it.
    store = msgcask.open(store_path, max_file_size=256 * 1024, compaction_interval=None)
    q = store.queue("q")
    ids = [q.put(b"m%06d" % i + b"." * 1000) for i in range(300)]
    for _ in range(100):
        q.ack(q.get(block=False))
    sealed = min(f.file_id for f in store.stats().files if not f.active)
    store.close()
    path = store_path / f"{sealed:010d}.log"
    buf_before = path.read_bytes()
    buf = bytearray(buf_before)
    records = [
        r for r in codec.scan(buf_before, fmt.FILE_HEADER_SIZE) if isinstance(r, codec.Record)
    ]
    start = records[20].offset
    buf[start : start + 4096] = bytes(4096)
    path.write_bytes(bytes(buf))
    # The PUT records whose headers the page covers (start is a record boundary).
    lost = {
        fmt.PUT_FIXED.unpack_from(buf_before, r.payload_start)[0]
        for r in records
        if start <= r.offset < start + 4096
    }
    if index == "index lost":
        shutil.rmtree(store_path / "index")
    with reopen(store_path) as store:
        live = live_ids(store, "q")
    # Only the messages whose records the page held are gone (the first 100 were acked).
    assert live == set(ids[100:]) - lost
    assert len(lost) <= 5
