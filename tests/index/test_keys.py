"""index/keys.py: the byte layout of index keys and values.

LMDB sorts keys bytewise, so delivery order is only right if the packed order keys sort
exactly like (queue, priority high-first, id).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msgcask.index import keys
from msgcask.index.keys import STATE_ACKED, STATE_LIVE, Acked, Live

U8 = st.integers(0, 2**8 - 1)
U16 = st.integers(0, 2**16 - 1)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
PRIORITY = st.integers(0, 9)


@given(st.lists(st.tuples(U32, PRIORITY, U64), min_size=2, max_size=50))
def test_order_keys_sort_by_queue_then_priority_high_first_then_id(
    entries: list[tuple[int, int, int]],
) -> None:
    by_bytes = sorted(entries, key=lambda e: keys.order_key(*e))
    by_meaning = sorted(entries, key=lambda e: (e[0], -e[1], e[2]))
    assert by_bytes == by_meaning


@given(U32, PRIORITY, U64)
def test_order_key_gives_back_its_id_and_starts_with_the_queue_prefix(
    qid: int, priority: int, msg_id: int
) -> None:
    key = keys.order_key(qid, priority, msg_id)
    assert keys.order_key_id(key) == msg_id
    assert key.startswith(keys.ORDER_PREFIX.pack(qid))
    assert len(key) == 4 + 1 + 8


@given(st.lists(U64, min_size=2, max_size=50, unique=True))
def test_message_keys_sort_by_id(ids: list[int]) -> None:
    assert sorted(ids, key=keys.msg_key) == sorted(ids)


@given(
    state=st.just(STATE_LIVE),
    qid=U32,
    priority=PRIORITY,
    file_id=U32,
    offset=U64,
    size=U32,
    deliveries=U16,
    deliver_file=U32,
)
def test_live_entry_round_trips(
    state: int,
    qid: int,
    priority: int,
    file_id: int,
    offset: int,
    size: int,
    deliveries: int,
    deliver_file: int,
) -> None:
    entry = Live(state, qid, priority, file_id, offset, size, deliveries, deliver_file)
    assert keys.unpack_msg(keys.pack_live(entry)) == entry


@given(U32, U32)
def test_acked_entry_round_trips(put_file: int, ack_file: int) -> None:
    got = keys.unpack_msg(keys.pack_acked(put_file, ack_file))
    assert got == Acked(STATE_ACKED, put_file, ack_file)
    assert isinstance(got, Acked)


def test_states_are_distinct_on_disk() -> None:
    # The first byte tells the entry kinds apart; the values never change meaning.
    assert (STATE_LIVE, STATE_ACKED) == (1, 2)
    live = keys.pack_live(Live(STATE_LIVE, 1, 4, 1, 32, 10, 0, 0))
    assert live[0] == STATE_LIVE and keys.pack_acked(1, 2)[0] == STATE_ACKED


@pytest.mark.parametrize("offset", [0, 2**32, 2**64 - 1])
def test_checkpoint_round_trips(offset: int) -> None:
    assert keys.CHECKPOINT.unpack(keys.CHECKPOINT.pack(7, offset)) == (7, offset)
