"""index/accounting.py: the per-file record and its change-only flush."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msgcask.index.accounting import Accounting, FileAccount
from msgcask.index.keys import FILE_KEY

U64 = st.integers(0, 2**64 - 1)


class Recorder:
    """Stands in for the LMDB table: records every put and delete."""

    def __init__(self) -> None:
        self.puts: list[tuple[bytes, bytes]] = []
        self.deletes: list[bytes] = []
        self.table: dict[bytes, bytes] = {}

    def put(self, key: bytes, value: bytes) -> None:
        self.puts.append((key, value))
        self.table[key] = value

    def delete(self, key: bytes) -> None:
        self.deletes.append(key)
        del self.table[key]

    def clear(self) -> None:
        self.puts.clear()
        self.deletes.clear()

    def flush(self, acct: Accounting) -> None:
        self.clear()
        acct.flush(self.put, self.delete)


@given(
    file_id=st.integers(1, 2**32 - 1),
    kind=st.sampled_from([0, 1]),
    size=U64,
    live_bytes=U64,
    live_messages=U64,
    needed_marks=U64,
    dead_puts=U64,
    created=st.floats(allow_nan=False),
    retired=st.booleans(),
    id_floor=U64,
    acked_in=st.dictionaries(st.integers(1, 2**32 - 1), st.integers(1, 2**32 - 1), max_size=5),
)
def test_file_account_round_trips(
    file_id: int,
    kind: int,
    size: int,
    live_bytes: int,
    live_messages: int,
    needed_marks: int,
    dead_puts: int,
    created: float,
    retired: bool,
    id_floor: int,
    acked_in: dict[int, int],
) -> None:
    a = FileAccount(
        file_id,
        kind,
        size,
        live_bytes,
        live_messages,
        needed_marks,
        dead_puts,
        created,
        retired,
        id_floor,
        acked_in,
    )
    assert FileAccount.unpack(file_id, a.pack()) == a


def test_counted_acks_pack_in_one_order_whatever_the_dict_order() -> None:
    # flush() compares packed forms: the same counts must pack the same.
    a = FileAccount(1, 0, acked_in={3: 1, 2: 5})
    b = FileAccount(1, 0, acked_in={2: 5, 3: 1})
    assert a.pack() == b.pack()


def test_a_file_account_with_missing_pairs_is_refused() -> None:
    packed = FileAccount(1, 0, acked_in={2: 5, 3: 1}).pack()
    with pytest.raises(ValueError, match="1 pairs, header says 2"):
        FileAccount.unpack(1, packed[:-8])


def test_reclaimable_means_no_live_message_and_no_needed_mark() -> None:
    assert FileAccount(1, 0).reclaimable
    assert not FileAccount(1, 0, live_messages=1, live_bytes=10).reclaimable
    assert not FileAccount(1, 0, needed_marks=1).reclaimable
    # Dead PUT records alone do not keep a file: deleting it releases their ACKs.
    assert FileAccount(1, 0, dead_puts=3).reclaimable


def test_first_flush_writes_every_record() -> None:
    acct = Accounting()
    for f in (1, 2, 3):
        acct.add(FileAccount(f, 0, size=32))
    rec = Recorder()
    rec.flush(acct)
    assert sorted(k for k, _ in rec.puts) == [FILE_KEY.pack(f) for f in (1, 2, 3)]
    assert rec.deletes == []


def test_flush_writes_only_changed_records() -> None:
    acct = Accounting()
    for f in (1, 2, 3):
        acct.add(FileAccount(f, 0, size=32))
    rec = Recorder()
    rec.flush(acct)
    rec.flush(acct)
    assert rec.puts == [] and rec.deletes == []
    acct[2].live_bytes += 100
    acct[2].live_messages += 1
    rec.flush(acct)
    assert rec.puts == [(FILE_KEY.pack(2), acct[2].pack())]
    # A change that is undone before the flush writes nothing.
    acct[3].needed_marks += 1
    acct[3].needed_marks -= 1
    rec.flush(acct)
    assert rec.puts == []


def test_flush_deletes_forgotten_records_once() -> None:
    acct = Accounting()
    acct.add(FileAccount(1, 0))
    acct.add(FileAccount(2, 1))
    rec = Recorder()
    rec.flush(acct)
    acct.forget(1)
    rec.flush(acct)
    assert rec.deletes == [FILE_KEY.pack(1)] and rec.puts == []
    rec.flush(acct)
    assert rec.deletes == []
    assert rec.table == {FILE_KEY.pack(2): acct[2].pack()}


def test_forgetting_an_unwritten_record_deletes_nothing() -> None:
    acct = Accounting()
    acct.add(FileAccount(5, 0))
    acct.forget(5)
    rec = Recorder()
    rec.flush(acct)
    assert rec.puts == [] and rec.deletes == []


def test_loaded_accounting_flushes_nothing_until_changed() -> None:
    acct = Accounting()
    for f in (1, 2):
        acct.add(FileAccount(f, 0, size=100, live_bytes=50, live_messages=2, created=1.5))
    rec = Recorder()
    rec.flush(acct)
    loaded = Accounting.load(sorted(rec.table.items()))
    assert loaded.files == acct.files
    rec.flush(loaded)
    assert rec.puts == [] and rec.deletes == []
    loaded[1].retired = True
    rec.flush(loaded)
    assert rec.puts == [(FILE_KEY.pack(1), loaded[1].pack())]
