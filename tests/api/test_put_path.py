"""A put into an existing queue takes only the append lock (msgcask/db.py).

It must not wait for whoever holds the store's lock (a compaction batch, a
consumer), and what it leaves for the index must be there for everyone who
takes the store's lock next: consumers, counts, deletes, the checker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

import msgcask
from msgcask.puts import MAX_PENDING


def test_put_completes_while_another_thread_holds_the_stores_lock(store_path: Path) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        q.put(b"first")
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store._lock:
                holding.set()
                release.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        holding.wait(10)
        ids: list[int] = []
        putter = threading.Thread(target=lambda: ids.extend(q.put(b"p%d" % i) for i in range(3)))
        putter.start()
        putter.join(30)
        done_while_held = not putter.is_alive()
        release.set()
        holder.join(30)
        putter.join(30)
        assert done_while_held, "a put waited for the store's lock"
        assert len(q) == 4
        assert [m.body for m in q.browse()] == [b"first", b"p0", b"p1", b"p2"]


def test_put_completes_while_the_stores_lock_writes_earlier_puts_to_the_index(
    store_path: Path,
) -> None:
    # Taking the store's lock writes the pending entries (CatchUpLock); each
    # index call lets go of the interpreter, and a put that gets it meanwhile
    # must not find the append lock held.
    with msgcask.open(store_path, sync_interval=3600, compaction_interval=None) as store:
        q = store.queue("q")
        q.put(b"first")  # creates the queue: later puts take only the append lock
        q.put(b"second")
        assert store._pending, "the second put should have left its entry pending"
        writing, release = threading.Event(), threading.Event()
        add_many = store._catalog.add_many

        def slow_add_many(*args: Any, **kwargs: Any) -> None:
            if threading.current_thread() is holder:
                writing.set()
                release.wait(60)
            add_many(*args, **kwargs)

        store._catalog.add_many = slow_add_many  # type: ignore[method-assign]

        def hold() -> None:
            with store._lock:  # catches up: stops inside slow_add_many
                pass

        holder = threading.Thread(target=hold)
        holder.start()
        assert writing.wait(30), "taking the store's lock did not write the pending entry"
        putter = threading.Thread(target=lambda: [q.put(b"p%d" % i) for i in range(3)])
        putter.start()
        putter.join(30)
        done_while_writing = not putter.is_alive()
        release.set()
        holder.join(30)
        putter.join(30)
        store._catalog.add_many = add_many  # type: ignore[method-assign]
        assert done_while_writing, "a put waited while earlier puts were written to the index"
        assert [m.body for m in q.browse()] == [b"first", b"second", b"p0", b"p1", b"p2"]


def test_puts_left_for_the_index_stay_bounded(store_path: Path) -> None:
    with msgcask.open(store_path, sync_interval=3600, compaction_interval=None) as store:
        q = store.queue("q")
        for i in range(3 * MAX_PENDING + 7):
            q.put(b"%d" % i)
            assert len(store._pending) <= MAX_PENDING
        assert len(q) == 3 * MAX_PENDING + 7


def test_a_blocked_consumer_is_woken_by_every_put(store_path: Path) -> None:
    # A lost wake-up leaves get() waiting for good (until close wakes it); the
    # main thread then stops putting, and the consumer falls short.
    rounds = 300
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        got: list[bytes] = []
        ready = threading.Semaphore(0)

        def consume() -> None:
            for _ in range(rounds):
                ready.release()
                try:
                    m = q.get()
                except msgcask.ClosedError:
                    return
                q.ack(m)
                got.append(m.body)

        consumer = threading.Thread(target=consume)
        consumer.start()
        for i in range(rounds):
            if not ready.acquire(timeout=30):
                break  # the consumer gave up: the assertion below says so
            q.put(b"%d" % i)
        consumer.join(60)
        assert got == [b"%d" % i for i in range(rounds)]
    consumer.join(60)


def test_puts_racing_queue_deletion_leave_a_consistent_store(
    store_path: Path, verify: Callable[[msgcask.Store], None]
) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        stop = threading.Event()
        returned: list[list[int]] = [[], []]

        def produce(n: int) -> None:
            q = store.queue("x")
            while not stop.is_set():
                returned[n].append(q.put(b"y" * 50))

        producers = [threading.Thread(target=produce, args=(n,)) for n in range(2)]
        for t in producers:
            t.start()
        deleted = 0
        while deleted < 150:
            if "x" in store.queues():
                store.delete_queue("x")
                deleted += 1
        stop.set()
        for t in producers:
            t.join(30)
        verify(store)
        left = {m.id for m in store.queue("x").browse()}
        assert left <= set(returned[0]) | set(returned[1])
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert {m.id for m in store.queue("x").browse()} == left


def test_a_failure_writing_earlier_puts_to_the_index_leaves_the_stores_lock_free(
    store_path: Path,
) -> None:
    # The call whose taking of the store's lock failed to write the pending
    # entries raises, and never got the lock: another thread can close the store.
    store = msgcask.open(store_path, sync_interval=3600, compaction_interval=None)
    q = store.queue("q")
    q.put(b"first")
    q.put(b"second")
    assert store._pending, "the second put should have left its entry pending"

    def failing_add_many(*args: Any, **kwargs: Any) -> None:
        raise lmdb.DiskError("no room")

    store._catalog.add_many = failing_add_many  # type: ignore[method-assign]
    with pytest.raises(msgcask.IndexFailedError, match="no room"):
        q.get(block=False)
    closer = threading.Thread(target=store.close, daemon=True)  # a hang must not keep pytest
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() waited for a lock the failed call kept"
