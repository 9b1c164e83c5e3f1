"""The store's LOCK file: one writer per store, across processes and within one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time

from msgcask.errors import StoreLockedError

MAX_PID = 2**31 - 1  # the largest pid_t
# lock_holder holds a shared lock for an instant to see whether the lock is free: an
# opener that meets it then tries again for this long before it gives up.
PROBE_GRACE = 0.05  # seconds
PROBE_RETRY = 0.002  # seconds between two tries


class StoreLock:
    """An exclusive ``flock`` on ``<store>/LOCK`` holding the owner's pid.

    flock locks belong to an open file description, so a second open of the
    same store in the same process is refused too.
    """

    def __init__(self, path: str):
        self.path = path
        self.created = not os.path.exists(path)  # by this open (a failed open removes it)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not self._try_lock():
            written = os.pread(self.fd, 64, 0)
            os.close(self.fd)
            holder = written.decode(errors="replace").strip() or "unknown"
            if holder == str(os.getpid()):
                where = f"already open in this process (pid {holder}) or in a child forked from it"
            elif _exited(holder):  # a parent that exited, leaving the lock to a child
                where = (
                    f"open in another process: its LOCK names pid {holder}, which has exited, "
                    "so a process it forked holds the lock until that one exits"
                )
            else:
                where = f"open in another process (pid {holder}) or elsewhere in this one"
            raise StoreLockedError(
                f"{os.path.dirname(path)} is {where}; close it there first, or inspect it "
                "read-only with `msgcask check`"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def _try_lock(self) -> bool:
        """Take the lock, or say it is held (past the instant a probe holds it)."""
        deadline = time.monotonic() + PROBE_GRACE
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(PROBE_RETRY)

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


def lock_holder(path: str) -> str | None:
    """Who holds the lock at ``path`` ("process 1234"), or None if nobody does.

    Asks the lock itself, not the pid written in it: a copy of a store made while
    it was open names a live process that holds nothing. It tries a shared
    ``flock`` on a file description of its own, without waiting, and gives it up
    at once (an opener meeting it waits that instant out). flock locks belong to
    an open file description, so closing this one leaves a holder's lock alone,
    in this process too. A LOCK that cannot be opened or is not a regular file
    (a directory, a pipe) has no holder: no open could have locked it, and opening
    says what is wrong.
    """
    try:
        # O_NONBLOCK: opening a pipe would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_named_in(os.pread(fd, 64, 0))
        except OSError:
            return None  # a file system without flock: the open says so
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _exited(pid: str) -> bool:
    """Whether ``pid`` is a valid pid that names no process now."""
    if not (pid.isascii() and pid.isdigit()) or not 0 < int(pid) <= MAX_PID:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _holder_named_in(text: bytes) -> str:
    """The holder as LOCK names it: its pid once it has written it (an opener
    writes it just after taking the lock), if that process exists."""
    pid = text.decode(errors="replace").strip()
    if not (pid.isascii() and pid.isdigit()):  # isdigit() alone takes "²", int() not
        return "another process"
    if not 0 < int(pid) <= MAX_PID:  # kill(0) asks about our own group; past pid_t overflows
        return "another process"
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        # A parent that exited, leaving the lock to a child it forked.
        return "another process"
    except PermissionError:
        pass  # exists, owned by someone else
    return f"process {pid}"
