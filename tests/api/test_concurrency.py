"""Single writer across processes, and thread safety within one process."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hold_store import start_holder

import msgcask


def test_second_process_gets_store_locked_error_naming_the_holder(store_path: Path) -> None:
    holder = start_holder(store_path)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        with pytest.raises(msgcask.StoreLockedError) as info:
            msgcask.open(store_path)
        assert str(holder.pid) in str(info.value), "the error must name the holder's pid"
        # The refused open must not have damaged the holder's store.
        holder.stdin.close()
        assert holder.stdout.readline().strip() == "closed"
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    # Once the holder is gone the store opens and holds the holder's message.
    with msgcask.open(store_path) as store:
        assert [m.body for m in store.queue("held").browse()] == [b"by the holder"]


def test_lock_of_killed_holder_is_released(store_path: Path) -> None:
    # A crashed holder must not lock the store forever (no stale-lock wedging).
    holder = start_holder(store_path)
    holder.kill()
    holder.wait()
    with msgcask.open(store_path) as store:
        assert [m.body for m in store.queue("held").browse()] == [b"by the holder"]


@pytest.mark.parametrize("compacting", [False, True], ids=["plain", "with_compaction_thread"])
def test_threads_deliver_every_message_exactly_once(
    store_path: Path, verify: Callable[[msgcask.Store], None], compacting: bool
) -> None:
    producers, consumers, per_producer = 4, 4, 150
    # Small files and bodies of a few KB, so that a compaction thread has work to race.
    store = msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None)
    try:
        q = store.queue("q")
        put_ids: list[int] = []
        got_ids: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        done_producing = threading.Event()

        def produce(n: int) -> None:
            try:
                for i in range(per_producer):
                    if i % 10 == 0:
                        ids = q.put_many([b"%d-%d-batch" % (n, i) * 200] * 2, priority=i % 10)
                    else:
                        ids = [q.put(b"%d-%d" % (n, i) * 300, priority=i % 10)]
                    with lock:
                        put_ids.extend(ids)
            except BaseException as e:  # surfaced in the main thread
                errors.append(e)

        def consume() -> None:
            try:
                while True:
                    try:
                        m = q.get(timeout=0.05)
                    except msgcask.Empty:
                        if done_producing.is_set():
                            return
                        continue
                    if m.id % 7 == 0 and m.deliveries == 1:
                        q.nack(m)  # some go round again; still delivered once in the end
                        continue
                    q.ack(m)
                    with lock:
                        got_ids.append(m.id)
            except BaseException as e:
                errors.append(e)

        stop_compacting = threading.Event()
        passes: list[object] = []

        def compact() -> None:
            try:
                while not stop_compacting.is_set():
                    passes.append(store.compact(threshold=0.9))
            except BaseException as e:
                errors.append(e)

        prod = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
        cons = [threading.Thread(target=consume) for _ in range(consumers)]
        extra = [threading.Thread(target=compact)] if compacting else []
        for t in prod + cons + extra:
            t.start()
        for t in prod:
            t.join()
        done_producing.set()
        for t in cons:
            t.join()
        stop_compacting.set()
        for t in extra:
            t.join()
        if compacting:
            assert passes, "the compaction thread never completed a pass"
        assert not errors, errors
        dupes = [i for i, c in Counter(got_ids).items() if c > 1]
        assert not dupes, f"delivered more than once: {dupes[:10]}"
        assert len(put_ids) == len(set(put_ids)), "put returned the same id twice"
        assert sorted(got_ids) == sorted(put_ids)
        assert len(q) == 0
        verify(store)
    finally:
        store.close()


def _put_until_closed(q: msgcask.Queue, started: threading.Barrier) -> None:
    started.wait()
    try:
        while True:
            q.put(b"x" * 100)
    except msgcask.ClosedError:
        pass


def test_close_while_sync_always_writers_wait_for_an_fsync_does_not_hang(tmp_path: Path) -> None:
    # close() syncs holding the append lock; the thread running the writers' shared
    # fsync takes that lock briefly to unmap the head, and must not wait for it.
    for round_ in range(20):
        store = msgcask.open(tmp_path / f"store{round_}", sync="always", compaction_interval=None)
        q = store.queue("q")
        started = threading.Barrier(5)
        writers = [
            threading.Thread(target=_put_until_closed, args=(q, started), daemon=True)
            for _ in range(4)
        ]
        for t in writers:
            t.start()
        started.wait()
        while len(q) < 50:  # the writers are syncing away
            threading.Event().wait(0.001)
        closer = threading.Thread(target=store.close, daemon=True)
        closer.start()
        closer.join(60)
        assert not closer.is_alive(), f"close() hung in round {round_}"
        for t in writers:
            t.join(60)
            assert not t.is_alive(), f"a writer hung in round {round_}"


def _close_from_two_threads(store: msgcask.Store) -> list[BaseException]:
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def close() -> None:
        barrier.wait()
        try:
            store.close()
        except BaseException as e:
            errors.append(e)

    closers = [threading.Thread(target=close) for _ in range(2)]
    for t in closers:
        t.start()
    for t in closers:
        t.join(10)
    return errors


def test_two_threads_closing_at_once_both_return_and_free_the_store(tmp_path: Path) -> None:
    for run in range(10):
        path = tmp_path / f"store-{run}"
        store = msgcask.open(path, compaction_interval=0.05)
        store.queue("q").put(b"m")
        assert _close_from_two_threads(store) == []
        with msgcask.open(path, compaction_interval=None) as reopened:  # the lock is free
            assert len(reopened.queue("q")) == 1


def test_verify_while_a_put_appends_reports_no_problem(
    store: msgcask.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A put into an existing queue takes only the append lock and leaves its
    # index entry for later: one appended while verify scans the data files
    # must not show up as a message the index lacks.
    from msgcask import check

    q = store.queue("q")
    q.put(b"before")
    put_done = threading.Event()
    scan_files = check.scan_files

    def put_during_the_scan(*args: Any, **kwargs: Any) -> Any:
        putting = threading.Thread(target=lambda: (q.put(b"during"), put_done.set()))
        putting.start()
        put_done.wait(1)  # time for a put that verify does not hold back to append
        return scan_files(*args, **kwargs)

    monkeypatch.setattr(check, "scan_files", put_during_the_scan)
    assert store.verify() == []
    assert put_done.wait(30), "the put did not return once verify ended"
    monkeypatch.undo()
    assert [m.body for m in q.browse()] == [b"before", b"during"]
