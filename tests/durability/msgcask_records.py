"""Read and damage data files at the byte level, following the documented layout.

File header (32 bytes): magic, version u16, kind u8, reserved u8, file id u32, id floor
u64, xxh3_64 of bytes 0..24. Records follow back to back: checksum u64 (xxh3_64 of the
record from byte 8 to its end), payload length u32, type u8, payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import xxhash

FILE_HEADER = 32
RECORD_HEADER = struct.Struct("<QIB")  # checksum, payload length, type: 8 + 4 + 1 = 13
MAGIC = b"msgcask\0"


@dataclass(frozen=True)
class Record:
    start: int  # offset of the record's first byte in its file
    end: int  # offset just past its last byte
    type: int
    payload: bytes
    ok: bool  # checksum matches


def read_records(path: Path) -> tuple[list[Record], int]:
    """All complete records of a data file, and the offset where the complete ones end."""
    raw = path.read_bytes()
    assert raw[:8] == MAGIC, f"{path.name} does not start with the documented magic"
    records = []
    off = FILE_HEADER
    while off + RECORD_HEADER.size <= len(raw):
        checksum, length, rtype = RECORD_HEADER.unpack_from(raw, off)
        end = off + RECORD_HEADER.size + length
        if end > len(raw):
            break
        ok = xxhash.xxh3_64_intdigest(raw[off + 8 : end]) == checksum
        records.append(Record(off, end, rtype, raw[off + RECORD_HEADER.size : end], ok))
        off = end
    return records, off


def assert_file_is_clean(path: Path) -> None:
    """Every byte after the header belongs to a complete record with a good checksum."""
    records, end = read_records(path)
    size = path.stat().st_size
    assert end == size, f"{path.name}: {size - end} bytes of partial record at offset {end}"
    bad = [r.start for r in records if not r.ok]
    assert not bad, f"{path.name}: records with bad checksums at offsets {bad}"


def find_record_with(path: Path, needle: bytes) -> Record | None:
    """The record whose payload contains ``needle`` (a message body), if any."""
    for r in read_records(path)[0]:
        if needle in r.payload:
            return r
    return None


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))
