"""Encode and decode records and file headers. Pure: no I/O.

A record is ``checksum | payload_length | type | payload`` (store/format.py).
``scan`` walks a buffer of records, yielding each intact one and a ``Damage``
for each stretch it cannot parse, so a reader never has to guess where a
record ends and corruption is always reported with its offset and size.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from xxhash import xxh3_64, xxh3_64_intdigest

from msgcask.errors import CorruptionError, FormatVersionError
from msgcask.store import format as fmt

_LEN_TYPE = struct.Struct("<IB")  # the record header after its checksum
_CHECKSUM = struct.Struct("<Q")
_TYPE_OFFSET = fmt.CHECKSUM_SIZE + 4  # where the type byte sits in a record header
_TYPE_BYTES = tuple(bytes([t]) for t in sorted(fmt.RECORD_TYPES))

Buffer = bytes | bytearray | memoryview


def frame(rtype: int, payload: Buffer) -> bytes:
    """Return a complete record of type ``rtype`` around ``payload``."""
    rest = _LEN_TYPE.pack(len(payload), rtype) + payload
    return _CHECKSUM.pack(xxh3_64_intdigest(rest)) + rest


def encode_headers(headers: Mapping[str, str] | None) -> bytes:
    """Encode a str->str mapping; the empty mapping and None encode to b""."""
    if not headers:
        return b""
    parts = [fmt.HEADER_COUNT.pack(len(headers))]
    for key, value in headers.items():
        kb = key.encode()
        vb = value.encode()
        parts += (fmt.HEADER_KEY_LEN.pack(len(kb)), kb, fmt.HEADER_VALUE_LEN.pack(len(vb)), vb)
    return b"".join(parts)


def decode_headers(data: Buffer) -> dict[str, str]:
    """Inverse of ``encode_headers``. Malformed input raises ValueError (a key or
    value that is not UTF-8, bytes left over or missing) or struct.error (a block
    that ends inside a length field)."""
    if not data:
        return {}
    view = memoryview(data)
    (count,) = fmt.HEADER_COUNT.unpack_from(view, 0)
    pos = fmt.HEADER_COUNT.size
    out: dict[str, str] = {}
    for _ in range(count):
        (klen,) = fmt.HEADER_KEY_LEN.unpack_from(view, pos)
        pos += fmt.HEADER_KEY_LEN.size
        key = bytes(view[pos : pos + klen]).decode()
        pos += klen
        (vlen,) = fmt.HEADER_VALUE_LEN.unpack_from(view, pos)
        pos += fmt.HEADER_VALUE_LEN.size
        out[key] = bytes(view[pos : pos + vlen]).decode()
        pos += vlen
    if pos != len(view):
        raise ValueError("headers block has trailing bytes")
    return out


def encode_put(
    msg_id: int,
    queue: bytes,
    priority: int,
    deliveries: int,
    headers: bytes,
    body: Buffer,
) -> bytes:
    """Return a PUT record. ``queue`` and ``headers`` are already encoded."""
    payload_len = fmt.PUT_FIXED_SIZE + len(queue) + len(headers) + len(body)
    rest = b"".join(
        (
            _LEN_TYPE.pack(payload_len, fmt.TYPE_PUT),
            fmt.PUT_FIXED.pack(msg_id, priority, deliveries, len(queue), len(headers)),
            queue,
            headers,
            body,
        )
    )
    return _CHECKSUM.pack(xxh3_64_intdigest(rest)) + rest


def put_record_size(queue: bytes, headers: bytes, body_len: int) -> int:
    """The size of the PUT record ``encode_put`` would return."""
    return fmt.RECORD_HEADER_SIZE + fmt.PUT_FIXED_SIZE + len(queue) + len(headers) + body_len


# The sizes of the records ``encode_ack`` and ``encode_batch_header`` return.
ACK_RECORD_SIZE = fmt.RECORD_HEADER_SIZE + fmt.ACK_PAYLOAD.size
BATCH_RECORD_SIZE = fmt.RECORD_HEADER_SIZE + fmt.BATCH_PAYLOAD.size


# ACK and DELIVER records are written once per message each: packed in one go.
_ACK_REST = struct.Struct("<IBQ")
_DELIVER_REST = struct.Struct("<IBQH")


def encode_ack(msg_id: int) -> bytes:
    rest = _ACK_REST.pack(fmt.ACK_PAYLOAD.size, fmt.TYPE_ACK, msg_id)
    return _CHECKSUM.pack(xxh3_64_intdigest(rest)) + rest


def encode_deliver(msg_id: int, deliveries: int) -> bytes:
    rest = _DELIVER_REST.pack(fmt.DELIVER_PAYLOAD.size, fmt.TYPE_DELIVER, msg_id, deliveries)
    return _CHECKSUM.pack(xxh3_64_intdigest(rest)) + rest


def encode_batch_header(count: int, length: int) -> bytes:
    """A BATCH record announcing that the next ``count`` records (``length``
    bytes) were written together and count only if all of them are intact."""
    return frame(fmt.TYPE_BATCH, fmt.BATCH_PAYLOAD.pack(count, length))


def encode_manifest(victims: list[int]) -> bytes:
    body = fmt.MANIFEST_COUNT.pack(len(victims)) + b"".join(
        fmt.MANIFEST_ENTRY.pack(v) for v in victims
    )
    return frame(fmt.TYPE_MANIFEST, body)


class PutMeta(NamedTuple):
    """The fixed fields of a PUT record, without headers and body."""

    msg_id: int
    priority: int
    deliveries: int
    queue: str


class Put(NamedTuple):
    msg_id: int
    queue: str
    priority: int
    deliveries: int
    headers: dict[str, str]
    body: bytes


def decode_put_meta(buf: Buffer, payload_start: int, payload_end: int) -> PutMeta:
    """The fixed fields and queue of a PUT record. Raises ValueError if they are
    impossible (a priority above 9, a queue name of 0 or over 255 bytes, not
    UTF-8 or with a NUL, a queue name and headers block that overrun the payload)."""
    msg_id, priority, deliveries, qlen, hlen = fmt.PUT_FIXED.unpack_from(buf, payload_start)
    if priority > fmt.MAX_PRIORITY:
        raise ValueError(f"priority {priority}")
    if not 0 < qlen <= fmt.MAX_QUEUE_NAME_BYTES:
        raise ValueError(f"queue name of {qlen} bytes")
    qstart = payload_start + fmt.PUT_FIXED_SIZE
    if qstart + qlen + hlen > payload_end:
        raise ValueError("queue name and headers overrun the record")
    raw = bytes(buf[qstart : qstart + qlen])
    if b"\0" in raw:
        raise ValueError("NUL in the queue name")
    return PutMeta(msg_id, priority, deliveries, raw.decode())


def decode_put_headers(buf: Buffer, payload_start: int) -> dict[str, str]:
    """The headers of a PUT record whose fields passed ``decode_put_meta``.
    Raises ValueError or struct.error if its headers block cannot be decoded."""
    _, _, _, qlen, hlen = fmt.PUT_FIXED.unpack_from(buf, payload_start)
    hstart = payload_start + fmt.PUT_FIXED_SIZE + qlen
    return decode_headers(buf[hstart : hstart + hlen])


def decode_put(buf: Buffer, payload_start: int, payload_end: int) -> Put:
    msg_id, priority, deliveries, qlen, hlen = fmt.PUT_FIXED.unpack_from(buf, payload_start)
    qstart = payload_start + fmt.PUT_FIXED_SIZE
    hstart = qstart + qlen
    bstart = hstart + hlen
    if bstart > payload_end:
        raise ValueError("PUT record fields overrun the payload")
    queue = bytes(buf[qstart:hstart]).decode()
    headers = decode_headers(buf[hstart:bstart])
    return Put(msg_id, queue, priority, deliveries, headers, bytes(buf[bstart:payload_end]))


def read_put(raw: Buffer) -> Put | None:
    """Check and decode a buffer holding exactly one PUT record (as read at a
    location the index gave); None if the record is damaged."""
    if len(raw) < fmt.RECORD_HEADER_SIZE:
        return None
    checksum, length, rtype = fmt.RECORD_HEADER.unpack_from(raw, 0)
    end = fmt.RECORD_HEADER_SIZE + length
    if rtype != fmt.TYPE_PUT or end != len(raw):
        return None
    if xxh3_64_intdigest(raw[fmt.CHECKSUM_SIZE :]) != checksum:
        return None
    try:
        return decode_put(raw, fmt.RECORD_HEADER_SIZE, end)
    except (ValueError, UnicodeDecodeError, struct.error):
        return None


def decode_manifest(buf: Buffer, payload_start: int) -> list[int]:
    (count,) = fmt.MANIFEST_COUNT.unpack_from(buf, payload_start)
    first = payload_start + fmt.MANIFEST_COUNT.size
    size = fmt.MANIFEST_ENTRY.size
    return [fmt.MANIFEST_ENTRY.unpack_from(buf, first + i * size)[0] for i in range(count)]


# -- file header -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileHeader:
    version: int
    kind: int
    file_id: int
    id_floor: int  # the store's next message id when the file was made: ids assigned later are >=


def encode_file_header(kind: int, file_id: int, id_floor: int) -> bytes:
    head = fmt.FILE_HEADER.pack(fmt.MAGIC, fmt.FORMAT_VERSION, kind, 0, file_id, id_floor)
    return head + fmt.FILE_HEADER_CHECKSUM.pack(xxh3_64_intdigest(head))


def decode_file_header(buf: Buffer, path: str) -> FileHeader:
    """Parse a data file's header. Raises FormatVersionError for a newer
    version and CorruptionError for anything else that is not a valid header."""
    if len(buf) < fmt.FILE_HEADER_SIZE:
        raise CorruptionError(
            f"{path}: file header is truncated ({len(buf)} of {fmt.FILE_HEADER_SIZE} bytes)",
            path=path,
            offset=0,
            length=len(buf),
        )
    magic, version, kind, _reserved, file_id, id_floor = fmt.FILE_HEADER.unpack_from(buf, 0)
    (checksum,) = fmt.FILE_HEADER_CHECKSUM.unpack_from(buf, fmt.FILE_HEADER.size)
    if magic != fmt.MAGIC:
        raise CorruptionError(
            f"{path}: not a msgcask data file (bad magic)", path=path, offset=0, length=8
        )
    if xxh3_64_intdigest(bytes(buf[: fmt.FILE_HEADER.size])) != checksum:
        raise CorruptionError(
            f"{path}: file header checksum mismatch",
            path=path,
            offset=0,
            length=fmt.FILE_HEADER_SIZE,
        )
    if version > fmt.FORMAT_VERSION:
        raise FormatVersionError(
            f"{path} was written by msgcask format version {version}; this msgcask reads "
            f"up to version {fmt.FORMAT_VERSION}. Upgrade msgcask to open this store."
        )
    if kind not in (fmt.KIND_JOURNAL, fmt.KIND_COMPACTED):
        raise CorruptionError(f"{path}: unknown file kind {kind}", path=path, offset=10, length=1)
    return FileHeader(version, kind, file_id, id_floor)


def check_file_id(header: FileHeader, file_id: int, path: str) -> None:
    """Raise CorruptionError if ``header`` names another file than ``file_id``,
    the id in the file's name."""
    if header.file_id != file_id:
        raise CorruptionError(
            f"{path}: header names file {header.file_id}; the file was renamed or "
            "copied from another store. Move it out of the store directory.",
            path=path,
            offset=12,
            length=4,
        )


# -- scanning --------------------------------------------------------------------


class Record(NamedTuple):
    """An intact record found by ``scan``: its type and where its bytes are."""

    offset: int
    rtype: int
    payload_start: int
    end: int  # offset just past the record

    @property
    def size(self) -> int:
        return self.end - self.offset


class Damage(NamedTuple):
    """A stretch of a file that holds no intact record.

    ``at_tail`` is true when no intact record follows it: that is what a write
    torn by a crash looks like, and recovery truncates it. ``unused`` marks a
    tail of zero bytes only: the write head's preallocated space (store/fs.py),
    which is not damage at all. ``zeros``: how many zero bytes end a torn
    tail (mostly that space, after what the torn write left; a torn record's
    own last bytes may be zeros too).
    """

    offset: int
    length: int
    reason: str
    at_tail: bool
    unused: bool = False
    zeros: int = 0


def _check_record(buf: Buffer, pos: int, limit: int) -> tuple[int, int, str]:
    """Return (type, end, "") for an intact record at ``pos``, else (0, 0, reason).

    Pass a memoryview as ``buf`` where speed matters: slicing it copies nothing.
    """
    if limit - pos < fmt.RECORD_HEADER_SIZE:
        return 0, 0, "truncated record header"
    checksum, length, rtype = fmt.RECORD_HEADER.unpack_from(buf, pos)
    least = _LEAST_PAYLOAD.get(rtype)  # None: not a record type
    if least is None:
        return 0, 0, f"unknown record type 0x{rtype:02x}"
    end = pos + fmt.RECORD_HEADER_SIZE + length
    if end > limit:
        return 0, 0, "record runs past the end of the file"
    if xxh3_64_intdigest(buf[pos + fmt.CHECKSUM_SIZE : end]) != checksum:
        return 0, 0, "checksum mismatch"
    # Two comparisons: this runs for every record on recovery.
    if length < least or (rtype == _MANIFEST and not _manifest_fits(buf, pos, length)):
        name = fmt.RECORD_TYPE_NAMES[rtype].upper()
        return 0, 0, f"malformed {name}: a payload of {length} bytes"
    return rtype, end, ""


# A checksum proves the bytes are as written, not that a writer of this format
# wrote them: a payload too short for its type's fixed fields (or a MANIFEST
# naming more files than it holds) is damage, so no decoder reads past its
# record or raises struct.error. Bytes past the fixed fields are not read.
_LEAST_PAYLOAD = {
    fmt.TYPE_PUT: fmt.PUT_FIXED_SIZE,
    fmt.TYPE_ACK: fmt.ACK_PAYLOAD.size,
    fmt.TYPE_DELIVER: fmt.DELIVER_PAYLOAD.size,
    fmt.TYPE_BATCH: fmt.BATCH_PAYLOAD.size,
    fmt.TYPE_MANIFEST: fmt.MANIFEST_COUNT.size,
}
assert set(_LEAST_PAYLOAD) == fmt.RECORD_TYPES
_MANIFEST = fmt.TYPE_MANIFEST


def _manifest_fits(buf: Buffer, pos: int, length: int) -> bool:
    """A MANIFEST's payload holds exactly the count of file ids it announces."""
    if length < fmt.MANIFEST_COUNT.size:
        return False
    (count,) = fmt.MANIFEST_COUNT.unpack_from(buf, pos + fmt.RECORD_HEADER_SIZE)
    return length == fmt.MANIFEST_COUNT.size + count * fmt.MANIFEST_ENTRY.size


def _resync(buf: Buffer, start: int, limit: int) -> int | None:
    """Return the offset of the next intact record at or after ``start``."""
    # bytes, bytearray and mmap search in C; a memoryview is copied once.
    data = buf if hasattr(buf, "find") else bytes(buf)
    candidates = {}
    for tb in _TYPE_BYTES:
        candidates[tb] = data.find(tb, start + _TYPE_OFFSET, limit)
    while True:
        live = [(p, tb) for tb, p in candidates.items() if p >= 0]
        if not live:
            return None
        p, tb = min(live)
        pos = p - _TYPE_OFFSET
        if _check_record(memoryview(data), pos, limit)[0]:
            return pos
        candidates[tb] = data.find(tb, p + 1, limit)


def _torn_tail(view: memoryview, pos: int, end: int, reason: str) -> Damage:
    """The torn tail ``view[pos:end]``, with the zero bytes that end it counted."""
    tail = bytes(view[pos:end])
    written = len(tail.rstrip(b"\0"))
    if not written:
        return Damage(pos, len(tail), "zero-filled tail", True, True)
    return Damage(pos, len(tail), reason, True, zeros=len(tail) - written)


def _only_zeros(view: memoryview, start: int, limit: int) -> bool:
    return start >= limit or not bytes(view[start:limit]).strip(b"\0")


class _Claim(NamedTuple):
    """What a damaged record's header says: trusted only where it is borne out."""

    checksum: int
    length: int
    rtype: int

    def end(self, pos: int) -> int:
        return pos + fmt.RECORD_HEADER_SIZE + self.length


def _claim(view: memoryview, pos: int, limit: int) -> _Claim | None:
    """The header at ``pos``, if all of it is there and it names a known type."""
    if limit - pos < fmt.RECORD_HEADER_SIZE:
        return None
    claim = _Claim(*fmt.RECORD_HEADER.unpack_from(view, pos))
    return claim if claim.rtype in _LEAST_PAYLOAD else None


def _torn_append(view: memoryview, pos: int, limit: int, claim: _Claim | None) -> bool:
    """In a write head, whether the damage at ``pos`` is the append a crash cut
    short: its header was never written (zeros: a mapped copy may store a
    record's first bytes last), or it names a record that runs past the end of
    the file or is followed by nothing but the preallocated zero tail. The
    bytes inside such a record are the caller's body, not records."""
    if limit - pos < fmt.RECORD_HEADER_SIZE:
        return True
    if _only_zeros(view, pos, pos + fmt.RECORD_HEADER_SIZE):
        return True
    return claim is not None and _only_zeros(view, claim.end(pos), limit)


def _claimed_end(view: memoryview, pos: int, limit: int, claim: _Claim | None) -> int | None:
    """Where the damaged record at ``pos`` says it ends, if an intact record starts
    exactly there: its header is then to be trusted, and the bytes before that end
    are its body (the caller's bytes), never to be searched for records."""
    if claim is None:
        return None
    end = claim.end(pos)
    if end >= limit or not _check_record(view, end, limit)[0]:
        return None
    return end


def _length_repaired(view: memoryview, pos: int, limit: int, claim: _Claim | None) -> int | None:
    """Where the record at ``pos`` really ends if only one bit of its length field
    was flipped (its checksum, which covers the length, then holds for the length
    with that bit restored), else None. Such a record looks like a torn append
    (it names an end past the file, or on zeros) while intact records follow it."""
    if claim is None:
        return None
    least = _LEAST_PAYLOAD[claim.rtype]
    for bit in range(32):
        true_length = claim.length ^ (1 << bit)
        end = pos + fmt.RECORD_HEADER_SIZE + true_length
        if true_length < least or end > limit:
            continue
        # Only where a record could end (cheap to test) is the checksum worked out.
        if end < limit and not (
            _check_record(view, end, limit)[0] or _only_zeros(view, end, min(end + 16, limit))
        ):
            continue
        digest = xxh3_64(_LEN_TYPE.pack(true_length, claim.rtype))
        digest.update(view[pos + fmt.RECORD_HEADER_SIZE : end])
        if digest.intdigest() == claim.checksum:
            return end
    return None


def scan(
    buf: Buffer, start: int, limit: int | None = None, *, head: bool = False
) -> Iterator[Record | Damage]:
    """Yield every intact record and every damaged stretch in ``buf[start:limit]``.

    Records inside a BATCH are yielded only once the whole batch has been seen
    intact, so a batch torn at the tail yields nothing but one ``Damage`` that
    starts at the batch's header. The BATCH record itself is not yielded.

    ``head``: ``buf`` is the last journal file, whose last append a crash may
    have cut short. A damaged record that reaches the end of the data (or only
    zeros follow it) is then a torn tail as a whole: nothing inside it is
    searched for records, since a message body may hold bytes that parse as
    one (an ACK of another message, say) and must never be applied. (Not in a
    sealed file: fsynced when it was sealed, it holds no torn append unless
    sync="never" let a power cut leave one, and there a zeroed page would cost
    every record after it.)
    """
    end_of_data = len(buf) if limit is None else limit
    view = memoryview(buf)  # checksums over slices of it copy nothing
    pos = start
    while pos < end_of_data:
        rtype, end, reason = _check_record(view, pos, end_of_data)
        if not rtype:
            # Never searched inside where its header can be trusted: the checksum
            # holds once one bit of its length is restored, or an intact record
            # starts right where it says it ends. The bytes inside are its body.
            claim = _claim(view, pos, end_of_data)
            repaired = _length_repaired(view, pos, end_of_data, claim)
            if repaired is not None:
                reason = "length field damaged"
                nxt = repaired if repaired < end_of_data else None
                if nxt is not None and not _check_record(view, nxt, end_of_data)[0]:
                    nxt = _resync(buf, nxt, end_of_data)
            elif (nxt := _claimed_end(view, pos, end_of_data, claim)) is not None:
                pass
            elif head and _torn_append(view, pos, end_of_data, claim):
                nxt = None
            else:
                nxt = _resync(buf, pos + 1, end_of_data)
            if nxt is None:
                yield _torn_tail(view, pos, end_of_data, reason)
                return
            yield Damage(pos, nxt - pos, reason, False)
            pos = nxt
            continue
        if rtype != fmt.TYPE_BATCH:
            yield Record(pos, rtype, pos + fmt.RECORD_HEADER_SIZE, end)
            pos = end
            continue
        count, length = fmt.BATCH_PAYLOAD.unpack_from(buf, pos + fmt.RECORD_HEADER_SIZE)
        batch_end = end + length
        members: list[Record] = []
        sub = end
        while len(members) < count and sub < min(batch_end, end_of_data):
            stype, send, _ = _check_record(view, sub, min(batch_end, end_of_data))
            if not stype or stype == fmt.TYPE_BATCH:
                break
            members.append(Record(sub, stype, sub + fmt.RECORD_HEADER_SIZE, send))
            sub = send
        if len(members) == count and sub == batch_end:
            yield from members
            pos = batch_end
            continue
        # Incomplete batch: torn if nothing intact follows, else mid-file damage.
        torn = batch_end > end_of_data or (head and _only_zeros(view, batch_end, end_of_data))
        nxt = None if torn else _resync(buf, max(sub, end), end_of_data)
        if nxt is None:
            yield _torn_tail(view, pos, end_of_data, "incomplete batch")
            return
        yield from members
        yield Damage(sub, nxt - sub, "damaged record inside a batch", False)
        pos = nxt
