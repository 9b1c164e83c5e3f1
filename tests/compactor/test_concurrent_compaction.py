"""Everything at once: producers, a consumer, the background job, space pressure and
explicit compact() calls, on a small store. Whatever the interleaving, the result must
be exactly puts minus acks, in the open store, after a reopen and after a rebuild.
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import msgcask

MFS = 64 * 1024
LIMIT = 16 * MFS
BACKLOG = 400  # live messages the producers let pile up


@pytest.mark.slow
def test_compaction_from_every_trigger_at_once_keeps_puts_minus_acks(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    path = tmp_path / "store"
    store = msgcask.open(
        path,
        max_file_size=MFS,
        max_store_size=LIMIT,
        compaction_interval=0.02,
    )
    per_producer = scaled(3000)
    put_ids: list[list[int]] = [[], []]
    acked: list[int] = []
    dead_consumed: list[int] = []  # original ids of dead letters consumed from DLQ.work
    errors: list[BaseException] = []
    producers_done = threading.Event()

    give_up = time.monotonic() + 120  # a store that stays full means a stuck consumer

    def produce(k: int) -> None:
        rnd = random.Random(k)
        q = store.queue("work", max_deliveries=2)
        dlq = store.queue("DLQ.work")
        try:
            i = 0
            while i < per_producer and not errors:
                # Two producers outrun one consumer when the machine is busy: keep
                # the backlog bounded (at most about BACKLOG * 2.5 KB live), or the
                # live data fills the store, which then rightly refuses puts until
                # its consumer has emptied whole files (docs/tuning.md, max_store_size).
                while len(q) + len(dlq) > BACKLOG and not errors:
                    if time.monotonic() > give_up:
                        raise AssertionError("the consumer stopped taking messages")
                    time.sleep(0.001)
                body = (b"%d-%d|" % (k, i)) * rnd.choice([10, 100, 300])
                try:
                    msg_id = q.put(body, headers={"k": str(k)}, priority=rnd.randrange(10))
                except msgcask.StoreFullError as e:
                    # Fair only when live data really fills the store (but for the
                    # data file puts leave for compaction): then wait for the consumer.
                    live = int(re.search(r"of which (\d+) bytes are live", str(e))[1])  # type: ignore[index]
                    if live < LIMIT - 4 * MFS or time.monotonic() > give_up:
                        raise
                    time.sleep(0.01)
                    continue
                put_ids[k].append(msg_id)
                i += 1
        except BaseException as e:
            errors.append(e)

    def consume() -> None:
        rnd = random.Random(7)
        q = store.queue("work", max_deliveries=2)
        dlq = store.queue("DLQ.work")
        held: list[msgcask.Message] = []
        try:
            n = 0
            while not errors:
                n += 1
                if n % 20 == 0:
                    # Dead letters are consumed too, slowly: with the producers'
                    # bound on the backlog, live data stays bounded whatever the
                    # scale, so the store never legitimately fills up.
                    with contextlib.suppress(msgcask.Empty):
                        d = dlq.get(block=False)
                        dlq.ack(d)
                        acked.append(d.id)
                        dead_consumed.append(int(d.headers["x-original-id"]))
                try:
                    m = q.get(timeout=0.2)
                except msgcask.Empty:
                    if producers_done.is_set():
                        return
                    continue
                x = rnd.random()
                if x < 0.8:
                    q.ack(m)
                    acked.append(m.id)
                elif x < 0.95:
                    try:
                        q.nack(m)  # back, or to DLQ.work on the second delivery
                    except msgcask.StoreFullError:
                        q.ack(m)  # no room for the DLQ copy: nothing changed, consume it
                        acked.append(m.id)
                else:
                    held.append(m)  # in flight for a while (a window of 50)
                    if len(held) > 50:
                        old = held.pop(0)
                        q.ack(old)
                        acked.append(old.id)
        except BaseException as e:
            errors.append(e)

    try:
        expected = _run(store, produce, consume, producers_done)
        assert not errors, errors
        everything = set(put_ids[0]) | set(put_ids[1])
        assert not expected.keys() & set(acked), "an acked message is live"
        # Every put is accounted for: acked, live, or dead-lettered (live, new id).
        moved = {int(orig) for _, orig in expected.values() if orig is not None}
        accounted = set(acked) | expected.keys() | moved | set(dead_consumed)
        assert everything <= accounted, f"puts neither acked nor live: {everything - accounted}"
        assert not (set(dead_consumed) | moved) & set(acked), "a message both acked and moved"
    finally:
        store.close()

    copy = tmp_path / "rebuilt"
    shutil.copytree(path, copy)
    shutil.rmtree(copy / "index")
    for p in (path, copy):
        with msgcask.open(p, max_file_size=MFS, compaction_interval=None) as s:
            got = _live(s)
            assert got.keys() == expected.keys(), s.recovery.mode
            assert got == expected
            assert s.verify() == []


def _run(
    store: msgcask.Store,
    produce: Callable[[int], None],
    consume: Callable[[], None],
    producers_done: threading.Event,
) -> dict[int, tuple[bytes, str | None]]:
    """Run it all; return the live messages at the end."""
    threads = [threading.Thread(target=produce, args=(k,)) for k in (0, 1)]
    consumer = threading.Thread(target=consume)
    for t in [*threads, consumer]:
        t.start()
    while any(t.is_alive() for t in threads):
        store.compact(threshold=0.7)
        threads[0].join(0.05)
    for t in threads:
        t.join()
    producers_done.set()
    consumer.join()
    st = store.stats()
    assert st.compaction.passes > 0 and st.compaction.files_rewritten > 0
    store.pause_compaction()
    return _live(store)


def _live(store: msgcask.Store) -> dict[int, tuple[bytes, str | None]]:
    """id -> (body, original id if dead-lettered) for every live message."""
    return {
        m.id: (m.body, m.headers.get("x-original-id"))
        for name in store.queues()
        for m in store.queue(name).browse()
    }


def test_verify_during_a_pass_waits_for_it_instead_of_reporting_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pass publishes its compacted file before the index knows it; a verify
    # that ran in between would call the copy an orphan.
    from msgcask.compactor import rewrite

    with msgcask.open(tmp_path / "store", max_file_size=MFS, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(130):
            q.put(b"m" * 1000)
        for _ in range(100):
            q.ack(q.get(block=False))
        published, release = threading.Event(), threading.Event()
        write_output = rewrite._write_output

        def stop_after_publishing(*args: object) -> object:
            out = write_output(*args)  # type: ignore[arg-type]
            published.set()
            release.wait(60)
            return out

        monkeypatch.setattr(rewrite, "_write_output", stop_after_publishing)
        compacting = threading.Thread(target=store.compact)
        compacting.start()
        assert published.wait(30), "the pass did not get to its copy"
        problems: list[str] = []
        verifying = threading.Thread(target=lambda: problems.extend(store.verify()))
        verifying.start()
        verifying.join(2)  # time for a verify that does not wait to finish
        release.set()
        compacting.join(30)
        verifying.join(30)
        assert problems == []
        assert store.verify() == [] and len(q) == 30
