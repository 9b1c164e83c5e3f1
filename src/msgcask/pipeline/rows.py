"""One data file as rows: a row for the file, one per record, one per damaged stretch.

This is what the ``msgcask`` Spark data source yields for each file, kept free
of Spark so it can be tested and used alone. Records inside a BATCH come out
as the records they hold (the BATCH record itself is framing, as in
``codec.scan``); a batch torn by a crash is one damage row.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from msgcask.errors import Error
from msgcask.pipeline.files import DELETED_WHILE_READ, DataFileInfo
from msgcask.store import codec
from msgcask.store import format as fmt

# (name, Spark SQL type): the columns, in order. ``body`` is left out when the
# data source is asked for no payload (Spark prunes no columns of a Python data
# source, and bodies are most of the bytes).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("file_id", "BIGINT"),
    ("file_kind", "STRING"),  # journal | compacted | unreadable
    ("redundant", "STRING"),  # why the file's records do not count, or NULL
    ("offset", "BIGINT"),
    ("size", "BIGINT"),  # bytes of the record, damaged stretch, or whole file
    ("type", "STRING"),  # file | put | ack | deliver | manifest | damage | deleted
    ("msg_id", "BIGINT"),  # put, ack, deliver
    ("queue", "STRING"),  # put
    ("priority", "INT"),  # put
    ("deliveries", "INT"),  # put (as written), deliver (the count it records)
    ("headers", "MAP<STRING, STRING>"),  # put
    ("body_size", "BIGINT"),  # put
    ("victims", "ARRAY<BIGINT>"),  # manifest: the files a compaction replaced
    ("damage", "STRING"),  # damage: what is wrong there
    ("body", "BINARY"),  # put, with the payload option only
)
BODY = "body"
# Spark's BIGINT is signed; message ids in the format are unsigned 64-bit. msgcask
# numbers messages from 1 upward, so its own stores never come near 2^63.
BIGINT_MAX = 2**63 - 1
AT = {name: i for i, (name, _) in enumerate(COLUMNS)}  # a column's place in a row


def schema(payload: bool) -> str:
    """The rows' schema as a Spark SQL DDL string."""
    return ", ".join(f"`{n}` {t}" for n, t in COLUMNS if payload or n != BODY)


def file_rows(
    info: DataFileInfo, payload: bool, deleted_row: bool = False
) -> Iterator[tuple[Any, ...]]:
    """The rows of one data file: first a ``file`` row (offset 0, ``size`` the
    bytes read), then its records and damage in file order. A file that cannot
    be read raises ``msgcask.Error`` naming it; so does one deleted since the
    snapshot was taken, since its records may now live in files the snapshot
    does not have (a compaction pass ran meanwhile): the snapshot is no longer
    whole. With ``deleted_row``, such a file is one ``deleted`` row instead
    (``size``: its bytes when listed), for a reader that says so."""
    common = (info.file_id, info.kind, info.redundant or None)

    def row(offset: int, size: int, kind: str, reason: str | None = None) -> tuple[Any, ...]:
        out = (*common, offset, size, kind, *([None] * 7), reason)
        return (*out, None) if payload else out

    try:
        with open(info.path, "rb") as f:
            buf = f.read()
    except FileNotFoundError as e:
        if deleted_row:
            yield row(0, info.size, "deleted")
            return
        raise Error(
            f"{info.path} was deleted while the store was being read: {DELETED_WHILE_READ}"
        ) from e
    except OSError as e:
        raise Error(f"{info.path}: cannot be read ({e})") from e

    yield row(0, len(buf), "file")
    try:
        codec.decode_file_header(buf[: fmt.FILE_HEADER_SIZE], info.path)
    except Error as e:
        yield row(0, min(len(buf), fmt.FILE_HEADER_SIZE), "damage", str(e))
    for item in codec.scan(buf, fmt.FILE_HEADER_SIZE, head=info.head):
        if isinstance(item, codec.Damage):
            if not item.unused:  # the write head's space allocated ahead of writes
                yield row(item.offset, item.length, "damage", item.reason)
            continue
        try:
            fields = _record_row(buf, item, payload, info.path)
        except (ValueError, UnicodeDecodeError, struct.error) as e:
            # Intact bytes with impossible fields: recovery skips such a record too.
            reason = f"malformed {fmt.RECORD_TYPE_NAMES[item.rtype]} record: {e}"
            yield row(item.offset, item.size, "damage", reason)
            continue
        yield (*common, item.offset, item.size, *fields)


def _record_row(buf: bytes, item: codec.Record, payload: bool, path: str) -> tuple[Any, ...]:
    """The columns after ``size`` for one intact record; ``msgcask.Error``
    naming the file and offset for a message id the ``msg_id`` column cannot hold."""
    rtype, start = item.rtype, item.payload_start
    msg_id = queue = priority = deliveries = headers = body_size = victims = body = None
    if rtype == fmt.TYPE_PUT:
        codec.decode_put_meta(buf, start, item.end)  # the checks recovery makes
        put = codec.decode_put(buf, start, item.end)
        msg_id, queue, priority, deliveries = put.msg_id, put.queue, put.priority, put.deliveries
        headers, body_size = put.headers, len(put.body)
        body = put.body
    elif rtype == fmt.TYPE_ACK:
        (msg_id,) = fmt.ACK_PAYLOAD.unpack_from(buf, start)
    elif rtype == fmt.TYPE_DELIVER:
        msg_id, deliveries = fmt.DELIVER_PAYLOAD.unpack_from(buf, start)
    else:
        victims = codec.decode_manifest(buf, start)
    if msg_id is not None and msg_id > BIGINT_MAX:
        # Not damage (recovery reads it), but a BIGINT would take it for another id.
        kind = fmt.RECORD_TYPE_NAMES[rtype].upper()
        raise Error(
            f"{path}: the {kind} record at offset {item.offset} holds message id {msg_id}, "
            "2^63 or more, which the pipeline's msg_id column (a BIGINT) cannot hold. msgcask "
            "numbers messages upward from 1 (from past the largest id in the files when it "
            "rebuilds its index), so the first such id came from a record other software "
            "wrote: read the store with msgcask.open, whose ids are Python ints."
        )
    row = (
        fmt.RECORD_TYPE_NAMES[rtype],
        msg_id,
        queue,
        priority,
        deliveries,
        headers,
        body_size,
        victims,
    )
    return (*row, None, body) if payload else (*row, None)
