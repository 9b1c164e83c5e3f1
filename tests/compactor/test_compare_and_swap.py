"""The swap is compare-and-swap per message (design brief, compactor mechanisms).

A compaction decides what to copy, then writes the copy without the store lock, then
swaps the index over to the copy. Whatever the foreground does to a message between the
decision and the swap must win: an ack stays an ack (the copy is dead and its ACK must
outlive it), a nack/redelivery keeps its new delivery count, a dead-lettering moves the
message exactly once. These tests hook the compacted output file's writes (through the
FileSystem seam) and act on the message at exactly that moment, from the same thread:
the output is written without the store lock (rewrite._write_output), so nothing waits.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import msgcask
from msgcask.store import format as fmt
from msgcask.store.fs import DataFile, FileSystem

MAX_FILE_SIZE = 64 * 1024
BODY = 1000


class HookedFile(DataFile):
    """A data file that calls ``fs.hook`` while the compactor writes copies into it."""

    fs: HookedFS
    is_output = False
    appends = 0

    def append(self, data: bytes, *, single_record: bool = False) -> int:
        if self.size == 0 and data[:8] == fmt.MAGIC and data[10] == fmt.KIND_COMPACTED:
            self.is_output = True
        elif self.is_output:
            self.appends += 1
            # Append 1 is the MANIFEST, 2 the first batch of copied records.
            if self.appends == 2 and self.fs.hook is not None:
                hook, self.fs.hook = self.fs.hook, None
                hook()
                self.fs.fired += 1
        return super().append(data, single_record=single_record)


class HookedFS(FileSystem):
    def __init__(self) -> None:
        self.hook: Callable[[], object] | None = None
        self.fired = 0

    def _wrap(self, path: str, fd: int, size: int) -> DataFile:
        f = HookedFile(path, fd, size)
        f.fs = self
        return f


def _open(path: Path, fs: FileSystem | None = None) -> msgcask.Store:
    return msgcask.Store(path, max_file_size=MAX_FILE_SIZE, compaction_interval=None, _fs=fs)


def _body(i: int) -> bytes:
    return (b"%06d" % i) * (BODY // 6)


def _fill_sparse_files(
    store: msgcask.Store, name: str = "q", max_deliveries: int | None = None
) -> list[int]:
    """Put ~2 files of messages, consume all but every 20th; return the ids left."""
    q = store.queue(name, max_deliveries=max_deliveries)
    ids = [q.put(_body(i), headers={"i": str(i)}) for i in range(130)]
    kept = ids[::20]
    taken = [q.get(block=False) for _ in ids]
    for m in taken:
        if m.id in kept:
            q.nack(m)  # back to the queue, delivered once
        else:
            q.ack(m)
    # Roll the head so the files holding those messages are sealed victims.
    _seal_head(store)
    return kept


def _seal_head(store: msgcask.Store) -> None:
    """Put and ack about a file's worth of filler, so the head rolls over."""
    filler = store.queue("filler")
    for i in range(70):
        filler.put(_body(i))
    for _ in range(70):
        filler.ack(filler.get(block=False))


def _sparse_hooked_store(
    tmp_path: Path, max_deliveries: int | None = None
) -> tuple[Path, HookedFS, msgcask.Store, list[int]]:
    """A store on a ``HookedFS`` filled by ``_fill_sparse_files``: its path, its
    file system, the store and the ids left live."""
    path = tmp_path / "store"
    fs = HookedFS()
    store = _open(path, fs)
    return path, fs, store, _fill_sparse_files(store, max_deliveries=max_deliveries)


def _live_ids(store: msgcask.Store) -> dict[int, msgcask.Message]:
    return {m.id: m for name in store.queues() for m in store.queue(name).browse()}


def _reopen_both_ways(path: Path, tmp_path: Path) -> list[msgcask.Store]:
    """The store reopened with its index (replay) and a copy without it (rebuild)."""
    copy = tmp_path / "rebuilt"
    shutil.copytree(path, copy)
    shutil.rmtree(copy / "index")
    return [_open(path), _open(copy)]


def _assert_reopened(
    path: Path,
    tmp_path: Path,
    live: set[int],
    check: Callable[[msgcask.Store], object] = lambda s: None,
) -> None:
    """Reopened with its index and rebuilt, the store holds exactly ``live`` (then
    passes ``check``) and verifies."""
    for s in _reopen_both_ways(path, tmp_path):
        with s:
            assert set(_live_ids(s)) == live, s.recovery.mode
            check(s)
            assert s.verify() == []


def _deliver(store: msgcask.Store, name: str, msg_id: int) -> msgcask.Message:
    """Get exactly ``msg_id`` (a selector on its header), delivering nothing else."""
    q = store.queue(name)
    tag = next(m.headers["i"] for m in q.browse() if m.id == msg_id)
    m = q.get(block=False, selector=lambda h: h.get("i") == tag)
    assert m.id == msg_id
    return m


def _ack_during_the_copy(
    store: msgcask.Store, fs: HookedFS, ids: list[int]
) -> msgcask.CompactionReport:
    """Deliver ``ids``, then compact, acking them while the copy is written."""
    q = store.queue("q")
    delivered = [_deliver(store, "q", i) for i in ids]

    def ack_all() -> None:
        for m in delivered:
            q.ack(m)

    fs.hook = ack_all
    report = store.compact()
    assert fs.fired == 1, "the hook never ran: no compacted output was written"
    return report


def test_message_acked_while_its_copy_is_written_stays_acked(tmp_path: Path) -> None:
    path, fs, store, kept = _sparse_hooked_store(tmp_path)
    victim_ids = kept[:3]
    report = _ack_during_the_copy(store, fs, victim_ids)
    assert report.files_rewritten >= 1
    for i in victim_ids:
        assert store._message_state(i) == "acked", f"message {i}: the copy undid the ack"
    assert store.verify() == []
    live = _live_ids(store)
    assert set(live) == set(kept) - set(victim_ids)
    # The copies of the acked messages are dead bytes, not live ones.
    st = store.stats()
    assert st.live_messages == len(kept) - len(victim_ids)
    compacted = [f for f in st.files if f.kind == "compacted"]
    assert len(compacted) == 1
    assert compacted[0].live_messages == len(kept) - len(victim_ids)

    # The ACK records must now outlive the dead copies, in the file that holds them.
    head = next(f.file_id for f in st.files if f.active)
    kept_by_head = store.why_kept(head)
    for i in victim_ids:
        assert (i, compacted[0].file_id) in kept_by_head.needed_acks, (
            f"ACK of {i} is not kept for its copy in {compacted[0].file_id}: {kept_by_head}"
        )
    store.close()
    _assert_reopened(path, tmp_path, set(kept) - set(victim_ids))


def test_ack_of_a_dead_copy_is_carried_when_its_own_file_is_compacted(tmp_path: Path) -> None:
    # Follow-up of the case above: the file holding the ACKs becomes a victim itself. If
    # the ACKs were dropped instead of carried, a rebuild would resurrect the messages
    # from their dead copies.
    path, fs, store, kept = _sparse_hooked_store(tmp_path)
    acked_ids = kept[:2]
    _ack_during_the_copy(store, fs, acked_ids)
    # Seal the head that holds the ACKs, then compact everything with dead bytes.
    _seal_head(store)
    for _ in range(3):
        store.compact(threshold=1.0)
    assert store.verify() == []
    for i in acked_ids:
        # "unknown" once the dead copy itself is gone and the ACK with it.
        assert store._message_state(i) in ("acked", "unknown")
    store.close()
    _assert_reopened(path, tmp_path, set(kept) - set(acked_ids))


def test_redelivery_during_the_copy_keeps_the_new_delivery_count(tmp_path: Path) -> None:
    path, fs, store, kept = _sparse_hooked_store(tmp_path)
    q = store.queue("q")
    target = kept[1]
    # Delivered once before the copy is planned (count 2: the fill delivered it once).
    first = _deliver(store, "q", target)
    assert first.deliveries == 2
    seen: list[msgcask.Message] = []

    def nack_and_redeliver() -> None:
        q.nack(first)
        seen.append(_deliver(store, "q", target))

    fs.hook = nack_and_redeliver
    store.compact()
    assert fs.fired == 1
    assert seen[0].deliveries == 3
    assert _live_ids(store)[target].deliveries == 3, "the copy's stale count won"
    assert store.verify() == []
    store.close()

    def counted_on(s: msgcask.Store) -> None:
        deliveries = _live_ids(s)[target].deliveries
        assert deliveries == 3, f"{s.recovery.mode}: delivery count {deliveries}, want 3"
        # And it comes back as a redelivery, counted on from there.
        assert _deliver(s, "q", target).deliveries == 4

    _assert_reopened(path, tmp_path, set(kept), counted_on)


def test_dead_lettering_during_the_copy_moves_the_message_once(tmp_path: Path) -> None:
    path, fs, store, kept = _sparse_hooked_store(tmp_path, max_deliveries=5)
    q = store.queue("q", max_deliveries=2)
    target = kept[2]
    m = _deliver(store, "q", target)
    assert m.deliveries >= 2
    fs.hook = lambda: q.nack(m)  # over max_deliveries: to DLQ.q with a new id
    store.compact()
    assert fs.fired == 1
    assert store._message_state(target) == "acked"
    dlq = list(store.queue("DLQ.q").browse())
    assert [d.headers["x-original-id"] for d in dlq] == [str(target)]
    assert dlq[0].body == m.body
    assert store.verify() == []
    store.close()
    # Without the dead-lettered original, which must not come back.
    _assert_reopened(path, tmp_path, (set(kept) - {target}) | {dlq[0].id})


def test_acks_racing_real_compactions_are_never_undone(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    # The deterministic cases above, left to the scheduler: a consumer thread acks while
    # the main thread compacts in a loop. Whatever the interleaving, every returned ack
    # holds, in the open store, after a reopen and after a rebuild.
    path = tmp_path / "store"
    store = _open(path)
    q = store.queue("q")
    n = scaled(3000)
    ids = [q.put(_body(i), headers={"i": str(i)}) for i in range(n)]
    keep = set(ids[::7])
    acked: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def consume() -> None:
        try:
            while True:
                m = q.get(block=False)
                if m.id not in keep:  # kept ones stay delivered: DELIVER records to carry
                    q.ack(m)
                    acked.append(m.id)
        except msgcask.Empty:
            pass
        except BaseException as e:
            errors.append(e)
        finally:
            done.set()

    worker = threading.Thread(target=consume)
    worker.start()
    passes = overlapped = 0
    while not done.is_set() or passes < 3:
        running = not done.is_set()
        report = store.compact(threshold=0.8)
        passes += 1
        if running:
            overlapped += report.files_rewritten
    worker.join()
    # Not guaranteed by the scheduler, but with ~50 files of backlog the first pass
    # always starts before the consumer is through; if not, the test proves nothing.
    assert overlapped > 0, "no compaction overlapped the acks"
    assert not errors, errors
    assert len(acked) == n - len(keep)
    for i in acked:
        assert store._message_state(i) in ("acked", "unknown"), f"ack of {i} undone"
    assert set(_live_ids(store)) == keep
    assert store.verify() == []
    store.close()
    _assert_reopened(path, tmp_path, keep)


def test_purge_during_the_copy_leaves_every_copy_dead(tmp_path: Path) -> None:
    path, fs, store, kept = _sparse_hooked_store(tmp_path)
    q = store.queue("q")
    purged: list[int] = []
    fs.hook = lambda: purged.append(q.purge())
    store.compact()
    assert fs.fired == 1
    assert purged == [len(kept)]
    assert _live_ids(store) == {}
    assert store.verify() == []
    store.close()
    _assert_reopened(path, tmp_path, set())  # no purged message back


def test_queue_deleted_during_the_copy_stays_deleted(tmp_path: Path) -> None:
    path, fs, store, kept = _sparse_hooked_store(tmp_path)
    other = store.queue("other")
    survivor = other.put(b"stays")
    fs.hook = lambda: store.delete_queue("q")
    store.compact()
    assert fs.fired == 1
    assert "q" not in store.queues()
    assert all(store._message_state(i) != "live" for i in kept)
    assert set(_live_ids(store)) == {survivor}
    assert store.verify() == []
    store.close()

    def still_deleted(s: msgcask.Store) -> None:
        assert "q" not in s.queues()

    _assert_reopened(path, tmp_path, {survivor}, still_deleted)


def test_transaction_acking_and_putting_during_the_copy_is_all_kept(tmp_path: Path) -> None:
    path, fs, store, kept = _sparse_hooked_store(tmp_path)
    m = _deliver(store, "q", kept[3])
    new_ids: list[int] = []

    def transact() -> None:
        with store.transaction() as tx:
            new_ids.append(tx.put("q", b"made during the copy"))
            tx.ack(m)

    fs.hook = transact
    store.compact()
    assert fs.fired == 1
    expected = (set(kept) - {kept[3]}) | set(new_ids)
    assert set(_live_ids(store)) == expected
    assert store.verify() == []
    store.close()
    _assert_reopened(path, tmp_path, expected)
