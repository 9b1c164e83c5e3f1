"""Records whose checksum is right but whose fields are not.

Disk damage fails the checksum; these come from a writer bug or a foreign or crafted file.
Opening must report and skip them like damage, never fail with a raw UnicodeDecodeError or
struct.error from deep inside recovery.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from xxhash import xxh3_64_intdigest

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt


def _with_queue_len(queue_len: int) -> bytes:
    """A PUT record whose queue_len field says ``queue_len``, with a checksum to match."""
    raw = bytearray(codec.encode_put(2, b"q", 4, 0, b"", b"x"))
    struct.pack_into("<H", raw, fmt.RECORD_HEADER_SIZE + 11, queue_len)
    struct.pack_into("<Q", raw, 0, xxh3_64_intdigest(bytes(raw[fmt.CHECKSUM_SIZE :])))
    return bytes(raw)


MALFORMED = {
    "queue name not UTF-8": codec.encode_put(2, b"\xff\xfe", 4, 0, b"", b"x"),
    "NUL in the queue name": codec.encode_put(2, b"q\x00r", 4, 0, b"", b"x"),
    "queue name over 255 bytes": _with_queue_len(256),
    "queue name past the record": _with_queue_len(3),
    "priority out of range": codec.encode_put(2, b"q", 200, 0, b"", b"x"),
    "headers not decodable": codec.encode_put(2, b"q", 4, 0, b"\x05\x00zz", b"x"),
}


@pytest.mark.parametrize("record", MALFORMED.values(), ids=MALFORMED.keys())
def test_well_framed_but_malformed_put_is_reported_and_skipped(
    store_path: Path, record: bytes
) -> None:
    store_path.mkdir()
    good = codec.encode_put(1, b"q", 4, 0, b"", b"ok")
    path = store_path / "0000000001.log"
    path.write_bytes(codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1) + good + record)
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.id for m in store.queue("q").browse()] == [1]
        [report] = store.stats().corruptions  # found on open, or when first read
        assert (report.path, report.offset) == (str(path), fmt.FILE_HEADER_SIZE + len(good))
        assert store.verify() == []
