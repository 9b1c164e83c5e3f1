"""The data-file format: every constant and struct layout, in one place.

docs/format.md is the prose spec of these bytes; tests/test_docs.py checks that
its tables agree with the constants here. On-disk values never change meaning:
a new record type gets a new number, and a changed layout a new FORMAT_VERSION.
"""

from __future__ import annotations

import struct
from typing import Final

FORMAT_VERSION: Final = 1
MAGIC: Final = b"msgcask\x00"

# File kinds (header byte 10).
KIND_JOURNAL: Final = 0  # written by the foreground: puts, acks, deliveries
KIND_COMPACTED: Final = 1  # written by the compactor: copies of live records

# File header: magic(8) version(2) kind(1) reserved(1) file_id(4) id_floor(8) checksum(8)
FILE_HEADER: Final = struct.Struct("<8sHBBIQ")
FILE_HEADER_CHECKSUM: Final = struct.Struct("<Q")
FILE_HEADER_SIZE: Final = FILE_HEADER.size + FILE_HEADER_CHECKSUM.size  # 24 + 8 = 32

# Record header: checksum(8) payload_length(4) type(1); the checksum covers every
# byte of the record after itself, so a flipped length or type is caught too.
RECORD_HEADER: Final = struct.Struct("<QIB")
RECORD_HEADER_SIZE: Final = RECORD_HEADER.size  # 8 + 4 + 1 = 13
CHECKSUM_SIZE: Final = 8

# Record types. Values are chosen far from 0x00 so a zero-filled region (a
# preallocated or hole-punched tail) never parses as a record.
TYPE_PUT: Final = 0xA1  # a message
TYPE_ACK: Final = 0xA2  # a message is consumed (refers to its id)
TYPE_DELIVER: Final = 0xA3  # a message was delivered n times (refers to its id)
TYPE_BATCH: Final = 0xA4  # the next `count` records, `length` bytes, are all-or-nothing
TYPE_MANIFEST: Final = 0xA5  # first record of a compacted file: its victim files
RECORD_TYPES: Final = frozenset({TYPE_PUT, TYPE_ACK, TYPE_DELIVER, TYPE_BATCH, TYPE_MANIFEST})
RECORD_TYPE_NAMES: Final = {
    TYPE_PUT: "put",
    TYPE_ACK: "ack",
    TYPE_DELIVER: "deliver",
    TYPE_BATCH: "batch",
    TYPE_MANIFEST: "manifest",
}

# PUT payload: id(8) priority(1) deliveries(2) queue_len(2) headers_len(4),
# then queue name (UTF-8), headers (see HEADER_*), body.
PUT_FIXED: Final = struct.Struct("<QBHHI")
PUT_FIXED_SIZE: Final = PUT_FIXED.size  # 8 + 1 + 2 + 2 + 4 = 17

# Headers block: count(2), then per header key_len(2) key value_len(4) value.
HEADER_COUNT: Final = struct.Struct("<H")
HEADER_KEY_LEN: Final = struct.Struct("<H")
HEADER_VALUE_LEN: Final = struct.Struct("<I")

ACK_PAYLOAD: Final = struct.Struct("<Q")  # id(8)
DELIVER_PAYLOAD: Final = struct.Struct("<QH")  # id(8) deliveries(2)
BATCH_PAYLOAD: Final = struct.Struct("<II")  # count(4) length(4)
MANIFEST_COUNT: Final = struct.Struct("<I")  # count(4), then count x file_id u32
MANIFEST_ENTRY: Final = struct.Struct("<I")

MAX_PRIORITY: Final = 9
MAX_HEADERS: Final = 0xFFFF  # HEADER_COUNT is a u16
MAX_QUEUE_NAME_BYTES: Final = 255
MAX_DELIVERIES_COUNTED: Final = 0xFFFF  # the u16 saturates; it never wraps
