"""Helpers for tests in several directories that look at a store's files and
disk. A module of its own, not conftest.py: tests/workloads has a conftest too,
and ``from conftest import`` finds whichever of the two was loaded first."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb

from msgcask.store import codec
from msgcask.store import format as fmt


def written_size(path: Path) -> int:
    """Bytes of a data file up to its last record: an open store's write head
    also holds a preallocated tail of zeros, which is not part of its data."""
    data = path.read_bytes()
    for item in codec.scan(data, min(len(data), fmt.FILE_HEADER_SIZE)):
        if isinstance(item, codec.Damage) and item.unused:
            return item.offset
    return len(data)


def statvfs_reporting(available: int, free: int) -> Callable[[str], Any]:
    """os.statvfs, with ``available`` bytes for users and ``free`` for root."""
    real = os.statvfs

    def statvfs(path: str) -> Any:
        size = real(path).f_frsize
        return type(
            "Vfs",
            (),
            {
                "f_bavail": available // size,
                "f_bfree": free // size,
                "f_blocks": 2**20,
                "f_frsize": size,
            },
        )

    return statvfs


def listdir_refusing(directory: Path) -> Callable[..., list[str]]:
    """os.listdir, refusing ``directory`` with EACCES as a chmod 000 does (tests
    run as root, which lists any directory)."""
    real = os.listdir

    def listdir(path: str = ".") -> list[str]:
        if os.fspath(path) == str(directory):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path)

    return listdir


@contextlib.contextmanager
def index_table(store_path: Path, table: bytes) -> Iterator[tuple[lmdb.Transaction, Any]]:
    """A write transaction on one table of a closed store's index, behind the
    store's back: (transaction, table), committed when the block ends."""
    env = lmdb.open(str(store_path / "index"), max_dbs=8, lock=False, map_size=2**30)
    try:
        db = env.open_db(table, create=False)
        with env.begin(write=True) as txn:
            yield txn, db
    finally:
        env.close()
