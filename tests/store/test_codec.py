"""store/codec.py: record encoding, scanning and file headers, on plain byte buffers.

``scan`` is tested the way LevelDB's log_test.cc tests its reader: one test per kind of
damage, each asserting exactly which records come back and which stretch is reported.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xxhash import xxh3_64_intdigest

from msgcask.errors import CorruptionError, Error, FormatVersionError
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.codec import Damage, Record

# Text that encodes to UTF-8 (lone surrogates cannot, and queue names never hold them).
TEXT = st.text(st.characters(codec="utf-8"), max_size=20)


def put(
    msg_id: int,
    body: bytes = b"body",
    queue: str = "q",
    *,
    priority: int = 4,
    deliveries: int = 0,
    headers: dict[str, str] | None = None,
) -> bytes:
    hb = codec.encode_headers(headers)
    return codec.encode_put(msg_id, queue.encode(), priority, deliveries, hb, body)


def records_of(items: list[Record | Damage]) -> list[Record]:
    return [i for i in items if isinstance(i, Record)]


def damages_of(items: list[Record | Damage]) -> list[Damage]:
    return [i for i in items if isinstance(i, Damage)]


def offsets(parts: list[bytes]) -> list[int]:
    """Start offsets of ``parts`` laid back to back."""
    out, pos = [], 0
    for p in parts:
        out.append(pos)
        pos += len(p)
    return out


def flip(buf: bytes, at: int) -> bytes:
    return buf[:at] + bytes([buf[at] ^ 0x40]) + buf[at + 1 :]


# -- round trips -----------------------------------------------------------------


class TestRoundTrip:
    def test_put_record_round_trips_with_unicode_headers(self) -> None:
        headers = {"ключ": "значение", "emoji 🚀": "ü\u00e9\u4e2d", "": ""}
        raw = codec.encode_put(
            2**63 + 5, "очередь".encode(), 9, 7, codec.encode_headers(headers), b"\x00\xff"
        )
        got = codec.read_put(raw)
        assert got == codec.Put(2**63 + 5, "очередь", 9, 7, headers, b"\x00\xff")

    def test_put_record_with_empty_body_and_no_headers(self) -> None:
        raw = put(1, b"")
        assert codec.read_put(raw) == codec.Put(1, "q", 4, 0, {}, b"")
        # No headers encode to nothing at all, not to an empty count.
        assert codec.encode_headers(None) == codec.encode_headers({}) == b""

    def test_put_record_size_matches_encoding(self) -> None:
        hb = codec.encode_headers({"a": "b"})
        raw = codec.encode_put(3, b"queue", 0, 0, hb, b"x" * 100)
        assert codec.put_record_size(b"queue", hb, 100) == len(raw)

    def test_frame_and_encode_put_agree(self) -> None:
        hb = codec.encode_headers({"k": "v"})
        payload = fmt.PUT_FIXED.pack(9, 2, 1, 1, len(hb)) + b"q" + hb + b"data"
        assert codec.frame(fmt.TYPE_PUT, payload) == codec.encode_put(9, b"q", 2, 1, hb, b"data")

    def test_put_meta_is_the_fixed_fields(self) -> None:
        raw = put(77, b"zz", queue="orders", priority=3, deliveries=2)
        meta = codec.decode_put_meta(raw, fmt.RECORD_HEADER_SIZE, len(raw))
        assert meta == codec.PutMeta(77, 3, 2, "orders")

    def test_ack_record_round_trips(self) -> None:
        raw = codec.encode_ack(2**64 - 1)
        [rec] = list(codec.scan(raw, 0))
        assert isinstance(rec, Record) and rec.rtype == fmt.TYPE_ACK
        assert fmt.ACK_PAYLOAD.unpack_from(raw, rec.payload_start) == (2**64 - 1,)
        assert raw == codec.frame(fmt.TYPE_ACK, fmt.ACK_PAYLOAD.pack(2**64 - 1))

    def test_deliver_record_round_trips(self) -> None:
        raw = codec.encode_deliver(12, 0xFFFF)
        [rec] = list(codec.scan(raw, 0))
        assert isinstance(rec, Record) and rec.rtype == fmt.TYPE_DELIVER
        assert fmt.DELIVER_PAYLOAD.unpack_from(raw, rec.payload_start) == (12, 0xFFFF)
        assert raw == codec.frame(fmt.TYPE_DELIVER, fmt.DELIVER_PAYLOAD.pack(12, 0xFFFF))

    def test_manifest_record_round_trips(self) -> None:
        raw = codec.encode_manifest([1, 7, 2**32 - 1])
        [rec] = list(codec.scan(raw, 0))
        assert isinstance(rec, Record) and rec.rtype == fmt.TYPE_MANIFEST
        assert codec.decode_manifest(raw, rec.payload_start) == [1, 7, 2**32 - 1]

    def test_empty_manifest(self) -> None:
        raw = codec.encode_manifest([])
        assert codec.decode_manifest(raw, fmt.RECORD_HEADER_SIZE) == []

    def test_batch_header_carries_count_and_length(self) -> None:
        raw = codec.encode_batch_header(3, 999)
        checksum, length, rtype = fmt.RECORD_HEADER.unpack_from(raw, 0)
        assert (length, rtype) == (fmt.BATCH_PAYLOAD.size, fmt.TYPE_BATCH)
        assert checksum == xxh3_64_intdigest(raw[fmt.CHECKSUM_SIZE :])
        assert fmt.BATCH_PAYLOAD.unpack_from(raw, fmt.RECORD_HEADER_SIZE) == (3, 999)

    def test_checksum_covers_length_and_type(self) -> None:
        # A flipped type byte or length byte must fail the check, not parse differently.
        raw = put(1)
        for at in (8, 12):  # first byte of the length, the type byte
            assert codec.read_put(flip(raw, at)) is None

    def test_read_put_rejects_damage(self) -> None:
        raw = put(1, b"hello")
        assert codec.read_put(raw[:-1]) is None  # short
        assert codec.read_put(raw + b"\x00") is None  # longer than the record
        assert codec.read_put(raw[:5]) is None  # not even a header
        assert codec.read_put(flip(raw, len(raw) - 1)) is None  # body bit flip
        assert codec.read_put(codec.encode_ack(1)) is None  # not a PUT

    def test_put_meta_rejects_headers_that_run_past_the_record(self) -> None:
        raw = bytearray(put(1, b"", headers={"k": "v"}))
        headers_len_at = fmt.RECORD_HEADER_SIZE + fmt.PUT_FIXED_SIZE - 4  # the last fixed field
        (hlen,) = struct.unpack_from("<I", raw, headers_len_at)
        struct.pack_into("<I", raw, headers_len_at, hlen + 1)
        with pytest.raises(ValueError, match="overrun"):
            codec.decode_put_meta(raw, fmt.RECORD_HEADER_SIZE, len(raw))

    def test_decode_headers_rejects_trailing_bytes(self) -> None:
        with pytest.raises(ValueError):
            codec.decode_headers(codec.encode_headers({"a": "b"}) + b"x")

    @settings(max_examples=200)
    @given(
        msg_id=st.integers(0, 2**64 - 1),
        queue=TEXT.filter(lambda s: 0 < len(s.encode()) <= fmt.MAX_QUEUE_NAME_BYTES),
        priority=st.integers(0, fmt.MAX_PRIORITY),
        deliveries=st.integers(0, fmt.MAX_DELIVERIES_COUNTED),
        headers=st.dictionaries(TEXT, TEXT, max_size=5),
        body=st.binary(max_size=300),
    )
    def test_put_round_trip_property(
        self,
        msg_id: int,
        queue: str,
        priority: int,
        deliveries: int,
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        hb = codec.encode_headers(headers)
        raw = codec.encode_put(msg_id, queue.encode(), priority, deliveries, hb, body)
        assert len(raw) == codec.put_record_size(queue.encode(), hb, len(body))
        assert codec.read_put(raw) == codec.Put(msg_id, queue, priority, deliveries, headers, body)
        assert codec.decode_headers(hb) == headers

    @settings(max_examples=100)
    @given(ids=st.lists(st.integers(1, 2**32 - 1), max_size=50))
    def test_manifest_round_trip_property(self, ids: list[int]) -> None:
        raw = codec.encode_manifest(ids)
        assert codec.decode_manifest(raw, fmt.RECORD_HEADER_SIZE) == ids


# -- scan --------------------------------------------------------------------------


def three_records() -> list[bytes]:
    return [put(1, b"first"), codec.encode_ack(1), put(2, b"second" * 10)]


class TestScan:
    def test_clean_buffer_yields_every_record_in_order(self) -> None:
        parts = three_records()
        buf = b"".join(parts)
        items = list(codec.scan(buf, 0))
        assert items == [
            Record(o, t, o + fmt.RECORD_HEADER_SIZE, o + len(p))
            for o, p, t in zip(
                offsets(parts), parts, (fmt.TYPE_PUT, fmt.TYPE_ACK, fmt.TYPE_PUT), strict=True
            )
        ]

    def test_empty_buffer_yields_nothing(self) -> None:
        assert list(codec.scan(b"", 0)) == []

    def test_scan_honours_start_and_limit(self) -> None:
        parts = three_records()
        buf = b"HEADER" + b"".join(parts) + b"beyond the limit"
        limit = len(buf) - len(b"beyond the limit")
        items = list(codec.scan(buf, 6, limit))
        assert [i.offset for i in items] == [6 + o for o in offsets(parts)]
        assert not damages_of(items)

    def test_truncated_header_at_tail(self) -> None:
        parts = three_records()
        good = b"".join(parts)
        buf = good + put(3)[:7]
        items = list(codec.scan(buf, 0))
        assert len(records_of(items)) == 3
        assert damages_of(items) == [Damage(len(good), 7, "truncated record header", True)]

    def test_record_running_past_the_end(self) -> None:
        parts = three_records()
        good = b"".join(parts)
        tail = put(3, b"x" * 100)[:40]  # intact header, payload cut short
        items = list(codec.scan(good + tail, 0))
        assert len(records_of(items)) == 3
        assert damages_of(items) == [
            Damage(len(good), 40, "record runs past the end of the file", True)
        ]

    def test_checksum_mismatch_in_the_middle_resyncs_to_the_next_record(self) -> None:
        parts = [put(i, b"body %d" % i * 5) for i in range(1, 6)]
        at = offsets(parts)
        buf = flip(b"".join(parts), at[2] + 20)  # inside record 3's payload
        items = list(codec.scan(buf, 0))
        assert [r.offset for r in records_of(items)] == [at[0], at[1], at[3], at[4]]
        assert damages_of(items) == [Damage(at[2], len(parts[2]), "checksum mismatch", False)]
        # Damage sits where it is in the stream, between the records around it.
        assert isinstance(items[2], Damage)

    def test_damaged_length_field_does_not_swallow_later_records(self) -> None:
        parts = [put(i, b"payload") for i in range(1, 5)]
        at = offsets(parts)
        buf = bytearray(b"".join(parts))
        struct.pack_into("<I", buf, at[1] + 8, 2**31)  # length points far past the end
        items = list(codec.scan(bytes(buf), 0))
        assert [r.offset for r in records_of(items)] == [at[0], at[2], at[3]]
        [damage] = damages_of(items)
        assert (damage.offset, damage.length, damage.at_tail) == (at[1], len(parts[1]), False)

    def test_garbage_at_the_tail(self) -> None:
        parts = three_records()
        good = b"".join(parts)
        garbage = bytes(range(256)) * 3
        items = list(codec.scan(good + garbage, 0))
        assert len(records_of(items)) == 3
        [damage] = damages_of(items)
        assert (damage.offset, damage.length, damage.at_tail) == (len(good), len(garbage), True)

    def test_zero_filled_tail(self) -> None:
        # A preallocated or hole-punched tail: zero bytes never parse as a record.
        good = b"".join(three_records())
        items = list(codec.scan(good + bytes(4096), 0))
        assert len(records_of(items)) == 3
        [damage] = damages_of(items)
        assert (damage.offset, damage.length, damage.at_tail) == (len(good), 4096, True)
        assert damage.unused and "zero" in damage.reason

    def test_torn_record_before_zeros_is_damage_not_unused_space(self) -> None:
        # The write head's preallocated tail after a record cut short by a crash.
        parts = three_records()
        good = b"".join(parts[:2])
        items = list(codec.scan(good + parts[2][:20] + bytes(4096), 0))
        assert len(records_of(items)) == 2
        [damage] = damages_of(items)
        assert (damage.offset, damage.at_tail, damage.unused) == (len(good), True, False)

    def test_a_record_right_after_one_stray_byte_is_kept(self) -> None:
        first, second = put(1), put(2)
        items = list(codec.scan(first + b"\x07" + second, 0, head=True))
        assert [r.offset for r in records_of(items)] == [0, len(first) + 1]
        assert damages_of(items) == [Damage(len(first), 1, "unknown record type 0x00", False)]

    def test_bad_first_record_then_good_ones(self) -> None:
        parts = three_records()
        at = offsets(parts)
        buf = flip(b"".join(parts), 0)  # the first checksum byte
        items = list(codec.scan(buf, 0))
        assert items[0] == Damage(0, len(parts[0]), "checksum mismatch", False)
        assert [r.offset for r in records_of(items)] == at[1:]

    @settings(max_examples=200)
    @given(
        bodies=st.lists(st.binary(min_size=0, max_size=64), min_size=2, max_size=8),
        data=st.data(),
    )
    def test_one_flipped_byte_loses_only_its_record(
        self, bodies: list[bytes], data: st.DataObject
    ) -> None:
        parts = [put(i + 1, b) for i, b in enumerate(bodies)]
        at = offsets(parts)
        buf = b"".join(parts)
        victim = data.draw(st.integers(0, len(parts) - 1))
        pos = data.draw(st.integers(at[victim], at[victim] + len(parts[victim]) - 1))
        items = list(codec.scan(flip(buf, pos), 0))
        assert [r.offset for r in records_of(items)] == [o for i, o in enumerate(at) if i != victim]
        [damage] = damages_of(items)
        assert damage.offset == at[victim]
        last = victim == len(parts) - 1
        # The last record's damage reaches the end, so it is indistinguishable from a torn tail.
        assert damage.at_tail == last
        assert damage.length == len(buf) - at[victim] if last else len(parts[victim])

    @settings(max_examples=100)
    @given(bodies=st.lists(st.binary(max_size=100), max_size=10), cut=st.integers(0, 2000))
    def test_any_prefix_scans_without_error(self, bodies: list[bytes], cut: int) -> None:
        # A torn write can stop anywhere: every complete record before the cut comes back.
        parts = [put(i + 1, b) for i, b in enumerate(bodies)]
        buf = b"".join(parts)
        cut = min(cut, len(buf))
        items = list(codec.scan(buf[:cut], 0))
        complete = [o for o, p in zip(offsets(parts), parts, strict=True) if o + len(p) <= cut]
        assert [r.offset for r in records_of(items)] == complete
        damages = damages_of(items)
        if complete and sum(map(len, parts[: len(complete)])) == cut:
            assert damages == []
        elif cut:
            assert len(damages) == 1 and damages[0].at_tail


class TestScanBatch:
    def batch(self, records: list[bytes]) -> bytes:
        return codec.encode_batch_header(len(records), sum(map(len, records))) + b"".join(records)

    def test_complete_batch_yields_its_members_not_itself(self) -> None:
        members = [put(2), put(3), codec.encode_ack(1)]
        before, after = put(1), put(4)
        buf = before + self.batch(members) + after
        items = list(codec.scan(buf, 0))
        assert not damages_of(items)
        assert [r.rtype for r in records_of(items)] == [
            fmt.TYPE_PUT,
            fmt.TYPE_PUT,
            fmt.TYPE_PUT,
            fmt.TYPE_ACK,
            fmt.TYPE_PUT,
        ]
        header = len(codec.encode_batch_header(0, 0))
        start = len(before) + header
        assert [r.offset for r in items[1:4]] == [start + o for o in offsets(members)]

    def test_empty_batch(self) -> None:
        buf = put(1) + self.batch([]) + put(2)
        items = list(codec.scan(buf, 0))
        assert len(records_of(items)) == 2 and not damages_of(items)

    @pytest.mark.parametrize("keep", [0, 1, 2, 20, 60])
    def test_batch_torn_at_the_tail_yields_nothing_of_it(self, keep: int) -> None:
        # keep = bytes of the batch that reached the disk after the first two members
        members = [put(2), put(3), put(4, b"x" * 50)]
        before = put(1)
        full = self.batch(members)
        header = len(codec.encode_batch_header(0, 0))
        cut = header + len(members[0]) + len(members[1]) + keep
        buf = before + full[:cut]
        items = list(codec.scan(buf, 0))
        assert records_of(items) == [Record(0, fmt.TYPE_PUT, 13, len(before))]
        tail = full[:cut]  # its last bytes may be zeros of the record it cut
        zeros = len(tail) - len(tail.rstrip(b"\0"))
        assert damages_of(items) == [
            Damage(len(before), cut, "incomplete batch", True, zeros=zeros)
        ]

    def test_batch_torn_before_the_heads_zero_tail_counts_the_zeros(self) -> None:
        # The write head is allocated ahead of writes: a batch cut short by a crash is
        # followed by zero bytes, which `msgcask check` tells apart from written ones.
        members = [put(2), put(3)]
        torn = self.batch(members)[: len(codec.encode_batch_header(0, 0)) + len(members[0])]
        buf = put(1) + torn + bytes(4000)
        [damage] = damages_of(list(codec.scan(buf, 0)))
        assert (damage.reason, damage.length) == ("incomplete batch", len(torn) + 4000)
        assert damage.zeros == 4000 + len(torn) - len(torn.rstrip(b"\0"))

    def test_batch_cut_inside_its_header(self) -> None:
        before = put(1)
        buf = before + self.batch([put(2)])[:10]
        items = list(codec.scan(buf, 0))
        assert len(records_of(items)) == 1
        [damage] = damages_of(items)
        assert (damage.offset, damage.at_tail) == (len(before), True)

    def test_batch_damaged_in_the_middle_keeps_intact_members(self) -> None:
        members = [put(2, b"a" * 20), put(3, b"b" * 20), put(4, b"c" * 20)]
        before, after = put(1), [put(5), put(6)]
        header = len(codec.encode_batch_header(0, 0))
        buf = before + self.batch(members) + b"".join(after)
        m_at = [len(before) + header + o for o in offsets(members)]
        buf = flip(buf, m_at[1] + 25)  # inside member 2's body
        items = list(codec.scan(buf, 0))
        after_at = m_at[2] + len(members[2])
        assert [r.offset for r in records_of(items)] == [
            0,
            m_at[0],
            m_at[2],
            after_at,
            after_at + len(after[0]),
        ]
        [damage] = damages_of(items)
        assert (damage.offset, damage.length, damage.at_tail) == (m_at[1], len(members[1]), False)

    def test_batch_whose_last_member_is_damaged_mid_file(self) -> None:
        members = [put(2), put(3)]
        header = len(codec.encode_batch_header(0, 0))
        buf = self.batch(members) + put(4)
        buf = flip(buf, header + len(members[0]) + 20)
        items = list(codec.scan(buf, 0))
        assert [r.offset for r in records_of(items)] == [
            header,
            header + len(members[0]) + len(members[1]),
        ]
        assert len(damages_of(items)) == 1 and not damages_of(items)[0].at_tail

    def test_records_past_a_batchs_members_but_inside_its_length_are_kept(self) -> None:
        # A BATCH whose length covers more than its members (a writer bug): the
        # record after them is intact and must not be skipped with the batch.
        member, extra = put(2), put(3)
        header = codec.encode_batch_header(1, len(member) + len(extra))
        buf = put(1) + header + member + extra + put(4)
        ids = [
            fmt.PUT_FIXED.unpack_from(buf, r.payload_start)[0]
            for r in records_of(list(codec.scan(buf, 0)))
        ]
        assert ids == [1, 2, 3, 4]

    def test_a_batch_inside_a_batch_is_never_yielded_as_a_record(self) -> None:
        inner = self.batch([put(2)])
        buf = put(1) + codec.encode_batch_header(2, len(inner)) + inner + put(3)
        items = list(codec.scan(buf, 0))
        assert fmt.TYPE_BATCH not in [r.rtype for r in records_of(items)]
        assert damages_of(items)

    def test_batch_cut_one_byte_short_in_a_sealed_file_is_torn_not_searched(self) -> None:
        # The cut member's body holds an ACK record: applying it would consume
        # message 1. A sealed file is scanned without head=True.
        members = [put(2), put(3, b"xx" + codec.encode_ack(1) + b"yy")]
        buf = put(1) + self.batch(members)[:-1]
        items = list(codec.scan(buf, 0))
        assert [r.rtype for r in records_of(items)] == [fmt.TYPE_PUT]
        [damage] = damages_of(items)
        assert (damage.offset, damage.reason, damage.at_tail) == (
            len(put(1)),
            "incomplete batch",
            True,
        )


# -- file header -------------------------------------------------------------------


class TestFileHeader:
    def test_round_trip(self) -> None:
        raw = codec.encode_file_header(fmt.KIND_COMPACTED, 42, 1000)
        assert len(raw) == fmt.FILE_HEADER_SIZE == 32
        assert codec.decode_file_header(raw, "f") == codec.FileHeader(
            fmt.FORMAT_VERSION, fmt.KIND_COMPACTED, 42, 1000
        )

    def test_layout_matches_the_spec(self) -> None:
        raw = codec.encode_file_header(fmt.KIND_JOURNAL, 7, 9)
        assert raw[:8] == b"msgcask\x00"
        assert struct.unpack_from("<HBBIQ", raw, 8) == (fmt.FORMAT_VERSION, 0, 0, 7, 9)
        assert struct.unpack_from("<Q", raw, 24)[0] == xxh3_64_intdigest(raw[:24])

    def test_bad_magic(self) -> None:
        raw = b"NOTCASK\x00" + codec.encode_file_header(0, 1, 1)[8:]
        with pytest.raises(CorruptionError, match="magic") as err:
            codec.decode_file_header(raw, "/x/0000000001.log")
        assert err.value.path == "/x/0000000001.log" and err.value.offset == 0

    def test_bad_checksum(self) -> None:
        raw = flip(codec.encode_file_header(0, 1, 1), 16)
        with pytest.raises(CorruptionError, match="checksum"):
            codec.decode_file_header(raw, "f")

    def test_newer_version_is_a_format_version_error(self) -> None:
        head = fmt.FILE_HEADER.pack(fmt.MAGIC, fmt.FORMAT_VERSION + 1, 0, 0, 1, 1)
        raw = head + struct.pack("<Q", xxh3_64_intdigest(head))
        with pytest.raises(FormatVersionError, match="Upgrade"):
            codec.decode_file_header(raw, "f")

    def test_unknown_kind(self) -> None:
        head = fmt.FILE_HEADER.pack(fmt.MAGIC, fmt.FORMAT_VERSION, 7, 0, 1, 1)
        with pytest.raises(CorruptionError, match="kind"):
            codec.decode_file_header(head + struct.pack("<Q", xxh3_64_intdigest(head)), "f")

    @pytest.mark.parametrize("size", [0, 1, 8, 31])
    def test_truncated(self, size: int) -> None:
        raw = codec.encode_file_header(0, 1, 1)[:size]
        with pytest.raises(CorruptionError, match="truncated") as err:
            codec.decode_file_header(raw, "f")
        assert err.value.length == size
        assert isinstance(err.value, Error)


# A journal of standalone records and batches, as (is_batch, [records]) groups.
GROUPS = st.lists(
    st.tuples(st.booleans(), st.lists(st.binary(max_size=40), min_size=1, max_size=4)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200)
@given(groups=GROUPS, data=st.data())
def test_a_cut_anywhere_keeps_exactly_the_complete_groups_before_it(
    groups: list[tuple[bool, list[bytes]]], data: st.DataObject
) -> None:
    # All or nothing at any torn-write position: a batch counts only if all of it is
    # there, a standalone record only if it is whole.
    chunks: list[bytes] = []
    expected_ends: list[tuple[int, list[int]]] = []  # (end of group, member offsets)
    pos, msg_id = 0, 0
    for is_batch, bodies in groups:
        recs = []
        for b in bodies:
            msg_id += 1
            recs.append(put(msg_id, b))
        if is_batch:
            head = codec.encode_batch_header(len(recs), sum(map(len, recs)))
            chunks.append(head + b"".join(recs))
            first = pos + len(head)
        else:
            chunks.append(b"".join(recs))
            first = pos
        starts = [first + o for o in offsets(recs)]
        pos += len(chunks[-1])
        if is_batch:
            expected_ends.append((pos, starts))
        else:  # standalone records count one by one
            ends = [s + len(r) for s, r in zip(starts, recs, strict=True)]
            expected_ends += [(e, [s]) for s, e in zip(starts, ends, strict=True)]
    buf = b"".join(chunks)
    cut = data.draw(st.integers(0, len(buf)))
    items = list(codec.scan(buf[:cut], 0))
    expected = [s for end, starts in expected_ends if end <= cut for s in starts]
    assert [r.offset for r in records_of(items)] == expected
    assert all(d.at_tail for d in damages_of(items))


# -- a write head whose last append a crash cut short ------------------------------


class TestScanHead:
    """``scan(head=True)``: in the last journal file, a record cut short by a crash is
    cut off whole; bytes inside it that parse as a record (the body is the caller's)
    are never taken for one."""

    def torn(self, keep: int, *, headerless: bool = False) -> tuple[bytes, bytes, bytes]:
        good = put(1) + put(2)
        record = put(3, b"x" * 50 + codec.encode_ack(1) + b"y" * 500)
        cut = bytearray(record[:keep])
        if headerless:  # a mapped copy may store the record's first bytes last
            cut[:32] = bytes(32)
        return good, record, bytes(cut)

    @pytest.mark.parametrize("tail", ["eof", "zeros"])
    @pytest.mark.parametrize("headerless", [False, True])
    def test_torn_record_holding_a_record_is_one_torn_tail(
        self, tail: str, headerless: bool
    ) -> None:
        good, _, cut = self.torn(200, headerless=headerless)
        buf = good + cut + (bytes(4096) if tail == "zeros" else b"")
        items = list(codec.scan(buf, 0, head=True))
        assert [r.offset for r in records_of(items)] == [0, len(put(1))]
        [damage] = damages_of(items)
        assert (damage.offset, damage.at_tail) == (len(good), True)
        # Without head (a sealed file), damage followed by an intact record is
        # mid-file damage, and that record is used: what the flag is for.
        assert any(r.rtype == fmt.TYPE_ACK for r in records_of(list(codec.scan(buf, 0))))

    def test_torn_batch_holding_a_record_yields_nothing_of_it(self) -> None:
        members = [put(2), put(3, b"x" * 50 + codec.encode_ack(1) + b"y" * 500)]
        batch = codec.encode_batch_header(2, sum(map(len, members))) + b"".join(members)
        before = put(1)
        buf = before + batch[: len(batch) - 300] + bytes(4096)
        items = list(codec.scan(buf, 0, head=True))
        assert records_of(items) == [Record(0, fmt.TYPE_PUT, 13, len(before))]
        [damage] = damages_of(items)
        assert (damage.offset, damage.at_tail) == (len(before), True)

    def test_damage_with_intact_records_after_it_is_still_mid_file_damage(self) -> None:
        parts = [put(i, b"body %d" % i * 5) for i in range(1, 6)]
        at = offsets(parts)
        buf = flip(b"".join(parts), at[2] + 20) + bytes(4096)
        items = list(codec.scan(buf, 0, head=True))
        assert [r.offset for r in records_of(items)] == [at[0], at[1], at[3], at[4]]
        assert not damages_of(items)[0].at_tail


class TestScanHeadLengthFlip:
    """A flipped bit in a record's length field makes it look like a torn append (it
    names an end past the file, or on the zero tail); the checksum, which covers the
    length, tells the two apart, so the intact records after it are kept."""

    @pytest.mark.parametrize("bit", [7, 20, 31])
    def test_records_after_a_flipped_length_bit_are_kept(self, bit: int) -> None:
        parts = [put(i, b"body %d" % i * 5) for i in range(1, 6)]
        at = offsets(parts)
        buf = bytearray(b"".join(parts) + bytes(4096))
        length_at = at[1] + fmt.CHECKSUM_SIZE
        (length,) = struct.unpack_from("<I", buf, length_at)
        struct.pack_into("<I", buf, length_at, length ^ (1 << bit))
        items = list(codec.scan(bytes(buf), 0, head=True))
        assert [r.offset for r in records_of(items)] == [at[0], at[2], at[3], at[4]]
        [damage] = [d for d in damages_of(items) if not d.unused]
        assert (damage.offset, damage.length, damage.at_tail) == (at[1], len(parts[1]), False)

    def test_a_torn_record_is_not_taken_for_a_flipped_length(self) -> None:
        good = put(1) + put(2)
        record = put(3, b"x" * 50 + codec.encode_ack(1) + b"y" * 500)
        buf = good + record[:200] + bytes(4096)
        items = list(codec.scan(buf, 0, head=True))
        assert [r.offset for r in records_of(items)] == [0, len(put(1))]
        assert damages_of(items)[0].at_tail

    def test_records_inside_a_damaged_record_with_an_intact_one_after_are_not_used(
        self,
    ) -> None:
        # A power cut that wrote a later page of the head back before an earlier one:
        # the put across the lost page is damaged, and intact records follow it. Its
        # header names where it ends, and an intact record starts there: the ACK in
        # its body is the caller's bytes, not a record.
        good = put(1, b"precious")
        full = put(2, b"x" * 100 + codec.encode_ack(1) + b"y" * 8000)
        kept = 4096 - len(good)
        torn = full[:kept] + bytes(len(full) - kept)
        later = put(3, b"written back first")
        buf = good + torn + later + bytes(4096)
        for head in (True, False):
            items = list(codec.scan(buf, 0, head=head))
            assert [r.offset for r in records_of(items)] == [0, len(good) + len(full)]
            assert damages_of(items)[0] == Damage(len(good), len(full), "checksum mismatch", False)
