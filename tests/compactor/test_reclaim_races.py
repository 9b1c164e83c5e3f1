"""Deleting data files while the store is in use by other threads.

A reclaim unlinks files outside the store lock (compactor/reclaim.py delete_retired),
so anything that lists the store directory and then opens what it listed can find a
file gone in between. The interleaving is forced through the FileSystem seam: the
unlink waits until the directory has been listed, and the listing returns only once
the unlink is done.
"""

from __future__ import annotations

import threading
from pathlib import Path

import msgcask
from msgcask.store.fs import DataFile, FileSystem

MFS = 64 * 1024
WAIT = 10.0
# Small files, no compaction schedule, and no background flush (which could delete
# a dead file before the test does).
QUIET = {"max_file_size": MFS, "compaction_interval": None, "sync_interval": 60}


def _compact_in_thread(store: msgcask.Store, errors: list[BaseException]) -> threading.Thread:
    """Start ``store.compact()`` in a thread that records what it raises."""

    def compact() -> None:
        try:
            store.compact()
        except BaseException as e:
            errors.append(e)

    worker = threading.Thread(target=compact)
    worker.start()
    return worker


class InterleavingFS(FileSystem):
    def __init__(self) -> None:
        self.armed = False
        self.unlinking = threading.Event()
        self.proceed = threading.Event()
        self.unlinked = threading.Event()

    def unlink(self, path: str) -> None:
        if self.armed and path.endswith(".log"):
            self.unlinking.set()
            self.proceed.wait(WAIT)
            super().unlink(path)
            self.unlinked.set()
            return
        super().unlink(path)

    def listdir(self, path: str) -> list[str]:
        names = super().listdir(path)
        if self.armed and self.unlinking.is_set() and not self.proceed.is_set():
            self.proceed.set()  # the listing is taken: let the unlink happen now
            self.unlinked.wait(WAIT)
        return names


def test_verify_while_a_file_is_being_deleted_does_not_crash(tmp_path: Path) -> None:
    fs = InterleavingFS()
    store = msgcask.Store(tmp_path / "store", _fs=fs, **QUIET)
    try:
        q = store.queue("q")
        for _ in range(100):  # more than one file, all consumed: the first file dies whole
            q.put(b"x" * 1000)
            q.ack(q.get(block=False))
        fs.armed = True
        errors: list[BaseException] = []
        worker = _compact_in_thread(store, errors)
        assert fs.unlinking.wait(WAIT), "the compaction never deleted a file"
        problems = store.verify()  # lists the directory while the unlink is pending
        worker.join(WAIT)
        assert not errors, errors
        assert fs.unlinked.is_set(), "the interleaving did not happen"
        assert problems == []
        fs.armed = False
        assert store.verify() == []
    finally:
        fs.proceed.set()
        store.close()


class BlockingUnlinkFS(FileSystem):
    """The first unlink of a data file waits until the test lets it go."""

    def __init__(self) -> None:
        self.armed = False
        self.unlinking = threading.Event()
        self.release = threading.Event()

    def unlink(self, path: str) -> None:
        if self.armed and path.endswith(".log") and not self.unlinking.is_set():
            self.unlinking.set()
            self.release.wait(WAIT)
        super().unlink(path)


def test_put_while_a_pass_deletes_dead_files_is_not_refused(tmp_path: Path) -> None:
    # A pass has retired ~8 dead files (index committed) and is unlinking them. A put
    # arriving now must not be refused for want of space that is being freed: that is
    # refusing a put because of dead data (guarantee 5).
    path = tmp_path / "store"
    # No space limit and no background flush while the garbage is made.
    with msgcask.open(path, **QUIET) as s:
        q = s.queue("q")
        for _ in range(500):
            q.put(b"g" * 1000)
        for _ in range(500):
            q.ack(q.get(block=False))
        for _ in range(50):  # a mostly live write head
            q.put(b"l" * 1000)
        garbage = s.stats().data_bytes
    limit = garbage + 10_000  # the garbage alone nearly fills the store
    assert limit >= 4 * MFS
    fs = BlockingUnlinkFS()
    store = msgcask.Store(path, max_store_size=limit, _fs=fs, **QUIET)
    errors: list[BaseException] = []
    try:
        fs.armed = True
        worker = _compact_in_thread(store, errors)
        assert fs.unlinking.wait(WAIT), "the pass never deleted a file"
        outcome: list[object] = []

        def put() -> None:
            try:
                outcome.append(store.queue("q").put(b"n" * 40_000))
            except BaseException as e:
                outcome.append(e)

        putter = threading.Thread(target=put)
        putter.start()
        putter.join(1.0)  # it may wait for the pass; it must not fail
        fs.release.set()
        putter.join(WAIT)
        worker.join(WAIT)
        assert not errors, errors
        assert len(outcome) == 1 and isinstance(outcome[0], int), (
            f"put during the deletion of dead files: {outcome}"
        )
        assert store.stats().data_bytes <= limit
        assert store.verify() == []
    finally:
        fs.release.set()
        store.close()


class PeakFS(FileSystem):
    """Samples the bytes of data files on disk (temporary ones included) at every step
    where a compaction has written more than it has deleted yet."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.peak = 0

    def _sample(self) -> None:
        total = sum(p.stat().st_size for p in self.directory.iterdir() if ".log" in p.name)
        self.peak = max(self.peak, total)

    def publish(self, handle: DataFile, path: str, *, durable: bool = True) -> None:
        self._sample()
        super().publish(handle, path, durable=durable)

    def unlink(self, path: str) -> None:
        self._sample()
        super().unlink(path)


def test_compaction_never_takes_the_disk_over_max_store_size(tmp_path: Path) -> None:
    # Six or seven sealed files 40% live under an 8-file limit: the put path never felt
    # pressure. The copy is written before its victims are deleted, so it must fit in
    # the data file's worth puts leave under the cap: a pass copying 40% of seven
    # files at once would write ~2.5 files on top of 7 in an 8-file store.
    path = tmp_path / "store"
    limit = 8 * MFS
    fs = PeakFS(path)
    store = msgcask.Store(path, max_store_size=limit, _fs=fs, **QUIET)
    try:
        q = store.queue("q")
        held = []
        while store.stats().data_bytes < limit - 2 * MFS:
            batch = [q.put(b"k" * 1000) for _ in range(60)]
            got = [q.get(block=False) for _ in batch]
            for i, m in enumerate(got):
                if i % 5 < 3:
                    q.ack(m)  # 60% consumed, 40% left delivered
                else:
                    held.append(m)
        before = store.stats()
        assert before.data_bytes + MFS <= limit
        fs.peak = 0
        reports = [store.compact() for _ in range(3)]
        assert fs.peak <= limit, (
            f"a pass took the data files to {fs.peak} bytes on disk, over "
            f"max_store_size={limit} (before: {before.data_bytes}, {reports})"
        )
        # Capped, but still useful: each pass frees space, and a few of them a lot.
        assert reports[0].files_rewritten >= 1 and reports[0].bytes_reclaimed > 0
        after = store.stats().data_bytes
        assert after <= 0.7 * before.data_bytes, f"{before.data_bytes} -> {after}: {reports}"
        assert len(held) == len(list(q.browse()))
        assert store.verify() == []
    finally:
        store.close()
