"""Queue semantics through the public API: order, blocking, selectors, redelivery,
dead-lettering, transactions, batches, purge/delete, persistence across reopen."""

from __future__ import annotations

import queue as stdlib_queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import msgcask
from draining import each_available
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import data_file_name

Verify = Callable[[msgcask.Store], None]


def _drain(q: Any) -> list[Any]:
    """Get and ack everything available, in delivery order."""
    out = []
    for m in each_available(q):
        q.ack(m)
        out.append(m)
    return out


class TestOrder:
    def test_higher_priority_is_delivered_first_then_fifo(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        plan = [(4, b"a"), (9, b"b"), (0, b"c"), (4, b"d"), (9, b"e"), (0, b"f"), (5, b"g")]
        ids = {body: q.put(body, priority=p) for p, body in plan}
        expected = [body for p, body in sorted(plan, key=lambda pb: (-pb[0], ids[pb[1]]))]
        assert [m.body for m in q.browse()] == expected
        assert [m.body for m in _drain(q)] == expected

    # Delivery moves the queue's cursor past what it delivered: a put that sorts
    # before the cursor must move it back, on each path a put takes (a space cap
    # sends single puts through the store's lock; put_many writes a batch).
    @pytest.mark.parametrize("put_many", [False, True], ids=["put", "put_many"])
    @pytest.mark.parametrize("max_store_size", [None, 2**30], ids=["uncapped", "capped"])
    def test_a_higher_priority_put_after_a_get_is_delivered_next(
        self, store_path: Path, put_many: bool, max_store_size: int | None
    ) -> None:
        options: dict[str, Any] = {"compaction_interval": None, "max_store_size": max_store_size}
        with msgcask.open(store_path, **options) as store:
            q = store.queue("q")
            for body in (b"low 1", b"low 2"):
                q.put(body, priority=1)
            first = q.get(block=False)
            assert first.body == b"low 1"
            if put_many:
                q.put_many([b"high"], priority=9)
            else:
                q.put(b"high", priority=9)
            assert [m.body for m in _drain(q)] == [b"high", b"low 2"]
            q.ack(first)

    def test_ids_are_global_and_increasing_across_queues(self, store: msgcask.Store) -> None:
        a, b = store.queue("a"), store.queue("b")
        ids = [a.put(b"1"), b.put(b"2"), a.put(b"3"), *b.put_many([b"4", b"5"]), a.put(b"6")]
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)

    def test_ids_are_not_reused_after_the_highest_is_acked_and_reopened(
        self, store_path: Path
    ) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            q.put(b"low")
            top = q.put(b"top", priority=9)
            m = q.get(block=False)
            assert m.id == top
            q.ack(m)
        with msgcask.open(store_path) as store:
            assert store.queue("q").put(b"new") > top

    def test_message_fields_round_trip(self, store: msgcask.Store) -> None:
        q = store.queue("orders")
        body = bytes(range(256)) * 3
        mid = q.put(bytearray(body), headers={"k": "v", "\u00fc": "\u2603"}, priority=6)
        m = q.get(block=False)
        assert (m.id, m.queue, bytes(m.body), m.priority) == (mid, "orders", body, 6)
        assert dict(m.headers) == {"k": "v", "\u00fc": "\u2603"}
        assert (m.deliveries, m.redelivered) == (1, False)
        q.ack(m)

    def test_memoryview_and_empty_body_are_accepted(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put(memoryview(b"viewed"))
        q.put(b"")
        assert [bytes(m.body) for m in _drain(q)] == [b"viewed", b""]

    def test_messages_survive_reopen_in_order(self, store_path: Path, verify: Verify) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            for i in range(20):
                q.put(b"m%d" % i, headers={"i": str(i)}, priority=i % 3)
            before = [(m.id, bytes(m.body), dict(m.headers), m.priority) for m in q.browse()]
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            after = [(m.id, bytes(m.body), dict(m.headers), m.priority) for m in q.browse()]
            assert after == before
            verify(store)

    def test_messages_put_after_gets_began_keep_their_place(self, store: msgcask.Store) -> None:
        # get() goes on from where it got to in the queue; whatever arrives later, at
        # any priority, must still come out in priority order, then in put order.
        q = store.queue("q")
        plan: list[tuple[int, bytes]] = [(4, b"a1"), (4, b"a2"), (0, b"z1"), (4, b"a3")]
        ids = {body: q.put(body, priority=p) for p, body in plan}
        got = [q.get(block=False)]
        for p, body in [(4, b"a4"), (9, b"top"), (0, b"z2"), (5, b"mid"), (4, b"a5")]:
            ids[body] = q.put(body, priority=p)
            plan.append((p, body))
            got.append(q.get(block=False))
        while len(got) < len(plan):
            got.append(q.get(block=False))
        # What is taken at each step is the best of what was there at the time.
        want = [b"a1", b"a2", b"top", b"a3", b"mid", b"a4", b"a5", b"z1", b"z2"]
        assert [m.body for m in got] == want
        assert len({m.id for m in got}) == len(plan)

    def test_a_nacked_message_comes_back_before_later_ones(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        ids = [q.put(b"m%d" % i) for i in range(5)]
        first, second = q.get(block=False), q.get(block=False)
        q.nack(first)
        assert [m.id for m in _drain(q)] == [ids[0], *ids[2:]]
        q.ack(second)

    def test_headers_of_delivered_messages_are_their_own(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        mine = {"k": "v"}
        q.put_many([b"a", b"b"], headers=mine)
        q.put(b"c", headers=mine)
        mine["k"] = "changed by the producer"
        a = q.get(block=False)
        a.headers["k"] = "changed by the consumer"
        assert [dict(q.get(block=False).headers) for _ in range(2)] == [{"k": "v"}] * 2


class TestBlocking:
    def test_get_on_empty_queue_without_blocking_raises_empty(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        with pytest.raises(msgcask.Empty):
            q.get(block=False)
        # Code written for the standard library's queue.Empty works unchanged.
        with pytest.raises(stdlib_queue.Empty):
            q.get(block=False)

    def test_get_with_timeout_waits_then_raises_empty(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        raised: list[BaseException] = []

        def getter() -> None:
            try:
                q.get(timeout=0.5)
            except msgcask.Empty as e:
                raised.append(e)

        t = threading.Thread(target=getter)
        t.start()
        # It waits on the queue (counted as a waiter) instead of returning at once.
        deadline = time.monotonic() + 10
        while store._queues["q"].waiting == 0 and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert store._queues["q"].waiting == 1 and not raised
        t.join()
        [error] = raised
        assert "no message arrived on queue 'q' within 0.5 s" in str(error)

    def test_blocked_get_is_woken_by_put_from_another_thread(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        sent: list[int] = []

        def producer() -> None:
            time.sleep(0.2)
            sent.append(q.put(b"wake up"))

        t = threading.Thread(target=producer)
        t.start()
        m = q.get(timeout=30)
        t.join()
        assert m.id == sent[0] and m.body == b"wake up"
        q.ack(m)

    def test_blocked_get_is_woken_by_nack(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put(b"only")
        m = q.get(block=False)
        t = threading.Timer(0.2, q.nack, args=(m,))
        t.start()
        again = q.get(timeout=30)
        t.join()
        assert again.id == m.id and again.redelivered
        q.ack(again)

    def test_delivered_message_is_invisible_to_other_gets(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put(b"one")
        m = q.get(block=False)
        with pytest.raises(msgcask.Empty):
            q.get(block=False)
        assert len(q) == 1  # still live: delivered but not acked
        q.ack(m)
        assert len(q) == 0


class TestSelectors:
    def test_selector_returns_first_matching_in_delivery_order(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put(b"a1", headers={"t": "a"}, priority=5)
        b1 = q.put(b"b1", headers={"t": "b"}, priority=1)
        b2 = q.put(b"b2", headers={"t": "b"}, priority=8)
        q.put(b"none")
        m = q.get(block=False, selector=lambda h: (h or {}).get("t") == "b")
        assert m.id == b2  # priority 8 beats the older priority-1 match
        q.ack(m)
        m = q.get(block=False, selector=lambda h: (h or {}).get("t") == "b")
        assert m.id == b1
        q.ack(m)
        with pytest.raises(msgcask.Empty):
            q.get(block=False, selector=lambda h: (h or {}).get("t") == "b")
        # Skipped messages keep their place.
        assert [m.body for m in _drain(q)] == [b"a1", b"none"]

    def test_selector_receives_the_headers(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put(b"x", headers={"k": "v"})
        seen: list[Any] = []

        def selector(h: Any) -> bool:
            seen.append(dict(h or {}))
            return True

        q.ack(q.get(block=False, selector=selector))
        assert seen == [{"k": "v"}]

    def test_blocked_get_with_selector_ignores_non_matching_puts(
        self, store: msgcask.Store
    ) -> None:
        q = store.queue("q")

        def producer() -> None:
            time.sleep(0.1)
            q.put(b"nope", headers={"t": "x"})
            time.sleep(0.1)
            q.put(b"yes", headers={"t": "y"})

        t = threading.Thread(target=producer)
        t.start()
        m = q.get(timeout=30, selector=lambda h: (h or {}).get("t") == "y")
        t.join()
        assert m.body == b"yes"
        q.ack(m)
        assert [x.body for x in q.browse()] == [b"nope"]


class TestRedelivery:
    def test_nack_returns_message_to_its_original_position(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        first = q.put(b"first")
        q.put(b"second")
        m = q.get(block=False)
        assert m.id == first
        q.nack(m)
        again = q.get(block=False)
        assert (again.id, again.deliveries, again.redelivered) == (first, 2, True)
        q.ack(again)
        nxt = q.get(block=False)
        assert (nxt.body, nxt.deliveries, nxt.redelivered) == (b"second", 1, False)
        q.ack(nxt)

    def test_nack_by_id_works(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put(b"x")
        m = q.get(block=False)
        q.nack(m.id)
        assert q.get(block=False).deliveries == 2

    def test_unacked_delivery_comes_back_redelivered_after_reopen(self, store_path: Path) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            mid = q.put(b"in flight")
            q.put(b"never delivered")
            assert q.get(block=False).id == mid
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            m = q.get(block=False)
            assert (m.id, m.redelivered, m.deliveries) == (mid, True, 2)
            n = q.get(block=False)
            assert (n.body, n.redelivered) == (b"never delivered", False)

    def test_exhausted_message_moves_to_default_dead_letter_queue(
        self, store: msgcask.Store, verify: Verify
    ) -> None:
        q = store.queue("work", max_deliveries=2)
        old = q.put(b"poison", headers={"k": "v"}, priority=7)
        later = q.put(b"fine")
        m = q.get(block=False)
        q.nack(m)  # deliveries 1 < 2: back in the queue
        m = q.get(block=False)
        assert (m.id, m.deliveries) == (old, 2)
        q.nack(m)  # deliveries 2 >= 2: dead-lettered
        assert "DLQ.work" in store.queues()
        assert [x.id for x in q.browse()] == [later]
        dead = list(store.queue("DLQ.work").browse())
        assert len(dead) == 1
        d = dead[0]
        assert d.id != old and d.id > later  # a new id, never a reused one
        assert (bytes(d.body), d.priority) == (b"poison", 7)
        assert dict(d.headers) == {
            "k": "v",
            "x-dead-letter-from": "work",
            "x-original-id": str(old),
        }
        verify(store)

    def test_custom_dead_letter_queue_and_persistence(self, store_path: Path) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("work", max_deliveries=1, dead_letter_queue="graveyard")
            old = q.put(b"poison")
            q.nack(q.get(block=False))
        with msgcask.open(store_path) as store:
            assert "graveyard" in store.queues()
            assert "DLQ.work" not in store.queues()
            (d,) = list(store.queue("graveyard").browse())
            assert d.body == b"poison" and dict(d.headers)["x-original-id"] == str(old)
            assert len(store.queue("work")) == 0

    def test_settings_left_out_of_a_later_queue_call_keep_what_was_set(
        self, store: msgcask.Store
    ) -> None:
        store.queue("work", max_deliveries=1, dead_letter_queue="parking")
        store.queue("work", max_deliveries=1)  # no dead_letter_queue: still "parking"
        q = store.queue("work")  # nothing: still max_deliveries=1
        q.put(b"poison")
        q.nack(q.get(block=False))
        assert [m.body for m in store.queue("parking").browse()] == [b"poison"]
        assert "DLQ.work" not in store.queues()

    def test_a_handle_brings_its_deleted_queue_back_with_its_settings(
        self, store: msgcask.Store
    ) -> None:
        q = store.queue("work", max_deliveries=2)
        q.put(b"old")
        store.delete_queue("work")
        q.put(b"poison")  # the queue is back, and so is its max_deliveries
        q.nack(q.get(block=False))
        q.nack(q.get(block=False))
        assert len(q) == 0
        assert [m.body for m in store.queue("DLQ.work").browse()] == [b"poison"]

    def test_nack_whose_queue_is_deleted_while_it_dead_letters_says_so(
        self, store: msgcask.Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A dead-letter move is written after nack lets go of the store's lock
        # (its batch may wait for space); another thread deletes the queue then.
        q = store.queue("work", max_deliveries=1)
        q.put(b"poison")
        m = q.get(block=False)
        write_batch = msgcask.puts.write_batch

        def delete_first(*args: Any, **kwargs: Any) -> list[int]:
            done = threading.Thread(target=store.delete_queue, args=("work",))
            done.start()
            done.join()
            return write_batch(*args, **kwargs)

        monkeypatch.setattr(msgcask.puts, "write_batch", delete_first)
        with pytest.raises(ValueError, match="not delivered-and-unacked on queue 'work'") as e:
            q.nack(m)
        assert not isinstance(e.value, msgcask.MessageTooLargeError)
        assert "transaction" not in str(e.value)  # a nack, not a transaction's ack
        assert "DLQ.work" not in store.queues()  # nothing changed
        assert store.stats().live_messages == 0

    def test_queue_without_max_deliveries_never_dead_letters(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        mid = q.put(b"x")
        for n in range(1, 8):
            m = q.get(block=False)
            assert (m.id, m.deliveries) == (mid, n)
            q.nack(m)
        assert store.queues() == ["q"]

    def test_a_delivery_count_stays_at_its_highest_value(self, store_path: Path) -> None:
        # Counts are 16 bits on disk: a message delivered that often (a data file
        # says so here) is delivered again and again with the count saturated.
        store_path.mkdir()
        header = codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1)
        put = codec.encode_put(1, b"q", 4, fmt.MAX_DELIVERIES_COUNTED, b"", b"x")
        (store_path / data_file_name(1)).write_bytes(header + put)
        with msgcask.open(store_path, compaction_interval=None) as store:
            q = store.queue("q")
            for _ in range(2):
                m = q.get(block=False)
                assert (m.id, m.deliveries) == (1, fmt.MAX_DELIVERIES_COUNTED)
                q.nack(m)


class TestTransactions:
    def test_commit_applies_all_puts_and_acks(self, store: msgcask.Store) -> None:
        a, b = store.queue("a"), store.queue("b")
        a.put(b"to ack")
        m = a.get(block=False)
        with store.transaction() as tx:
            i1 = tx.put("a", b"x", priority=1)
            i2 = tx.put("b", b"y", headers={"h": "1"})
            tx.ack(m)
            # Nothing is visible before the block exits.
            assert len(b) == 0
            assert len(a) == 1
        assert [x.id for x in a.browse()] == [i1]
        assert [(x.id, dict(x.headers)) for x in b.browse()] == [(i2, {"h": "1"})]
        with pytest.raises(ValueError):
            a.ack(m)  # already acked by the transaction

    def test_exception_rolls_back_everything_and_is_reraised(
        self, store: msgcask.Store, store_path: Path, snapshot: Callable[..., Any]
    ) -> None:
        q = store.queue("q")
        q.put(b"to ack")
        m = q.get(block=False)
        before = snapshot(store, store_path)

        class Boom(Exception):
            pass

        with pytest.raises(Boom):
            with store.transaction() as tx:
                tx.put("q", b"x")
                tx.put("new-queue", b"y")
                tx.ack(m)
                raise Boom
        assert snapshot(store, store_path) == before
        assert "new-queue" not in store.queues()
        q.ack(m)  # still delivered: the rolled-back ack did not happen

    def test_committed_transaction_survives_reopen(self, store_path: Path) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            q.put(b"old")
            m = q.get(block=False)
            with store.transaction() as tx:
                new = tx.put("q", b"new")
                tx.ack(m)
        with msgcask.open(store_path) as store:
            assert [x.id for x in store.queue("q").browse()] == [new]


class TestBatches:
    def test_put_many_returns_ids_in_order(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        ids = q.put_many([b"a", b"b", b"c"], headers={"k": "v"}, priority=2)
        assert ids == sorted(ids) and len(set(ids)) == 3
        got = _drain(q)
        assert [(m.id, m.body, dict(m.headers), m.priority) for m in got] == [
            (ids[0], b"a", {"k": "v"}, 2),
            (ids[1], b"b", {"k": "v"}, 2),
            (ids[2], b"c", {"k": "v"}, 2),
        ]

    def test_put_many_with_one_bad_item_puts_nothing(
        self, store: msgcask.Store, store_path: Path, snapshot: Callable[..., Any]
    ) -> None:
        q = store.queue("q")
        q.put(b"existing")
        before = snapshot(store, store_path)
        with pytest.raises(TypeError):
            q.put_many([b"a", b"b", 3, b"d"])
        assert snapshot(store, store_path) == before

    def test_put_many_empty_list_puts_nothing(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        assert q.put_many([]) == []
        assert len(q) == 0


class TestPurgeDelete:
    def test_purge_removes_available_and_keeps_delivered(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put_many([b"1", b"2", b"3", b"4"])
        m = q.get(block=False)
        assert q.purge() == 3
        assert len(q) == 1
        q.ack(m)
        assert len(q) == 0
        assert q.purge() == 0

    def test_purge_is_durable(self, store_path: Path) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            q.put_many([b"1", b"2"])
            assert q.purge() == 2
            keep = q.put(b"after purge")
        with msgcask.open(store_path) as store:
            assert [m.id for m in store.queue("q").browse()] == [keep]

    @pytest.mark.parametrize("remove", ["purge", "delete_queue"])
    def test_purge_of_more_acks_than_a_file_holds_keeps_files_in_size(
        self, store_path: Path, remove: str
    ) -> None:
        # 5,000 ACK records are 105,000 bytes: more than one 64 KiB data file holds.
        size = 65536
        with msgcask.open(store_path, max_file_size=size, compaction_interval=None) as store:
            q = store.queue("q")
            for _ in range(50):
                q.put_many([b""] * 100)
            removed = q.purge() if remove == "purge" else store.delete_queue("q")
            assert removed == 5000
        assert all(p.stat().st_size <= size for p in store_path.glob("*.log"))
        with msgcask.open(store_path, max_file_size=size) as store:
            assert store.stats().live_messages == 0
            assert store.verify() == []

    def test_delete_queue_removes_it_and_its_messages(self, store_path: Path) -> None:
        with msgcask.open(store_path) as store:
            store.queue("b").put(b"x")
            store.queue("a").put_many([b"1", b"2"])
            store.queue("c")
            assert store.queues() == ["a", "b", "c"]
            store.delete_queue("a")
            assert store.queues() == ["b", "c"]
            assert store.stats().live_messages == 1
            with pytest.raises(ValueError):
                store.delete_queue("a")
        with msgcask.open(store_path) as store:
            assert store.queues() == ["b", "c"]
            # Getting it again creates a new, empty queue.
            assert len(store.queue("a")) == 0

    def test_reading_through_a_deleted_queues_handle_does_not_bring_it_back(
        self, store_path: Path
    ) -> None:
        with msgcask.open(store_path, compaction_interval=None) as store:
            q = store.queue("gone")
            q.put(b"x")
            store.delete_queue("gone")
            assert len(q) == 0
            assert list(q.browse()) == []
            assert q.purge() == 0
            with pytest.raises(msgcask.Empty):
                q.get(block=False)
            with pytest.raises(msgcask.Empty):
                q.get(timeout=0)  # waits for nothing, so it is a read too
            assert "gone" not in store.queues()
        with msgcask.open(store_path, compaction_interval=None) as store:
            assert "gone" not in store.queues()

    def test_a_put_or_a_waiting_get_through_it_creates_the_queue_anew(
        self, store: msgcask.Store
    ) -> None:
        q = store.queue("gone")
        q.put(b"old")
        store.delete_queue("gone")
        with pytest.raises(msgcask.Empty):
            q.get(timeout=0.01)
        assert store.queues() == ["gone"]
        store.delete_queue("gone")
        new = q.put(b"new")
        assert store.queues() == ["gone"]
        assert [m.id for m in q.browse()] == [new]

    def test_delete_queue_with_delivered_messages(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put(b"x")
        m = q.get(block=False)
        store.delete_queue("q")
        assert "q" not in store.queues()
        assert store.stats().live_messages == 0
        # The delivery belonged to the deleted queue: acking it now is refused.
        with pytest.raises((ValueError, msgcask.Error)):
            store.queue("q").ack(m)


class TestBrowse:
    def test_browse_does_not_deliver(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put_many([b"1", b"2"])
        assert [m.body for m in q.browse()] == [b"1", b"2"]
        assert [m.body for m in q.browse()] == [b"1", b"2"]
        m = q.get(block=False)
        assert (m.body, m.deliveries) == (b"1", 1)
        q.ack(m)

    def test_len_counts_available_and_delivered(self, store: msgcask.Store) -> None:
        q = store.queue("q")
        q.put_many([b"1", b"2", b"3"])
        assert len(q) == 3
        m = q.get(block=False)
        assert len(q) == 3
        q.ack(m)
        assert len(q) == 2

    def test_stats_live_messages_follows_the_queues(
        self, store: msgcask.Store, verify: Verify
    ) -> None:
        store.queue("a").put_many([b"1", b"2"])
        store.queue("b").put(b"3")
        assert store.stats().live_messages == 3
        verify(store)

    def test_browse_straddling_a_delete_and_recreate_stays_in_order(
        self, store: msgcask.Store
    ) -> None:
        # browse() reads 256 messages per lock hold. Between two, the queue is
        # deleted and made again under the same name, with a message of priority
        # 9: the browse must not go on into the new queue from its start, which
        # would list that message after the old queue's priority-0 ones.
        q = store.queue("q")
        q.put_many([b"old"] * 300, priority=0)
        it = q.browse()
        assert next(it).body == b"old"  # the first chunk is read
        store.delete_queue("q")
        q.put(b"new", priority=9)
        rest = list(it)
        keys = [(-m.priority, m.id) for m in rest]
        assert keys == sorted(keys), [(m.priority, m.body) for m in rest]
        assert [m.body for m in rest] == [b"old"] * 255  # what it read before the delete


class TestLifecycle:
    def test_context_manager_closes_and_releases_the_lock(self, store_path: Path) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            q.put(b"x")
        with pytest.raises(msgcask.ClosedError):
            q.put(b"y")
        # The lock was released: the same process can open it again at once.
        with msgcask.open(store_path) as again:
            assert len(again.queue("q")) == 1

    def test_every_call_after_close_is_refused(self, store_path: Path) -> None:
        store = msgcask.open(store_path)
        tx = store.transaction()
        store.close()
        calls = {
            "pause_compaction": store.pause_compaction,
            "resume_compaction": store.resume_compaction,
            "transaction put": lambda: tx.put("q", b"x"),
        }
        for name, call in calls.items():
            with pytest.raises(msgcask.ClosedError, match="open it again"):
                call()
                pytest.fail(f"{name} was not refused")

    def test_context_manager_closes_on_exception(self, store_path: Path) -> None:
        with pytest.raises(RuntimeError):
            with msgcask.Store(store_path) as store:
                store.queue("q").put(b"x")
                raise RuntimeError("boom")
        with pytest.raises(msgcask.ClosedError):
            store.queues()
        with msgcask.open(store_path) as again:
            assert len(again.queue("q")) == 1

    def test_second_open_in_same_process_is_refused(
        self, store: msgcask.Store, store_path: Path
    ) -> None:
        with pytest.raises(msgcask.StoreLockedError):
            msgcask.open(store_path)
        # The refused open did not disturb the holder.
        store.queue("q").put(b"still mine")
        assert len(store.queue("q")) == 1


class TestEdges:
    def test_message_nearly_as_big_as_a_data_file_round_trips(self, store_path: Path) -> None:
        size = 64 * 1024  # the smallest max_file_size the store accepts
        big = bytes(i % 253 for i in range(size - 1024))  # leaves room for the framing
        with msgcask.open(store_path, max_file_size=size, compaction_interval=None) as store:
            q = store.queue("q")
            ids = [q.put(b"small"), q.put(big), q.put(big), q.put(b"after")]
        with msgcask.open(store_path, max_file_size=size) as store:
            got = [(m.id, bytes(m.body)) for m in store.queue("q").browse()]
        assert got == list(zip(ids, [b"small", big, big, b"after"], strict=True))

    def test_stale_message_from_before_reopen_cannot_be_acked(self, store_path: Path) -> None:
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            q.put(b"x")
            stale = q.get(block=False)
        with msgcask.open(store_path) as store:
            q = store.queue("q")
            # After the reopen the message is available again, not delivered to anyone.
            with pytest.raises(ValueError):
                q.ack(stale)
            m = q.get(block=False)
            assert m.id == stale.id and m.redelivered
            q.ack(m)
            assert len(q) == 0

    def test_close_wakes_a_blocked_get_with_closed_error(self, store_path: Path) -> None:
        store = msgcask.open(store_path)
        q = store.queue("q")
        outcome: list[BaseException | None] = []

        def consumer() -> None:
            try:
                q.get(timeout=20)
                outcome.append(None)
            except BaseException as e:
                outcome.append(e)

        t = threading.Thread(target=consumer)
        t.start()
        time.sleep(0.2)
        store.close()
        t.join(timeout=10)
        # A consumer waiting on a closing store must not sleep out its whole timeout.
        assert not t.is_alive(), "the blocked get was not woken by close()"
        assert len(outcome) == 1 and isinstance(outcome[0], msgcask.ClosedError), outcome


class TestCallerErrors:
    def test_selector_that_raises_delivers_nothing(
        self, store: msgcask.Store, store_path: Path, snapshot: Callable[..., Any]
    ) -> None:
        q = store.queue("q")
        q.put_many([b"1", b"2"])
        before = snapshot(store, store_path)

        def broken(headers: Any) -> bool:
            raise KeyError("selector bug")

        with pytest.raises(KeyError):
            q.get(block=False, selector=broken)
        assert snapshot(store, store_path) == before
        # Nothing was left half-delivered: both messages are still there for a get.
        assert [m.body for m in _drain(q)] == [b"1", b"2"]

    @pytest.mark.parametrize(
        "change",
        [
            lambda h: h.__setitem__("t", "changed"),
            lambda h: h.__delitem__("t"),
            lambda h: h.clear(),
            lambda h: h.update(extra="1"),
        ],
        ids=["set", "del", "clear", "update"],
    )
    def test_a_selector_that_changes_its_headers_leaves_the_delivered_ones_alone(
        self, store: msgcask.Store, change: Callable[[dict[str, str]], object]
    ) -> None:
        q = store.queue("q")
        q.put(b"1", headers={"t": "a"})
        q.put(b"2", headers={"t": "b"})

        def changing(headers: dict[str, str]) -> bool:
            change(headers)
            return True

        m = q.get(block=False, selector=changing)
        assert (m.body, m.headers) == (b"1", {"t": "a"})
        q.ack(m)
        # Nor what a later get, or a browse, sees.
        assert [(m.body, m.headers) for m in q.browse()] == [(b"2", {"t": "b"})]
        assert [(m.body, m.headers) for m in _drain(q)] == [(b"2", {"t": "b"})]

    def test_transaction_used_after_its_block_is_refused(
        self, store: msgcask.Store, store_path: Path, snapshot: Callable[..., Any]
    ) -> None:
        with store.transaction() as tx:
            tx.put("q", b"inside")
        before = snapshot(store, store_path)
        with pytest.raises((ValueError, msgcask.Error)):
            tx.put("q", b"after the block")
        assert snapshot(store, store_path) == before


# Write amplification is bytes_written / bytes_put: every put path must count its
# PUT records once (a space cap sends single puts through the store's lock).
@pytest.mark.parametrize("max_store_size", [None, 2**30], ids=["uncapped", "capped"])
def test_bytes_put_counts_the_put_records_of_every_path(
    store_path: Path, max_store_size: int | None
) -> None:
    options: dict[str, Any] = {"compaction_interval": None, "max_store_size": max_store_size}
    with msgcask.open(store_path, **options) as store:
        q = store.queue("q")
        q.put(b"one")
        q.put_many([b"two", b"three"])
        with store.transaction() as tx:
            tx.put("q", b"four")
        bodies = [b"one", b"two", b"three", b"four"]
        expected = sum(codec.put_record_size(b"q", b"", len(b)) for b in bodies)
        assert store.stats().bytes_put == expected


def test_the_ratios_of_stats_hold_for_an_emptied_store(store_path: Path) -> None:
    # Reopened and drained: acks and deliveries written since the open, no put.
    with msgcask.open(store_path, compaction_interval=None) as store:
        store.queue("q").put_many([b"x" * 100] * 10)
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        before = store.stats()
        assert [f.live_ratio for f in before.files] == [f.live_bytes / f.size for f in before.files]
        assert 0 < before.files[0].live_ratio < 1
        for _ in range(10):
            q.ack(q.get(block=False))
        stats = store.stats()
        assert stats.bytes_written > 0 and stats.bytes_put == 0
        assert stats.write_amplification == 0.0  # nothing put: no ratio to take
        assert stats.live_bytes == 0
        assert stats.space_amplification == float("inf")  # bytes on disk, none of them live
