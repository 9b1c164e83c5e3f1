"""Group commit through the seam: with sync="always", threads that put at the same time
share fsyncs, and each put returns only once its own record is durable."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem, abandon

import msgcask

WRITERS = 12


def open_always(store_path: Path) -> tuple[FaultyFileSystem, msgcask.Store]:
    """A sync="always" store over the seam; no background sync or compaction."""
    fs = FaultyFileSystem()
    store = msgcask.Store(
        store_path, _fs=fs, sync="always", sync_interval=3600, compaction_interval=None
    )
    return fs, store


def test_concurrent_puts_with_sync_always_share_fsyncs(store_path: Path) -> None:
    fs, store = open_always(store_path)
    q = store.queue("q")
    everyone_wrote = threading.Event()
    start = fs.appends
    # Stall every fsync until all writers have appended: the first fsync may have
    # started before some appends, the second covers them all.

    def stall() -> None:
        assert everyone_wrote.wait(30), "a writer never appended"

    fs.before_fsync = stall
    fsyncs_before = fs.fsyncs
    returned: dict[int, int] = {}
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            returned[n] = q.put(b"writer %d" % n)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for t in threads:
        t.start()
    while fs.appends - start < WRITERS and not errors:
        threading.Event().wait(0.001)
    everyone_wrote.set()
    for t in threads:
        t.join(30)
    assert not errors
    assert 1 <= fs.fsyncs - fsyncs_before <= 2 < WRITERS
    # Every put that returned is durable: a power cut right now loses none of them.
    fs.before_fsync = None
    abandon(store)
    fs.power_cut()
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert {m.id for m in store.queue("q").browse()} == set(returned.values())


def test_when_a_shared_fsync_fails_every_writer_waiting_on_it_raises(store_path: Path) -> None:
    fs, store = open_always(store_path)
    q = store.queue("q")
    everyone_wrote = threading.Event()
    start = fs.appends

    def stall_then_fail() -> None:  # the fsync all writers wait for fails
        assert everyone_wrote.wait(30), "a writer never appended"
        fs.fail_fsync = True

    fs.before_fsync = stall_then_fail
    outcomes: dict[int, str] = {}

    def writer(n: int) -> None:
        try:
            q.put(b"writer %d" % n)
            outcomes[n] = "returned"
        except msgcask.Error as e:
            outcomes[n] = f"raised: {e}"

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(WRITERS)]
    for t in threads:
        t.start()
    while fs.appends - start < WRITERS:
        threading.Event().wait(0.001)
    everyone_wrote.set()
    for t in threads:
        t.join(30)
    assert not [t for t in threads if t.is_alive()], "writers still wait for the failed fsync"
    assert all(o.startswith("raised") for o in outcomes.values()), outcomes
    # The disk "recovers": a later fsync would succeed, but cannot vouch for pages
    # the failed one may have dropped. Nothing claims durability any more.
    fs.before_fsync = None
    fs.fail_fsync = False
    with pytest.raises(msgcask.Error, match="fsync of the journal"):
        store.sync()
    store.close()  # already reported: close does not raise it again
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert reopened.recovery.mode != "clean"  # recovered from what reached the disk
        assert reopened.verify() == []
