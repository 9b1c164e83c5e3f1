"""Records whose checksum is right but whose fields are not.

Disk damage fails the checksum; these come from a writer bug or a foreign or crafted file.
Opening must report and skip them like damage, never fail with a raw UnicodeDecodeError or
struct.error from deep inside recovery.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt

MALFORMED = {
    "queue name not UTF-8": codec.encode_put(2, b"\xff\xfe", 4, 0, b"", b"x"),
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
