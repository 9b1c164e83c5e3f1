"""Every bad call gets a clear error and changes nothing (design brief, guarantee 9).

Each test records the store's observable state (queues, messages in browse order,
live count, data file sizes) before the bad call and compares it afterwards, so a call
that raises *after* writing something is caught as well as one that does not raise.
"""

from __future__ import annotations

import copy
import errno
import os
import pickle
import re
import struct
import threading
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import lmdb
import pytest
import xxhash

import msgcask
from msgcask.options import Options
from msgcask.store import codec
from msgcask.store import format as fmt

Snapshot = Callable[..., dict[str, Any]]
BadCall = Callable[[msgcask.Store, Any], object]

SMALL_FILE = 64 * 1024  # the smallest max_file_size the store accepts
HEADER_SIZE = 32
VERSION_OFFSET = 8  # u16 LE after the 8-byte magic
HEADER_CHECKSUM_OFFSET = 24  # xxh3_64 of bytes 0..24, u64 LE


@pytest.fixture
def seeded(store: msgcask.Store) -> tuple[msgcask.Store, Any]:
    """A store with a little state, so that "changes nothing" has something to change."""
    q = store.queue("orders")
    q.put(b"first", headers={"k": "v"}, priority=3)
    q.put(b"second", priority=7)
    store.queue("other").put(b"elsewhere")
    return store, q


def _huge_name() -> str:
    return "x" * 256


BAD_TYPE_CALLS: dict[str, BadCall] = {
    "body_str": lambda s, q: q.put("text"),
    "body_int": lambda s, q: q.put(5),
    "body_none": lambda s, q: q.put(None),
    "body_list": lambda s, q: q.put([b"a"]),
    "headers_list": lambda s, q: q.put(b"x", headers=[("k", "v")]),
    "headers_str": lambda s, q: q.put(b"x", headers="k=v"),
    "headers_int_value": lambda s, q: q.put(b"x", headers={"k": 1}),
    "headers_bytes_value": lambda s, q: q.put(b"x", headers={"k": b"v"}),
    "headers_int_key": lambda s, q: q.put(b"x", headers={1: "v"}),
    "priority_str": lambda s, q: q.put(b"x", priority="4"),
    "priority_float": lambda s, q: q.put(b"x", priority=4.0),
    "name_int": lambda s, q: s.queue(123),
    "name_bytes": lambda s, q: s.queue(b"orders"),
    "name_none": lambda s, q: s.queue(None),
    "handle_name_bytes": lambda s, q: msgcask.Queue(s, b"orders").put(b"x"),
    "handle_of_no_store": lambda s, q: msgcask.Queue("store", "orders"),
    "transaction_of_no_store": lambda s, q: msgcask.Transaction("store").put("orders", b"x"),
    "max_deliveries_str": lambda s, q: s.queue("new", max_deliveries="3"),
    "max_deliveries_float": lambda s, q: s.queue("new", max_deliveries=1.5),
    "dead_letter_queue_int": lambda s, q: s.queue("new", max_deliveries=2, dead_letter_queue=7),
    "put_many_not_list": lambda s, q: q.put_many(b"ab"),
    "put_many_bad_item": lambda s, q: q.put_many([b"ok", "not bytes", b"ok"]),
    "put_many_bad_headers": lambda s, q: q.put_many([b"a"], headers={"k": 1}),
    "selector_not_callable": lambda s, q: q.get(block=False, selector="k=v"),
    # Refused before looking: with no message to run it on, it would pass unseen.
    "selector_not_callable_no_message": lambda s, q: msgcask.Queue(s, "none").get(
        block=False, selector="k=v"
    ),
    "tx_put_body_str": lambda s, q: _in_tx(s, lambda tx: tx.put("orders", "text")),
    "tx_put_name_int": lambda s, q: _in_tx(s, lambda tx: tx.put(5, b"x")),
    "delete_queue_int": lambda s, q: s.delete_queue(5),
    "get_block_str": lambda s, q: q.get(block="no"),
    "get_timeout_str": lambda s, q: q.get(block=False, timeout="1"),
    "tx_ack_str": lambda s, q: _in_tx(s, lambda tx: tx.ack("1")),
    "tx_ack_float": lambda s, q: _in_tx(s, lambda tx: tx.ack(1.0)),
    "tx_ack_bool": lambda s, q: _in_tx(s, lambda tx: tx.ack(True)),
}

BAD_VALUE_CALLS: dict[str, BadCall] = {
    "priority_negative": lambda s, q: q.put(b"x", priority=-1),
    "priority_ten": lambda s, q: q.put(b"x", priority=10),
    "priority_huge": lambda s, q: q.put(b"x", priority=2**64),
    "name_empty": lambda s, q: s.queue(""),
    "name_256_ascii": lambda s, q: s.queue(_huge_name()),
    # 128 two-byte characters: 128 characters but 256 UTF-8 bytes.
    "name_256_utf8_bytes": lambda s, q: s.queue("\u00e9" * 128),
    "name_nul": lambda s, q: s.queue("a\0b"),
    # A handle made directly checks its name as store.queue() does.
    "handle_name_empty": lambda s, q: msgcask.Queue(s, "").put(b"x"),
    "handle_name_256": lambda s, q: msgcask.Queue(s, _huge_name()).put(b"x"),
    "handle_name_nul": lambda s, q: msgcask.Queue(s, "a\0b").put(b"x"),
    "handle_name_surrogate": lambda s, q: msgcask.Queue(s, "caf\udce9").put(b"x"),
    "max_deliveries_negative": lambda s, q: s.queue("new", max_deliveries=-1),
    "dead_letter_queue_empty_name": lambda s, q: s.queue(
        "new", max_deliveries=2, dead_letter_queue=""
    ),
    "get_negative_timeout": lambda s, q: q.get(timeout=-1),
    "get_nan_timeout": lambda s, q: q.get(timeout=float("nan")),
    "max_deliveries_past_the_counter": lambda s, q: s.queue("new", max_deliveries=65536),
    "default_dead_letter_name_too_long": lambda s, q: s.queue("n" * 252, max_deliveries=1),
    "compact_threshold_zero": lambda s, q: s.compact(threshold=0),
    "compact_threshold_huge_int": lambda s, q: s.compact(threshold=10**400),
    "put_many_priority": lambda s, q: q.put_many([b"a", b"b"], priority=11),
    "tx_put_priority": lambda s, q: _in_tx(s, lambda tx: tx.put("orders", b"x", priority=10)),
    "tx_put_name_nul": lambda s, q: _in_tx(s, lambda tx: tx.put("a\0", b"x")),
    "delete_unknown_queue": lambda s, q: s.delete_queue("no-such-queue"),
    # A header name is stored with a u16 length, and the header count is a u16.
    "header_name_65536_bytes": lambda s, q: q.put(b"x", headers={"k" * 65536: "v"}),
    "headers_65536": lambda s, q: q.put(b"x", headers={str(i): "" for i in range(65536)}),
}

# Text that cannot be UTF-8: a lone surrogate, as bytes decoded with surrogateescape give.
SURROGATE_CALLS: dict[str, BadCall] = {
    "header_value": lambda s, q: q.put(b"x", headers={"name": "caf\udce9"}),
    "header_name": lambda s, q: q.put(b"x", headers={"caf\udce9": "v"}),
    "put_many_header": lambda s, q: q.put_many([b"x"], headers={"name": "\ud800"}),
    "queue_name": lambda s, q: s.queue("caf\udce9"),
    "dead_letter_queue": lambda s, q: s.queue("new", dead_letter_queue="\ud800"),
}
BAD_VALUE_CALLS.update({f"surrogate_{name}": call for name, call in SURROGATE_CALLS.items()})


def _in_tx(store: msgcask.Store, body: Callable[[Any], object]) -> None:
    with store.transaction() as tx:
        tx.put("orders", b"inside the failing transaction")
        body(tx)


def _raises_and_changes_nothing(
    seeded: tuple[msgcask.Store, Any],
    store_path: Path,
    snapshot: Snapshot,
    call: BadCall,
    error: type[Exception],
) -> None:
    store, q = seeded
    before = snapshot(store, store_path)
    with pytest.raises(error):
        call(store, q)
    assert snapshot(store, store_path) == before


@pytest.mark.parametrize("call", BAD_TYPE_CALLS.values(), ids=BAD_TYPE_CALLS.keys())
def test_wrong_type_raises_type_error_and_changes_nothing(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot, call: BadCall
) -> None:
    _raises_and_changes_nothing(seeded, store_path, snapshot, call, TypeError)


@pytest.mark.parametrize("call", BAD_VALUE_CALLS.values(), ids=BAD_VALUE_CALLS.keys())
def test_bad_value_raises_value_error_and_changes_nothing(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot, call: BadCall
) -> None:
    _raises_and_changes_nothing(seeded, store_path, snapshot, call, ValueError)


# What the API says of a bad argument, word for word.
CALL_MESSAGES: dict[str, tuple[BadCall, type[Exception], str]] = {
    # Any one body, not only bytes: iterated, a bytearray or memoryview gives ints.
    **{
        f"put_many_one_{kind.__name__}": (
            lambda s, q, kind=kind: q.put_many(kind(b"ab")),
            TypeError,
            "put_many takes an iterable of message bodies, not one body",
        )
        for kind in (bytes, bytearray, memoryview)
    },
    "body_str": (
        lambda s, q: q.put("text"),
        TypeError,
        "message body must be bytes, bytearray or memoryview, got str; encode text first, "
        "e.g. text.encode()",
    ),
    "headers_list": (
        lambda s, q: q.put(b"x", headers=[("k", "v")]),
        TypeError,
        "headers must be a dict of str to str, got list",
    ),
    "headers_int_value": (
        lambda s, q: q.put(b"x", headers={"k": 1}),
        TypeError,
        "headers must map str to str; got str -> int for 'k' (convert values with str())",
    ),
    "header_name_65536_bytes": (
        lambda s, q: q.put(b"x", headers={"k" * 65536: "v"}),
        ValueError,
        f"header name {'k' * 20!r}... is longer than 65535 bytes",
    ),
    "header_value_surrogate": (
        lambda s, q: q.put(b"x", headers={"name": "caf\udce9"}),
        ValueError,
        "the value of header 'name', 'caf\\udce9' is not valid Unicode text: it holds a "
        "lone surrogate (as str from bytes decoded with errors='surrogateescape' does); "
        "pass text that encodes to UTF-8",
    ),
    "headers_65536": (
        lambda s, q: q.put(b"x", headers={str(i): "" for i in range(65536)}),
        ValueError,
        "a message can carry at most 65535 headers",
    ),
    "priority_str": (
        lambda s, q: q.put(b"x", priority="4"),
        TypeError,
        "priority must be an int from 0 to 9, got str",
    ),
    "priority_ten": (
        lambda s, q: q.put(b"x", priority=10),
        ValueError,
        "priority must be from 0 (lowest) to 9 (highest), got 10",
    ),
    "name_int": (lambda s, q: s.queue(123), TypeError, "queue name must be a str, got int"),
    "name_empty": (lambda s, q: s.queue(""), ValueError, "queue name must not be empty"),
    "name_256_utf8_bytes": (
        lambda s, q: s.queue("\u00e9" * 128),
        ValueError,
        "queue name must be at most 255 UTF-8 bytes, got 256",
    ),
    "name_nul": (
        lambda s, q: s.queue("a\0b"),
        ValueError,
        "queue name must not contain NUL characters",
    ),
    "max_deliveries_str": (
        lambda s, q: s.queue("new", max_deliveries="3"),
        TypeError,
        "max_deliveries must be an int or None, got str",
    ),
    "max_deliveries_zero": (
        lambda s, q: s.queue("new", max_deliveries=0),
        ValueError,
        "max_deliveries must be at least 1, got 0",
    ),
    "get_timeout_str": (
        lambda s, q: q.get(timeout="1"),
        TypeError,
        "timeout must be a number of seconds or None, got str",
    ),
    "get_negative_timeout": (
        lambda s, q: q.get(timeout=-1),
        ValueError,
        "timeout must be >= 0 seconds, got -1",
    ),
    "get_nan_timeout": (
        lambda s, q: q.get(timeout=float("nan")),
        ValueError,
        "timeout must be a number of seconds, got nan",
    ),
    "compact_threshold_above_one": (
        lambda s, q: s.compact(threshold=2),
        ValueError,
        "threshold must be in (0, 1] (the live fraction below which a file is rewritten), got 2",
    ),
    "transaction_of_no_store": (
        lambda s, q: msgcask.Transaction("store"),
        TypeError,
        "a Transaction belongs to a msgcask.Store (make one with store.transaction()), got str",
    ),
    "tx_ack_str": (
        lambda s, q: _in_tx(s, lambda tx: tx.ack("1")),
        TypeError,
        "expected a Message or a message id (int), got str",
    ),
    "tx_ack_never_delivered": (
        lambda s, q: _in_tx(s, lambda tx: tx.ack(1)),
        ValueError,
        "message 1 is not delivered and unacked (or is acked twice in this transaction); "
        "only messages returned by get() can be acked, once",
    ),
}


# The errors a user meets most, word for word: what is wrong, named, and where to look.
SAID: dict[str, tuple[BadCall, type[Exception], str]] = {
    "get_of_a_queue_that_does_not_exist": (
        lambda s, q: msgcask.Queue(s, "nowhere").get(block=False),
        msgcask.Empty,
        "queue 'nowhere' has no message available",
    ),
    "delete_of_a_queue_that_does_not_exist": (
        lambda s, q: s.delete_queue("nowhere"),
        ValueError,
        "no queue named 'nowhere'; store.queues() lists them",
    ),
    "a_queue_as_its_own_dead_letter_queue": (
        lambda s, q: s.queue("orders", max_deliveries=2, dead_letter_queue="orders"),
        ValueError,
        "a queue cannot be its own dead-letter queue",
    ),
    "ack_of_an_id_never_delivered": (
        lambda s, q: q.ack(12345),
        ValueError,
        "message 12345 is not delivered-and-unacked on queue 'orders'; only messages "
        "returned by get() on this queue can be acked or nacked, once",
    ),
    "why_kept_of_a_file_the_store_lacks": (
        lambda s, q: s.why_kept(99),
        ValueError,
        "no data file 99; the store has files [1]",
    ),
}


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [*CALL_MESSAGES.values(), *SAID.values()],
    ids=[*CALL_MESSAGES, *SAID],
)
def test_a_refused_call_says_what_is_wrong_word_for_word_and_changes_nothing(
    seeded: tuple[msgcask.Store, Any],
    store_path: Path,
    snapshot: Snapshot,
    call: BadCall,
    error: type[Exception],
    says: str,
) -> None:
    store, q = seeded
    before = snapshot(store, store_path)
    with pytest.raises(error) as refused:
        call(store, q)
    assert str(refused.value) == says
    assert snapshot(store, store_path) == before


def test_a_transaction_says_what_it_refuses_after_it_ended_and_changes_nothing(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
) -> None:
    store, q = seeded
    m = q.get(block=False)
    assert m is not None
    with store.transaction() as tx:
        tx.ack(m)
        with pytest.raises(ValueError) as twice:
            tx.ack(m.id)
    assert str(twice.value) == (
        f"message {m.id} is not delivered and unacked (or is acked twice in this "
        "transaction); only messages returned by get() can be acked, once"
    )
    before = snapshot(store, store_path)
    for late in (lambda: tx.put("orders", b"late"), lambda: tx.ack(m), tx.commit):
        with pytest.raises(ValueError) as ended:
            late()
        assert str(ended.value) == "this transaction is already committed or rolled back"
    rolled_back = store.transaction()
    rolled_back.rollback()
    with pytest.raises(ValueError) as ended:
        rolled_back.put("orders", b"late")
    assert str(ended.value) == "this transaction is already committed or rolled back"
    assert snapshot(store, store_path) == before


@pytest.mark.parametrize("priority", [True, False])
def test_bool_priority_is_rejected(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot, priority: bool
) -> None:
    # bool is an int subclass; accepting it would silently mean priority 0 or 1.
    store, q = seeded
    before = snapshot(store, store_path)
    with pytest.raises((TypeError, ValueError)):
        q.put(b"x", priority=priority)
    assert snapshot(store, store_path) == before


def test_queue_name_limits_are_inclusive(store: msgcask.Store) -> None:
    # The limits are in UTF-8 bytes: 255 ASCII bytes and 127 two-byte characters fit.
    for name in ("x" * 255, "\u00e9" * 127, "a"):
        q = store.queue(name)
        mid = q.put(b"body")
        assert [m.id for m in q.browse()] == [mid]
    assert sorted(store.queues()) == sorted(["x" * 255, "\u00e9" * 127, "a"])


def test_header_limits_are_inclusive(store: msgcask.Store) -> None:
    # A header name of 65535 UTF-8 bytes and 65535 headers fit their u16 lengths.
    q = store.queue("q")
    longest = {"k" * 0xFFFF: "v"}
    most = {str(i): "" for i in range(fmt.MAX_HEADERS)}
    q.put(b"a", headers=longest)
    q.put(b"b", headers=most)
    assert [m.headers for m in q.browse()] == [longest, most]


def test_a_body_is_taken_as_it_is_when_put(store: msgcask.Store) -> None:
    # A bytearray or a memoryview of one, changed after the put, changes nothing
    # stored, also while the transaction that put it is not committed yet.
    q = store.queue("q")
    plain, viewed = bytearray(b"plain"), bytearray(b"viewed")
    with store.transaction() as txn:
        txn.put("q", plain)
        txn.put("q", memoryview(viewed))
        plain[0:1] = b"P"
        viewed[0:1] = b"V"
    assert [m.body for m in q.browse()] == [b"plain", b"viewed"]


def test_message_bigger_than_a_data_file_is_rejected(store_path: Path, snapshot: Snapshot) -> None:
    store = msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None)
    try:
        q = store.queue("q")
        q.put(b"fits" * 100)
        before = snapshot(store, store_path)
        with pytest.raises(msgcask.MessageTooLargeError):
            q.put(b"x" * (SMALL_FILE + 1))
        assert snapshot(store, store_path) == before
        with pytest.raises(msgcask.MessageTooLargeError):
            q.put_many([b"small", b"x" * (SMALL_FILE + 1), b"small"])
        assert snapshot(store, store_path) == before
        with pytest.raises(msgcask.MessageTooLargeError):
            with store.transaction() as tx:
                tx.put("q", b"small")
                tx.put("q", b"x" * (SMALL_FILE + 1))
        assert snapshot(store, store_path) == before
        # The store keeps working after the refusals.
        mid = q.put(b"after")
        assert [m.body for m in q.browse()][-1] == b"after"
        assert mid > max(m.id for m in q.browse() if m.body != b"after")
    finally:
        store.close()


def test_a_batch_may_fill_a_data_file_to_the_last_byte(store_path: Path) -> None:
    # A BATCH record, then one PUT record: exactly a data file after its header.
    room = SMALL_FILE - fmt.FILE_HEADER_SIZE - codec.BATCH_RECORD_SIZE
    fixed = codec.put_record_size(b"q", codec.encode_headers(None), 0)
    with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as store:
        q = store.queue("q")
        with pytest.raises(msgcask.MessageTooLargeError, match=f"record of {SMALL_FILE - 31} "):
            q.put_many([b"x" * (room - fixed + 1)])
        [mid] = q.put_many([b"x" * (room - fixed)])
        m = q.get(block=False)
        assert (m.id, len(m.body)) == (mid, room - fixed)


def test_message_too_large_is_a_msgcask_error() -> None:
    assert issubclass(msgcask.MessageTooLargeError, msgcask.Error)


def test_path_that_is_a_regular_file_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "plain.txt"
    path.write_bytes(b"not a store\n")
    with pytest.raises(msgcask.NotAStoreError):
        msgcask.open(path)
    assert path.read_bytes() == b"not a store\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt"]


def test_put_many_of_no_iterable_says_what_it_takes(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
) -> None:
    store, q = seeded
    before = snapshot(store, store_path)
    with pytest.raises(TypeError, match=r"iterable of message bodies \(a list of bytes\), got int"):
        q.put_many(5)  # type: ignore[arg-type]
    assert snapshot(store, store_path) == before


def test_non_empty_directory_that_is_not_a_store_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "photos"
    path.mkdir()
    (path / "holiday.jpg").write_bytes(b"\xff\xd8 jpeg")
    (path / "sub").mkdir()
    with pytest.raises(msgcask.NotAStoreError, match=r"holds holiday\.jpg, sub, and no data"):
        msgcask.open(path)
    assert sorted(p.name for p in path.iterdir()) == ["holiday.jpg", "sub"]
    assert (path / "holiday.jpg").read_bytes() == b"\xff\xd8 jpeg"
    assert list((path / "sub").iterdir()) == []


def _tree(path: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(path)): p.read_bytes() if p.is_file() else None for p in path.rglob("*")
    }


@pytest.mark.parametrize(
    "case", ["index_beside_files", "index_alone", "lock_beside_files", "lock_alone"]
)
def test_a_directory_sharing_only_a_name_with_a_store_is_left_alone(
    tmp_path: Path, case: str
) -> None:
    # A web site's index/ or another database's LOCK: opening it as a store would
    # delete that index/ as a damaged index, and truncate that LOCK. A LOCK alone
    # is what an open that stopped right after creating it leaves, but holding
    # text no open writes (a pid, or nothing) it is another program's.
    path = tmp_path / "site"
    path.mkdir()
    if not case.endswith("_alone"):
        (path / "about.html").write_bytes(b"<p>about</p>")
    if case.startswith("index"):
        (path / "index").mkdir()
        (path / "index" / "index.html").write_bytes(b"<p>home</p>")
    else:
        (path / "LOCK").write_bytes(b"held by another program\n")
    before = _tree(path)
    with pytest.raises(msgcask.NotAStoreError):
        msgcask.open(path)
    assert _tree(path) == before


def test_what_a_first_open_that_stopped_early_leaves_still_opens(store_path: Path) -> None:
    with msgcask.open(store_path):
        pass
    for data_file in store_path.glob("*.log"):
        data_file.unlink()
    (store_path / "0000000001.log.tmp").write_bytes(b"")
    with msgcask.open(store_path) as store:
        store.queue("q").put(b"x")


@pytest.mark.parametrize("content", [b"", b"4242\n", b"42", b"\0\0\0\0\0"])
def test_a_lock_left_by_a_first_open_that_stopped_early_still_opens(
    tmp_path: Path, content: bytes
) -> None:
    # Killed right after creating its LOCK: before the pid was written, after it,
    # or (a power cut) with the pid's bytes never reaching the disk.
    path = tmp_path / "store"
    path.mkdir()
    (path / "LOCK").write_bytes(content)
    with msgcask.open(path) as store:
        store.queue("q").put(b"x")


def test_empty_directory_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.mkdir()
    with msgcask.open(path) as store:
        mid = store.queue("q").put(b"x")
    with msgcask.open(path) as store:
        assert [m.id for m in store.queue("q").browse()] == [mid]


def _patch_version(path: Path, delta: int) -> int:
    """Rewrite a data file header's format version (and its checksum); return the old one."""
    raw = bytearray(path.read_bytes())
    (version,) = struct.unpack_from("<H", raw, VERSION_OFFSET)
    stored = struct.unpack_from("<Q", raw, HEADER_CHECKSUM_OFFSET)[0]
    # Check our reading of the layout before relying on it.
    assert raw[:8] == b"msgcask\0", "data file does not start with the documented magic"
    assert stored == xxhash.xxh3_64_intdigest(bytes(raw[:HEADER_CHECKSUM_OFFSET]))
    struct.pack_into("<H", raw, VERSION_OFFSET, version + delta)
    checksum = xxhash.xxh3_64_intdigest(bytes(raw[:HEADER_CHECKSUM_OFFSET]))
    struct.pack_into("<Q", raw, HEADER_CHECKSUM_OFFSET, checksum)
    path.write_bytes(bytes(raw))
    return int(version)


@pytest.mark.parametrize("drop_index", [False, True], ids=["with_index", "without_index"])
def test_store_written_by_newer_format_is_refused(
    store_path: Path, data_files: Callable[[Path], list[Path]], drop_index: bool
) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        store.queue("q").put(b"payload")
    files = data_files(store_path)
    assert files, "a store with a message has at least one data file"
    for f in files:
        _patch_version(f, +1)
    if drop_index:
        import shutil

        shutil.rmtree(store_path / "index")
    contents = {f.name: f.read_bytes() for f in files}
    with pytest.raises(msgcask.FormatVersionError):
        msgcask.open(store_path)
    # Refusing must not "repair" (truncate, rewrite or delete) the newer files.
    assert {f.name: f.read_bytes() for f in data_files(store_path)} == contents
    assert issubclass(msgcask.FormatVersionError, msgcask.Error)


BAD_OPTIONS: dict[str, tuple[dict[str, Any], type[Exception]]] = {
    "sync_sometimes": ({"sync": "sometimes"}, ValueError),
    "sync_int": ({"sync": 1}, TypeError),
    "sync_interval_negative": ({"sync_interval": -0.1}, ValueError),
    "sync_interval_str": ({"sync_interval": "fast"}, TypeError),
    "threshold_zero": ({"compaction_threshold": 0}, ValueError),
    "threshold_negative": ({"compaction_threshold": -0.5}, ValueError),
    "threshold_above_one": ({"compaction_threshold": 1.5}, ValueError),
    "max_file_size_zero": ({"max_file_size": 0}, ValueError),
    "max_file_size_tiny": ({"max_file_size": 16}, ValueError),
    "max_file_size_str": ({"max_file_size": "32MB"}, TypeError),
    "compaction_interval_negative": ({"compaction_interval": -1}, ValueError),
    # Shorter than the schedule's microsecond, which would make it one second.
    "compaction_interval_below_a_millisecond": ({"compaction_interval": 1e-7}, ValueError),
    # Past what a float holds: a ValueError, not an OverflowError.
    "sync_interval_huge_int": ({"sync_interval": 10**400}, ValueError),
    "threshold_huge_int": ({"compaction_threshold": 10**400}, ValueError),
    "compaction_interval_huge_int": ({"compaction_interval": 10**400}, ValueError),
    "max_store_size_negative": ({"max_store_size": -1}, ValueError),
    "max_store_size_str": ({"max_store_size": "1GB"}, TypeError),
    # A bad type is a TypeError even beside a setting it could not be combined with.
    "max_store_size_str_with_keep_data_files": (
        {"max_store_size": "1GB", "keep_data_files": True, "compaction_interval": None},
        TypeError,
    ),
    "background_cpus_str_with_keep_data_files": (
        {"background_cpus": "0", "keep_data_files": True},
        TypeError,
    ),
    # Past what the platform's timers can wait: refused, not a dead background thread.
    "sync_interval_past_an_hour": ({"sync_interval": 1e300}, ValueError),
    # So short the flush thread would run round after round.
    "sync_interval_below_a_millisecond": ({"sync_interval": 1e-300}, ValueError),
    "sync_interval_just_below_a_millisecond": ({"sync_interval": 0.00099}, ValueError),
    "compaction_interval_past_a_year": ({"compaction_interval": 1e12}, ValueError),
    "max_file_size_past_2_gib": ({"max_file_size": 2**31 + 1}, ValueError),
    "compaction_budget_zero": ({"compaction_budget": 0}, ValueError),
    # A bool is an int to Python, not a size or a number of seconds to msgcask.
    "max_file_size_bool": ({"max_file_size": True}, TypeError),
    "sync_interval_bool": ({"sync_interval": True}, TypeError),
}

# What msgcask.open says of a bad option, word for word.
SETTINGS = "('always', 'periodic', 'never')"
OPTION_MESSAGES: dict[str, tuple[dict[str, Any], type[Exception], str]] = {
    "sync_sometimes": (
        {"sync": "sometimes"},
        ValueError,
        f"sync must be one of {SETTINGS}, got 'sometimes'",
    ),
    "sync_int": ({"sync": 1}, TypeError, f"sync must be a str, one of {SETTINGS}"),
    "sync_interval_str": (
        {"sync_interval": "fast"},
        TypeError,
        "sync_interval must be a number (int or float), got str; convert other number "
        "types (NumPy's) with int() or float()",
    ),
    "sync_interval_nan": (
        {"sync_interval": float("nan")},
        ValueError,
        "sync_interval must be finite, got nan",
    ),
    "sync_interval_negative": (
        {"sync_interval": -0.1},
        ValueError,
        "sync_interval must be at least 0.001 and at most 3600 seconds, got -0.1",
    ),
    "threshold_zero": (
        {"compaction_threshold": 0},
        ValueError,
        "compaction_threshold must be in (0, 1] (the live fraction below which a file is "
        "rewritten), got 0",
    ),
    "max_file_size_tiny": (
        {"max_file_size": 16},
        ValueError,
        "max_file_size must be at least 65536 bytes, got 16",
    ),
    "max_file_size_past_2_gib": (
        {"max_file_size": 2**31 + 1},
        ValueError,
        "max_file_size must be at most 2 GiB, got 2147483649",
    ),
    "max_file_size_str": (
        {"max_file_size": "32MB"},
        TypeError,
        "max_file_size must be an int (bytes), got str; convert other integer types "
        "(NumPy's) with int()",
    ),
    "compaction_budget_zero": (
        {"compaction_budget": 0},
        ValueError,
        "compaction_budget must be positive (bytes copied per pass)",
    ),
    "compaction_interval_below_a_millisecond": (
        {"compaction_interval": 1e-7},
        ValueError,
        "compaction_interval must be at least 0.001 seconds and at most 31536000 seconds "
        "(a year), or None to turn the schedule off; got 1e-07",
    ),
    "max_store_size_str": (
        {"max_store_size": "1GB"},
        TypeError,
        "max_store_size must be an int (bytes) or None, got str; convert other integer "
        "types (NumPy's) with int()",
    ),
    "max_store_size_below_four_files": (
        {"max_store_size": 200_000, "max_file_size": SMALL_FILE},
        ValueError,
        "max_store_size must be at least 4 data files (4 * max_file_size = 262144 bytes), "
        "got 200000",
    ),
    "keep_data_files_int": (
        {"keep_data_files": 1},
        TypeError,
        "keep_data_files must be a bool, got int",
    ),
    "keep_data_files_with_the_schedule": (
        {"keep_data_files": True},
        ValueError,
        "keep_data_files=True keeps every data file, so nothing may compact: pass "
        "compaction_interval=None and no max_store_size with it",
    ),
}


@pytest.mark.parametrize(
    ("options", "error", "says"), OPTION_MESSAGES.values(), ids=OPTION_MESSAGES.keys()
)
def test_a_bad_option_is_refused_saying_what_to_pass(
    tmp_path: Path, options: dict[str, Any], error: type[Exception], says: str
) -> None:
    path = tmp_path / "new-store"
    with pytest.raises(error) as refused:
        msgcask.open(path, **options)
    assert str(refused.value) == says
    assert not path.exists()


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_bad_option_on_new_path_creates_nothing(
    tmp_path: Path, options: dict[str, Any], error: type[Exception]
) -> None:
    path = tmp_path / "new-store"
    with pytest.raises(error):
        msgcask.open(path, **options)
    assert not path.exists(), "a refused open must not create the store directory"


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_bad_option_on_existing_store_leaves_it_usable(
    store_path: Path, snapshot: Snapshot, options: dict[str, Any], error: type[Exception]
) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        store.queue("q").put(b"kept", priority=2)
        before = snapshot(store, store_path)
    with pytest.raises(error):
        msgcask.open(store_path, **options)
    # The refused open must not leave the lock held or the files changed.
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert snapshot(store, store_path) == before


class _IntLike:
    """An integer type that is not int, as NumPy's are (``operator.index`` takes it)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n


def _numeric_options() -> set[str]:
    """The Options fields that take integers (alone, or among numbers)."""
    return {f.name for f in fields(Options) if re.search(r"\b(int|float)\b", str(f.type))}


# A good integer for each: an int is taken, the same value in another type is not.
INTEGER_OPTIONS: dict[str, Callable[[Callable[[int], object]], object]] = {
    "max_file_size": lambda n: n(2**20),
    "compaction_budget": lambda n: n(2**20),
    "max_store_size": lambda n: n(2**40),
    "sync_interval": lambda n: n(1),
    "compaction_threshold": lambda n: n(1),
    "compaction_interval": lambda n: n(10),
    "background_cpus": lambda n: [n(min(os.sched_getaffinity(0)))],
}


def test_every_option_taking_integers_is_checked_for_integer_types() -> None:
    assert set(INTEGER_OPTIONS) == _numeric_options()


@pytest.mark.parametrize("name", INTEGER_OPTIONS)
def test_an_integer_that_is_not_an_int_is_refused_by_every_option(name: str) -> None:
    # As by the rest of the API (priority, max_deliveries, confine_to_one_cpu):
    # converting silently would take whatever __index__ says for an int.
    value = INTEGER_OPTIONS[name]
    Options(**{name: value(int)})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"{name} must .*_IntLike.*int\(\)"):
        Options(**{name: value(_IntLike)})  # type: ignore[arg-type]


def test_an_integer_that_is_not_an_int_is_refused_as_a_priority(
    seeded: tuple[msgcask.Store, Any],
) -> None:
    _, q = seeded
    with pytest.raises(TypeError, match="priority must be an int"):
        q.put(b"x", priority=_IntLike(3))  # type: ignore[arg-type]


@pytest.mark.parametrize("interval", [1e-300, 0.00099, 3600.5])
def test_a_sync_interval_out_of_range_is_refused_with_the_range(interval: float) -> None:
    with pytest.raises(ValueError, match=r"at least 0\.001 and at most 3600 seconds"):
        Options(sync_interval=interval)
    assert Options(sync_interval=0.001).sync_interval == 0.001


def test_the_ends_of_each_range_are_taken() -> None:
    assert Options(sync_interval=3600).sync_interval == 3600
    assert Options(compaction_interval=0.001).compaction_interval == 0.001
    assert Options(compaction_interval=365 * 86400).compaction_interval == 365 * 86400
    assert Options(max_file_size=2**31).max_file_size == 2**31
    assert Options(max_file_size=64 * 1024, max_store_size=4 * 64 * 1024).max_store_size == 2**18


def test_open_that_fails_starting_background_work_releases_the_store(
    store_path: Path, snapshot: Snapshot, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgcask.compactor.scheduler import CompactionScheduler

    with msgcask.open(store_path, compaction_interval=None) as store:
        store.queue("q").put(b"kept")
        before = snapshot(store, store_path)
    flushers = {t for t in threading.enumerate() if t.name == "msgcask-flush"}

    def refuse(self: CompactionScheduler) -> None:
        raise RuntimeError("cannot start the schedule")

    monkeypatch.setattr(CompactionScheduler, "start", refuse)
    with pytest.raises(RuntimeError, match="cannot start the schedule"):
        msgcask.open(store_path)
    assert {t for t in threading.enumerate() if t.name == "msgcask-flush"} == flushers
    monkeypatch.undo()
    with msgcask.open(store_path, compaction_interval=None) as store:  # not left locked
        assert snapshot(store, store_path) == before


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, 1e10, 10**400])
def test_timeouts_longer_than_any_wait_wait_until_a_message_comes(
    store: msgcask.Store, timeout: float
) -> None:
    q = store.queue("q")
    threading.Timer(0.2, lambda: q.put(b"late")).start()
    assert q.get(timeout=timeout).body == b"late"


@pytest.mark.parametrize("call", ["ack", "nack"])
def test_refused_ack_on_a_deleted_queue_does_not_bring_it_back(store_path: Path, call: str) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("gone")
        q.put(b"m")
        m = q.get(block=False)
        store.delete_queue("gone")
        with pytest.raises(ValueError, match="not delivered-and-unacked"):
            getattr(q, call)(m)
        assert "gone" not in store.queues()
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert "gone" not in store.queues()


def test_default_dead_letter_queue_of_the_longest_allowed_name_is_reachable(
    store: msgcask.Store,
) -> None:
    name = "n" * 251  # DLQ.<name> is then 255 bytes, the limit
    q = store.queue(name, max_deliveries=1)
    q.put(b"poison")
    q.nack(q.get(block=False))
    assert store.queue(f"DLQ.{name}").get(block=False).body == b"poison"


class TestDeadLetteringNearTheSizeLimit:
    """A message put close to max_file_size: its dead-letter copy is larger (a
    longer queue name, two more headers, the batch with the original's ACK)."""

    LIMIT = SMALL_FILE - HEADER_SIZE  # the largest record a data file holds

    def _open(self, path: Path) -> msgcask.Store:
        return msgcask.open(path, max_file_size=SMALL_FILE, compaction_interval=None)

    def test_copy_that_fits_only_without_the_origin_headers_goes_without_them(
        self, store_path: Path
    ) -> None:

        batch_overhead = codec.BATCH_RECORD_SIZE + codec.ACK_RECORD_SIZE  # the copy fills the file
        size = (
            self.LIMIT
            - batch_overhead
            - codec.put_record_size(b"DLQ.q", codec.encode_headers({}), 0)
        )
        body = b"b" * size
        with self._open(store_path) as store:
            q = store.queue("q", max_deliveries=1)
            q.put(body, headers={})
            q.nack(q.get(block=False))
            assert len(q) == 0
        with self._open(store_path) as store:
            m = store.queue("DLQ.q").get(block=False)
            assert bytes(m.body) == body
            assert "x-dead-letter-from" not in (m.headers or {})

    def test_copy_that_cannot_fit_is_refused_and_the_message_stays_delivered(
        self, store_path: Path, snapshot: Snapshot, caplog: pytest.LogCaptureFixture
    ) -> None:

        size = self.LIMIT - codec.put_record_size(b"q", codec.encode_headers({}), 0)
        with self._open(store_path) as store:
            q = store.queue("q", max_deliveries=1)
            q.put(b"b" * size)
            m = q.get(block=False)
            before = snapshot(store, store_path)
            with pytest.raises(msgcask.MessageTooLargeError, match="stays delivered"):
                q.nack(m)
            assert "dead-lettered" not in caplog.text  # no move is logged that was not made
            assert snapshot(store, store_path) == before
            q.ack(m)  # still delivered, so the consumer can drop it
            assert len(q) == 0


def test_a_message_with_nearly_the_most_headers_is_dead_lettered_without_the_origin_ones(
    store: msgcask.Store, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {str(i): "" for i in range(fmt.MAX_HEADERS - 1)}  # two more would not fit
    q = store.queue("q", max_deliveries=1)
    q.put(b"poison", headers=headers)
    q.nack(q.get(block=False))
    assert len(q) == 0
    moved = store.queue("DLQ.q").get(block=False)
    assert moved.body == b"poison" and moved.headers == headers
    assert f"may carry {fmt.MAX_HEADERS}" in caplog.text


def _compact_until_closed(
    store: msgcask.Store, started: threading.Event, errors: list[BaseException]
) -> None:
    try:
        while True:
            started.set()
            store.compact(threshold=1.0)
    except msgcask.ClosedError:
        pass
    except BaseException as e:
        errors.append(e)


def test_close_waits_for_a_compaction_pass_running_in_another_thread(store_path: Path) -> None:
    # A pass running in another thread when close() is called finishes first;
    # compact() after close() raises ClosedError, never an error from files
    # closed under the pass.
    for _ in range(5):
        store = msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None)
        q = store.queue("q")
        for i in range(600):
            q.put(b"p" * 1000, headers={"pin": "1"} if i % 25 == 0 else {})
        for _ in range(600 - 24):
            q.ack(q.get(block=False, selector=lambda h: "pin" not in h))
        errors: list[BaseException] = []
        started = threading.Event()
        worker = threading.Thread(target=_compact_until_closed, args=(store, started, errors))
        worker.start()
        started.wait()
        store.close()
        worker.join()
        assert errors == []
        with msgcask.open(store_path, max_file_size=SMALL_FILE, compaction_interval=None) as again:
            assert again.verify() == []
            assert len(again.queue("q")) == 24
            again.queue("q").purge()


def test_threshold_of_one_is_accepted(store_path: Path) -> None:
    # (0, 1] is closed at 1: the bound itself is valid.
    with msgcask.open(store_path, compaction_threshold=1.0) as store:
        assert store.options.compaction_threshold == 1.0
        store.queue("q").put(b"x")
        assert store.compact().files_rewritten == 0  # the head alone: nothing to rewrite


class TestAckNack:
    def test_ack_of_available_message_is_refused(
        self, seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
    ) -> None:
        store, q = seeded
        waiting = next(iter(q.browse()))
        before = snapshot(store, store_path)
        for call in (q.ack, q.nack):
            with pytest.raises(ValueError):
                call(waiting.id)
            with pytest.raises(ValueError):
                call(waiting)
        assert snapshot(store, store_path) == before

    def test_ack_of_unknown_id_is_refused(
        self, seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
    ) -> None:
        store, q = seeded
        unknown = max(m.id for m in q.browse()) + 1000
        before = snapshot(store, store_path)
        for call in (q.ack, q.nack):
            with pytest.raises(ValueError):
                call(unknown)
        assert snapshot(store, store_path) == before

    def test_ack_on_the_wrong_queue_is_refused(
        self, seeded: tuple[msgcask.Store, Any], store_path: Path
    ) -> None:
        store, q = seeded
        other = store.queue("other")
        m = q.get(block=False)
        for call in (other.ack, other.nack):
            with pytest.raises(ValueError):
                call(m)
            with pytest.raises(ValueError):
                call(m.id)
        # Still delivered on its own queue: the refused ack did not consume it.
        q.ack(m)
        assert m.id not in {x.id for x in q.browse()}

    def test_double_ack_is_refused(
        self, seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
    ) -> None:
        store, q = seeded
        m = q.get(block=False)
        q.ack(m)
        before = snapshot(store, store_path)
        with pytest.raises(ValueError):
            q.ack(m)
        with pytest.raises(ValueError):
            q.ack(m.id)
        with pytest.raises(ValueError):
            q.nack(m)
        assert snapshot(store, store_path) == before

    def test_nack_then_ack_of_the_old_delivery_is_refused(
        self, seeded: tuple[msgcask.Store, Any]
    ) -> None:
        _store, q = seeded
        m = q.get(block=False)
        q.nack(m)
        # After the nack the message is available again, not delivered.
        with pytest.raises(ValueError):
            q.ack(m)
        assert m.id in {x.id for x in q.browse()}

    @pytest.mark.parametrize("bad", ["1", 1.0, None, b"1"], ids=["str", "float", "none", "bytes"])
    def test_ack_of_wrong_type_is_refused(
        self,
        seeded: tuple[msgcask.Store, Any],
        store_path: Path,
        snapshot: Snapshot,
        bad: object,
    ) -> None:
        store, q = seeded
        m = q.get(block=False)
        before = snapshot(store, store_path)
        for call in (q.ack, q.nack):
            with pytest.raises((TypeError, ValueError)):
                call(bad)
        assert snapshot(store, store_path) == before
        q.ack(m)

    @pytest.mark.parametrize(
        ("field", "bad"),
        [
            ("id", 1.0),
            ("id", True),
            *(("deliveries", bad) for bad in ("1", None, b"1", True, 1.0)),
        ],
        ids=[
            "id-float",
            "id-bool",
            *(f"deliveries-{n}" for n in ("str", "none", "bytes", "bool", "float")),
        ],
    )
    def test_a_message_whose_id_or_deliveries_is_no_int_is_refused_as_such(
        self,
        seeded: tuple[msgcask.Store, Any],
        store_path: Path,
        snapshot: Snapshot,
        field: str,
        bad: object,
    ) -> None:
        # A plain Message is taken at its word, but a value that only equals an int
        # would pass: an id equal to a delivered message's finds it (a float's ACK
        # record cannot be encoded, a bool is taken for 1), and a delivery count
        # equal to the one held is taken for it. Not "delivered again since" either.
        store, q = seeded
        m, one = q.get(block=False), q.get(block=False)
        assert (one.id, one.deliveries) == (1, 1)  # what the bad ones equal
        fake = msgcask.Message(*one)._replace(**{field: bad})
        says = f"{field} must be an int"
        before = snapshot(store, store_path)
        for call in (q.ack, q.nack):
            with pytest.raises(TypeError, match=says):
                call(fake)
        with pytest.raises(TypeError, match=says):
            with store.transaction() as tx:
                tx.put("a-new-queue", b"should not appear")
                tx.ack(fake)
        assert snapshot(store, store_path) == before
        q.ack(m)
        q.ack(one)

    def test_a_transaction_whose_commit_failed_says_so_when_used_again(
        self, seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
    ) -> None:
        store, q = seeded
        m = q.get(block=False)
        tx = store.transaction()
        tx.put("orders", b"should not appear")
        tx.ack(m)
        q.ack(m)  # acked meanwhile: the commit fails and writes nothing
        before = snapshot(store, store_path)
        with pytest.raises(ValueError, match=f"message {m.id} is not delivered"):
            tx.commit()
        for again in (tx.commit, lambda: tx.put("orders", b"x"), lambda: tx.ack(1)):
            with pytest.raises(
                ValueError, match=r"commit failed \(ValueError: .*nothing of it was"
            ):
                again()
        assert snapshot(store, store_path) == before

    def test_a_commit_that_failed_after_writing_does_not_invite_a_second_write(
        self, store_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = msgcask.open(store_path, compaction_interval=None)
        tx = store.transaction()
        tx.put("orders", b"once")

        def index_full(*args: object, **kwargs: object) -> None:
            raise lmdb.MapFullError("the index is full")

        monkeypatch.setattr(store._catalog, "add_many", index_full)
        with pytest.raises(msgcask.IndexFailedError):
            tx.commit()  # the batch is in the journal already
        with pytest.raises(ValueError, match=r"may have been written whole.*look before"):
            tx.put("orders", b"again")
        store.close()
        with msgcask.open(store_path, compaction_interval=None) as again:
            assert [m.body for m in again.queue("orders").browse()] == [b"once"]

    def test_a_commit_refused_before_writing_says_nothing_was_written(
        self, store: msgcask.Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A plain msgcask Error, raised before the append: the type alone cannot tell.
        monkeypatch.setattr(store, "_free_bytes", lambda: 0)
        tx = store.transaction()
        tx.put("orders", b"never")
        with pytest.raises(msgcask.Error, match="nothing of this call was stored"):
            tx.commit()
        with pytest.raises(ValueError, match="nothing of it was written"):
            tx.commit()
        assert len(store.queue("orders")) == 0

    def test_transaction_with_bad_ack_applies_nothing(
        self, seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
    ) -> None:
        store, q = seeded
        m = q.get(block=False)
        before = snapshot(store, store_path)
        with pytest.raises(ValueError):
            with store.transaction() as tx:
                tx.put("orders", b"should not appear")
                tx.ack(m)
                tx.ack(m.id + 1000)
        assert snapshot(store, store_path) == before
        # The good ack inside the failed transaction was discarded too.
        q.ack(m)


def test_a_committed_transaction_refuses_a_rollback(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot
) -> None:
    # A rollback that returned quietly would let the caller believe the puts undone.
    store, q = seeded
    tx = store.transaction()
    tx.put("orders", b"committed")
    tx.commit()
    before = snapshot(store, store_path)
    with pytest.raises(ValueError, match=r"committed: .* cannot be rolled back"):
        tx.rollback()
    assert snapshot(store, store_path) == before
    # A block that commits by itself, then raises, ends with its own exception.
    with pytest.raises(KeyError, match="after the commit"), store.transaction() as block:
        block.put("orders", b"committed in the block")
        block.commit()
        raise KeyError("after the commit")
    bodies = [m.body for m in q.browse()]
    assert b"committed" in bodies and b"committed in the block" in bodies
    # Clean-up code may roll back a transaction whose commit failed, or twice.
    failed = store.transaction()
    failed.put("orders", b"never")
    delivered = q.get(block=False)
    failed.ack(delivered)
    q.ack(delivered)
    with pytest.raises(ValueError, match="not delivered"):
        failed.commit()
    failed.rollback()
    failed.rollback()
    assert b"never" not in [m.body for m in q.browse()]


def _compact(store: msgcask.Store) -> object:
    return store.compact()


class TestUseAfterClose:
    CALLS: dict[str, Callable[[msgcask.Store, Any, Any], object]] = {
        "put": lambda s, q, m: q.put(b"x"),
        "put_many": lambda s, q, m: q.put_many([b"x"]),
        "put_many_nothing": lambda s, q, m: q.put_many([]),
        "get": lambda s, q, m: q.get(block=False),
        "get_blocking": lambda s, q, m: q.get(timeout=0.01),
        "ack": lambda s, q, m: q.ack(m),
        "nack": lambda s, q, m: q.nack(m),
        "len": lambda s, q, m: len(q),
        "browse": lambda s, q, m: list(q.browse()),
        "purge": lambda s, q, m: q.purge(),
        "queue": lambda s, q, m: s.queue("q"),
        "queues": lambda s, q, m: s.queues(),
        "delete_queue": lambda s, q, m: s.delete_queue("q"),
        "transaction": lambda s, q, m: s.transaction().__enter__(),
        "stats": lambda s, q, m: s.stats(),
        "sync": lambda s, q, m: s.sync(),
        "compact": lambda s, q, m: _compact(s),
        "why_kept": lambda s, q, m: s.why_kept(1),
        "pause_compaction": lambda s, q, m: s.pause_compaction(),
        "resume_compaction": lambda s, q, m: s.resume_compaction(),
        "with": lambda s, q, m: s.__enter__(),
    }

    @pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
    def test_call_on_closed_store_raises_closed_error(
        self, store_path: Path, call: Callable[[msgcask.Store, Any, Any], object]
    ) -> None:
        store = msgcask.open(store_path, compaction_interval=None)
        q = store.queue("q")
        q.put(b"one")
        q.put(b"two")
        m = q.get(block=False)
        store.close()
        with pytest.raises(msgcask.ClosedError):
            call(store, q, m)
        # Nothing was written after close: the delivered message is still there.
        with msgcask.open(store_path) as again:
            assert sorted(x.body for x in again.queue("q").browse()) == [b"one", b"two"]

    def test_closed_error_is_a_msgcask_error(self) -> None:
        assert issubclass(msgcask.ClosedError, msgcask.Error)


def test_error_hierarchy() -> None:
    import queue as stdlib_queue

    for name in (
        "Empty",
        "StoreLockedError",
        "StoreFullError",
        "CorruptionError",
        "MessageTooLargeError",
        "ClosedError",
        "FormatVersionError",
        "NotAStoreError",
    ):
        assert issubclass(getattr(msgcask, name), msgcask.Error), name
    assert issubclass(msgcask.Empty, stdlib_queue.Empty)
    assert issubclass(msgcask.Error, Exception)


class TestStoreFull:
    LIMIT = 4 * SMALL_FILE  # the smallest max_store_size the store accepts for these files

    def test_store_full_refuses_the_put_and_changes_nothing(
        self, store_path: Path, snapshot: Snapshot
    ) -> None:
        store = msgcask.open(store_path, max_file_size=SMALL_FILE, max_store_size=self.LIMIT)
        try:
            q = store.queue("q")
            for i in range(1000):
                try:
                    q.put(b"%06d" % i + b"x" * 3000)
                except msgcask.StoreFullError as e:
                    full_at = i
                    message = str(e)
                    break
            else:
                raise AssertionError("1000 puts of 3 KB each never filled a 256 KiB store")
            assert full_at > 0
            assert message, "StoreFullError says why (live bytes, the limit)"
            # The refused put may compact to make room (files change), but the queues not.
            before = snapshot(store)
            with pytest.raises(msgcask.StoreFullError):
                q.put(b"y" * 3000)
            assert snapshot(store) == before
            assert len(q) == full_at
            # Nor does a refused put, or batch, to a queue it would have created.
            new = msgcask.Queue(store, "new")
            for refused in (lambda: new.put(b"y" * 3000), lambda: new.put_many([b"y" * 3000])):
                with pytest.raises(msgcask.StoreFullError):
                    refused()
                assert snapshot(store) == before
                assert "new" not in store.queues()
        finally:
            store.close()

    def test_a_full_store_takes_acks_in_a_transaction_as_it_takes_plain_ones(
        self, store_path: Path
    ) -> None:
        store = msgcask.open(
            store_path, max_file_size=SMALL_FILE, max_store_size=self.LIMIT, sync="never"
        )
        try:
            q = store.queue("q")
            for size in (3000, 300, 30, 1):  # fill up to the last few bytes
                with pytest.raises(msgcask.StoreFullError):
                    while True:
                        q.put(b"x" * size)
            live = len(q)
            first, second, third = (q.get(block=False) for _ in range(3))
            q.ack(first)
            with store.transaction() as tx:  # acks only: nothing to refuse
                tx.ack(second)
                tx.ack(third)
            assert len(q) == live - 3
        finally:
            store.close()
        with msgcask.open(store_path, max_file_size=SMALL_FILE) as store:
            assert len(store.queue("q")) == live - 3

    def test_dead_data_never_causes_store_full(self, store_path: Path) -> None:
        # Live data stays under half the limit while several limits' worth is written.
        store = msgcask.open(store_path, max_file_size=SMALL_FILE, max_store_size=self.LIMIT)
        try:
            q = store.queue("q")
            for rnd in range(8):
                for i in range(35):
                    q.put(b"%d-%d" % (rnd, i) + b"z" * 3000)
                for _ in range(35):
                    q.ack(q.get(block=False))
            assert len(q) == 0
        finally:
            store.close()


@pytest.mark.parametrize("path", [None, 123, ["a"]], ids=["none", "int", "list"])
def test_path_of_wrong_type_is_refused(tmp_path: Path, path: object) -> None:
    with pytest.raises(TypeError):
        msgcask.open(path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_directory_whose_name_is_not_utf8_is_a_store_like_any_other(tmp_path: Path) -> None:
    # Python gives such a name (bytes 0xe9: Latin-1) lone surrogates; the OS takes it.
    path = tmp_path / os.fsdecode(b"caf\xe9")
    with msgcask.open(path, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(2000):  # an index file mostly free pages: the pass shrinks it
            q.put(b"x" * 100)
        store.sync()
        for _ in range(1990):
            q.ack(q.get(block=False))
        store.sync()
        index_bytes = store.stats().index_bytes
        store.compact()
        assert store.stats().index_bytes < index_bytes
    assert os.listdir(os.fsencode(tmp_path)) == [b"caf\xe9"]
    with msgcask.open(path, compaction_interval=None) as store:
        assert store.recovery.mode == "clean"
        assert len(store.queue("q")) == 10


SELECTOR_CALLS: dict[str, Callable[[msgcask.Store, msgcask.Queue, msgcask.Message], object]] = {
    "queue": lambda s, q, m: s.queue("new"),
    "sync": lambda s, q, m: s.sync(),
    "put": lambda s, q, m: q.put(b"c"),
    "put_many": lambda s, q, m: q.put_many([b"c"]),
    "get": lambda s, q, m: q.get(block=False),
    "ack": lambda s, q, m: q.ack(m),
    "nack": lambda s, q, m: q.nack(m),
    "len": lambda s, q, m: len(q),
    "purge": lambda s, q, m: q.purge(),
    "delete_queue": lambda s, q, m: s.delete_queue("q"),
    "stats": lambda s, q, m: s.stats(),
    "compact": lambda s, q, m: s.compact(),
    "transaction": lambda s, q, m: s.transaction().__enter__().put("q", b"c"),
    "close": lambda s, q, m: s.close(),
}


@pytest.mark.parametrize("call", sorted(SELECTOR_CALLS))
def test_a_selector_that_calls_the_store_fails_its_get_and_changes_nothing(
    store_path: Path, snapshot: Snapshot, call: str
) -> None:
    # A selector runs in the middle of a get, with the store locked and an index
    # cursor open: a call back into the store could commit under it or wait for itself.
    store = msgcask.open(store_path)
    try:
        q = store.queue("q")
        q.put(b"delivered")
        q.put(b"a", headers={"t": "x"})
        q.put(b"b", headers={"t": "y"})
        delivered = q.get(block=False)

        def selector(headers: dict[str, str]) -> bool:
            SELECTOR_CALLS[call](store, q, delivered)
            return True

        before = snapshot(store, store_path)
        with pytest.raises(msgcask.Error, match="a selector must not call the store"):
            q.get(block=False, selector=selector)
        assert snapshot(store, store_path) == before
        assert q.get(block=False).body == b"a"  # the store still works
        q.ack(delivered)
    finally:
        store.close()
    with msgcask.open(store_path) as reopened:
        assert reopened.recovery.mode == "clean"  # the index was not given up
        assert [m.body for m in reopened.queue("q").browse()] == [b"a", b"b"]


@pytest.mark.parametrize("call", SURROGATE_CALLS.values(), ids=SURROGATE_CALLS.keys())
def test_text_that_is_not_utf8_is_refused_with_a_reason(
    seeded: tuple[msgcask.Store, Any], call: BadCall
) -> None:
    # That it changes nothing is checked with the other bad values.
    with pytest.raises(ValueError, match="lone surrogate") as raised:
        call(*seeded)
    assert not isinstance(raised.value, UnicodeError)


def test_a_transaction_refuses_text_that_is_not_utf8_at_the_put(
    seeded: tuple[msgcask.Store, Any],
) -> None:
    store, _ = seeded
    with store.transaction() as tx:
        kept = tx.put("orders", b"kept")
        with pytest.raises(ValueError, match="lone surrogate"):
            tx.put("orders", b"refused", headers={"name": "caf\udce9"})
    assert kept in [m.id for m in store.queue("orders").browse()]


def test_an_earlier_delivery_of_a_message_cannot_be_acked(store: msgcask.Store) -> None:
    q = store.queue("q")
    q.put(b"x")
    first = q.get(block=False)
    q.nack(first)
    second = q.get(block=False)
    assert second.id == first.id and second.deliveries == 2
    for settle in (q.ack, q.nack):
        with pytest.raises(ValueError, match="delivered again since"):
            settle(first)
    with store.transaction() as tx, pytest.raises(ValueError, match="delivered again since"):
        tx.ack(first)
    assert len(q) == 1
    q.ack(second)
    assert len(q) == 0


@pytest.mark.parametrize(
    ("made", "says"),
    [
        ("browsed_before_the_get", r"listed by browse\(\) before the message was delivered"),
        ("deliveries_ahead", r"says it is delivery 2 .*latest delivery is 1: get\(\) did not"),
        ("deliveries_negative", r"says it is delivery -1 .*get\(\) did not return it"),
    ],
)
def test_a_message_of_no_delivery_is_refused_without_claiming_a_later_one(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot, made: str, says: str
) -> None:
    # Not "delivered again since": the message was delivered once, and not after it.
    store, q = seeded
    listed = next(iter(q.browse()))
    delivered = q.get(block=False)
    assert (listed.id, listed.deliveries, delivered.deliveries) == (delivered.id, 0, 1)
    bad = {
        "browsed_before_the_get": listed,
        "deliveries_ahead": delivered._replace(deliveries=2),
        "deliveries_negative": delivered._replace(deliveries=-1),
    }[made]
    before = snapshot(store, store_path)
    for settle in (q.ack, q.nack):
        with pytest.raises(ValueError, match=says):
            settle(bad)
    with pytest.raises(ValueError, match=says), store.transaction() as tx:
        tx.ack(bad)
    assert snapshot(store, store_path) == before
    q.ack(delivered)


def test_a_transaction_refuses_an_ack_whose_message_was_delivered_again_before_the_commit(
    store: msgcask.Store,
) -> None:
    # Checked at the commit too: a nack and a new delivery can come between.
    q = store.queue("q")
    q.put(b"x")
    first = q.get(block=False)
    tx = store.transaction()
    tx.ack(first)
    q.nack(first)
    second = q.get(block=False)
    assert second.deliveries == 2
    with pytest.raises(ValueError, match="delivered again since"):
        tx.commit()
    assert len(q) == 1
    q.ack(second)  # the latest delivery's consumer still settles it
    assert len(q) == 0


def test_a_message_another_store_delivered_cannot_be_acked(tmp_path: Path) -> None:
    with msgcask.open(tmp_path / "a") as a, msgcask.open(tmp_path / "b") as b:
        qa, qb = a.queue("jobs"), b.queue("jobs")
        qa.put(b"A")
        qb.put(b"B")
        from_a, from_b = qa.get(block=False), qb.get(block=False)
        assert (from_a.id, from_a.deliveries) == (from_b.id, from_b.deliveries)
        with pytest.raises(ValueError, match="another store"):
            qb.ack(from_a)
        with pytest.raises(ValueError, match="another store"):
            qb.nack(from_a)
        assert len(qb) == 1
        qb.ack(from_b)
        assert len(qb) == 0


def test_a_queue_handle_keeps_its_name(store: msgcask.Store) -> None:
    # Every record the handle writes carries the name: one the format cannot hold
    # would fail the index, or be dropped by a rebuild with the message in it.
    q = store.queue("orders")
    with pytest.raises(AttributeError):
        q.name = "x" * 300  # type: ignore[misc]
    q.put(b"kept")
    assert q.name == "orders" and store.queues() == ["orders"]


def test_a_queue_handle_made_directly_reaches_the_queue_of_its_name(
    store: msgcask.Store,
) -> None:
    store.queue("orders").put(b"first")
    q = msgcask.Queue(store, "orders")
    assert repr(q) == "<msgcask.Queue 'orders'>"
    q.put(b"second")
    got = q.get(block=False)
    assert got is not None and bytes(got.body) == b"first"
    q.ack(got)
    assert [bytes(m.body) for m in store.queue("orders").browse()] == [b"second"]


@pytest.mark.parametrize("attribute", ["path", "options"])
def test_a_store_keeps_its_path_and_options(tmp_path: Path, attribute: str) -> None:
    # Compaction creates and deletes data files under the store's path: another
    # one would have it delete that directory's files, as if they were its own.
    other = tmp_path / "other"
    other.mkdir()
    (other / "0000000001.log").write_bytes(b"another store's data")
    replacement = {"path": str(other), "options": Options(max_file_size=2**31)}[attribute]
    with msgcask.open(tmp_path / "store", max_file_size=SMALL_FILE) as store:
        q = store.queue("q")
        for _ in range(200):
            q.put(b"x" * 1000)
        for _ in range(200):
            q.ack(q.get(block=False))
        with pytest.raises(AttributeError):
            setattr(store, attribute, replacement)
        assert store.path == str(tmp_path / "store")
        assert store.options.max_file_size == SMALL_FILE
        assert store.compact().files_deleted > 0
        assert store.verify() == []
    assert (other / "0000000001.log").read_bytes() == b"another store's data"


def test_a_browsed_message_cannot_be_acked_by_another_store(tmp_path: Path) -> None:
    with msgcask.open(tmp_path / "a") as a, msgcask.open(tmp_path / "b") as b:
        qa, qb = a.queue("jobs"), b.queue("jobs")
        qa.put(b"A")
        qb.put(b"B")
        qa.get(block=False)
        from_b = qb.get(block=False)
        listed = next(qa.browse())
        assert listed.id == from_b.id
        with pytest.raises(ValueError, match="another store"):
            qb.ack(listed)
        with pytest.raises(ValueError, match="another store"):
            with b.transaction() as tx:
                tx.ack(listed)
        assert len(qb) == 1
        qa.ack(listed)  # its own store takes it
        assert len(qa) == 0


def test_a_delivered_message_pickles_and_copies_as_a_plain_message(store: msgcask.Store) -> None:
    q = store.queue("q")
    q.put(b"x", headers={"k": "v"})
    m = q.get(block=False)
    copied = pickle.loads(pickle.dumps(m))
    assert type(copied) is msgcask.Message and copied == m
    assert repr(copied) == repr(m)
    q.ack(copied)  # a copy's origin is not known: taken at its word
    assert len(q) == 0


COPIES: dict[str, Callable[[object], object]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
}


@pytest.mark.parametrize("how", COPIES.values(), ids=COPIES.keys())
@pytest.mark.parametrize("what", ["store", "queue", "transaction"])
def test_a_store_or_transaction_cannot_be_copied(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot, what: str, how: Any
) -> None:
    # A copy would share the open files and index (closing it closes them under
    # the store), or a transaction's puts (committing both writes them twice).
    # A queue handle's shallow copy is another handle of the same queue.
    store, q = seeded
    tx = store.transaction()
    tx.put("orders", b"once")
    before = snapshot(store, store_path)
    original = {"store": store, "queue": q, "transaction": tx}[what]
    if what == "queue" and how is copy.copy:
        assert copy.copy(q).put(b"through the copy") > 0
        return
    owner = "Transaction" if what == "transaction" else "Store"
    says = f"a msgcask {owner} cannot be copied or pickled: .*\\. (Share|Make) "  # what to do
    with pytest.raises(TypeError, match=says):
        how(original)
    assert snapshot(store, store_path) == before
    tx.commit()
    assert [m.body for m in q.browse()].count(b"once") == 1
    assert store.verify() == []


@pytest.mark.parametrize("body", [None, 5, "text"], ids=["none", "int", "str"])
def test_a_message_built_with_a_body_of_no_bytes_has_a_repr(body: object) -> None:
    # A repr that raises hides the object in tracebacks, logs and assertion reports.
    message = msgcask.Message(1, "q", body, {}, 4, 1)  # type: ignore[arg-type]
    assert repr(message) == (
        f"Message(id=1, queue='q', priority=4, deliveries=1, headers={{}}, body={body!r})"
    )
    assert repr(message._replace(body=b"four")).endswith("body=<4 bytes>)")
    # A body built as a buffer of bytes is shown by its size too, never its content.
    assert repr(message._replace(body=bytearray(5))).endswith("body=<5 bytes>)")
    assert repr(message._replace(body=memoryview(b"six..."))).endswith("body=<6 bytes>)")


class _BytesPath:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> bytes:
        return bytes(self.path)


def _open_failures(tmp_path: Path) -> dict[str, tuple[object, type[Exception], str]]:
    (tmp_path / "a-file").write_bytes(b"")
    (tmp_path / "dir-named-like-a-data-file" / "0000000009.log").mkdir(parents=True)
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "0000000001.log").write_bytes(b"not a data file" * 10)
    (tmp_path / "dangling").symlink_to(tmp_path / "unmounted" / "store")
    return {
        "under_a_file": (tmp_path / "a-file" / "store", msgcask.Error, "Not a directory"),
        "empty": ("", ValueError, "must not be empty"),
        "nul_in_path": (tmp_path / "a\0b", ValueError, "holds a NUL character"),
        "data_file_is_a_directory": (
            tmp_path / "dir-named-like-a-data-file",
            msgcask.Error,
            "Is a directory",
        ),
        "garbage_data_file": (
            tmp_path / "garbage",
            msgcask.CorruptionError,
            "bad magic.*msgcask check .*garbage",  # what to do, and where
        ),
        "bytes_path": (_BytesPath(tmp_path / "bytes-store"), TypeError, "str path"),
        # Not "File exists. Move what is in the way out of the store's directory".
        "dangling_link": (
            tmp_path / "dangling",
            msgcask.Error,
            f"symbolic link to {tmp_path}/unmounted/store, which does not exist",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "under_a_file",
        "empty",
        "nul_in_path",
        "data_file_is_a_directory",
        "garbage_data_file",
        "bytes_path",
        "dangling_link",
    ],
)
def test_an_open_that_fails_raises_a_msgcask_error_and_changes_nothing(
    tmp_path: Path, case: str
) -> None:
    path, error, says = _open_failures(tmp_path)[case]
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(error, match=says) as raised:
        msgcask.open(path)  # type: ignore[arg-type]
    assert isinstance(raised.value, (msgcask.Error, ValueError, TypeError))
    assert not isinstance(raised.value, OSError)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


_FAILURES_INSIDE_OPEN: dict[str, tuple[BaseException, type[Exception]]] = {
    "os_error": (OSError(errno.EIO, "Input/output error"), msgcask.Error),
    "index_error": (lmdb.MapFullError("mdb_put: MDB_MAP_FULL"), msgcask.IndexFailedError),
}


@pytest.mark.parametrize("parent", ["new", "existing"])
@pytest.mark.parametrize(
    "failure", _FAILURES_INSIDE_OPEN.values(), ids=_FAILURES_INSIDE_OPEN.keys()
)
def test_an_open_that_fails_midway_leaves_no_directory_it_made(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: tuple[BaseException, type[Exception]],
    parent: str,
) -> None:
    """The directories an open creates (the store's, and missing parents) go
    again when it fails after creating them; one that was there stays."""
    raised, error = failure
    if parent == "existing":
        (tmp_path / "a" / "b").mkdir(parents=True)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    def fail(*args: object) -> None:
        raise raised

    # Once the index of the new store exists: the failure comes as late as it can.
    monkeypatch.setattr(msgcask.Store, "_open_recovered", fail)
    with pytest.raises(error):
        msgcask.open(tmp_path / "a" / "b" / "store")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    monkeypatch.undo()
    with msgcask.open(tmp_path / "a" / "b" / "store") as store:  # and the path still works
        store.queue("q").put(b"x")


@pytest.mark.parametrize("kind", ["browsed", "browsed-id", "unknown-id", "acked-twice"])
def test_a_transaction_refuses_a_bad_ack_at_the_call_and_stays_usable(
    seeded: tuple[msgcask.Store, Any], store_path: Path, snapshot: Snapshot, kind: str
) -> None:
    store, q = seeded
    delivered = q.get(block=False)
    waiting = next(m for m in q.browse() if m.id != delivered.id)
    before = snapshot(store, store_path)
    tx = store.transaction()
    tx.ack(delivered)
    bad: object = {
        "browsed": waiting,
        "browsed-id": waiting.id,
        "unknown-id": max(m.id for m in q.browse()) + 1000,
        "acked-twice": delivered.id,
    }[kind]
    with pytest.raises(ValueError, match="not delivered and unacked"):
        tx.ack(bad)  # type: ignore[arg-type]
    assert snapshot(store, store_path) == before  # nothing written yet, nothing refused later
    tx.commit()  # the refused ack left the rest of the transaction as it was
    assert [m.id for m in q.browse()] == [waiting.id]


def test_a_get_that_waited_in_vain_says_how_long(store: msgcask.Store) -> None:
    q = store.queue("empty")
    with pytest.raises(msgcask.Empty) as raised:
        q.get(timeout=0.05)
    assert str(raised.value) == "no message arrived on queue 'empty' within 0.05 s"


def test_a_call_on_a_closed_store_says_to_open_it_again(store_path: Path) -> None:
    store = msgcask.open(store_path, compaction_interval=None)
    q = store.queue("q")
    q.put(b"kept")
    store.close()
    with pytest.raises(msgcask.ClosedError) as raised:
        q.put(b"after close")
    assert str(raised.value) == f"the store at {store_path} is closed; open it again to use it"
    with msgcask.open(store_path, compaction_interval=None) as again:
        assert [m.body for m in again.queue("q").browse()] == [b"kept"]


def test_a_misspelt_option_is_refused_naming_the_call_and_the_options(tmp_path: Path) -> None:
    path = tmp_path / "new-store"
    options = ", ".join(f.name for f in fields(Options))
    with pytest.raises(TypeError) as refused:
        msgcask.open(path, compaction_treshold=0.3)
    assert str(refused.value) == (
        "msgcask.open() got an unknown option 'compaction_treshold' (did you mean "
        f"'compaction_threshold'?); the options are {options} (docs/tuning.md)"
    )
    with pytest.raises(TypeError) as refused:
        msgcask.open(path, colour="blue")
    assert str(refused.value) == (
        f"msgcask.open() got an unknown option 'colour'; the options are {options} (docs/tuning.md)"
    )
    assert not path.exists()
