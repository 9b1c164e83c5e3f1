"""The I/O seam: every byte of every data file goes through this module.

``FileSystem`` and ``DataFile`` are thin wrappers over ``os`` calls. Tests
substitute subclasses that inject faults (short writes, ENOSPC, bit flips, and
dropping every byte that was not fsynced, which is what a power cut does).

The journal's write head is written through a memory map (``map_appends``):
copying into the page cache takes no system call, so a put never lets go of
the interpreter lock, which another thread on the other CPU would take and
keep for up to a switch interval. What a process wrote is in the page cache
the moment the copy ends, so a crash of the process loses nothing, as with
``pwrite``; ``fsync`` covers mapped pages as it covers written ones. The map
advances a chunk at a time, and each chunk is allocated (``posix_fallocate``)
before it is mapped: a full disk then fails the allocation with ENOSPC,
where a store into a hole of a mapped file would kill the process with SIGBUS.
Until the file is sealed its tail past the last record is zero bytes, which
no reader takes for a record (store/format.py). Before each fsync of the head
the pages already written are unmapped (``unmap_written``): an fsync
write-protects every dirty page that is still mapped, and for each one it
interrupts every other CPU running this process to flush its TLB, which stalls
a put running there as often as there are pages.

``crash_point(name)`` marks the places where a crash is most interesting
(before and after each fsync, swap and delete of a compaction, the rename
of a shrunk index file, each committed step of a rebuild, and each append of
the ACK records of a purge or a queue's deletion). A process run
with ``MSGCASK_CRASH_AT=name`` kills itself with SIGKILL on reaching it, so crash
tests exercise real process death at an exact step.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import signal
from collections.abc import Callable, Iterator

TEMP_SUFFIX = ".tmp"
# Written bytes of the head's map before an fsync unmaps them: fewer pages cost
# fewer interrupts than mapping them again costs.
UNMAP_WRITTEN_AFTER = 64 * 1024

_crash_at = os.environ.get("MSGCASK_CRASH_AT", "")


def set_crash_point(name: str) -> None:
    """Arm (or with "" disarm) the crash point ``name`` in this process."""
    global _crash_at
    _crash_at = name


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL if ``name`` is the armed crash point."""
    if _crash_at and _crash_at == name:
        os.kill(os.getpid(), signal.SIGKILL)


class NoRoomForChunk(OSError):
    """The file system has no room for the write head's next mapped chunk; a
    record of a few bytes may still fit with pwrite. (Not raised for a quota:
    free space says nothing of the quota, so nothing could tell how much of it
    the index's commits still have.)"""


class DataFile:
    """An open data file: appends at the end, reads at any offset.

    ``size`` is the number of bytes written so far (including bytes not yet
    fsynced). Methods raise OSError as the OS does; callers translate.
    """

    def __init__(self, path: str, fd: int, size: int):
        self.path = path
        self.fd = fd
        self.size = size
        self._chunk = 0  # bytes mapped at a time; 0: appends use pwrite
        # (map, first byte, end) of the mapped part, replaced as one object: a
        # reader on another thread never pairs one map with another's bounds.
        self._window: tuple[mmap.mmap, int, int] | None = None
        self._allocated = size  # file length, preallocated tail included
        self._may_allocate: Callable[[int], bool] | None = None

    def map_appends(self, chunk: int, may_allocate: Callable[[int], bool] | None = None) -> None:
        """Write later appends through a memory map, ``chunk`` bytes at a time
        (rounded up to whole pages). ``may_allocate(n)`` says whether ``n`` more
        bytes may be allocated on disk for a new chunk (else NoRoomForChunk)."""
        granularity = mmap.ALLOCATIONGRANULARITY
        self._chunk = -(-chunk // granularity) * granularity
        self._may_allocate = may_allocate

    def append(self, data: bytes, *, single_record: bool = False) -> int:
        """Write all of ``data`` at the end; return the offset it starts at.

        Only ``single_record`` data goes through the map: a copy into it has no
        order (memcpy may store the first bytes last), and a crash in the middle
        of one record is a torn tail whatever bytes it left. Several records
        must leave a prefix (else a batch could lose its header and keep later
        records intact), so they are written with pwrite, which the kernel
        copies page by page, front to back.
        """
        offset = self.size
        end = offset + len(data)
        if single_record and self._chunk:
            window = self._window
            if window is None or end > window[2]:
                window = self._advance_map(offset, end)
            if window is not None:
                mapped, start, _ = window
                mapped[offset - start : end - start] = data
                self.size = end
                return offset
        view = memoryview(data)
        written = 0
        while written < len(view):
            n = os.pwrite(self.fd, view[written:], offset + written)
            if n <= 0:  # pragma: no cover - the OS raises instead
                raise OSError("pwrite wrote nothing")
            written += n
        self.size = offset + written
        self._allocated = max(self._allocated, self.size)
        return offset

    def _advance_map(self, offset: int, end: int) -> tuple[mmap.mmap, int, int] | None:
        """Map from the page holding ``offset`` to the end of the allocated tail,
        or if ``end`` lies beyond that, a new chunk allocated on disk first; None
        (pwrite it) if ``end`` lies beyond the chunk too. Raises OSError (ENOSPC)
        if the disk cannot hold the chunk."""
        self._unmap()
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        stop = self._allocated if end <= self._allocated else start + self._chunk
        if end > stop:
            return None
        if stop > self._allocated and self._may_allocate and not self._may_allocate(stop - start):
            raise NoRoomForChunk(
                errno.ENOSPC, "no room for the next chunk beside the space kept for the index"
            )
        try:
            # Cheap where the range is allocated already (a map made again after
            # ``unmap_written``); called either way, so every mapped byte is.
            os.posix_fallocate(self.fd, start, stop - start)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise NoRoomForChunk(e.errno, e.strerror) from e
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            self._chunk = 0  # a file system without allocation: plain writes
            return None
        self._allocated = max(self._allocated, stop)
        self._window = (mmap.mmap(self.fd, stop - start, offset=start), start, stop)
        return self._window

    def _unmap(self) -> None:
        window, self._window = self._window, None
        if window is not None:
            window[0].close()

    def unmap_written(self) -> None:
        """Unmap the pages written so far, if there are enough of them to matter
        (see the module's docstring); the next append maps the rest again. Call
        under the lock that serialises appends, before an fsync."""
        window = self._window
        if window is not None and self.size - window[1] >= UNMAP_WRITTEN_AFTER:
            self._unmap()

    def trim(self) -> None:
        """Give back the allocated tail past the last byte written."""
        if self._allocated > self.size:
            self._unmap()
            os.ftruncate(self.fd, self.size)
            self._allocated = self.size

    def read(self, offset: int, size: int) -> bytes:
        window = self._window
        if window is not None:
            mapped, start, stop = window
            if start <= offset and offset + size <= min(stop, self.size):
                # A fresh record: no system call either. An append on another
                # thread may unmap it meanwhile (ValueError): the file has it.
                # (A try costs nothing here; contextlib.suppress, an object per read.)
                try:
                    return mapped[offset - start : offset - start + size]
                except ValueError:
                    pass
        return os.pread(self.fd, size, offset)

    def read_all(self) -> bytes:
        return self.read(0, self.size)

    def fsync(self) -> None:
        fd = self.fd  # read once: close() on another thread sets it to -1
        if fd < 0:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        os.fdatasync(fd)

    def truncate(self, size: int) -> None:
        self._unmap()  # a map past the end of a file faults when touched
        os.ftruncate(self.fd, size)
        self.size = self._allocated = size

    def close(self) -> None:
        if self.fd >= 0:
            self._unmap()
            os.close(self.fd)
            self.fd = -1


class FileSystem:
    """Directory-level operations and the factory of ``DataFile``s."""

    def create_temp(self, path: str) -> DataFile:
        """Create an empty file at ``path + TEMP_SUFFIX`` (replacing a leftover one).

        Data files are born under a temporary name and appear under their real
        name only through ``publish``, so a crash never leaves a data file
        without its header (open removes leftover temporary files).
        """
        temp = path + TEMP_SUFFIX
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        return self._wrap(temp, fd, 0)

    @contextlib.contextmanager
    def unpublished(self, path: str) -> Iterator[DataFile]:
        """``create_temp(path)`` for the block to write and ``publish``; if the
        block raises, the file is closed and removed: a failure leaves nothing."""
        handle = self.create_temp(path)
        try:
            yield handle
        except BaseException:
            handle.close()
            with contextlib.suppress(OSError):
                self.unlink(handle.path)
            raise

    def publish(self, handle: DataFile, path: str, *, durable: bool = True) -> None:
        """Give a file made by ``create_temp`` its real name, atomically.

        With ``durable``: fsync the file first and the directory after, so the
        name never points at bytes that a power cut could lose.
        """
        if durable:
            handle.fsync()
        os.rename(handle.path, path)
        handle.path = path
        if durable:
            self.fsync_dir(os.path.dirname(path) or ".")

    def open(self, path: str, *, writable: bool = True) -> DataFile:
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC
        fd = os.open(path, flags)
        return self._wrap(path, fd, os.fstat(fd).st_size)

    def _wrap(self, path: str, fd: int, size: int) -> DataFile:
        return DataFile(path, fd, size)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        """Make creations and deletions of directory entries durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
