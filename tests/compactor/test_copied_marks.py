"""A rewrite copies a victim's DELIVER records only while they hold a message's
current delivery count.

Each delivery appends a DELIVER record, so a file may hold several of one
message: only the latest count is needed, and only while the index takes it
from that record (a copy of the message's PUT record carries the count once it
is rewritten). Copying any other one would put a dead record in the compacted
file, which a later pass would have to copy or drop again.
"""

from __future__ import annotations

from pathlib import Path

import msgcask
from draining import churn
from msgcask.store import codec
from msgcask.store import format as fmt

MAX_FILE_SIZE = 64 * 1024
BODY = b"d" * 1000


def _open(path: Path) -> msgcask.Store:
    # Passes run only when the test calls compact(), and no background flush.
    return msgcask.open(
        path, max_file_size=MAX_FILE_SIZE, compaction_interval=None, sync_interval=3600
    )


def _head(store: msgcask.Store) -> int:
    (head,) = [f.file_id for f in store.stats().files if f.active]
    return head


def _fill_head(store: msgcask.Store) -> None:
    """Put and consume messages until the write head is sealed."""
    head = _head(store)
    work = store.queue("work")
    while _head(store) == head:
        churn(work, 1, BODY)


def _copied_delivers(path: Path) -> dict[int, list[int]]:
    """Message id -> the counts of its DELIVER records in the compacted files."""
    found: dict[int, list[int]] = {}
    for p in sorted(path.glob("*.log")):
        buf = p.read_bytes()
        if codec.decode_file_header(buf[: fmt.FILE_HEADER_SIZE], str(p)).kind != fmt.KIND_COMPACTED:
            continue
        for item in codec.scan(buf, fmt.FILE_HEADER_SIZE):
            if isinstance(item, codec.Record) and item.rtype == fmt.TYPE_DELIVER:
                msg_id, count = fmt.DELIVER_PAYLOAD.unpack_from(buf, item.payload_start)
                found.setdefault(msg_id, []).append(count)
    return found


def test_a_rewrite_copies_only_the_current_delivery_count(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path) as store:
        # File 1: the PUT record of "m", among live messages that keep the file
        # from being rewritten (so its count stays in DELIVER records).
        m = store.queue("m")
        keep = store.queue("keep")
        m.put(b"m")
        while _head(store) == 1:
            keep.put(BODY)
        # File 2: the PUT record of "m2", and nothing else live.
        m2 = store.queue("m2")
        m2.put(b"m2")
        _fill_head(store)
        victim = _head(store)
        # The victim: "m" delivered twice (two DELIVER records, the second one
        # current), "m2" once.
        first = m.get(block=False)
        m.nack(first)
        second = m.get(block=False)
        assert second.deliveries == 2
        got = m2.get(block=False)
        assert got.deliveries == 1
        # A pass rewrites file 2: the copy of m2's PUT record carries its count,
        # so the victim's DELIVER record of m2 is no longer needed.
        store.compact()
        assert 2 not in {f.file_id for f in store.stats().files}
        _fill_head(store)
        report = store.compact()
        assert victim not in {f.file_id for f in store.stats().files}
        assert report.files_rewritten >= 1
        assert store.verify() == []
    # The one DELIVER record copied is m's current count.
    assert _copied_delivers(path) == {second.id: [2]}
    with _open(path) as store:
        assert store.queue("m").get(block=False).deliveries == 3
        assert store.queue("m2").get(block=False).deliveries == 2
        assert store.verify() == []
