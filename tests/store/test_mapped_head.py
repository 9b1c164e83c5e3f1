"""The write head written through a memory map (store/fs.py).

Its tail past the last record is preallocated zero bytes until the file is sealed
or the store closes: a crash leaves that tail behind, and it is not damage. The
allocation is what fails on a full disk, cleanly, before any byte is mapped.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import msgcask
from disk_files import statvfs_reporting, written_size
from msgcask import db as db_module
from msgcask.check import scan_files
from msgcask.store import fs as fs_module

CHILD = """
import sys, msgcask
store = msgcask.open(sys.argv[1], max_file_size=4 * 2**20, compaction_interval=None)
q = store.queue("q")
for i in range(500):
    q.put(b"m%03d" % i + b"." * 96)
print("done", flush=True)
sys.stdin.read()  # killed here
"""


def zero_tail(path: Path) -> int:
    """Length of the preallocated zero tail of a data file (0 if none)."""
    return path.stat().st_size - written_size(path)


def test_kill9_leaves_a_zero_tail_that_reopen_trims_without_reporting_damage(
    store_path: Path, data_files: Callable[[Path], list[Path]]
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "done"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    [head] = data_files(store_path)
    assert zero_tail(head) > 0  # the crash left the preallocated tail behind
    written = written_size(head)
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.recovery.corruptions == []
        bodies = [m.body[:4] for m in store.queue("q").browse()]
        assert bodies == [b"m%03d" % i for i in range(500)]
        assert head.stat().st_size == written  # trimmed on open
    assert head.stat().st_size == written and zero_tail(head) == 0


def test_check_of_an_open_store_sees_no_damage_in_the_zero_tail(store_path: Path) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(100):
            q.put(b"x" * 100)
        [head] = store_path.glob("*.log")
        assert zero_tail(head) > 0
        assert store.verify() == []
        scan = scan_files(str(store_path))  # what `msgcask check` reads
        assert [f.damage for f in scan.files] == [[]]
        assert scan.files[0].size == written_size(head)


def _refuse_allocation(code: int) -> Callable[..., Any]:
    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(code, os.strerror(code))

    return refuse


@contextlib.contextmanager
def _head_needing_a_chunk(
    store_path: Path, messages: int
) -> Iterator[tuple[msgcask.Store, msgcask.Queue, list[int]]]:
    """An open store holding ``messages`` messages, its head trimmed (no map, no
    allocated tail), so the next mapped append needs a new chunk."""
    with msgcask.open(store_path, max_file_size=2**20, compaction_interval=None) as store:
        q = store.queue("q")
        ids = [q.put(b"m%d" % i) for i in range(messages)]
        store._journal.head.trim()
        yield store, q, ids


def test_full_disk_at_a_new_chunk_fails_the_put_cleanly(
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot: Callable[..., dict[str, Any]],
) -> None:
    with msgcask.open(store_path, max_file_size=2**16, compaction_interval=None) as store:
        q = store.queue("q")
        ids = []
        while len(ids) < 5 or store._journal.head.size < 2**15:
            ids.append(q.put(b"k" * 500))  # half of the first file, mapped
        store._journal.roll_over()  # the next put maps a chunk of a new head
        before = snapshot(store, store_path)
        monkeypatch.setattr(fs_module.os, "posix_fallocate", _refuse_allocation(errno.ENOSPC))
        with pytest.raises(msgcask.Error, match="disk space"):
            q.put(b"n" * 500)
        assert snapshot(store, store_path) == before
        monkeypatch.undo()
        ids.append(q.put(b"after"))
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.id for m in store.queue("q").browse()] == ids
        assert store.recovery.corruptions == []


def test_consumers_drain_a_disk_too_full_for_a_new_chunk(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Less than a chunk free: puts fail, but gets and acks write their small
    # records with pwrite, so the queue can be drained (and its files deleted).
    with _head_needing_a_chunk(store_path, 4) as (store, q, ids):
        monkeypatch.setattr(fs_module.os, "posix_fallocate", _refuse_allocation(errno.ENOSPC))
        with pytest.raises(msgcask.Error, match="disk space"):
            q.put(b"no room")
        first = q.get(block=False)
        q.ack(first)
        second = q.get(block=False)  # delivered, not acked: comes back after reopen
        assert [first.id, second.id] == ids[:2]
        assert store._journal.head._window is None  # written with pwrite
        monkeypatch.undo()
        ids.append(q.put(b"room again"))
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.recovery.corruptions == []
        q = store.queue("q")
        assert [m.id for m in q.browse()] == ids[1:]
        again = q.get(block=False)
        assert (again.id, again.redelivered, again.deliveries) == (ids[1], True, 2)


def test_a_full_disk_fails_a_get_cleanly(
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot: Callable[..., dict[str, Any]],
) -> None:
    # No room even for a DELIVER record: the get fails and delivers nothing.
    with _head_needing_a_chunk(store_path, 3) as (store, q, ids):
        before = snapshot(store, store_path)
        no_space = _refuse_allocation(errno.ENOSPC)
        monkeypatch.setattr(fs_module.os, "posix_fallocate", no_space)
        monkeypatch.setattr(fs_module.os, "pwrite", lambda *a: no_space(0, 0, 0))
        with pytest.raises(msgcask.Error, match="disk space"):
            q.get(block=False)
        monkeypatch.undo()
        assert snapshot(store, store_path) == before
        assert q.get(block=False).id == ids[0]  # its first delivery
        assert store._inflight[ids[0]][1] == 1


@pytest.mark.parametrize("euid", [0, 1000])
def test_marks_leave_room_for_the_index_on_a_nearly_full_disk(
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot: Callable[..., dict[str, Any]],
    euid: int,
) -> None:
    # Below the margin a DELIVER record is not written without a chunk: the
    # index's next commit needs that room more (without it the index fails).
    # Root may use the blocks kept in reserve, which only f_bfree counts.
    margin = db_module._MARKS_LEAVE_FREE
    monkeypatch.setattr(db_module.os, "geteuid", lambda: euid)
    with _head_needing_a_chunk(store_path, 3) as (store, q, ids):
        before = snapshot(store, store_path)
        monkeypatch.setattr(fs_module.os, "posix_fallocate", _refuse_allocation(errno.ENOSPC))
        short = (margin - 1, margin - 1) if euid else (0, margin - 1)
        monkeypatch.setattr(db_module.os, "statvfs", statvfs_reporting(*short))
        with pytest.raises(msgcask.Error, match="disk space"):
            q.get(block=False)
        assert snapshot(store, store_path) == before
        enough = (margin, margin) if euid else (0, margin)
        monkeypatch.setattr(db_module.os, "statvfs", statvfs_reporting(*enough))
        assert q.get(block=False).id == ids[0]


def test_puts_stop_while_the_index_still_has_room(
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot: Callable[..., dict[str, Any]],
) -> None:
    # A new chunk is allocated for puts only with _INDEX_RESERVE free beside it:
    # an index commit that found the disk full would fail the whole index.
    reserve = db_module._INDEX_RESERVE
    with _head_needing_a_chunk(store_path, 3) as (store, q, ids):
        chunk = store._journal.head._chunk
        before = snapshot(store, store_path)
        short = chunk + reserve - 1
        monkeypatch.setattr(db_module.os, "statvfs", statvfs_reporting(short, short))
        with pytest.raises(msgcask.Error, match="space kept for the index"):
            q.put(b"no room")
        assert snapshot(store, store_path) == before
        assert q.get(block=False).id == ids[0]  # a mark still fits without a chunk
        enough = chunk + reserve
        monkeypatch.setattr(db_module.os, "statvfs", statvfs_reporting(enough, enough))
        ids.append(q.put(b"room again"))
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.id for m in store.queue("q").browse()] == ids
        assert store.recovery.corruptions == []


def test_a_file_system_that_reports_no_sizes_does_not_stop_puts(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some FUSE file systems answer statvfs with zeros: that says nothing of room.
    with _head_needing_a_chunk(store_path, 1) as (_, q, ids):
        zeros = type("Vfs", (), {"f_bavail": 0, "f_bfree": 0, "f_blocks": 0, "f_frsize": 4096})
        monkeypatch.setattr(db_module.os, "statvfs", lambda path: zeros)
        ids.append(q.put(b"fits"))
        assert [m.id for m in q.browse()] == ids


def test_a_quota_is_not_drained_into(
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot: Callable[..., dict[str, Any]],
) -> None:
    # Free space says nothing of a quota, so no margin could be kept in it.
    with _head_needing_a_chunk(store_path, 3) as (store, q, _):
        before = snapshot(store, store_path)
        monkeypatch.setattr(fs_module.os, "posix_fallocate", _refuse_allocation(errno.EDQUOT))
        with pytest.raises(msgcask.Error, match=r"quota|disk space"):
            q.get(block=False)
        assert snapshot(store, store_path) == before


def test_only_the_chunk_is_retried_without_a_map(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No room for a new data file at a roll-over: the get fails once, as a put
    # would, and is not tried a second time.
    with msgcask.open(store_path, max_file_size=2**20, compaction_interval=None) as store:
        q = store.queue("q")
        q.put(b"m")
        store.sync()
        store._journal.max_file_size = store._journal.head.size  # the DELIVER rolls over
        real_open = fs_module.os.open
        creations = []

        def open_no_room(path: str, flags: int, *args: Any) -> int:
            if str(path).endswith(".tmp"):
                creations.append(path)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_open(path, flags, *args)

        monkeypatch.setattr(fs_module.os, "open", open_no_room)
        next_file = store._next_file_id
        with pytest.raises(msgcask.Error, match="disk space"):
            q.get(block=False)
        assert len(creations) == 1
        assert store._next_file_id == next_file + 1


def test_file_system_without_allocation_falls_back_to_plain_writes(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs_module.os, "posix_fallocate", _refuse_allocation(errno.EOPNOTSUPP))
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        ids = [q.put(b"p%d" % i) for i in range(50)]
        assert zero_tail(next(store_path.glob("*.log"))) == 0  # nothing preallocated
        assert [m.id for m in q.browse()] == ids
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.body for m in store.queue("q").browse()] == [b"p%d" % i for i in range(50)]


def test_a_store_with_a_size_limit_preallocates_nothing(store_path: Path) -> None:
    # Preallocated space would count against max_store_size.
    with msgcask.open(
        store_path, max_file_size=2**20, max_store_size=2**24, compaction_interval=None
    ) as store:
        q = store.queue("q")
        for _ in range(20):
            q.put(b"z" * 100)
        [head] = store_path.glob("*.log")
        assert zero_tail(head) == 0 and head.stat().st_size == written_size(head)


# The child dies in the middle of writing a batch, leaving what a kill leaves
# on each write path: a copy into the map may store its first bytes last
# (memcpy's order), so all but the batch's first 32 bytes; pwrite copies front
# to back, a page at a time, so a prefix.
TORN_BATCH_CHILD = """
import os, signal, sys, msgcask
store = msgcask.open(sys.argv[1], compaction_interval=None)
q = store.queue("q")
q.put(b"before")  # the head is mapped from here on
head = store._journal.head
assert head._window is not None

def die():
    os.kill(os.getpid(), signal.SIGKILL)

class TornMap:
    def __init__(self, inner):
        self.inner = inner
    def __setitem__(self, key, data):
        self.inner[key.start + 32 : key.stop] = data[32:]
        die()
    def __getitem__(self, key):
        return self.inner[key]
    def __getattr__(self, name):
        return getattr(self.inner, name)

real_pwrite = os.pwrite
def torn_pwrite(fd, data, offset):
    real_pwrite(fd, bytes(data)[: len(data) // 2], offset)
    die()

mapped, start, stop = head._window
head._window = (TornMap(mapped), start, stop)
os.pwrite = torn_pwrite
q.put_many([b"a" * 300, b"b" * 300, b"c" * 300, b"d" * 300])
"""


def test_a_batch_torn_by_a_kill_comes_back_all_or_nothing(store_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", TORN_BATCH_CHILD, str(store_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.body for m in store.queue("q").browse()] == [b"before"]
        assert [c.action for c in store.recovery.corruptions] == ["truncated"]  # the torn batch


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """(first, end) byte offsets of ``path`` this process has mapped (/proc/self/maps)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == str(path):
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                offset = int(fields[2], 16)
                ranges.append((offset, offset + hi - lo))
    return ranges


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_an_fsync_of_the_head_finds_none_of_its_written_pages_mapped(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An fsync write-protects each dirty page still mapped, interrupting every
    # other CPU that runs this process once per page: a put there stalls.
    seen: list[tuple[int, list[tuple[int, int]]]] = []
    real_fsync = fs_module.DataFile.fsync

    def fsync(handle: fs_module.DataFile) -> None:
        seen.append((handle.size, _mapped_ranges(Path(handle.path).resolve())))
        real_fsync(handle)

    # No background sync: each fsync below follows 100 KB of puts.
    with msgcask.open(store_path, compaction_interval=None, sync_interval=60) as store:
        q = store.queue("q")
        ids = [q.put(b"%05d" % i + b"." * 995) for i in range(200)]
        [head] = store_path.glob("*.log")
        assert _mapped_ranges(head.resolve())  # written through a map
        monkeypatch.setattr(fs_module.DataFile, "fsync", fsync)
        for round_ in range(3):
            store.sync()
            ids += [q.put(b"%05d" % (1000 + round_ * 100 + i) + b"." * 995) for i in range(100)]
        monkeypatch.undo()
        assert len(seen) == 3
        for written, ranges in seen:
            whole_pages = written - written % mmap.PAGESIZE
            assert all(first >= whole_pages for first, _ in ranges), (written, ranges)
        assert zero_tail(head) > 0 and head.stat().st_size <= 2**20  # no chunk beyond the first
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.recovery.corruptions == []
        assert [m.id for m in store.queue("q").browse()] == ids
        assert [m.body[:5] for m in store.queue("q").browse()][-1] == b"01299"


def test_a_read_of_a_page_unmapped_meanwhile_reads_the_file(store_path: Path) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        q.put(b"first")
        handle = store._journal.head
        offset = handle.size
        q.put(b"second")
        size = handle.size - offset
        expected = handle.read(offset, size)
        assert handle._window is not None
        # What an append on another thread does between this read's check and its copy.
        handle._window[0].close()
        assert handle.read(offset, size) == expected
        handle._window = None
        assert [m.body for m in q.browse()] == [b"first", b"second"]


def test_consumers_read_fresh_records_intact_while_the_flush_unmaps_the_head_every_ms(
    store_path: Path,
) -> None:
    # sync_interval of 1 ms: the background flush unmaps the written pages of the
    # head about as often as the consumer reads a record from them.
    n = 20_000
    with msgcask.open(store_path, compaction_interval=None, sync_interval=0.001) as store:
        q = store.queue("q")

        def produce() -> None:
            for i in range(n):
                q.put(b"%06d" % i + b"-" * 200)

        producer = threading.Thread(target=produce)
        producer.start()
        got = []
        while len(got) < n:
            m = q.get(timeout=30)
            got.append(m.body)
            q.ack(m)
        producer.join()
        assert store.stats().corruptions == []  # a bad read would have quarantined
        assert got == [b"%06d" % i + b"-" * 200 for i in range(n)]
        assert store.stats().live_messages == 0
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.recovery.corruptions == [] and len(store.queue("q")) == 0
