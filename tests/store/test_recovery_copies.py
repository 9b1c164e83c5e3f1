"""Several PUT records of one id: copies of one message, which recovery counts once
and a compaction pass copies, or lets go of, once."""

from __future__ import annotations

from pathlib import Path

import pytest

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt


def test_two_put_records_of_one_id_in_one_file_count_once(store_path: Path) -> None:
    store_path.mkdir()
    first = codec.encode_put(1, b"q", 4, 2, b"", b"body")
    copy = codec.encode_put(1, b"q", 4, 1, b"", b"body")
    other = codec.encode_put(2, b"q", 4, 0, b"", b"other")
    header = codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1)
    (store_path / "0000000001.log").write_bytes(header + first + copy + other)
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        assert len(q) == 2
        assert store.stats().live_messages == 2
        assert store.verify() == []
        m = q.get(timeout=1)
        # The first record read is the one kept, with the count it carries.
        assert (m.id, m.deliveries) == (1, 3)
        q.ack(m)
        assert len(q) == 1
        assert store.verify() == []


def _file_with_two_records_of_id_1(store_path: Path, id_floor: int, records: bytes) -> None:
    """Data file 1: two PUT records of id 1, id 2, ``records``, then ids 3 to 59
    in queue "w" (filling the file, so the store's writes go to a file 2)."""
    store_path.mkdir()
    first = codec.encode_put(1, b"q", 4, 0, b"", b"body")
    copy = codec.encode_put(1, b"q", 4, 0, b"", b"body")
    other = codec.encode_put(2, b"q", 4, 0, b"", b"other")
    fill = b"".join(codec.encode_put(i, b"w", 4, 0, b"", b"w" * 1000) for i in range(3, 60))
    header = codec.encode_file_header(fmt.KIND_JOURNAL, 1, id_floor)
    (store_path / "0000000001.log").write_bytes(header + first + copy + other + records + fill)


def _put_ids(path: Path) -> list[int]:
    buf = path.read_bytes()
    return [
        fmt.PUT_FIXED.unpack_from(buf, r.payload_start)[0]
        for r in codec.scan(buf, fmt.FILE_HEADER_SIZE)
        if isinstance(r, codec.Record) and r.rtype == fmt.TYPE_PUT
    ]


def _drain(store: msgcask.Store, name: str) -> None:
    q = store.queue(name)
    while len(q):
        q.ack(q.get(block=False))


def test_a_pass_copies_only_the_put_record_the_index_points_at(store_path: Path) -> None:
    # The file is read (a DELIVER record of id 2 is needed): of id 1's two PUT
    # records, only the one recovery kept is copied.
    _file_with_two_records_of_id_1(store_path, 1, codec.encode_deliver(2, 1))
    with msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None) as store:
        _drain(store, "w")
        assert store.stats().files[0].needed_acks == 1
        store.compact(threshold=1.0)
        [copy] = [f.file_id for f in store.stats().files if f.kind == "compacted"]
        assert 1 not in {f.file_id for f in store.stats().files}
        assert _put_ids(store_path / f"{copy:010d}.log") == [1, 2]
        assert store.verify() == []


def test_a_consumed_id_with_two_put_records_lets_its_file_go(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Ids 1 to 4 lie below the file's id floor, so their ACKs are kept by index
    # entries, one per id: id 1's is released once, however many records it has.
    _file_with_two_records_of_id_1(store_path, 5, b"")
    with msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None) as store:
        _drain(store, "w")
        q = store.queue("q")
        m = q.get(block=False)
        assert m.id == 1
        q.ack(m)
        caplog.clear()  # the open's rebuild was logged
        with caplog.at_level("WARNING", logger="msgcask"):
            store.compact(threshold=1.0)
        assert 1 not in {f.file_id for f in store.stats().files}
        assert caplog.records == []
        assert [m.id for m in q.browse()] == [2]
        assert store.verify() == []
