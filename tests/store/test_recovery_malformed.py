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
from msgcask.check import scan_files
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
    "priority one above the highest": codec.encode_put(2, b"q", fmt.MAX_PRIORITY + 1, 0, b"", b"x"),
    "empty queue name": codec.encode_put(2, b"", 4, 0, b"", b"x"),
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
    # `msgcask check` must report it too: its checksum is right, so only the
    # field checks can tell, and a check that passes it would call the store healthy.
    scanned = scan_files(str(store_path))
    at = fmt.FILE_HEADER_SIZE + len(good)
    problems = scanned.problems
    assert [p for p in problems if f"offset {at}" in p and "malformed PUT" in p], problems
    assert scanned.live_ids == {1}
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.id for m in store.queue("q").browse()] == [1]
        [report] = store.stats().corruptions  # found on open, or when first read
        assert (report.path, report.offset) == (str(path), fmt.FILE_HEADER_SIZE + len(good))
        assert store.verify() == []


SHORT = {
    "PUT of 5 bytes": codec.frame(fmt.TYPE_PUT, b"\x01" * 5),
    "ACK of 3 bytes": codec.frame(fmt.TYPE_ACK, b"\x01\x02\x03"),
    "DELIVER of 3 bytes": codec.frame(fmt.TYPE_DELIVER, b"\x01\x02\x03"),
    "BATCH of 3 bytes": codec.frame(fmt.TYPE_BATCH, b"\x01\x02\x03"),
    "MANIFEST of 2 bytes": codec.frame(fmt.TYPE_MANIFEST, b"\x01\x00"),
    "MANIFEST naming more files than it holds": codec.frame(
        fmt.TYPE_MANIFEST, fmt.MANIFEST_COUNT.pack(3) + fmt.MANIFEST_ENTRY.pack(7)
    ),
    "MANIFEST holding more than the files it names": codec.frame(
        fmt.TYPE_MANIFEST, fmt.MANIFEST_COUNT.pack(1) + fmt.MANIFEST_ENTRY.pack(7) + b"\x00"
    ),
}


@pytest.mark.parametrize("record", SHORT.values(), ids=SHORT.keys())
@pytest.mark.parametrize("where", ["mid-file", "at the tail"])
def test_a_record_of_the_wrong_size_is_damage_not_a_struct_error(
    store_path: Path, record: bytes, where: str
) -> None:
    store_path.mkdir()
    first, last = (codec.encode_put(i, b"q", 4, 0, b"", b"ok") for i in (1, 2))
    after = last if where == "mid-file" else b""
    path = store_path / "0000000001.log"
    path.write_bytes(codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1) + first + record + after)
    problems = scan_files(str(store_path)).problems  # msgcask check
    assert any("malformed" in p for p in problems), problems
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.id for m in store.queue("q").browse()] == ([1, 2] if after else [1])
        reasons = [r.reason for r in store.stats().corruptions]
        assert any(r.startswith("malformed") for r in reasons), reasons
        assert store.verify() == []


def test_check_reports_a_data_file_whose_header_names_another(store_path: Path) -> None:
    # Open refuses such a file (a copy or a renamed file); check must say so too.
    store_path.mkdir()
    header = codec.encode_file_header(fmt.KIND_JOURNAL, 4, 1)
    (store_path / "0000000005.log").write_bytes(header + codec.encode_put(1, b"q", 4, 0, b"", b"x"))
    problems = scan_files(str(store_path)).problems
    assert any("header names file 4" in p for p in problems), problems
    with pytest.raises(msgcask.CorruptionError, match="header names file 4"):
        msgcask.open(store_path, compaction_interval=None)


def test_check_reports_a_compacted_file_whose_first_record_is_not_its_manifest(
    store_path: Path,
) -> None:
    # Intact records, but no MANIFEST first: recovery keeps the file and reports
    # it (action "kept"); `msgcask check` must not call such a store healthy.
    store_path.mkdir()
    put = codec.encode_put(1, b"q", 4, 0, b"", b"ok")
    compacted = codec.encode_file_header(fmt.KIND_COMPACTED, 1, 1) + put
    compacted += codec.encode_manifest([7])
    (store_path / "0000000001.log").write_bytes(compacted)
    (store_path / "0000000002.log").write_bytes(codec.encode_file_header(fmt.KIND_JOURNAL, 2, 2))
    problems = scan_files(str(store_path)).problems
    assert [p for p in problems if "without an intact MANIFEST" in p], problems
    with msgcask.open(store_path, compaction_interval=None) as store:
        [report] = store.recovery.corruptions
        assert (report.file_id, report.action) == (1, "kept")
