"""Bit flips on read through the I/O seam: the disk returns a byte that differs from
what was written. The damaged message is quarantined and reported with its file and
offset; it never wedges its queue, and never crashes open.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt


def put_offsets(path: Path) -> dict[int, tuple[int, int]]:
    """message id -> (offset, size) of its PUT record in the data file at ``path``."""
    buf = path.read_bytes()
    out = {}
    for item in codec.scan(buf, fmt.FILE_HEADER_SIZE):
        if isinstance(item, codec.Damage) and item.unused:
            break  # the open write head's zero tail
        assert isinstance(item, codec.Record)
        if item.rtype == fmt.TYPE_PUT:
            out[codec.decode_put_meta(buf, item.payload_start, item.end).msg_id] = (
                item.offset,
                item.size,
            )
    return out


def open_store(path: Path, fs: FaultyFileSystem) -> msgcask.Store:
    return msgcask.Store(path, _fs=fs, compaction_interval=None)


@pytest.mark.parametrize("where", ["header", "body"])
def test_bit_flip_on_read_quarantines_the_message_and_get_moves_on(
    store_path: Path, fs: FaultyFileSystem, where: str
) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"message %d" % i) for i in range(3)]
    [path] = sorted(store_path.glob("*.log"))
    offset, size = put_offsets(path)[ids[1]]
    fs.bad_bytes[str(path)] = {offset + (9 if where == "header" else size - 1)}

    m1 = q.get(block=False)
    m3 = q.get(block=False)  # the damaged one is skipped, not returned, not blocking
    assert (m1.id, m3.id) == (ids[0], ids[2])
    assert fs.flipped_reads >= 1
    assert store._message_state(ids[1]) == "quarantined"
    [report] = store.stats().corruptions
    assert (report.file_id, report.path, report.offset, report.length) == (
        1,
        str(path),
        offset,
        size,
    )
    assert path.name in str(report)
    assert len(q) == 2  # the two delivered ones; the quarantined one left the queue
    q.ack(m1)
    q.ack(m3)
    with pytest.raises(msgcask.Empty):
        q.get(block=False)
    fs.bad_bytes.clear()  # the disk reads fine again; the quarantine stands
    assert store.verify() == []
    store.close()


def test_bit_flip_in_browse_quarantines_and_skips(store_path: Path, fs: FaultyFileSystem) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"m%d" % i) for i in range(4)]
    [path] = sorted(store_path.glob("*.log"))
    offset, _ = put_offsets(path)[ids[2]]
    fs.bad_bytes[str(path)] = {offset + 30}
    assert [m.id for m in q.browse()] == [ids[0], ids[1], ids[3]]
    assert [c.offset for c in store.stats().corruptions] == [offset]
    assert [q.get(block=False).id for _ in range(3)] == [ids[0], ids[1], ids[3]]
    fs.bad_bytes.clear()
    assert store.verify() == []
    store.close()


def test_bit_flip_while_rebuilding_is_reported_and_the_rest_recovered(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    store = open_store(store_path, fs)
    q = store.queue("q")
    ids = [q.put(b"m%d" % i) for i in range(5)]
    store.close()
    shutil.rmtree(store_path / "index")
    [path] = sorted(store_path.glob("*.log"))
    offset, size = put_offsets(path)[ids[1]]
    fs.bad_bytes[str(path)] = {offset + 20}
    store = open_store(store_path, fs)
    assert store.recovery.mode == "rebuild"
    [report] = store.recovery.corruptions
    assert (report.offset, report.length, report.action) == (offset, size, "skipped")
    assert [m.id for m in store.queue("q").browse()] == [ids[0], *ids[2:]]
    store.close()
    # The bytes on disk were never changed: a good read brings the message back.
    fs.bad_bytes.clear()
    shutil.rmtree(store_path / "index")
    with open_store(store_path, fs) as store:
        assert [m.id for m in store.queue("q").browse()] == ids


def test_bit_flip_in_a_file_header_refuses_open_and_changes_nothing(
    store_path: Path, fs: FaultyFileSystem
) -> None:
    with open_store(store_path, fs) as store:
        ids = [store.queue("q").put(b"m%d" % i) for i in range(3)]
    [path] = sorted(store_path.glob("*.log"))
    raw = path.read_bytes()
    fs.bad_bytes[str(path)] = {16}  # inside the id floor field
    with pytest.raises(msgcask.CorruptionError, match=path.name) as err:
        open_store(store_path, fs)
    assert err.value.offset == 0
    assert path.read_bytes() == raw  # nothing truncated or rewritten
    fs.bad_bytes.clear()
    with open_store(store_path, fs) as store:
        assert [m.id for m in store.queue("q").browse()] == ids
