"""The store's LOCK file: one writer per store, across processes and within one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat

from msgcask.errors import StoreLockedError

MAX_PID = 2**31 - 1  # the largest pid_t


class StoreLock:
    """An exclusive ``flock`` on ``<store>/LOCK`` holding the owner's pid.

    flock locks belong to an open file description, so a second open of the
    same store in the same process is refused too.
    """

    def __init__(self, path: str):
        self.path = path
        self.created = not os.path.exists(path)  # by this open (a failed open removes it)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            where = (
                f"already open in this process (pid {holder}) or in a child forked from it"
                if holder == str(os.getpid())
                else f"open in another process (pid {holder}) or elsewhere in this one"
            )
            raise StoreLockedError(
                f"{os.path.dirname(path)} is {where}; close it there first, or inspect it "
                "read-only with `msgcask check`"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self, *, remove_if_created: bool = False) -> None:
        """Give the lock up. ``remove_if_created`` (an open that failed) also
        removes the file if this open created it, so the failed open leaves
        the directory as it found it; removed while still locked, so no other
        opener can have locked this file meanwhile."""
        if self.fd >= 0:
            if remove_if_created and self.created:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def lock_holder(path: str) -> int | None:
    """The pid holding the lock at ``path``, or None if nobody seems to hold it.

    Reads the pid the holder wrote and asks whether that process exists; it
    never takes the lock itself, so it cannot get in an opener's way. A LOCK
    that cannot be read (missing, a directory, a pipe) or holds no valid pid has no
    live holder: no open could have written it, and opening says what is wrong.
    """
    try:
        # Opening a pipe would wait for a writer: only a regular file is read.
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            text = f.read(64).decode(errors="replace").strip()
    except OSError:
        return None
    if not (text.isascii() and text.isdigit()):  # isdigit() alone takes "²", int() not
        return None
    pid = int(text)
    if not 0 < pid <= MAX_PID:  # kill(0) asks about our own group; past pid_t overflows
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # a holder that died without cleaning up (kill -9)
    except PermissionError:
        pass  # exists, owned by someone else
    return pid
