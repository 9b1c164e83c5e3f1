"""Write errors through the I/O seam: the disk fills up (ENOSPC), or a write stops short.

Guarantee: a call that fails raises a msgcask.Error, changes nothing, and the store keeps
working once space is back; no partial record is ever visible, now or after reopening.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faulty_fs import FaultyFileSystem, abandon

import msgcask
from disk_files import written_size
from msgcask.store import codec
from msgcask.store import format as fmt

SMALL_FILE = 64 * 1024


def open_store(path: Path, fs: FaultyFileSystem | None = None, **kw: Any) -> msgcask.Store:
    kw.setdefault("compaction_interval", None)
    kw.setdefault("sync_interval", 3600)  # no background commits between our steps
    return msgcask.Store(path, _fs=fs or FaultyFileSystem(), **kw)


def observable(store: msgcask.Store) -> dict[str, Any]:
    """Everything a failed call must leave as it was."""
    st = store.stats()
    return {
        "queues": store.queues(),
        "messages": {
            name: [
                (m.id, bytes(m.body), m.priority, m.deliveries) for m in store.queue(name).browse()
            ]
            for name in store.queues()
        },
        "len": {name: len(store.queue(name)) for name in store.queues()},
        "stats": (
            st.live_messages,
            st.live_bytes,
            st.data_bytes,
            st.data_files,
            st.files,
            st.bytes_written,
            st.bytes_put,
            st.corruptions,
        ),
        "files": {p.name: written_size(p) for p in sorted(Path(store.path).glob("*.log"))},
    }


def contents(path: Path) -> dict[str, list[tuple[int, bytes]]]:
    with msgcask.open(path, compaction_interval=None) as store:
        assert store.verify() == []
        return {
            name: [(m.id, bytes(m.body)) for m in store.queue(name).browse()]
            for name in store.queues()
        }


def test_put_that_hits_enospc_raises_and_changes_nothing(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"before %d" % i) for i in range(5)]
    before = observable(store)
    fs.no_space = True
    with pytest.raises(msgcask.Error, match="disk space"):
        q.put(b"does not fit")
    with pytest.raises(msgcask.Error):
        q.put_many([b"a", b"b"])
    assert fs.appends >= 2  # the faults were really hit
    assert observable(store) == before
    assert store.verify() == []
    fs.no_space = False  # space is back
    after = q.put(b"after")
    assert after > ids[-1]
    store.close()
    assert contents(store_path) == {
        "q": [(i, b"before %d" % n) for n, i in enumerate(ids)] + [(after, b"after")]
    }


def test_get_that_hits_enospc_leaves_the_message_available(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    first = q.put(b"one")
    q.put(b"two")
    before = observable(store)
    fs.no_space = True  # get() journals a DELIVER record
    with pytest.raises(msgcask.Error):
        q.get(block=False)
    assert observable(store) == before
    assert store._message_state(first) == "live"
    fs.no_space = False
    m = q.get(block=False)
    assert (m.id, m.deliveries) == (first, 1)
    assert store.verify() == []
    store.close()


def test_ack_that_hits_enospc_leaves_the_message_delivered(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    q.put(b"one")
    m = q.get(block=False)
    before = observable(store)
    fs.no_space = True
    with pytest.raises(msgcask.Error):
        q.ack(m)
    assert observable(store) == before
    assert store._message_state(m.id) == "delivered"
    fs.no_space = False
    q.ack(m)  # the failed ack did not count: acking now is the first ack
    assert store._message_state(m.id) in ("acked", "unknown")
    assert len(q) == 0
    assert store.verify() == []
    store.close()
    assert contents(store_path) == {"q": []}


def test_enospc_when_rolling_over_to_a_new_file_raises_msgcask_error(
    store_path: Path, fs: FaultyFileSystem, unexpected_entries: Any
) -> None:
    store = open_store(store_path, fs, max_file_size=SMALL_FILE)
    q = store.queue("q")
    body = bytes(5000)
    per_file = (SMALL_FILE - fmt.FILE_HEADER_SIZE) // codec.put_record_size(b"q", b"", len(body))
    ids = [q.put(body) for _ in range(per_file)]  # the file is full: the next put rolls over
    assert store.stats().data_files == 1
    before = observable(store)
    fs.no_space = True
    with pytest.raises(msgcask.Error):
        q.put(body)
    assert observable(store) == before
    fs.no_space = False
    ids.append(q.put(body))
    assert store.verify() == []
    store.close()
    assert [i for i, _ in contents(store_path)["q"]] == ids
    assert unexpected_entries(store_path) == []


@pytest.mark.parametrize("written", [1, 12, 13, 40])
def test_short_write_leaves_no_partial_record_after_reopen(
    store_path: Path, fs: FaultyFileSystem, written: int
) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"kept %d" % i) for i in range(3)]
    before = observable(store)
    fs.short_write = written
    with pytest.raises(msgcask.Error):
        q.put(b"x" * 100)
    # Cut back at once: the partial bytes are not left for a reader to trip over.
    assert observable(store) == before
    ids.append(q.put(b"later"))
    store.close()
    assert [i for i, _ in contents(store_path)["q"]] == ids


@pytest.mark.parametrize("written", [1, 13, 90])
def test_short_write_that_cannot_be_cut_back_is_dropped_on_reopen(
    store_path: Path, fs: FaultyFileSystem, written: int
) -> None:
    # The partial record stays on disk (truncate fails too) and the process then dies.
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"kept %d" % i) for i in range(3)]
    [path] = sorted(store_path.glob("*.log"))
    size = written_size(path)
    fs.short_write = written
    fs.fail_truncate = True
    with pytest.raises(msgcask.Error):
        q.put(b"x" * 100)
    assert path.read_bytes()[size : size + written] != bytes(written)  # really there
    abandon(store)
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert [m.id for m in reopened.queue("q").browse()] == ids
        assert [c.action for c in reopened.recovery.corruptions] == ["truncated"]
        assert reopened.verify() == []
    assert path.stat().st_size == size


def test_short_write_overwritten_by_later_records_is_dropped_on_reopen(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    # The partial bytes stay, later (shorter) records are written over their start, and
    # what is left of them trails the last good record.
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"kept")]
    fs.short_write = 250
    fs.fail_truncate = True
    with pytest.raises(msgcask.Error):
        q.put(b"x" * 300)
    fs.fail_truncate = False
    ids.append(q.put(b"short"))
    store.close()
    assert [i for i, _ in contents(store_path)["q"]] == ids


@pytest.mark.parametrize("written", [5, 30, 200])
def test_short_write_of_a_batch_leaves_none_of_it_after_reopen(
    store_path: Path, fs: FaultyFileSystem, written: int
) -> None:
    # written=200 gets the batch header and whole member records onto the disk: they
    # must still not count, as the batch is all or nothing.
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"kept")]
    fs.short_write = written
    fs.fail_truncate = True
    with pytest.raises(msgcask.Error):
        q.put_many([b"a" * 40, b"b" * 40, b"c" * 40, b"d" * 40])
    abandon(store)
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert [m.id for m in reopened.queue("q").browse()] == ids
        assert reopened.verify() == []


def test_purge_that_hits_enospc_changes_nothing(store_path: Path, fs: FaultyFileSystem) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    for i in range(5):
        q.put(b"m%d" % i)
    before = observable(store)
    fs.no_space = True
    with pytest.raises(msgcask.Error):
        q.purge()
    assert observable(store) == before
    fs.no_space = False
    assert q.purge() == 5
    assert store.verify() == []
    store.close()


def test_delete_queue_that_hits_enospc_changes_nothing(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    store = open_store(store_path, fs)
    store.queue("gone").put(b"x")
    store.queue("kept").put(b"y")
    before = observable(store)
    fs.no_space = True
    with pytest.raises(msgcask.Error):
        store.delete_queue("gone")
    assert observable(store) == before
    fs.no_space = False
    store.delete_queue("gone")
    assert store.queues() == ["kept"]
    assert store.verify() == []
    store.close()


def test_dead_lettering_that_hits_enospc_leaves_the_message_delivered(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q", max_deliveries=1)
    msg_id = q.put(b"poison")
    m = q.get(block=False)
    before = observable(store)
    fs.no_space = True
    with pytest.raises(msgcask.Error):
        q.nack(m)  # moves it to DLQ.q: a batch of PUT + ACK
    assert observable(store) == before  # not even an empty DLQ.q
    assert store._message_state(msg_id) == "delivered"
    fs.no_space = False
    q.nack(m)
    [dead] = list(store.queue("DLQ.q").browse())
    assert (bytes(dead.body), dead.headers["x-original-id"]) == (b"poison", str(msg_id))
    assert len(q) == 0
    assert store.verify() == []
    store.close()


def test_transaction_that_hits_enospc_creates_no_queue(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    store = open_store(store_path, fs)
    store.queue("q").put(b"x")
    before = observable(store)
    fs.no_space = True
    with pytest.raises(msgcask.Error):
        with store.transaction() as tx:
            tx.put("brand-new", b"y")
    assert observable(store) == before  # store.queues() == ["q"]
    fs.no_space = False
    store.close()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert reopened.queues() == ["q"]


@pytest.mark.parametrize("existed", [False, True], ids=["new_directory", "empty_directory"])
def test_a_first_open_that_hits_enospc_leaves_the_directory_as_it_found_it(
    tmp_path: Path, fs: FaultyFileSystem, existed: bool
) -> None:
    path = tmp_path / "store"
    if existed:
        path.mkdir()
    fs.no_space = True  # the first data file's header cannot be written
    with pytest.raises(msgcask.Error, match="No space left"):
        open_store(path, fs)
    # A directory the open made goes with it; one that was there stays, empty.
    assert path.exists() == existed
    if existed:
        assert list(path.iterdir()) == []
    fs.no_space = False
    with open_store(path, fs) as store:
        store.queue("q").put(b"after the disk had room")
    with open_store(path, fs) as store:
        assert [bytes(m.body) for m in store.queue("q").browse()] == [b"after the disk had room"]
