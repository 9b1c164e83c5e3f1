"""The fault model itself: if FaultyFileSystem did not drop what it claims to, every
power-cut test would pass for the wrong reason."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from faulty_fs import FaultyFileSystem

from msgcask.store.fs import DataFile


def new_file(
    fs: FaultyFileSystem, directory: Path, name: str, data: bytes, *, durable: bool
) -> DataFile:
    path = str(directory / name)
    handle = fs.create_temp(path)
    handle.append(data)
    fs.publish(handle, path, durable=durable)
    return handle


def test_power_cut_truncates_to_the_last_fsync(fs: FaultyFileSystem, tmp_path: Path) -> None:
    handle = new_file(fs, tmp_path, "a.log", b"header", durable=True)
    handle.append(b"synced")
    handle.fsync()
    handle.append(b"lost")
    handle.close()
    assert fs.power_cut() == ["truncated a.log to 12"]
    assert (tmp_path / "a.log").read_bytes() == b"headersynced"


def test_power_cut_removes_files_whose_name_was_never_made_durable(
    fs: FaultyFileSystem, tmp_path: Path
) -> None:
    new_file(fs, tmp_path, "a.log", b"x", durable=False).close()
    new_file(fs, tmp_path, "b.log", b"y", durable=False).close()
    fs.fsync_dir(str(tmp_path))  # b's name is durable now, its data is not
    new_file(fs, tmp_path, "c.log", b"z", durable=False).close()
    fs.power_cut()
    assert sorted(os.listdir(tmp_path)) == ["a.log", "b.log"]  # c's name was never synced
    assert (tmp_path / "a.log").stat().st_size == 0  # named by the same dir fsync
    assert (tmp_path / "b.log").stat().st_size == 0


def test_power_cut_brings_back_a_deletion_not_made_durable(
    fs: FaultyFileSystem, tmp_path: Path
) -> None:
    new_file(fs, tmp_path, "a.log", b"kept", durable=True).close()
    new_file(fs, tmp_path, "b.log", b"gone", durable=True).close()
    fs.unlink(str(tmp_path / "a.log"))
    fs.fsync_dir(str(tmp_path))
    fs.unlink(str(tmp_path / "b.log"))
    assert sorted(os.listdir(tmp_path)) == []
    fs.power_cut()
    assert sorted(os.listdir(tmp_path)) == ["b.log"]
    assert (tmp_path / "b.log").read_bytes() == b"gone"
    assert not [n for n in os.listdir(tmp_path.parent) if n.startswith(".unlinked-")]


def test_writeback_makes_everything_durable(fs: FaultyFileSystem, tmp_path: Path) -> None:
    handle = new_file(fs, tmp_path, "a.log", b"one", durable=False)
    handle.append(b"two")
    handle.close()
    fs.writeback()
    assert fs.power_cut() == []
    assert (tmp_path / "a.log").read_bytes() == b"onetwo"


def test_short_write_writes_a_prefix_then_fails(fs: FaultyFileSystem, tmp_path: Path) -> None:
    handle = new_file(fs, tmp_path, "a.log", b"", durable=True)
    fs.short_write = 3
    with pytest.raises(OSError) as err:
        handle.append(b"abcdef")
    assert err.value.errno == errno.ENOSPC
    assert (tmp_path / "a.log").read_bytes() == b"abc"
    assert handle.append(b"xyz") == 0  # one-shot; the size never counted the prefix
    handle.close()


def test_bit_flip_on_read_leaves_the_file_alone(fs: FaultyFileSystem, tmp_path: Path) -> None:
    handle = new_file(fs, tmp_path, "a.log", b"\x00" * 10, durable=True)
    fs.bad_bytes[handle.path] = {4}
    assert handle.read(0, 10) == b"\x00" * 4 + b"\x10" + b"\x00" * 5
    assert handle.read(5, 5) == b"\x00" * 5  # a read that misses the bad byte
    assert (tmp_path / "a.log").read_bytes() == b"\x00" * 10
    handle.close()


def test_bad_sector_fails_only_the_reads_that_cover_it(
    fs: FaultyFileSystem, tmp_path: Path
) -> None:
    handle = new_file(fs, tmp_path, "a.log", bytes(100), durable=True)
    fs.bad_sectors[handle.path] = {50}
    with pytest.raises(OSError) as err:
        handle.read(40, 20)
    assert err.value.errno == errno.EIO
    assert handle.read(0, 50) == bytes(50)
    assert handle.read(51, 49) == bytes(49)
    handle.close()


def test_failing_directory_fsync(fs: FaultyFileSystem, tmp_path: Path) -> None:
    fs.fail_fsync_dir = True
    with pytest.raises(OSError) as err:
        fs.fsync_dir(str(tmp_path))
    assert err.value.errno == errno.EIO
