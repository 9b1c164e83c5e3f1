"""store/writer.py: the journal's write head (roll-over, group commit, append errors).

The Journal is driven directly with a real FileSystem in a temp dir; fsyncs and failing
writes are observed through DataFile subclasses handed out by ``FileSystem._wrap``.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from msgcask.errors import Error
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import data_file_name, parse_data_file_name
from msgcask.store.fs import DataFile, FileSystem
from msgcask.store.writer import Journal

HEADER = fmt.FILE_HEADER_SIZE


class CountingFile(DataFile):
    """Counts fsyncs and remembers the size each one made durable."""

    fs: CountingFS

    def fsync(self) -> None:
        self.fs.before_fsync()
        super().fsync()
        with self.fs.mutex:
            self.fs.fsyncs += 1
            self.fs.synced[self.path] = max(self.fs.synced.get(self.path, 0), self.size)


class CountingFS(FileSystem):
    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.fsyncs = 0
        self.synced: dict[str, int] = {}
        self.gate: threading.Event | None = None

    def before_fsync(self) -> None:
        if self.gate is not None:
            assert self.gate.wait(30), "test gate never opened"

    def _wrap(self, path: str, fd: int, size: int) -> DataFile:
        f = CountingFile(path, fd, size)
        f.fs = self
        return f


class FailingFile(DataFile):
    """Writes ``partial`` bytes of the next append, then fails with ENOSPC."""

    partial: int | None = None
    truncate_fails = False

    def append(self, data: bytes, *, single_record: bool = False) -> int:
        if self.partial is None:
            return super().append(data, single_record=single_record)
        os.pwrite(self.fd, data[: self.partial], self.size)
        self.partial = None
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def truncate(self, size: int) -> None:
        if self.truncate_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().truncate(size)


class FailingFS(FileSystem):
    def _wrap(self, path: str, fd: int, size: int) -> DataFile:
        return FailingFile(path, fd, size)


class Harness:
    """A journal in ``directory`` starting at file 1, recording its new files."""

    def __init__(
        self, directory: Path, fs: FileSystem, max_file_size: int, fsync: bool = True
    ) -> None:
        self.directory = str(directory)
        self.fs = fs
        self.next_file = 2
        self.id_floor = 100
        self.new_files: list[int] = []
        path = os.path.join(self.directory, data_file_name(1))
        head = fs.create_temp(path)
        head.append(codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1))
        fs.publish(head, path)
        self.journal = Journal(
            fs,
            self.directory,
            1,
            head,
            max_file_size=max_file_size,
            fsync_enabled=fsync,
            new_file_id=self._new_file_id,
            id_floor=lambda: self.id_floor,
            on_new_file=lambda file_id, handle: self.new_files.append(file_id),
        )

    def _new_file_id(self) -> int:
        self.next_file += 1
        return self.next_file - 1

    def files(self) -> dict[int, bytes]:
        out = {}
        for name in os.listdir(self.directory):
            file_id = parse_data_file_name(name)
            if file_id is not None:
                out[file_id] = Path(self.directory, name).read_bytes()
        return out


def record(n: int, size: int) -> bytes:
    """A PUT record of exactly ``size`` bytes."""
    overhead = codec.put_record_size(b"q", b"", 0)
    return codec.encode_put(n, b"q", 4, 0, b"", bytes([n % 256]) * (size - overhead))


class TestRollOver:
    def test_record_that_does_not_fit_goes_to_a_new_file(self, tmp_path: Path) -> None:
        h = Harness(tmp_path, FileSystem(), max_file_size=1000)
        a, b = record(1, 600), record(2, 600)
        assert h.journal.append(a) == (1, HEADER)
        assert h.journal.append(b) == (2, HEADER)
        assert h.new_files == [2]
        files = h.files()
        assert files[1] == codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1) + a
        assert files[2][HEADER:] == b
        # The new file says which ids it may hold: from the id floor at roll-over on.
        assert codec.decode_file_header(files[2], "f") == codec.FileHeader(
            fmt.FORMAT_VERSION, fmt.KIND_JOURNAL, 2, 100
        )
        assert h.journal.position == (2, HEADER + 600)

    def test_record_that_fits_exactly_stays(self, tmp_path: Path) -> None:
        h = Harness(tmp_path, FileSystem(), max_file_size=1000)
        h.journal.append(record(1, 500))
        assert h.journal.append(record(2, 1000 - HEADER - 500)) == (1, HEADER + 500)
        assert h.new_files == []

    def test_never_an_empty_roll_over(self, tmp_path: Path) -> None:
        # A record bigger than a file goes into the fresh file it starts in; rolling over
        # would only leave an empty file behind (and loop if repeated).
        h = Harness(tmp_path, FileSystem(), max_file_size=1000)
        assert h.journal.append(record(1, 1500)) == (1, HEADER)
        assert h.new_files == []
        h.journal.append(record(2, 40))
        assert h.new_files == [2]
        assert h.journal.append(record(3, 2000)) == (3, HEADER)
        assert h.new_files == [2, 3]
        assert len(h.files()[2]) == HEADER + 40

    def test_roll_over_seals_the_old_head_with_an_fsync(self, tmp_path: Path) -> None:
        fs = CountingFS()
        h = Harness(tmp_path, fs, max_file_size=1000)
        h.journal.append(record(1, 600))
        before = fs.fsyncs
        h.journal.append(record(2, 600))
        path1 = os.path.join(str(tmp_path), data_file_name(1))
        assert fs.synced[path1] == HEADER + 600
        assert fs.fsyncs > before
        # ...so syncing to a position in the sealed file needs no further fsync.
        count = fs.fsyncs
        h.journal.sync_to((1, HEADER + 600))
        assert fs.fsyncs == count

    def test_sync_never_fsyncs_only_to_publish_new_files(self, tmp_path: Path) -> None:
        # No fsync per record; each roll-over file is still published durably (one fsync
        # per file), so a power cut never leaves a data file name without its header.
        fs = CountingFS()
        h = Harness(tmp_path, fs, max_file_size=1000, fsync=False)
        count = fs.fsyncs
        for i in range(5):
            h.journal.append(record(i, 600))
        assert h.new_files == [2, 3, 4, 5]
        assert fs.fsyncs - count == len(h.new_files)
        synced = {os.path.basename(p): n for p, n in fs.synced.items()}
        for file_id in h.new_files:
            assert synced[data_file_name(file_id) + ".tmp"] == HEADER  # the header only


class TestGroupCommit:
    def test_waiters_share_one_fsync(self, tmp_path: Path) -> None:
        fs = CountingFS()
        h = Harness(tmp_path, fs, max_file_size=2**20)
        positions = []
        for i in range(20):
            h.journal.append(record(i, 100))
            positions.append(h.journal.position)
        before = fs.fsyncs
        threads = [threading.Thread(target=h.journal.sync_to, args=(p,)) for p in positions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        # Everything was written before anyone synced, so the first fsync covers all.
        assert fs.fsyncs - before == 1

    def test_a_failed_fsync_fails_every_sync_it_covered(self, tmp_path: Path) -> None:
        # A second thread syncs to the same position while the fsync is in flight
        # (or just after it failed): it must raise too, never count the bytes durable.
        fs = OneHookFS()
        h = Harness(tmp_path, fs, max_file_size=2**20)
        h.journal.append(record(1, 100))
        pos = h.journal.position
        outcome: list[BaseException | None] = []

        def sync_beside() -> None:
            try:
                h.journal.sync_to(pos)
                outcome.append(None)
            except OSError as e:
                outcome.append(e)

        waiter = threading.Thread(target=sync_beside)

        def start_a_waiter_then_fail() -> None:
            waiter.start()
            waiter.join(0.2)  # give it time to wait for this fsync
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        fs.hook = start_a_waiter_then_fail
        with pytest.raises(OSError):
            h.journal.sync_to(pos)
        waiter.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], OSError), outcome

    def test_concurrent_writers_need_fewer_fsyncs_than_callers(self, tmp_path: Path) -> None:
        fs = CountingFS()
        h = Harness(tmp_path, fs, max_file_size=2**20)
        callers = 16
        lock = threading.Lock()  # appends happen under the store's lock
        appended = 0
        fs.gate = threading.Event()  # holds the first fsync until every caller appended
        positions: dict[int, tuple[int, int]] = {}
        errors: list[BaseException] = []

        def caller(i: int) -> None:
            nonlocal appended
            try:
                with lock:
                    h.journal.append(record(i, 200))
                    pos = h.journal.position
                    positions[i] = pos
                    appended += 1
                    if appended == callers:
                        assert fs.gate is not None
                        fs.gate.set()
                h.journal.sync_to(pos)
            except BaseException as e:
                errors.append(e)

        before = fs.fsyncs
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        # One fsync may start before all appends (target taken then); a second covers
        # the rest. Without group commit there would be one per caller.
        assert 1 <= fs.fsyncs - before <= 2 < callers
        path = os.path.join(str(tmp_path), data_file_name(1))
        for pos in positions.values():
            assert pos[0] == 1 and fs.synced[path] >= pos[1]
            assert h.journal._durable >= pos

    def test_sync_covers_everything_written(self, tmp_path: Path) -> None:
        fs = CountingFS()
        h = Harness(tmp_path, fs, max_file_size=2**20)
        h.journal.append(record(1, 300))
        h.journal.sync()
        assert fs.synced[os.path.join(str(tmp_path), data_file_name(1))] == HEADER + 300


class TestAppendError:
    def test_failed_append_cuts_the_file_back_and_raises(self, tmp_path: Path) -> None:
        h = Harness(tmp_path, FailingFS(), max_file_size=2**20)
        good = record(1, 100)
        h.journal.append(good)
        head = h.journal.head
        assert isinstance(head, FailingFile)
        head.partial = 37
        with pytest.raises(Error, match="nothing of this call was stored") as err:
            h.journal.append(record(2, 100))
        assert isinstance(err.value.__cause__, OSError)
        assert err.value.__cause__.errno == errno.ENOSPC
        path = os.path.join(str(tmp_path), data_file_name(1))
        assert os.path.getsize(path) == HEADER + 100 == head.size
        assert h.journal.bytes_written == 100
        # Space is back: the next record lands where the failed one would have.
        assert h.journal.append(record(3, 50)) == (1, HEADER + 100)
        assert h.files()[1][HEADER:] == good + record(3, 50)

    def test_failed_append_with_failing_truncate_rewinds_the_write_position(
        self, tmp_path: Path
    ) -> None:
        # The partial bytes stay on disk, but the next append overwrites them: they never
        # sit between two records.
        h = Harness(tmp_path, FailingFS(), max_file_size=2**20)
        h.journal.append(record(1, 100))
        head = h.journal.head
        assert isinstance(head, FailingFile)
        head.partial = 80
        head.truncate_fails = True
        with pytest.raises(Error):
            h.journal.append(record(2, 100))
        assert head.size == HEADER + 100
        head.truncate_fails = False
        h.journal.append(record(3, 100))
        buf = h.files()[1]
        items = list(codec.scan(buf, HEADER))
        assert [(i.offset, i.rtype) for i in items if isinstance(i, codec.Record)] == [
            (HEADER, fmt.TYPE_PUT),
            (HEADER + 100, fmt.TYPE_PUT),
        ]
        assert len(items) == 2  # and no damage: the partial bytes were overwritten


def test_a_seal_waits_for_a_sync_in_flight_and_neither_fails(tmp_path: Path) -> None:
    # sync_to takes the head without a lock. A seal from another thread (which
    # fsyncs the head too) waits for that fsync: two fsyncs of one file at once
    # could split a write-back error between them, and the head cannot be sealed
    # and deleted under the sync.
    fs = OneHookFS()
    h = Harness(tmp_path, fs, max_file_size=1000)
    h.journal.append(record(1, 600))
    first = h.journal.head
    sealer: list[threading.Thread] = []

    def seal_and_delete_the_head() -> None:
        t = threading.Thread(target=lambda: (h.journal.roll_over(), first.close()))
        t.start()
        t.join(0.3)
        assert t.is_alive(), "the seal ran during the sync's fsync"
        sealer.append(t)

    fs.hook = seal_and_delete_the_head
    h.journal.sync()
    sealer[0].join(5)
    assert not sealer[0].is_alive()
    assert h.journal.sync_failure is None
    assert h.journal.head is not first
    h.journal.append(record(2, 600))
    h.journal.sync()  # the journal still syncs
    assert fs.synced[h.journal.head.path] == h.journal.head.size


def test_a_sync_gives_up_the_unmap_for_a_seal_waiting_on_it(tmp_path: Path) -> None:
    # A seal holds the append lock while it waits for the fsync in flight: the
    # syncing thread must not wait for that lock (up to _UNMAP_LOCK_WAIT) first.
    h = Harness(tmp_path, CountingFS(), max_file_size=1000)
    journal = h.journal
    with journal._sync_cond:
        journal._syncing = True  # an fsync in flight
    sealer = threading.Thread(target=journal._fsync_alone, args=(journal.head,))
    sealer.start()
    for _ in range(500):
        if journal._seal_waiting:
            break
        time.sleep(0.01)
    assert journal._seal_waiting, "the waiting seal did not say so"

    class CountingLock:
        acquired = 0

        def acquire(self, *args: object, **kwargs: object) -> bool:
            self.acquired += 1
            return False

    lock = CountingLock()
    journal._append_lock = lock  # type: ignore[assignment]
    assert journal._take_append_lock_briefly() is False
    assert lock.acquired == 0
    with journal._sync_cond:
        journal._syncing = False  # the fsync in flight ends
        journal._sync_cond.notify_all()
    sealer.join(5)
    assert not sealer.is_alive() and not journal._seal_waiting and not journal._syncing


class OneHookFS(CountingFS):
    """Runs ``hook`` once, at the start of the next fsync."""

    hook: Callable[[], None] | None = None

    def before_fsync(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
