"""Random operation sequences checked against a plain in-memory model.

The model is a dict per queue of id -> message, with a "delivered" flag and a delivery
count. After every step the store must agree with it: per-queue length, browse order
(priority 9 first, then id), and the store-wide live count. A small ``max_file_size``
makes the records of one run span many data files, and the ``reopen`` rule checks that
what was journaled comes back (delivered-unacked messages as redeliveries). The
``reopen_with_settings`` rule changes what a user may change between opens: the
limited queue's ``max_deliveries``, and a ``max_store_size`` small enough that puts
meet space pressure (compaction inside the put) and, once live data fills the
store, ``StoreFullError``, which must change nothing.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import msgcask

PLAIN = "plain"
LIMITED = "limited"  # max_deliveries (2 at first), dead-letters to DLQ.limited
DLQ = "DLQ.limited"
MAX_DELIVERIES = 2  # at first; reopen_with_settings changes it
STORE_LIMIT = 4 * 64 * 1024  # max_store_size of a limited open: the least it may be
WRITABLE = (PLAIN, LIMITED)
ALL_QUEUES = (PLAIN, LIMITED, DLQ)

# Mostly small bodies, some large ones so that a run spans several 64 KiB data files.
bodies = st.one_of(
    st.binary(max_size=64),
    st.binary(max_size=64),
    st.integers(min_value=2000, max_value=16000).map(lambda n: bytes([n % 251]) * n),
)
priorities = st.integers(min_value=0, max_value=9)
header_sets = st.sampled_from([None, {"k": "x"}, {"k": "y"}, {"k": "x", "other": "\u00e9"}])


@dataclass
class Msg:
    id: int
    body: bytes
    headers: dict[str, str]
    priority: int
    deliveries: int = 0
    delivered: bool = False


@dataclass
class Model:
    queues: dict[str, dict[int, Msg]] = field(
        default_factory=lambda: {name: {} for name in ALL_QUEUES}
    )

    def order(self, name: str, *, available_only: bool = False) -> list[Msg]:
        msgs = [m for m in self.queues[name].values() if not (available_only and m.delivered)]
        return sorted(msgs, key=lambda m: (-m.priority, m.id))

    def delivered(self) -> list[tuple[str, int]]:
        return sorted(
            (name, mid)
            for name, msgs in self.queues.items()
            for mid, m in msgs.items()
            if m.delivered
        )


def _selector_for(value: str) -> Callable[[Any], bool]:
    return lambda h: (h or {}).get("k") == value


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="msgcask-model-"))
        self.path = self.tmp / "store"
        self.model = Model()
        self.max_id = 0
        self.handles: dict[int, Any] = {}  # id -> the Message of its latest delivery
        self.saved_index: Path | None = None  # a copy of index/ taken after a clean close
        self.max_deliveries = MAX_DELIVERIES
        self.max_store_size: int | None = None
        self.store = self._open()

    def _open(self) -> msgcask.Store:
        store = msgcask.open(
            self.path,
            max_file_size=64 * 1024,  # the smallest the store accepts
            sync="never",
            compaction_interval=None,
            max_store_size=self.max_store_size,
        )
        self.qs = {
            PLAIN: store.queue(PLAIN),
            LIMITED: store.queue(LIMITED, max_deliveries=self.max_deliveries),
        }
        return store

    def _refused(self, error: msgcask.StoreFullError) -> None:
        # Only a limited store refuses; the invariant checks the refusal changed nothing.
        assert self.max_store_size is not None, f"refused without max_store_size: {error}"
        assert f"max_store_size={self.max_store_size}" in str(error)

    def _queue(self, name: str) -> Any:
        if name == DLQ:
            return self.store.queue(DLQ)
        return self.qs[name]

    def _new_ids(self, ids: list[int]) -> None:
        # ids are global and increasing: every new id exceeds every earlier one.
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        if ids:
            assert ids[0] > self.max_id, f"id {ids[0]} not above earlier id {self.max_id}"
            self.max_id = ids[-1]

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(name=st.sampled_from(WRITABLE), body=bodies, priority=priorities, headers=header_sets)
    def put(self, name: str, body: bytes, priority: int, headers: dict[str, str] | None) -> None:
        try:
            mid = self.qs[name].put(body, headers=headers, priority=priority)
        except msgcask.StoreFullError as e:
            self._refused(e)
            return
        self._new_ids([mid])
        self.model.queues[name][mid] = Msg(mid, body, dict(headers or {}), priority)

    @rule(
        name=st.sampled_from(WRITABLE),
        batch=st.lists(bodies, max_size=5),
        priority=priorities,
        headers=header_sets,
    )
    def put_many(
        self, name: str, batch: list[bytes], priority: int, headers: dict[str, str] | None
    ) -> None:
        try:
            ids = self.qs[name].put_many(batch, headers=headers, priority=priority)
        except msgcask.StoreFullError as e:
            self._refused(e)
            return
        assert len(ids) == len(batch)
        self._new_ids(ids)
        for mid, body in zip(ids, batch, strict=True):
            self.model.queues[name][mid] = Msg(mid, body, dict(headers or {}), priority)

    @precondition(lambda self: self.max_store_size is not None)
    @rule(name=st.sampled_from(WRITABLE), priority=priorities)
    def fill_until_full(self, name: str, priority: int) -> None:
        # Puts of live data into a limited store: space pressure compacts what it
        # can, and once live data fills the store the next put is refused.
        assert self.max_store_size is not None
        body_size = 12_000
        for n in range(self.max_store_size // body_size + 1):
            body = bytes([n % 251]) * body_size
            try:
                mid = self.qs[name].put(body, priority=priority)
            except msgcask.StoreFullError as e:
                self._refused(e)
                return
            self._new_ids([mid])
            self.model.queues[name][mid] = Msg(mid, body, {}, priority)
        raise AssertionError(f"stored more live bytes than max_store_size={self.max_store_size}")

    @rule(name=st.sampled_from(ALL_QUEUES), select=st.sampled_from([None, "x", "y"]))
    def get(self, name: str, select: str | None) -> None:
        candidates = [
            m
            for m in self.model.order(name, available_only=True)
            if select is None or m.headers.get("k") == select
        ]
        selector = None if select is None else _selector_for(select)
        if not candidates:
            try:
                got = self._queue(name).get(block=False, selector=selector)
            except msgcask.Empty:
                return
            raise AssertionError(f"get on {name!r} returned {got.id}, model has nothing")
        want = candidates[0]
        got = self._queue(name).get(block=False, selector=selector)
        want.deliveries += 1
        want.delivered = True
        assert got.id == want.id
        assert (bytes(got.body), dict(got.headers or {}), got.priority) == (
            want.body,
            want.headers,
            want.priority,
        )
        assert got.queue == name
        assert got.deliveries == want.deliveries
        assert got.redelivered == (want.deliveries > 1)
        self.handles[got.id] = got

    @precondition(lambda self: bool(self.model.delivered()))
    @rule(data=st.data(), by_id=st.booleans())
    def ack(self, data: st.DataObject, by_id: bool) -> None:
        name, mid = data.draw(st.sampled_from(self.model.delivered()))
        # Both forms are part of the API: the Message itself, or its id.
        self._queue(name).ack(mid if by_id else self.handles[mid])
        del self.model.queues[name][mid]

    @precondition(lambda self: bool(self.model.delivered()))
    @rule(data=st.data())
    def nack(self, data: st.DataObject) -> None:
        name, mid = data.draw(st.sampled_from(self.model.delivered()))
        m = self.model.queues[name][mid]
        try:
            self._queue(name).nack(mid)
        except msgcask.StoreFullError as e:
            self._refused(e)  # no room for the dead-letter copy: still delivered
            return
        if name == LIMITED and m.deliveries >= self.max_deliveries:
            del self.model.queues[name][mid]
            moved = [
                d
                for d in self.store.queue(DLQ).browse()
                if (d.headers or {}).get("x-original-id") == str(mid)
            ]
            assert len(moved) == 1, f"dead-lettered message {mid} found {len(moved)} times"
            d = moved[0]
            self._new_ids([d.id])
            headers = dict(m.headers, **{"x-dead-letter-from": LIMITED, "x-original-id": str(mid)})
            assert dict(d.headers) == headers
            self.model.queues[DLQ][d.id] = Msg(d.id, m.body, headers, m.priority)
        else:
            m.delivered = False

    @rule(
        data=st.data(),
        puts=st.lists(
            st.tuples(st.sampled_from(WRITABLE), bodies, priorities, header_sets), max_size=4
        ),
        commit=st.booleans(),
        by_id=st.booleans(),
        stray_ack=st.booleans(),
    )
    def transaction(
        self,
        data: st.DataObject,
        puts: list[tuple[str, bytes, int, dict[str, str] | None]],
        commit: bool,
        by_id: bool,
        stray_ack: bool,
    ) -> None:
        delivered = self.model.delivered()
        acks = data.draw(st.lists(st.sampled_from(delivered), unique=True)) if delivered else []
        available = [m.id for name in WRITABLE for m in self.model.order(name, available_only=True)]
        ids: list[int] = []

        class Rollback(Exception):
            pass

        try:
            with self.store.transaction() as tx:
                for name, body, priority, headers in puts:
                    ids.append(tx.put(name, body, headers, priority))
                for _, mid in acks:
                    tx.ack(mid if by_id else self.handles[mid])
                if stray_ack and available:
                    # A message nobody got: refused at the call, the rest kept.
                    try:
                        tx.ack(available[0])
                    except ValueError:
                        pass
                    else:
                        raise AssertionError(f"tx.ack({available[0]}) of an undelivered message")
                if not commit:
                    raise Rollback
        except Rollback:
            assert not commit
            return
        except msgcask.StoreFullError as e:
            self._refused(e)
            return
        self._new_ids(ids)
        for mid, (name, body, priority, headers) in zip(ids, puts, strict=True):
            self.model.queues[name][mid] = Msg(mid, body, dict(headers or {}), priority)
        for name, mid in acks:
            del self.model.queues[name][mid]

    @rule(name=st.sampled_from(WRITABLE))
    def purge(self, name: str) -> None:
        available = [m.id for m in self.model.order(name, available_only=True)]
        assert self.qs[name].purge() == len(available)
        for mid in available:
            del self.model.queues[name][mid]

    @rule()
    def delete_and_recreate_plain(self) -> None:
        self.store.delete_queue(PLAIN)
        assert PLAIN not in self.store.queues()
        self.model.queues[PLAIN] = {}
        self.qs[PLAIN] = self.store.queue(PLAIN)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self._reopened()

    def _reopened(self) -> None:
        self.store = self._open()
        # Deliveries were journaled: unacked ones are available again, count kept.
        for msgs in self.model.queues.values():
            for m in msgs.values():
                m.delivered = False

    @rule(max_deliveries=st.integers(min_value=1, max_value=3), limited=st.booleans())
    def reopen_with_settings(self, max_deliveries: int, limited: bool) -> None:
        # Queue settings are not stored: the new max_deliveries applies to messages
        # delivered before it too. Under a limit, puts may run compaction passes.
        self.store.close()
        self.max_deliveries = max_deliveries
        self.max_store_size = STORE_LIMIT if limited else None
        if limited:
            self.saved_index = None  # the puts' passes may delete files it points into
        self._reopened()

    @rule()
    def rebuild_index(self) -> None:
        # Without its index the store replays the data files: same state, same counts.
        self.store.close()
        shutil.rmtree(self.path / "index")
        self._reopened()

    @precondition(lambda self: self.max_store_size is None)  # puts may compact otherwise
    @rule()
    def save_index(self) -> None:
        self.store.close()
        self.saved_index = self.tmp / "index.saved"
        shutil.rmtree(self.saved_index, ignore_errors=True)
        shutil.copytree(self.path / "index", self.saved_index)
        self._reopened()

    @precondition(lambda self: self.saved_index is not None)
    @rule()
    def restore_older_index(self) -> None:
        # An index older than the journal (a crash before its commit, or a restored
        # backup) is caught up by replaying the journal: the model does not change.
        assert self.saved_index is not None
        self.store.close()
        shutil.rmtree(self.path / "index")
        shutil.copytree(self.saved_index, self.path / "index")
        self._reopened()

    @precondition(lambda self: hasattr(self.store, "compact"))
    @rule(threshold=st.sampled_from([None, 0.5, 1.0]))
    def compact(self, threshold: float | None) -> None:
        # Compaction moves records between files; it must not change what the queues hold.
        self.store.compact(threshold=threshold)
        # A saved index may point into files compaction deleted; that is not a state a
        # crash can produce (victims go only after the index swap is durable).
        self.saved_index = None

    @invariant()
    def queues_agree(self) -> None:
        names = set(self.store.queues())
        assert {PLAIN, LIMITED} <= names <= set(ALL_QUEUES)
        total = 0
        for name in ALL_QUEUES:
            expected = self.model.order(name)
            total += len(expected)
            if name not in names:
                assert not expected, f"queue {name!r} missing but model holds {len(expected)}"
                continue
            q = self._queue(name)
            assert len(q) == len(expected)
            browsed = list(q.browse())
            assert [m.id for m in browsed] == [m.id for m in expected]
            assert [bytes(m.body) for m in browsed] == [m.body for m in expected]
        assert self.store.stats().live_messages == total


@pytest.mark.slow
def test_store_agrees_with_model(scale: float) -> None:
    # Both the number of runs and their length grow with the square root of the scale,
    # so the work grows with the scale itself (--big: about ten times the default).
    root = math.sqrt(scale)
    run_state_machine_as_test(
        StoreMachine,
        settings=settings(
            max_examples=max(1, round(150 * root)),
            stateful_step_count=max(5, round(60 * root)),
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
