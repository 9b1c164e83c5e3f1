"""Keys and values of the LMDB index. Pure: no I/O.

Tables (LMDB named databases):

- ``meta``   name -> value: format version, next message id, checkpoint, ...
- ``queues`` queue name (UTF-8) -> queue id u32 | live messages u64
- ``order``  queue id u32 BE | 9 - priority u8 | message id u64 BE -> b""
             Big-endian, so LMDB's byte order is delivery order.
- ``msgs``   message id u64 BE -> a LIVE or ACKED entry (below)
- ``files``  file id u32 BE -> per-file accounting (index/accounting.py)
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

ORDER_KEY: Final = struct.Struct(">IBQ")
ORDER_PREFIX: Final = struct.Struct(">I")
MSG_KEY: Final = struct.Struct(">Q")
FILE_KEY: Final = struct.Struct(">I")
QUEUE_VALUE: Final = struct.Struct("<IQ")  # queue id, live messages

STATE_LIVE: Final = 1
STATE_ACKED: Final = 2  # consumed; its PUT record still exists in put_file

# LIVE: state qid priority file offset size deliveries deliver_file
_LIVE: Final = struct.Struct("<BIBIQIHI")
# ACKED: state put_file ack_file
_ACKED: Final = struct.Struct("<BII")

META_FORMAT: Final = b"format"
META_NEXT_ID: Final = b"next_id"
META_NEXT_QUEUE: Final = b"next_queue"
META_NEXT_FILE: Final = b"next_file"
META_CHECKPOINT: Final = b"checkpoint"
META_CLEAN: Final = b"clean"
META_BOOT: Final = b"boot_id"
CHECKPOINT: Final = struct.Struct("<IQ")
U64: Final = struct.Struct("<Q")


class Live(NamedTuple):
    """Where a live message's PUT record is and what the index knows of it.

    ``deliver_file`` is the file holding the DELIVER record that carries the
    current delivery count, or 0 when the PUT record itself carries it.
    """

    state: int
    queue_id: int
    priority: int
    file_id: int
    offset: int
    size: int
    deliveries: int
    deliver_file: int


class Acked(NamedTuple):
    """A consumed message whose PUT record is still on disk in ``put_file``;
    its ACK record in ``ack_file`` must outlive that PUT record."""

    state: int
    put_file: int
    ack_file: int


def pack_live(e: Live) -> bytes:
    return _LIVE.pack(*e)


def pack_acked(put_file: int, ack_file: int) -> bytes:
    return _ACKED.pack(STATE_ACKED, put_file, ack_file)


def unpack_msg(value: bytes) -> Live | Acked:
    if value[0] == STATE_ACKED:
        return Acked(*_ACKED.unpack(value))
    return Live(*_LIVE.unpack(value))


def order_key(queue_id: int, priority: int, msg_id: int) -> bytes:
    return ORDER_KEY.pack(queue_id, 9 - priority, msg_id)


def order_key_id(key: bytes) -> int:
    return MSG_KEY.unpack_from(key, 5)[0]


# The struct's own bound method: a message key is built several times per
# get and ack, and a Python function around it would double the cost.
msg_key: Final = MSG_KEY.pack
