"""docs/format.md is enough to read a store: a reader written from it alone agrees.

The reader below (``read_data_file``, ``read_store``, ``check_index``) is written from
docs/format.md with struct, xxhash and lmdb, and uses nothing of msgcask's: file
headers, records, batches, the MANIFEST rule, which messages are live, and the index
tables. The first tests write stores through the public API, read their files with
it, and check that it finds what the store says (ids, queues, order, bodies, headers,
priorities, delivery counts, dead letters, acks, what recovery removes).
tests/test_docs.py checks the tables and the worked example against the code; this
checks that the prose around them is enough to read real files.

The tests after them craft or damage files byte by byte as the spec lays them out
(never with msgcask's encoder), one for each promise of format.md that no other test
checks, and see what ``msgcask.open`` (and ``msgcask check``) make of them.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import lmdb
import pytest
import xxhash

import msgcask
from msgcask.check import scan_files

# -- the reader: docs/format.md, and nothing else ---------------------------------------

MAGIC = b"msgcask\x00"
FILE_HEADER = struct.Struct("<8sHBBIQ")  # magic version kind reserved file_id id_floor
FILE_CHECKSUM = struct.Struct("<Q")  # xxh3_64 of the 24 bytes above
RECORD_HEADER = struct.Struct("<QIB")  # checksum length type
PUT, ACK, DELIVER, BATCH, MANIFEST = 0xA1, 0xA2, 0xA3, 0xA4, 0xA5
FIXED_PAYLOAD = {PUT: 17, ACK: 8, DELIVER: 10, BATCH: 8, MANIFEST: 4}
PUT_FIXED = struct.Struct("<QBHHI")  # id priority deliveries queue_len headers_len
JOURNAL, COMPACTED = 0, 1
U32, U64 = struct.Struct("<I"), struct.Struct("<Q")


def xxh3(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


def record(rtype: int, payload: bytes) -> bytes:
    """A record as "Records" describes it: checksum over length, type and payload."""
    rest = struct.pack("<IB", len(payload), rtype) + payload
    return U64.pack(xxh3(rest)) + rest


def file_header(
    file_id: int,
    *,
    kind: int = JOURNAL,
    id_floor: int = 1,
    magic: bytes = MAGIC,
    version: int = 1,
    reserved: int = 0,
    checksum: int | None = None,
) -> bytes:
    """A file header as "File header" lays it out (``checksum``: a wrong one)."""
    head = FILE_HEADER.pack(magic, version, kind, reserved, file_id, id_floor)
    return head + U64.pack(xxh3(head) if checksum is None else checksum)


def put_record(
    msg_id: int,
    queue: bytes = b"q",
    body: bytes = b"x",
    *,
    priority: int = 4,
    deliveries: int = 0,
    headers: bytes = b"",
) -> bytes:
    fixed = PUT_FIXED.pack(msg_id, priority, deliveries, len(queue), len(headers))
    return record(PUT, fixed + queue + headers + body)


def headers_block(pairs: list[tuple[bytes, bytes]]) -> bytes:
    out = struct.pack("<H", len(pairs))
    for key, value in pairs:
        out += struct.pack("<H", len(key)) + key + struct.pack("<I", len(value)) + value
    return out


def decode_headers(block: bytes) -> dict[str, str]:
    """A headers block ("Headers block"); raises ValueError if it is invalid."""
    if not block:
        return {}
    if len(block) < 2:
        raise ValueError("a block shorter than its count")
    (count,) = struct.unpack_from("<H", block, 0)
    pos, out = 2, {}
    for _ in range(count):
        if pos + 2 > len(block):
            raise ValueError("ends inside a key length")
        (klen,) = struct.unpack_from("<H", block, pos)
        key = block[pos + 2 : pos + 2 + klen]
        pos += 2 + klen
        if pos + 4 > len(block):
            raise ValueError("ends inside a value length")
        (vlen,) = struct.unpack_from("<I", block, pos)
        value = block[pos + 4 : pos + 4 + vlen]
        pos += 4 + vlen
        if pos > len(block):
            raise ValueError("ends inside a value")
        out[key.decode()] = value.decode()  # a key met twice keeps its last value
    if pos != len(block):
        raise ValueError("bytes left over")
    return out


@dataclass
class Put:
    id: int
    queue: str
    priority: int
    deliveries: int
    headers: dict[str, str]
    body: bytes
    file_id: int
    offset: int
    size: int


@dataclass
class SpecFile:
    file_id: int
    kind: int
    id_floor: int
    size: int
    records: list[tuple[int, int, bytes]]  # (offset, type, payload): intact, batches applied
    end: int = 32  # where the records end: a write head's zero tail follows
    batches: list[list[int]] = field(default_factory=list)  # each complete batch's members
    manifest: list[int] | None = None

    def of_type(self, rtype: int) -> list[bytes]:
        return [payload for _, t, payload in self.records if t == rtype]


def intact(raw: bytes, pos: int, limit: int) -> tuple[int, int] | None:
    """(type, end) of an intact record at ``pos`` ("Records": known type, ends within
    the file, checksum, fixed fields; a MANIFEST exactly 4 + 4 x count bytes)."""
    if limit - pos < RECORD_HEADER.size:
        return None
    checksum, length, rtype = RECORD_HEADER.unpack_from(raw, pos)
    end = pos + RECORD_HEADER.size + length
    if rtype not in FIXED_PAYLOAD or end > limit or xxh3(raw[pos + 8 : end]) != checksum:
        return None
    if length < FIXED_PAYLOAD[rtype]:
        return None
    if rtype == MANIFEST and length != 4 + 4 * U32.unpack_from(raw, pos + 13)[0]:
        return None
    return rtype, end


def read_data_file(path: Path) -> SpecFile:
    """A data file that holds no damage: its header checked, its records in order,
    each complete batch's members in place of the batch, a zero tail allowed."""
    raw = path.read_bytes()
    assert len(raw) >= 32, path
    magic, version, kind, _reserved, file_id, id_floor = FILE_HEADER.unpack_from(raw)
    assert magic == MAGIC, path
    assert FILE_CHECKSUM.unpack_from(raw, 24)[0] == xxh3(raw[:24]), path
    assert version == 1 and kind in (JOURNAL, COMPACTED), (path, version, kind)
    assert path.name == f"{file_id:010d}.log", (path, file_id)
    spec = SpecFile(file_id, kind, id_floor, len(raw), [])
    pos = 32
    while pos < len(raw):
        if not raw[pos:].strip(b"\x00"):
            break  # a write head's preallocated tail
        found = intact(raw, pos, len(raw))
        assert found, f"{path}: no intact record at offset {pos}"
        rtype, end = found
        if rtype != BATCH:
            spec.records.append((pos, rtype, raw[pos + 13 : end]))
            pos = end
            continue
        count, length = struct.unpack_from("<II", raw, pos + 13)
        members, sub = [], end
        while len(members) < count:
            member = intact(raw, sub, end + length)
            assert member and member[0] != BATCH, f"{path}: batch at {pos} broken at {sub}"
            members.append((sub, member[0], raw[sub + 13 : member[1]]))
            sub = member[1]
        assert sub == end + length, f"{path}: batch at {pos} ends at {sub}, not {end + length}"
        spec.records += members
        spec.batches.append([offset for offset, _, _ in members])
        pos = sub
    spec.end = pos
    types = [t for _, t, _ in spec.records]
    if kind == COMPACTED:
        # One MANIFEST, first, at offset 32; never a BATCH in a compacted file.
        assert spec.records and spec.records[0][:2] == (32, MANIFEST), path
        assert types.count(MANIFEST) == 1 and not spec.batches, path
        payload = spec.records[0][2]
        (n,) = U32.unpack_from(payload)
        spec.manifest = [U32.unpack_from(payload, 4 + 4 * i)[0] for i in range(n)]
    else:
        assert MANIFEST not in types, path
    return spec


def read_put(spec: SpecFile, offset: int, payload: bytes) -> Put:
    msg_id, priority, deliveries, qlen, hlen = PUT_FIXED.unpack_from(payload)
    assert priority <= 9 and 0 < qlen <= 255
    queue = payload[17 : 17 + qlen]
    assert b"\x00" not in queue
    headers = decode_headers(payload[17 + qlen : 17 + qlen + hlen])
    body = payload[17 + qlen + hlen :]
    size = 13 + len(payload)
    return Put(
        msg_id, queue.decode(), priority, deliveries, headers, body, spec.file_id, offset, size
    )


def left_out(files: dict[int, SpecFile]) -> set[int]:
    """The files the MANIFEST rule leaves out ("MANIFEST")."""
    on_disk, out = set(files), set()
    for file_id in sorted(f for f, s in files.items() if s.kind == COMPACTED):
        if file_id in out:
            continue  # left out by an older one's rule: not judged
        victims = files[file_id].manifest
        if victims is None:
            continue  # a damaged MANIFEST: nothing is left out on its account
        if all(v in on_disk for v in victims):
            out.add(file_id)  # an unfinished compaction
        else:
            out |= {v for v in victims if v in on_disk}
    return out


@dataclass
class SpecStore:
    """What a store's data files say ("Which messages are live")."""

    files: dict[int, SpecFile]
    left_out: set[int]
    live: dict[int, Put] = field(default_factory=dict)
    deliveries: dict[int, int] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)
    highest_id: int = 0  # of any PUT or ACK record

    def queue(self, name: str) -> list[tuple[int, bytes, dict[str, str], int, int]]:
        """A queue's live messages in delivery order: highest priority, then lowest id."""
        mine = [p for p in self.live.values() if p.queue == name]
        mine.sort(key=lambda p: (-p.priority, p.id))
        return [(p.id, p.body, p.headers, p.priority, self.deliveries[p.id]) for p in mine]

    def queues(self) -> set[str]:
        return {p.queue for p in self.live.values()}


def read_store(path: Path) -> SpecStore:
    names = [n for n in os.listdir(path) if len(n) == 14 and n.endswith(".log")]
    files = {spec.file_id: spec for spec in (read_data_file(path / n) for n in names)}
    store = SpecStore(files, left_out(files))
    puts: dict[int, Put] = {}
    delivered: dict[int, int] = defaultdict(int)
    for file_id in sorted(set(files) - store.left_out):  # ascending id: the first copy kept
        spec = files[file_id]
        for offset, rtype, payload in spec.records:
            if rtype == PUT:
                put = read_put(spec, offset, payload)
                puts.setdefault(put.id, put)
                store.highest_id = max(store.highest_id, put.id)
            elif rtype == ACK:
                (msg_id,) = U64.unpack_from(payload)
                store.acked.add(msg_id)
                store.highest_id = max(store.highest_id, msg_id)
            elif rtype == DELIVER:
                msg_id, count = struct.unpack_from("<QH", payload)
                delivered[msg_id] = max(delivered[msg_id], count)
    store.live = {i: p for i, p in puts.items() if i not in store.acked}
    store.deliveries = {i: max(p.deliveries, delivered[i]) for i, p in store.live.items()}
    return store


# The index ("The index"): five named LMDB databases, keys big-endian.
ORDER_KEY = struct.Struct(">IBQ")
LIVE_ENTRY = struct.Struct("<BIBIQIHI")
ACKED_ENTRY = struct.Struct("<BII")
FILE_VALUE = struct.Struct("<BBQQQQQdQI")


TABLES = ("meta", "queues", "order", "msgs", "files")


def read_index(path: Path) -> dict[str, dict[bytes, bytes]]:
    env = lmdb.open(str(path / "index"), readonly=True, lock=False, max_dbs=5)
    try:
        tables = {}
        with env.begin() as txn:
            # The main database names the five tables and nothing else.
            assert sorted(k.decode() for k, _ in txn.cursor()) == sorted(TABLES)
            for name in TABLES:
                db = env.open_db(name.encode(), txn=txn, create=False)
                tables[name] = dict(txn.cursor(db=db))
        return tables
    finally:
        env.close()


def check_index(path: Path, spec: SpecStore) -> dict[str, int]:
    """The index of a cleanly closed store, as "The index" describes it, agrees with
    the data files. Returns how many entries of some kinds it checked."""
    seen: dict[str, int] = defaultdict(int)
    assert sorted(os.listdir(path / "index")) == ["data.mdb"]  # no lock.mdb
    t = read_index(path)
    meta = t["meta"]
    assert U64.unpack(meta[b"format"]) == (2,)
    assert U64.unpack(meta[b"clean"]) == (1,)
    assert U64.unpack(meta[b"next_id"])[0] > spec.highest_id
    assert U64.unpack(meta[b"next_file"])[0] > max(spec.files)
    if os.path.exists("/proc/sys/kernel/random/boot_id"):
        assert len(meta[b"boot_id"]) == 36
    cp_file, cp_offset = struct.unpack("<IQ", meta[b"checkpoint"])
    head = max(f for f, s in spec.files.items() if s.kind == JOURNAL)
    assert (cp_file, cp_offset) == (head, spec.files[head].size)  # closed: no tail
    queue_ids = {}
    for name, value in t["queues"].items():
        qid, live = struct.unpack("<IQ", value)
        queue_ids[name.decode()] = qid
        assert live == len(spec.queue(name.decode())), name
    assert len(set(queue_ids.values())) == len(queue_ids)
    assert U64.unpack(meta[b"next_queue"])[0] > max(queue_ids.values(), default=0)
    assert set(t["order"].values()) <= {b""}
    assert set(t["order"]) == {
        ORDER_KEY.pack(queue_ids[p.queue], 9 - p.priority, p.id) for p in spec.live.values()
    }
    records = {
        (f, off): (rtype, payload)
        for f, s in spec.files.items()
        for off, rtype, payload in s.records
    }
    live_at: dict[int, list[int]] = defaultdict(list)  # file -> sizes of live PUTs there
    dead_puts: dict[int, int] = defaultdict(int)
    marks: dict[int, int] = defaultdict(int)
    for key, value in t["msgs"].items():
        (msg_id,) = struct.unpack(">Q", key)
        if value[0] == 1:
            _, qid, prio, f, off, size, count, deliver_file = LIVE_ENTRY.unpack(value)
            put = spec.live[msg_id]
            assert (qid, prio, count) == (
                queue_ids[put.queue],
                put.priority,
                spec.deliveries[msg_id],
            )
            rtype, payload = records[(f, off)]
            assert (rtype, U64.unpack_from(payload)[0], 13 + len(payload)) == (PUT, msg_id, size)
            live_at[f].append(size)
            if deliver_file == 0:
                assert PUT_FIXED.unpack_from(payload)[2] == count  # the PUT carries it
            else:
                seen["deliver_file"] += 1
                marks[deliver_file] += 1
                delivers = [
                    struct.unpack_from("<QH", p)
                    for _, rt, p in spec.files[deliver_file].records
                    if rt == DELIVER
                ]
                assert (msg_id, count) in delivers, (msg_id, count, deliver_file)
        else:
            assert value[0] == 2 and msg_id in spec.acked and msg_id not in spec.live
            _, put_file, ack_file = ACKED_ENTRY.unpack(value)
            assert put_file != ack_file
            assert any(
                rt == PUT and U64.unpack_from(p)[0] == msg_id
                for _, rt, p in spec.files[put_file].records
            )
            assert any(
                rt == ACK and U64.unpack_from(p)[0] == msg_id
                for _, rt, p in spec.files[ack_file].records
            )
            seen["acked"] += 1
            dead_puts[put_file] += 1
            marks[ack_file] += 1
    assert sum(len(v) for v in live_at.values()) == len(spec.live)
    accounts = {}
    for key, value in t["files"].items():
        (file_id,) = struct.unpack(">I", key)
        kind, retired, size, live_bytes, live_msgs, needed, dead, created, floor, pairs = (
            FILE_VALUE.unpack_from(value)
        )
        assert time.time() - 600 < created <= time.time()  # Unix seconds
        acked_in = [struct.unpack_from("<II", value, 62 + 8 * i) for i in range(pairs)]
        assert len(value) == 62 + 8 * pairs
        assert [a for a, _ in acked_in] == sorted({a for a, _ in acked_in})
        assert all(count > 0 for _, count in acked_in)
        for ack_file, count in acked_in:
            seen["acked_in"] += count
            marks[ack_file] += count
        accounts[file_id] = (kind, retired, size, live_bytes, live_msgs, needed, dead, floor)
    assert set(accounts) == set(spec.files)
    for file_id, spec_file in spec.files.items():
        kind, retired, size, live_bytes, live_msgs, needed, dead, floor = accounts[file_id]
        assert (kind, retired, size, floor) == (
            spec_file.kind,
            0,
            spec_file.size,
            spec_file.id_floor,
        )
        assert (live_msgs, live_bytes) == (len(live_at[file_id]), sum(live_at[file_id]))
        assert (needed, dead) == (marks[file_id], dead_puts[file_id]), file_id
    return seen


def store_view(
    store: msgcask.Store,
) -> dict[str, list[tuple[int, bytes, dict[str, str], int, int]]]:
    return {
        name: [
            (m.id, bytes(m.body), dict(m.headers), m.priority, m.deliveries)
            for m in store.queue(name).browse()
        ]
        for name in store.queues()
    }


def spec_view(spec: SpecStore) -> dict[str, list[tuple[int, bytes, dict[str, str], int, int]]]:
    return {name: spec.queue(name) for name in spec.queues()}


# -- stores written through the public API ----------------------------------------------


def busy_store(path: Path) -> dict[str, int]:
    """Every kind of record: puts with headers and priorities, batches (put_many, a
    transaction, dead-lettering), deliveries, acks, nacks, a purge, and a
    compaction pass whose output replaced sealed files. Returns counts of what
    happened, for the tests to check there was something to read."""
    done: dict[str, int] = defaultdict(int)
    with msgcask.open(path, max_file_size=64 * 1024, compaction_interval=None) as store:
        orders = store.queue("orders", max_deliveries=2)
        scratch = store.queue("scratch")
        for i in range(300):
            headers = {"n": str(i), "ké": "vé" * (i % 3)} if i % 4 == 0 else None
            orders.put(b"order %d " % i + b"p" * 400, headers=headers, priority=i % 10)
        orders.put_many([b"many %d" % i for i in range(20)], headers={"batch": "1"}, priority=6)
        for i in range(50):
            scratch.put(b"scratch %d" % i)
        kept = []
        for i in range(300):
            m = orders.get(block=False)
            if i % 10 == 0:
                kept.append(m)  # delivered, never acked
            elif i % 10 == 1:
                orders.nack(m)  # available again, its count kept
            else:
                orders.ack(m)

        def dead_letter() -> None:
            # A second delivery, then a nack, moves a message to DLQ.orders.
            m = orders.get(block=False)
            if m.deliveries < 2:
                orders.nack(m)
                m = orders.get(block=False)
            orders.nack(m)
            done["dead letters"] += 1

        def transaction(n: int) -> None:
            with store.transaction() as tx:
                tx.put("invoices", b"invoice %d" % n, headers={"for": "order"}, priority=1)
                tx.ack(orders.get(block=False))

        for _ in range(3):
            dead_letter()
        transaction(1)
        # Enough more that the file with those DELIVER records is sealed: the pass
        # then carries the ones still needed.
        filler = store.queue("filler")
        for _ in range(4):
            filler.put_many([b"f" * 400 for _ in range(50)])
        for _ in range(200):
            filler.ack(filler.get(block=False))
        done["compactions"] = store.compact(threshold=1.0).files_rewritten
        assert scratch.purge() == 50
        # Batches in the journal after the pass: put_many, a transaction, a dead letter.
        orders.put_many([b"after %d" % i for i in range(5)], priority=9)
        transaction(2)
        dead_letter()
        for m in kept[:5]:
            orders.ack(m)
        # Acks and deliveries in a later journal file than the PUT records they name:
        # acked_in pairs, and LIVE entries whose count is in a DELIVER record.
        late = store.queue("late")
        for i in range(200):
            late.put(b"late %d " % i + b"p" * 400)
        for i in range(25):
            m = late.get(block=False)
            if i % 5:
                late.ack(m)
    return done


def test_a_reader_written_from_format_md_agrees_with_the_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    done = busy_store(path)
    spec = read_store(path)
    assert done["compactions"] >= 1
    compacted = [s for s in spec.files.values() if s.kind == COMPACTED]
    assert compacted and all(s.manifest for s in compacted)
    assert any(rt == DELIVER for s in compacted for _, rt, _ in s.records)
    assert sum(len(s.batches) for s in spec.files.values()) >= 3
    assert all(s.end == s.size for s in spec.files.values())  # closed: no zero tail
    assert spec.left_out == set()  # a finished pass deleted its victims
    dead = [p for p in spec.live.values() if p.queue == "DLQ.orders"]
    assert len(dead) == done["dead letters"] == 4
    for copy in dead:
        original = int(copy.headers["x-original-id"])
        assert copy.headers["x-dead-letter-from"] == "orders" and copy.id > original
        assert original not in spec.live and copy.deliveries == 0
    # The last one's batch is still in the journal: the copy's PUT, the original's ACK.
    last = max(dead, key=lambda p: p.id)
    original = int(last.headers["x-original-id"])
    home = spec.files[last.file_id]
    [batch] = [b for b in home.batches if b[0] == last.offset]
    members = [(t, U64.unpack_from(p)[0]) for o, t, p in home.records if o in batch]
    assert members == [(PUT, last.id), (ACK, original)]
    # The store directory holds data files, index/ and LOCK (empty: closed), no more.
    names = sorted(os.listdir(path))
    assert names == sorted([f"{f:010d}.log" for f in spec.files] + ["LOCK", "index"])
    assert (path / "LOCK").read_bytes() == b""
    seen = check_index(path, spec)
    assert seen["deliver_file"] and seen["acked"] and seen["acked_in"], seen
    with msgcask.open(path, compaction_interval=None) as store:
        assert store.recovery.mode == "clean"
        # Queues left empty exist only in the index ("Which messages are live").
        assert {q: m for q, m in store_view(store).items() if m} == spec_view(spec)
        assert set(store.queues()) == spec.queues() | {"scratch", "filler"}
        assert store.stats().live_messages == len(spec.live)
        assert {q: len(store.queue(q)) for q in spec.queues()} == {
            q: len(spec.queue(q)) for q in spec.queues()
        }
        delivered = store.queue("orders").get(block=False)
        assert delivered.id == spec.queue("orders")[0][0]
    # The same files without their index: a rebuild finds what the reader found.
    shutil.rmtree(path / "index")
    with msgcask.open(path, compaction_interval=None) as store:
        assert store.recovery.mode == "rebuild"
        expected = spec_view(spec)
        first = expected["orders"][0]
        expected["orders"][0] = (*first[:4], first[4] + 1)  # the get just above
        assert store_view(store) == expected  # the empty queues are gone with the index
        assert store.queue("x").put(b"x") > spec.highest_id + 2**20  # "Message ids"


@pytest.mark.parametrize("restored", ["every victim", "all victims but one"])
def test_the_reader_and_the_store_apply_the_manifest_rule_alike(
    tmp_path: Path, restored: str
) -> None:
    # A finished pass's victims put back (a backup restored over the store, say): with
    # every victim there the compacted file is an unfinished compaction's and goes;
    # with one missing it is the real home of what it holds and the others go.
    path, before = tmp_path / "store", tmp_path / "before"
    with msgcask.open(path, max_file_size=64 * 1024, compaction_interval=None) as store:
        q = store.queue("q")
        for i in range(400):
            q.put(b"%04d" % i + b"p" * 500, priority=i % 3)
        for i in range(400):
            m = q.get(block=False)
            if i % 8:
                q.ack(m)
    shutil.copytree(path, before)
    with msgcask.open(path, max_file_size=64 * 1024, compaction_interval=None) as store:
        assert store.compact(threshold=1.0).files_rewritten >= 2
    [compacted] = [s for s in read_store(path).files.values() if s.kind == COMPACTED]
    assert compacted.manifest and len(compacted.manifest) >= 2
    back = compacted.manifest if restored == "every victim" else compacted.manifest[1:]
    for victim in back:
        name = f"{victim:010d}.log"
        shutil.copy(before / name, path / name)
    spec = read_store(path)
    expected = {compacted.file_id} if restored == "every victim" else set(back)
    assert spec.left_out == expected
    with msgcask.open(path, compaction_interval=None) as store:
        assert sorted(store.recovery.removed_files) == sorted(expected)
        assert store_view(store) == spec_view(spec)
        assert len(store.queue("q")) == 50


# -- files crafted byte by byte, as format.md lays them out --------------------------------


def write_files(path: Path, files: dict[int, bytes]) -> dict[int, Path]:
    path.mkdir(exist_ok=True)
    out = {}
    for file_id, data in files.items():
        out[file_id] = path / f"{file_id:010d}.log"
        out[file_id].write_bytes(data)
    return out


def browse(store: msgcask.Store, queue: str = "q") -> list[tuple[int, bytes, int]]:
    return [(m.id, bytes(m.body), m.deliveries) for m in store.queue(queue).browse()]


GOOD_HEAD = file_header(2, id_floor=2) + put_record(1, body=b"one")

# On open each header is checked in this order: at least 32 bytes, magic, checksum,
# version, kind, file_id against the name. Each case breaks two of them: the first
# one in that order is the one reported, at its documented offset.
HEADER_CASES = {
    "31 bytes, bad magic": (b"NOTCASK\x00" + bytes(range(1, 24)), "truncated", 0),
    "bad magic, bad checksum": (file_header(1, magic=b"NOTCASK\x00", checksum=7), "magic", 0),
    "bad checksum, newer version": (file_header(1, version=2, checksum=7), "checksum", 0),
    "newer version, unknown kind": (file_header(1, version=2, kind=7), "version", None),
    "unknown kind, another file id": (file_header(9, kind=7), "kind", 10),
    "another file id": (file_header(9), "names file 9", 12),
}


@pytest.mark.parametrize("case", HEADER_CASES, ids=HEADER_CASES.keys())
def test_a_bad_file_header_is_reported_as_the_first_check_in_the_documented_order(
    tmp_path: Path, case: str
) -> None:
    header, said, offset = HEADER_CASES[case]
    content = header + put_record(5) if len(header) == 32 else header  # 31 bytes: all of it
    paths = write_files(tmp_path / "s", {1: content, 2: GOOD_HEAD})
    before = paths[1].read_bytes()
    expected = msgcask.FormatVersionError if offset is None else msgcask.CorruptionError
    with pytest.raises(expected, match=said) as raised:
        msgcask.open(tmp_path / "s", compaction_interval=None)
    assert type(raised.value) is expected
    assert str(paths[1]) in str(raised.value)  # it names the file
    if offset is not None:
        assert isinstance(raised.value, msgcask.CorruptionError)
        assert (raised.value.path, raised.value.offset) == (str(paths[1]), offset)
    assert paths[1].read_bytes() == before  # never guessed at, never repaired


def test_a_newer_version_names_the_file_and_both_versions(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "s", {1: file_header(1, version=3), 2: GOOD_HEAD})
    with pytest.raises(msgcask.FormatVersionError) as raised:
        msgcask.open(tmp_path / "s", compaction_interval=None)
    said = str(raised.value)
    assert str(paths[1]) in said and "version 3" in said and "version 1" in said, said
    assert "Upgrade msgcask to open this store" in said


def test_the_reserved_header_byte_is_ignored_on_read(tmp_path: Path) -> None:
    header = file_header(1, reserved=0xFF)
    write_files(tmp_path / "s", {1: header + put_record(1, body=b"one")})
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.corruptions == []
        assert browse(store) == [(1, b"one", 0)]


@pytest.mark.parametrize(("size", "removed"), [(2 * 2**20, True), (2 * 2**20 + 1, False)])
def test_only_a_newest_file_of_zeros_up_to_2_mib_is_a_torn_creation(
    tmp_path: Path, size: int, removed: bool
) -> None:
    paths = write_files(tmp_path / "s", {1: file_header(1) + put_record(1), 2: bytes(size)})
    if removed:
        with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
            [report] = store.recovery.corruptions
            assert (report.file_id, report.offset, report.length, report.action) == (
                2,
                0,
                size,
                "removed",
            )
            assert [m for m, _, _ in browse(store)] == [1]
        # Gone; its id, the highest, went to the journal file the open started.
        assert read_data_file(paths[2]).kind == JOURNAL
    else:
        with pytest.raises(msgcask.CorruptionError, match="magic"):
            msgcask.open(tmp_path / "s", compaction_interval=None)
        assert paths[2].stat().st_size == size


def test_bytes_past_the_fixed_fields_of_ack_deliver_and_batch_are_ignored(
    tmp_path: Path,
) -> None:
    # "Bytes past the fixed fields of an ACK, DELIVER or BATCH are ignored": such
    # records are intact and do what their fixed fields say.
    members = put_record(3, body=b"three") + put_record(4, body=b"four")
    data = b"".join(
        (
            file_header(1),
            put_record(1, body=b"one"),
            put_record(2, body=b"two"),
            record(ACK, U64.pack(1) + b"more"),
            record(DELIVER, struct.pack("<QH", 2, 6) + b"\xff" * 6),
            record(BATCH, struct.pack("<II", 2, len(members)) + b"\x00\x01\x02"),
            members,
        )
    )
    write_files(tmp_path / "s", {1: data})
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.corruptions == []
        assert browse(store) == [(2, b"two", 6), (3, b"three", 0), (4, b"four", 0)]


@pytest.mark.parametrize(
    ("block", "headers"),
    [
        (b"\x00\x00", {}),  # a count of 0: no headers
        (headers_block([(b"k", b"1"), (b"k", b"2")]), {"k": "2"}),  # a key twice: the last
        (headers_block([(b"cl\xc3\xa9", b"v\xc3\xa9")]), {"clé": "vé"}),
    ],
    ids=["count 0", "a key twice", "UTF-8"],
)
def test_a_valid_headers_block_reads_as_documented(
    tmp_path: Path, block: bytes, headers: dict[str, str]
) -> None:
    write_files(tmp_path / "s", {1: file_header(1) + put_record(1, headers=block)})
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        [m] = store.queue("q").browse()
        assert m.headers == headers and m.body == b"x"


INVALID_BLOCKS = {
    "1 byte": b"\x01",
    "count 0 and a byte left over": b"\x00\x00\x00",
    "a byte left over": headers_block([(b"k", b"v")]) + b"\x00",
    "ends before its count": headers_block([(b"k", b"v")])[:-1],
    "two announced, one there": b"\x02\x00" + headers_block([(b"k", b"v")])[2:],
    "key not UTF-8": headers_block([(b"\xff", b"v")]),
    "value not UTF-8": headers_block([(b"k", b"\xc3")]),
}


@pytest.mark.parametrize("block", INVALID_BLOCKS.values(), ids=INVALID_BLOCKS.keys())
@pytest.mark.parametrize("reader", ["get", "browse"])
def test_an_invalid_headers_block_is_found_when_first_read_and_quarantined(
    tmp_path: Path, block: bytes, reader: str
) -> None:
    # Open does not parse headers blocks: the message counts as live until it is read.
    bad = put_record(1, headers=block, body=b"bad")
    paths = write_files(tmp_path / "s", {1: file_header(1) + bad + put_record(2, body=b"ok")})
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        q = store.queue("q")
        assert store.recovery.corruptions == [] and len(q) == 2
        if reader == "get":
            assert q.get(block=False).id == 2
        else:
            assert [m.id for m in q.browse()] == [2]
        [report] = store.stats().corruptions
        assert (report.path, report.offset, report.action) == (str(paths[1]), 32, "quarantined")
        assert len(q) == 1  # the index forgot message 1
    # A rebuild finds its intact PUT record again (and quarantines it again when read).
    shutil.rmtree(tmp_path / "s" / "index")
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.corruptions == [] and len(store.queue("q")) == 2


BLOCK = 2**20  # ID_BLOCK_AFTER_CRASH


@pytest.mark.parametrize(
    ("extra", "floor", "next_id"),
    [
        (b"", 1, 8 + BLOCK),  # the worked case: highest id 7, floor at most 8
        (b"", 8, 8 + BLOCK),
        (record(ACK, U64.pack(20)), 1, 21 + BLOCK),  # an ACK's id counts
        (record(DELIVER, struct.pack("<QH", 50, 1)), 1, 8 + BLOCK),  # a DELIVER's does not
        (b"", 30, 30 + BLOCK),  # the highest id_floor of any file header
    ],
    ids=["highest id", "floor 8", "an ACK", "a DELIVER", "a floor above"],
)
def test_a_rebuild_numbers_new_messages_as_documented(
    tmp_path: Path, extra: bytes, floor: int, next_id: int
) -> None:
    puts = b"".join(put_record(i, body=b"%d" % i) for i in range(1, 8))
    write_files(tmp_path / "s", {1: file_header(1, id_floor=floor) + puts + extra})
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.mode == "rebuild"
        assert [m for m, _, _ in browse(store)] == list(range(1, 8))  # ACK/DELIVER of no PUT
        assert store.queue("q").put(b"new") == next_id


def test_a_rebuild_keeps_the_put_copy_of_the_lowest_numbered_file(tmp_path: Path) -> None:
    # Two copies of message 1 both kept (victim 9 is gone, file 1 is no victim): their
    # counts differ, and the copy in file 1 is read first.
    write_files(
        tmp_path / "s",
        {
            1: file_header(1) + put_record(1, deliveries=2, body=b"one"),
            2: file_header(2, kind=COMPACTED, id_floor=2)
            + record(MANIFEST, struct.pack("<II", 1, 9))
            + put_record(1, deliveries=5, body=b"one"),
        },
    )
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.removed_files == []
        assert browse(store) == [(1, b"one", 2)]


def _manifest(victims: list[int]) -> bytes:
    return record(MANIFEST, struct.pack(f"<I{len(victims)}I", len(victims), *victims))


def _journal_and_copy(copy: bytes) -> dict[int, bytes]:
    """Journal file 1 holding messages 1 and 2, a compacted file 2 (``copy`` after its
    header), journal file 3 holding message 3."""
    return {
        1: file_header(1) + put_record(1, body=b"one") + put_record(2, body=b"two"),
        2: file_header(2, kind=COMPACTED, id_floor=3) + copy,
        3: file_header(3, id_floor=3) + put_record(3, body=b"three"),
    }


def test_a_manifest_naming_no_victim_makes_its_file_an_unfinished_copy(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "s", _journal_and_copy(_manifest([]) + put_record(9)))
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.removed_files == [2]
        assert [m for m, _, _ in browse(store)] == [1, 2, 3]
    assert not paths[2].exists()


@pytest.mark.parametrize("victims", [65_531, 65_532])
def test_a_manifest_must_end_within_256_kib_of_the_file_header(
    tmp_path: Path, victims: int
) -> None:
    # 13 + 4 + 4 x 65,531 = 262,141 bytes fit in 256 KiB; one victim more does not.
    # The first victim, file 1, is here and the others are gone: an intact MANIFEST
    # makes file 2 the real home of message 2 and deletes file 1.
    manifest = _manifest([1] + [100_000 + i for i in range(victims - 1)])
    assert (len(manifest) <= 256 * 1024) == (victims == 65_531)
    paths = write_files(tmp_path / "s", _journal_and_copy(manifest + put_record(2, body=b"two")))
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        if victims == 65_531:
            assert store.recovery.removed_files == [1]
            assert [m for m, _, _ in browse(store)] == [2, 3]
        else:
            # Damaged: nothing is deleted for it, and the file is reported kept from
            # offset 32 on (every byte after its header).
            assert store.recovery.removed_files == []
            assert [m for m, _, _ in browse(store)] == [1, 2, 3]
            [report] = [c for c in store.recovery.corruptions if c.action == "kept"]
            size = paths[2].stat().st_size
            assert (report.file_id, report.offset, report.length) == (2, 32, size - 32)


@pytest.mark.parametrize("first", ["a PUT", "damage"])
def test_a_manifest_that_is_not_the_first_record_is_ignored(tmp_path: Path, first: str) -> None:
    # It names file 1, which is here: were it read, file 2 would be an unfinished copy
    # and removed. Not first, it is ignored and the MANIFEST counts as damaged.
    lead = put_record(4, body=b"four") if first == "a PUT" else b"\xa5" * 20
    paths = write_files(tmp_path / "s", _journal_and_copy(lead + _manifest([1])))
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.removed_files == []
        kept = [c for c in store.recovery.corruptions if c.action == "kept"]
        size = paths[2].stat().st_size
        assert [(c.file_id, c.offset, c.length) for c in kept] == [(2, 32, size - 32)]
        skipped = [
            (c.offset, c.length) for c in store.recovery.corruptions if c.action == "skipped"
        ]
        assert skipped == ([] if first == "a PUT" else [(32, 20)])
        assert paths[2].exists()
        assert [m for m, _, _ in browse(store)] == ([1, 2, 3, 4] if first == "a PUT" else [1, 2, 3])


def test_a_batch_in_a_compacted_file_is_read_as_in_a_journal_file(tmp_path: Path) -> None:
    members = put_record(5, body=b"five") + put_record(6, body=b"six")
    batch = record(BATCH, struct.pack("<II", 2, len(members))) + members
    torn = record(BATCH, struct.pack("<II", 2, len(members))) + put_record(7) + b"\x01" * 9
    copy = _manifest([9]) + batch + torn + put_record(8, body=b"eight")
    write_files(tmp_path / "s", _journal_and_copy(copy))
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.removed_files == []
        assert [m for m, _, _ in browse(store)] == [1, 2, 3, 5, 6, 7, 8]
        [damage] = store.recovery.corruptions
        assert (damage.file_id, damage.reason, damage.action) == (
            2,
            "damaged record inside a batch",
            "skipped",
        )


def test_the_id_of_an_unfinished_compacted_file_is_handed_out_again(tmp_path: Path) -> None:
    # File 3, the highest, is an unfinished compaction's copy (both its victims are
    # here): the rebuild removes it, and the journal file the open then starts is 3.
    files = {
        1: file_header(1) + put_record(1),
        2: file_header(2, id_floor=2) + put_record(2),
        3: file_header(3, kind=COMPACTED, id_floor=3) + _manifest([1, 2]) + put_record(1),
    }
    paths = write_files(tmp_path / "s", files)
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.removed_files == [3]
        store.queue("q").put(b"new")
    spec = read_data_file(paths[3])
    assert spec.kind == JOURNAL and [t for _, t, _ in spec.records] == [PUT]


def test_open_deletes_leftover_data_files_being_created(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with msgcask.open(path, compaction_interval=None) as store:
        store.queue("q").put(b"x")
    (path / "0000000007.log.tmp").write_bytes(file_header(7))
    (path / "notes.tmp").write_bytes(b"mine")
    with msgcask.open(path, compaction_interval=None) as store:
        assert len(store.queue("q")) == 1
    assert not (path / "0000000007.log.tmp").exists()
    assert (path / "notes.tmp").read_bytes() == b"mine"


def test_the_lock_file_holds_the_pid_while_open_and_nothing_after(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with msgcask.open(path, compaction_interval=None):
        assert (path / "LOCK").read_bytes() == b"%d\n" % os.getpid()
    assert (path / "LOCK").read_bytes() == b""


def test_a_nack_writes_no_record(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with msgcask.open(path, compaction_interval=None) as store:
        q = store.queue("q", max_deliveries=5)
        q.put(b"x")
        m = q.get(block=False)
        head = path / "0000000001.log"
        before = read_data_file(head).records
        q.nack(m)
        assert read_data_file(head).records == before
    with msgcask.open(path, compaction_interval=None) as store:
        assert browse(store) == [(1, b"x", 1)]


@pytest.mark.parametrize(
    ("max_file_size", "messages", "per_append"),
    [(2**20, 25_000, 10_000), (64 * 1024, 4_000, (64 * 1024 - 32) // 21)],
)
def test_purge_writes_plain_acks_at_most_10000_an_append_that_fit_a_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    max_file_size: int,
    messages: int,
    per_append: int,
) -> None:
    from msgcask.store.writer import Journal

    appends: list[bytes] = []
    real = Journal.append

    def append(self: Journal, data: bytes, **kw: bool) -> tuple[int, int]:
        appends.append(bytes(data))
        return real(self, data, **kw)

    path = tmp_path / "s"
    with msgcask.open(path, max_file_size=max_file_size, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(0, messages, 1000):
            q.put_many([b"m"] * 1000)
        monkeypatch.setattr(Journal, "append", append)
        assert q.purge() == messages
    counts = []
    for data in appends:
        pos, acks = 0, 0
        while pos < len(data):
            rtype, end = intact(data, pos, len(data)) or (0, 0)
            assert rtype == ACK, "a purge writes ACK records only, without a BATCH"
            acks, pos = acks + 1, end
        counts.append(acks)
    assert max(counts) == per_append and sum(counts) == messages
    for spec in read_store(path).files.values():
        assert spec.size <= max_file_size
        in_batches = {o for b in spec.batches for o in b}
        assert not any(t == ACK and o in in_batches for o, t, _ in spec.records)


def test_a_compacted_file_with_a_damaged_manifest_that_a_newer_one_replaced_goes(
    tmp_path: Path,
) -> None:
    # File 3's MANIFEST names file 2, whose own MANIFEST is damaged, and file 9, which
    # is gone: file 3 is the real home of what file 2 held, so file 2 is left out like
    # any victim, and not reported as a file kept whole.
    damaged = bytearray(_manifest([1]))
    damaged[20] ^= 0x01
    paths = write_files(
        tmp_path / "s",
        {
            1: file_header(1) + put_record(1, body=b"one"),
            2: file_header(2, kind=COMPACTED, id_floor=2) + damaged + put_record(2, body=b"two"),
            3: file_header(3, kind=COMPACTED, id_floor=3)
            + _manifest([2, 9])
            + put_record(2, body=b"two"),
            4: file_header(4, id_floor=3) + put_record(3, body=b"three"),
        },
    )
    assert left_out(
        {f: read_data_file(p) for f, p in paths.items() if f != 2}
        | {2: SpecFile(2, COMPACTED, 2, 0, [], manifest=None)}
    ) == {2}
    problems = scan_files(str(tmp_path / "s")).problems  # msgcask check
    assert not [p for p in problems if "MANIFEST" in p], problems
    with msgcask.open(tmp_path / "s", compaction_interval=None) as store:
        assert store.recovery.removed_files == [2]
        assert store.recovery.corruptions == []
        assert [m for m, _, _ in browse(store)] == [1, 2, 3]
    assert not paths[2].exists()


def test_a_write_head_may_end_a_chunk_past_max_file_size_but_its_records_never_do(
    tmp_path: Path,
) -> None:
    # Chunks of min(1 MiB, max_file_size) from a page boundary: with 1.5 MiB files the
    # second chunk, mapped from the page where the record that needs it starts, ends
    # near 2 MiB. Sealing the file cuts it back to its last record.
    size, chunk = 3 * 2**19, 2**20
    path = tmp_path / "s"
    first, longest = path / "0000000001.log", 0
    with msgcask.open(path, max_file_size=size, sync="never", compaction_interval=None) as store:
        q = store.queue("q")
        while not (path / "0000000002.log").exists():
            q.put(b"x" * 1000)
            longest = max(longest, first.stat().st_size)
        head = read_data_file(path / "0000000002.log")
        assert head.end < head.size <= chunk  # an open head: its zero tail
    assert size < longest <= size + chunk
    sealed = read_data_file(first)
    assert sealed.end == sealed.size <= size
    assert sealed.size + 1043 > size  # the next put (1,043 bytes) did not fit


def test_a_replay_keeps_the_put_copy_the_index_points_at(tmp_path: Path) -> None:
    # A second PUT record of message 1 after the checkpoint, with another count: the
    # index already has the message, and keeps the copy it points at.
    path = tmp_path / "s"
    with msgcask.open(path, compaction_interval=None) as store:
        assert store.queue("q").put(b"one") == 1
    env = lmdb.open(str(path / "index"), max_dbs=5, lock=False)
    try:
        with env.begin(write=True) as txn:
            txn.put(b"clean", U64.pack(0), db=env.open_db(b"meta", txn=txn, create=False))
    finally:
        env.close()
    [head] = sorted(path.glob("*.log"))
    with head.open("ab") as f:
        f.write(put_record(1, body=b"one", deliveries=9))
    with msgcask.open(path, compaction_interval=None) as store:
        assert store.recovery.mode == "replay" and store.recovery.records == 1
        assert [(m.id, m.body, m.deliveries) for m in store.queue("q").browse()] == [(1, b"one", 0)]
