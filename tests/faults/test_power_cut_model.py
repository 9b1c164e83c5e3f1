"""Random operations and power cuts, checked against a model of what must survive.

A hypothesis state machine drives a store on a FaultyFileSystem with puts, batches,
gets, acks, nacks, transactions, syncs, OS writebacks, compactions, clean reopens and
power cuts (some falling inside a write, some also losing the index). The model tracks,
per message, whether its PUT and its ACK are durable, from the sync mode's promise:

* a message whose PUT is durable and that was never acked must survive every cut;
* a message whose ACK is durable, or that a cut already lost, must never come back;
* nothing survives that was never put.

Runs are derandomized (fixed seed, no example database), so they are reproducible;
``--big`` or ``MSGCASK_TEST_SCALE`` makes them more and longer.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem, abandon
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

QUEUES = st.sampled_from(["a", "b"])
SETTINGS = settings(
    max_examples=40,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class PowerCutMachine(RuleBasedStateMachine):
    mode = "periodic"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.path = Path(self.tmp) / "store"
        self.fs = FaultyFileSystem()
        self.store = self._open()
        self.bodies: dict[int, tuple[str, bytes]] = {}  # every message ever put
        self.live: set[int] = set()  # put and not acked (as far as this run knows)
        self.acked: set[int] = set()  # ack issued, not yet durable
        self.put_durable: set[int] = set()
        # (id, body) of messages durably acked or lost in a cut (ids are never reused, so
        # the body only makes failure reports clearer).
        self.forbidden: set[tuple[int, bytes]] = set()
        self.held: list[msgcask.Message] = []  # delivered, not yet acked or nacked
        self.serial = 0
        self.highest_id = 0

    def _open(self) -> msgcask.Store:
        return msgcask.Store(
            self.path,
            _fs=self.fs,
            sync=self.mode,
            max_file_size=64 * 1024,
            sync_interval=3600,  # syncs happen only where the model expects them
            compaction_interval=None,
        )

    # -- the model's durability events ---------------------------------------------------

    def _everything_durable(self) -> None:
        self.put_durable |= self.live | self.acked
        self._forbid(self.acked)
        self.acked.clear()

    def _put_returned(self, ids: list[int]) -> None:
        self.check_ids(ids)
        self.live.update(ids)
        if self.mode == "always":
            self.put_durable.update(ids)

    def _ack_returned(self, ids: list[int]) -> None:
        self.live.difference_update(ids)
        if self.mode == "always":
            self._forbid(ids)
        else:
            self.acked.update(ids)

    def check_ids(self, ids: list[int]) -> None:
        """Ids only grow, across cuts too: an id a caller was given is never reused."""
        assert ids == sorted(ids) and ids[0] > self.highest_id, (self.highest_id, ids)
        self.highest_id = ids[-1]

    def _forbid(self, ids: set[int] | list[int]) -> None:
        self.forbidden.update((i, self.bodies[i][1]) for i in ids)

    def _body(self, size: int) -> bytes:
        self.serial += 1
        return b"%08d" % self.serial + bytes([self.serial % 256]) * size

    def _get(self, queue: str) -> msgcask.Message | None:
        try:
            return self.store.queue(queue).get(block=False)
        except msgcask.Empty:
            return None

    # -- operations ------------------------------------------------------------------------

    @rule(queue=QUEUES, size=st.integers(0, 8000), priority=st.integers(0, 9))
    def put(self, queue: str, size: int, priority: int) -> None:
        body = self._body(size)
        msg_id = self.store.queue(queue).put(body, priority=priority)
        self.bodies[msg_id] = (queue, body)
        self._put_returned([msg_id])

    @rule(queue=QUEUES, n=st.integers(1, 6))
    def put_many(self, queue: str, n: int) -> None:
        bodies = [self._body(200) for _ in range(n)]
        ids = self.store.queue(queue).put_many(bodies)
        for msg_id, body in zip(ids, bodies, strict=True):
            self.bodies[msg_id] = (queue, body)
        self._put_returned(ids)

    @rule(queue=QUEUES)
    def get_and_ack(self, queue: str) -> None:
        m = self._get(queue)
        if m is not None:
            self.store.queue(queue).ack(m)
            self._ack_returned([m.id])

    @rule(queue=QUEUES)
    def get_and_nack(self, queue: str) -> None:
        m = self._get(queue)
        if m is not None:
            self.store.queue(queue).nack(m)

    @rule(queue=QUEUES)
    def get_and_hold(self, queue: str) -> None:
        m = self._get(queue)
        if m is not None:
            self.held.append(m)

    @precondition(lambda self: self.held)
    @rule()
    def ack_held(self) -> None:
        m = self.held.pop(0)
        self.store.queue(m.queue).ack(m)
        self._ack_returned([m.id])

    @rule(queue=QUEUES, n=st.integers(1, 3))
    def transaction(self, queue: str, n: int) -> None:
        m = self._get(queue)
        bodies = [self._body(100) for _ in range(n)]
        with self.store.transaction() as tx:
            ids = [tx.put(queue, b) for b in bodies]
            if m is not None:
                tx.ack(m)
        for msg_id, body in zip(ids, bodies, strict=True):
            self.bodies[msg_id] = (queue, body)
        self._put_returned(ids)
        if m is not None:
            self._ack_returned([m.id])

    @rule()
    def sync(self) -> None:
        self.store.sync()
        if self.mode != "never":
            self._everything_durable()

    @rule()
    def os_writeback(self) -> None:
        self.fs.writeback()
        self._everything_durable()

    @rule(threshold=st.sampled_from([0.5, 1.0]))
    def compact(self, threshold: float) -> None:
        self.store.compact(threshold=threshold)

    @rule()
    def clean_reopen(self) -> None:
        self.store.close()
        if self.mode != "never":
            self._everything_durable()
        self.held.clear()  # delivered messages come back on reopen
        self.store = self._open()
        assert self.store.verify() == []
        # A clean close loses nothing in any mode (the OS still has every byte).
        browsed = {m.id for name in ("a", "b") for m in self.store.queue(name).browse()}
        assert browsed == self.live

    @rule(torn=st.sampled_from([0, 0, 40, 5000]), lose_index=st.booleans())
    def power_cut(self, torn: int, lose_index: bool) -> None:
        abandon(self.store)
        self.fs.power_cut(torn=torn)
        if lose_index:
            shutil.rmtree(self.path / "index")
        self.store = self._open()
        assert self.store.verify() == []
        survivors = {
            m.id: (name, bytes(m.body))
            for name in self.store.queues()
            for m in self.store.queue(name).browse()
        }
        must = self.live & self.put_durable
        assert must <= survivors.keys(), f"durable puts lost: {sorted(must - survivors.keys())}"
        back = {(i, body) for i, (_, body) in survivors.items()} & self.forbidden
        assert not back, f"acked or lost messages came back: {sorted(i for i, _ in back)}"
        assert survivors.keys() <= self.live | self.acked, "a message nobody put"
        for msg_id, found in survivors.items():
            assert found == self.bodies[msg_id], f"message {msg_id} changed"
        # From here on, what survived is on disk and what did not is gone for good.
        self._forbid((self.live | self.acked) - survivors.keys())
        self.live = set(survivors)
        self.put_durable = set(survivors)
        self.acked.clear()
        self.held.clear()

    @invariant()
    def queue_lengths_match_the_model(self) -> None:
        for name in ("a", "b"):
            expected = sum(1 for i in self.live if self.bodies[i][0] == name)
            assert len(self.store.queue(name)) == expected

    def teardown(self) -> None:
        try:
            if not self.store._closed:
                assert self.store.verify() == []
                self.store.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["always", "periodic", "never"])
def test_power_cuts_keep_what_the_sync_mode_promises(mode: str, scale: float) -> None:
    # More runs, and longer ones, with the scale (--big: about ten times the work),
    # from the same fixed seed.
    root = math.sqrt(scale)
    machine = type(f"PowerCutMachine_{mode}", (PowerCutMachine,), {"mode": mode})
    run_state_machine_as_test(
        machine,
        settings=settings(
            SETTINGS,
            max_examples=max(1, round(40 * root)),
            stateful_step_count=max(5, round(50 * root)),
        ),
    )
