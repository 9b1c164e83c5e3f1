"""Read errors (EIO, a bad sector) through the I/O seam.

Like a flipped bit, an unreadable record must be reported and skipped so its queue keeps
moving; like every OS error, it must reach the caller as a msgcask.Error naming the file,
never as a raw OSError.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt

SMALL_FILE = 64 * 1024


def open_store(path: Path, fs: FaultyFileSystem) -> msgcask.Store:
    return msgcask.Store(path, _fs=fs, max_file_size=SMALL_FILE, compaction_interval=None)


def put_offsets(path: Path) -> dict[int, int]:
    buf = path.read_bytes()
    return {
        codec.decode_put_meta(buf, r.payload_start, r.end).msg_id: r.offset
        for r in codec.scan(buf, fmt.FILE_HEADER_SIZE)
        if isinstance(r, codec.Record) and r.rtype == fmt.TYPE_PUT
    }


def two_file_store(path: Path, fs: FaultyFileSystem) -> list[int]:
    """Messages in a sealed file 1 and a journal head 2, closed cleanly (so a reopen
    reads only the head)."""
    with open_store(path, fs) as store:
        q = store.queue("q")
        ids = [q.put(b"%04d" % i + bytes(300)) for i in range(300)]
        assert store.stats().data_files == 2
    return ids


def test_read_error_on_get_skips_the_message_and_reports_it(store_path: Path) -> None:
    fs = FaultyFileSystem()
    ids = two_file_store(store_path, fs)
    first = store_path / "0000000001.log"
    bad = put_offsets(first)[ids[1]] + 5
    fs.bad_sectors[str(first)] = {bad}
    with open_store(store_path, fs) as store:
        q = store.queue("q")
        assert q.get(block=False).id == ids[0]
        assert q.get(block=False).id == ids[2]  # the queue is not wedged
        [report] = store.stats().corruptions
        assert report.path == str(first) and report.offset <= bad
        fs.bad_sectors.clear()


def test_read_error_in_browse_skips_the_message_and_reports_it(store_path: Path) -> None:
    fs = FaultyFileSystem()
    ids = two_file_store(store_path, fs)
    first = store_path / "0000000001.log"
    fs.bad_sectors[str(first)] = {put_offsets(first)[ids[1]] + 5}
    with open_store(store_path, fs) as store:
        assert [m.id for m in store.queue("q").browse()] == [ids[0], *ids[2:]]
        assert [c.path for c in store.stats().corruptions] == [str(first)]
        fs.bad_sectors.clear()


@pytest.mark.parametrize("index", ["index kept", "index lost"])
def test_read_error_during_open_raises_msgcask_error_and_changes_nothing(
    store_path: Path, index: str
) -> None:
    fs = FaultyFileSystem()
    ids = two_file_store(store_path, fs)
    if index == "index lost":
        shutil.rmtree(store_path / "index")
    head = store_path / "0000000002.log"
    fs.bad_sectors[str(head)] = {0}  # its header
    with pytest.raises(msgcask.Error, match=head.name):
        open_store(store_path, fs)
    fs.bad_sectors.clear()  # the disk recovers: everything is still there
    with open_store(store_path, fs) as store:
        assert [m.id for m in store.queue("q").browse()] == ids
        assert store.verify() == []
