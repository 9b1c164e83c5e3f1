"""A pass's copy under ``max_store_size``, with puts coming meanwhile.

The copy is written before its victims are deleted. Puts fill the data files only
up to the cap less one data file (``Store._put_limit``), the most one copy takes:
whatever puts come while a pass plans, writes or swaps in its copy, the copy is
written and the data files never pass the cap. A put that does not fit while the
pass's victims are about to go waits for them, and is not refused.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import msgcask
from copy_watch import copies_held, data_files_bytes
from draining import each_available
from msgcask.compactor import needed, rewrite

MFS = 64 * 1024
LIMIT = 8 * MFS
BIG = b"B" * 60_000
PUT_LIMIT = LIMIT - MFS  # what puts may fill


@contextlib.contextmanager
def _capped_store(path: Path, count: int = 120, live_every: int = 2) -> Iterator[msgcask.Store]:
    """A store under LIMIT with no schedule. Files 1 and 2: ``count`` messages of
    1000 bytes, one in ``live_every`` left live and the others consumed; files 3
    to 6: live messages."""
    with msgcask.open(
        path, max_file_size=MFS, max_store_size=LIMIT, compaction_interval=None
    ) as store:
        a, b, c = store.queue("a"), store.queue("b"), store.queue("c")
        for i in range(count):
            (a if i % live_every == 0 else b).put(b"m" * 1000)
        for _ in range(250):
            c.put(b"c" * 1000)
        for m in each_available(b):
            b.ack(m)
        yield store


def test_puts_during_a_pass_leave_room_for_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with _capped_store(path) as store:
        go = threading.Event()
        ready, on_disk_after_copy = copies_held(monkeypatch, path, go)
        results: list[object] = []

        def put() -> None:
            try:
                results.append(store.queue("big").put(BIG))
            except msgcask.StoreFullError as e:
                results.append(e)

        compacting = threading.Thread(target=store.compact, kwargs={"threshold": 0.6})
        compacting.start()
        assert ready.wait(30), "the pass did not get to its copy"
        putting = [threading.Thread(target=put) for _ in range(2)]
        for t in putting:
            t.start()
        for t in putting:
            t.join(1)  # they may instead wait for the pass, to compact themselves
        go.set()
        compacting.join(30)
        for t in putting:
            t.join(30)
        assert len(results) == 2
        # Had the puts taken the room it needs, the copy would pass the cap.
        assert on_disk_after_copy and on_disk_after_copy[0] <= LIMIT
        assert data_files_bytes(path) <= LIMIT
        assert store.verify() == []


def test_a_put_that_fits_once_the_running_pass_ends_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A put that passed its space check before a pass started writing its copy,
    # and that fits once the pass has deleted its victims, is not refused.
    path = tmp_path / "s"
    with _capped_store(path) as store:
        planned, first_put, go = (threading.Event() for _ in range(3))
        real_find = needed.find_any

        def find_any(s: msgcask.Store, file_id: int) -> object:
            planned.set()  # the pass measured its room before the first put
            assert first_put.wait(30)
            return real_find(s, file_id)

        monkeypatch.setattr(needed, "find_any", find_any)
        copying, on_disk_after_copy = copies_held(monkeypatch, path, go)
        compacting = threading.Thread(target=store.compact, kwargs={"threshold": 0.6})
        compacting.start()
        assert planned.wait(30)
        big = store.queue("big")
        checked = threading.Event()
        real_ensure = store._ensure_room

        def ensure_room(size: int) -> None:
            real_ensure(size)
            checked.set()
            assert copying.wait(30)  # the copy started after this check

        monkeypatch.setattr(store, "_ensure_room", ensure_room)
        results: list[object] = []

        def put() -> None:
            try:
                results.append(big.put(b"B" * 55_000))
            except msgcask.StoreFullError as e:
                results.append(e)

        second = threading.Thread(target=put)
        second.start()
        assert checked.wait(30)
        monkeypatch.setattr(store, "_ensure_room", real_ensure)
        big.put(b"B" * 55_000)  # the first put
        first_put.set()
        assert copying.wait(30)
        second.join(0.5)  # it waits for the pass
        go.set()
        compacting.join(30)
        second.join(30)
        assert len(results) == 1 and isinstance(results[0], int), results
        assert on_disk_after_copy and on_disk_after_copy[0] <= LIMIT  # it did wait
        assert data_files_bytes(path) <= LIMIT
        assert len(big) == 2
        assert store.verify() == []


@pytest.mark.parametrize(
    "held",
    ["_write_output", "delete_retired"],
    ids=["while-the-copy-is-written", "after-the-swap-before-the-victims-go"],
)
def test_a_put_that_does_not_fit_while_a_pass_writes_its_copy_waits_for_the_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    # Puts that passed their space check before the pass began filled the puts'
    # room: the last one does not fit, but does once the pass has deleted its
    # victims. Those are dead bytes being freed,
    # not live data filling the store: the put waits for them, from the start
    # of the copy until the victims are deleted (the swap comes between).
    path = tmp_path / "s"
    with _capped_store(path, 126, live_every=6) as store:
        last = 60_000
        assert store._data_bytes + last <= PUT_LIMIT  # no space pressure yet
        copying, go = threading.Event(), threading.Event()
        real_step = getattr(rewrite, held)

        def step(*args: object) -> object:
            copying.set()
            assert go.wait(30)
            return real_step(*args)

        monkeypatch.setattr(rewrite, held, step)
        checked: dict[str, threading.Event] = {}
        release: dict[str, threading.Event] = {}
        real_ensure, real_fits = store._ensure_room, store._check_fits

        def ensure_room(size: int) -> None:
            real_ensure(size)  # before the pass reserves its copy's room
            me = threading.current_thread().name
            checked[me].set()
            assert release[me].wait(30)

        def check_fits(size: int) -> None:
            try:
                real_fits(size)
            finally:
                checked[threading.current_thread().name].set()

        monkeypatch.setattr(store, "_ensure_room", ensure_room)
        monkeypatch.setattr(store, "_check_fits", check_fits)
        big = store.queue("big")
        results: dict[str, object] = {}

        def put(size: int) -> None:
            try:
                results[threading.current_thread().name] = big.put(b"B" * size)
            except msgcask.StoreFullError as e:
                results[threading.current_thread().name] = e

        threads: dict[str, threading.Thread] = {}

        def start(name: str, size: int) -> None:
            checked[name], release[name] = threading.Event(), threading.Event()
            threads[name] = threading.Thread(target=put, args=(size,), name=name)
            threads[name].start()
            assert checked[name].wait(30)
            checked[name].clear()

        # After the swap the copy is in the data files, with its victims.
        copy = sum(store._acct.files[f].live_bytes for f in (1, 2)) + 1024  # at most
        fill = (PUT_LIMIT - store._data_bytes - copy - 4096) // 2
        for name, size in (("last", last), ("fill-1", fill), ("fill-2", fill)):
            start(name, size)
        compacting = threading.Thread(target=store.compact, kwargs={"threshold": 0.6})
        compacting.start()
        assert copying.wait(30), "the pass did not get to its copy"
        assert store._victims_going
        for name in ("fill-1", "fill-2"):  # they fit under the puts' limit, copy and all
            release[name].set()
            threads[name].join(30)
            assert isinstance(results[name], int), results
        assert store._data_bytes + last > PUT_LIMIT  # does not fit until the victims go
        release["last"].set()
        assert checked["last"].wait(30)  # it has looked at the room left
        go.set()
        compacting.join(30)
        threads["last"].join(30)
        assert isinstance(results["last"], int), results
        assert data_files_bytes(path) <= LIMIT
        assert len(big) == 3
        assert store.verify() == []


def test_a_pass_writes_its_copy_whatever_puts_took_since_its_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Puts that passed their space check before the pass are written after it
    # planned: they fill the puts' room, and the copy still fits under the cap
    # (before, puts could take the room a copy needed, and a store short of room
    # for any copy refused puts while most of it was dead).
    path = tmp_path / "s"
    with _capped_store(path) as store:
        big = store.queue("big")
        checked, release = threading.Barrier(3), threading.Event()
        real_ensure = store._ensure_room

        def ensure_room(size: int) -> None:
            real_ensure(size)
            checked.wait(30)  # both puts passed the check before the pass
            assert release.wait(30)

        monkeypatch.setattr(store, "_ensure_room", ensure_room)
        results: list[int] = []
        half = b"H" * ((PUT_LIMIT - store._data_bytes) // 2 - 100)  # both fit
        putting = [threading.Thread(target=lambda: results.append(big.put(half))) for _ in range(2)]
        for t in putting:
            t.start()
        checked.wait(30)
        real_find = needed.find_any

        def find_any(s: msgcask.Store, file_id: int) -> object:
            release.set()  # the pass planned before the puts were written
            for t in putting:
                t.join(30)
            return real_find(s, file_id)

        monkeypatch.setattr(needed, "find_any", find_any)
        _, on_disk_after_copy = copies_held(monkeypatch, path)
        report = store.compact(threshold=0.6)
        assert len(results) == 2
        assert report.files_rewritten >= 1
        assert on_disk_after_copy and on_disk_after_copy[0] <= LIMIT
        assert data_files_bytes(path) <= LIMIT
        assert store.verify() == []


class _WatchedLock:
    """A lock that says (``waited``) when an acquire finds it taken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waited = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking and self._lock.locked():
            self.waited.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("path_taken", ["space-pressure", "copy-under-way"])
def test_a_background_pass_a_put_waits_for_runs_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_taken: str
) -> None:
    # A put that does not fit while a scheduled pass writes its copy waits for
    # that pass: in space pressure (before its own check), or after a check made
    # before the copy took its room. The pass must not step aside for foreground
    # calls meanwhile, as a pass run for a put does not.
    path = tmp_path / "s"
    with _capped_store(path) as store:
        c = store.queue("c")
        while store._data_bytes + 2000 <= PUT_LIMIT:  # near the cap, short of space pressure
            c.put(b"c" * 1000)
        go = threading.Event()
        copying, _ = copies_held(monkeypatch, path, go)
        watched = _WatchedLock()
        monkeypatch.setattr(store._compactor, "_mutex", watched)
        compacting = threading.Thread(
            target=store._compactor.run, kwargs={"threshold": 0.6, "background": True}
        )
        compacting.start()
        assert copying.wait(30), "the pass did not get to its copy"
        assert not store._pacer.forced
        if path_taken == "copy-under-way":
            monkeypatch.setattr(store, "_ensure_room", lambda size: None)  # checked before
        big = store.queue("big")
        room = PUT_LIMIT - store._data_bytes  # does not fit now; fits once the victims go
        results: list[object] = []
        putting = threading.Thread(target=lambda: results.append(big.put(b"B" * room)))
        putting.start()
        assert watched.waited.wait(30), "the put did not wait for the pass"
        forced_while_waiting = store._pacer.forced
        go.set()
        compacting.join(30)
        putting.join(30)
        assert forced_while_waiting
        assert not store._pacer.forced
        assert len(results) == 1 and isinstance(results[0], int), results
        assert data_files_bytes(path) <= LIMIT
        assert store.verify() == []
