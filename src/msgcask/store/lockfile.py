"""The store's LOCK file: one writer per store, across processes and within one."""

from __future__ import annotations

import fcntl
import os

from msgcask.errors import StoreLockedError


class StoreLock:
    """An exclusive ``flock`` on ``<store>/LOCK`` holding the owner's pid.

    flock locks belong to an open file description, so a second open of the
    same store in the same process is refused too.
    """

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            raise StoreLockedError(
                f"{os.path.dirname(path)} is open in another process (pid {holder}) or "
                "elsewhere in this one; close it there first, or inspect it read-only with "
                "`msgcask check`"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def lock_holder(path: str) -> int | None:
    """The pid holding the lock at ``path``, or None if nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
