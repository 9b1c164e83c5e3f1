"""A fault-injecting FileSystem for the store's I/O seam (msgcask/store/fs.py).

Modelled on LevelDB's FaultInjectionTestEnv: it remembers, for every data file, how many
bytes were on disk at its last fsync and whether its creation or deletion was made durable
by an fsync of the directory, and ``power_cut()`` throws away everything else (a deleted
file comes back as it was at its last fsync). It also injects write errors (ENOSPC, short
writes) and bit flips on read.

Only data files go through the seam; the LMDB index does not. A power cut here therefore
keeps every index page (as if the index had been synced): tests that want the index lost
too delete ``index/`` themselves.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

from abandon import abandon as abandon  # where the fault tests look for it
from disk_files import written_size
from msgcask.store.fs import DataFile, FileSystem


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FaultyDataFile(DataFile):
    fs: FaultyFileSystem

    def append(self, data: bytes, *, single_record: bool = False) -> int:
        fs = self.fs
        with fs.mutex:
            fs.appends += 1
            if fs.no_space:
                raise _enospc()
            partial = fs.short_write
            fs.short_write = None
        if partial is not None:
            # The OS took some bytes before it ran out of space.
            os.pwrite(self.fd, data[:partial], self.size)
            raise _enospc()
        return super().append(data, single_record=single_record)

    def read(self, offset: int, size: int) -> bytes:
        for bad in self.fs.bad_sectors.get(self.path, ()):
            if offset <= bad < offset + max(size, 1):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        data = super().read(offset, size)
        bad = [
            o - offset for o in self.fs.bad_bytes.get(self.path, ()) if 0 <= o - offset < len(data)
        ]
        if not bad:
            return data
        buf = bytearray(data)
        for at in bad:
            buf[at] ^= 0x10  # one flipped bit
        self.fs.flipped_reads += 1
        return bytes(buf)

    def fsync(self) -> None:
        if self.fs.before_fsync is not None:
            self.fs.before_fsync()
        if self.fs.fail_fsync:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        size = self.size  # what the fsync covers: everything written before it started
        super().fsync()
        with self.fs.mutex:
            self.fs.fsyncs += 1
            self.fs.synced[self.path] = max(self.fs.synced.get(self.path, 0), size)

    def truncate(self, size: int) -> None:
        if self.fs.fail_truncate:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().truncate(size)
        with self.fs.mutex:
            if self.fs.synced.get(self.path, 0) > size:
                self.fs.synced[self.path] = size


class FaultyFileSystem(FileSystem):
    """Switches (set them from the test; each applies to every data file):

    * ``no_space``: every append raises ENOSPC and writes nothing;
    * ``short_write = n``: the next append writes its first ``n`` bytes, then raises ENOSPC;
    * ``fail_truncate``: truncate raises EIO (so a failed append's bytes stay on disk);
    * ``fail_fsync``: fsync raises EIO (the disk could not make the bytes durable);
    * ``fail_fsync_dir``: fsync of a directory raises EIO;
    * ``bad_bytes[path] = {offset, ...}``: reads covering those offsets get a bit flipped;
    * ``bad_sectors[path] = {offset, ...}``: reads covering those offsets fail with EIO.
    """

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.no_space = False
        self.short_write: int | None = None
        self.fail_truncate = False
        self.fail_fsync = False
        self.fail_fsync_dir = False
        self.before_fsync: Callable[[], None] | None = None  # a hook to stall fsyncs
        self.bad_bytes: dict[str, set[int]] = {}
        self.bad_sectors: dict[str, set[int]] = {}  # reads covering these offsets: EIO
        self.synced: dict[str, int] = {}  # path -> bytes durable at its last fsync
        self.unsynced_names: set[str] = set()  # created or renamed since their dir's fsync
        # Unlinked since their dir's fsync: path -> where the bytes wait in case of a cut.
        self.unsynced_unlinks: dict[str, str] = {}
        self.appends = 0
        self.fsyncs = 0
        self.flipped_reads = 0

    # -- the seam ---------------------------------------------------------------------

    def _wrap(self, path: str, fd: int, size: int) -> DataFile:
        handle = FaultyDataFile(path, fd, size)
        handle.fs = self
        with self.mutex:
            # A file found on disk that we have not seen written counts as durable.
            self.synced.setdefault(path, size)
        return handle

    def create_temp(self, path: str) -> DataFile:
        handle = super().create_temp(path)
        with self.mutex:
            self.synced[handle.path] = 0
            self.unsynced_names.add(handle.path)
        return handle

    def publish(self, handle: DataFile, path: str, *, durable: bool = True) -> None:
        temp = handle.path
        with self.mutex:
            # The new name, like any, is durable once its directory is fsynced after it.
            self.unsynced_names.add(path)
        super().publish(handle, path, durable=durable)
        with self.mutex:
            self.synced[path] = self.synced.pop(temp, 0)
            self.unsynced_names.discard(temp)

    def unlink(self, path: str) -> None:
        with self.mutex:
            created_unsynced = path in self.unsynced_names
            self.unsynced_names.discard(path)
            size = self.synced.pop(path, None)
        if created_unsynced or size is None:
            super().unlink(path)  # a cut would remove it anyway
            return
        # Until the directory is fsynced, a power cut brings the file back (as it was at
        # its last fsync): keep its bytes aside instead of deleting them.
        keep = os.path.join(
            os.path.dirname(os.path.dirname(path)), ".unlinked-" + os.path.basename(path)
        )
        os.rename(path, keep)
        os.truncate(keep, min(size, os.path.getsize(keep)))
        with self.mutex:
            self.unsynced_unlinks[path] = keep

    def fsync_dir(self, path: str) -> None:
        if self.fail_fsync_dir:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync_dir(path)
        here = os.path.normpath(path)
        with self.mutex:
            self.unsynced_names = {n for n in self.unsynced_names if os.path.dirname(n) != here}
            for name, keep in list(self.unsynced_unlinks.items()):
                if os.path.dirname(name) == here:
                    os.unlink(keep)
                    del self.unsynced_unlinks[name]

    # -- what the machine does ----------------------------------------------------------

    def writeback(self) -> None:
        """The OS writes every dirty page and directory entry (as it does on its own, and
        as ``sync="never"`` relies on): everything so far becomes durable."""
        with self.mutex:
            for path in list(self.synced):
                if os.path.exists(path):  # the write head's zero tail holds nothing
                    self.synced[path] = written_size(Path(path))
            self.unsynced_names.clear()
            self._forget_unlinked()

    def _forget_unlinked(self) -> None:
        for keep in self.unsynced_unlinks.values():
            os.unlink(keep)
        self.unsynced_unlinks.clear()

    def writeback_names(self) -> None:
        """The OS commits directory entries but not file data (delayed allocation)."""
        with self.mutex:
            self.unsynced_names.clear()
            self._forget_unlinked()

    def power_cut(self, *, torn: int = 0) -> list[str]:
        """Drop every byte not fsynced and every name not made durable. Call it after the
        store was abandoned (no process writes any more). Returns what changed.

        ``torn``: the first ``torn`` unsynced bytes of each file did reach the disk (the
        OS was part way through writing back), so a cut can fall inside a record.
        """
        changed = []
        with self.mutex:
            for path, synced in sorted(self.synced.items()):
                if not os.path.exists(path):
                    continue
                size = synced + torn
                if path in self.unsynced_names:
                    os.unlink(path)
                    changed.append(f"removed {os.path.basename(path)}")
                elif os.path.getsize(path) > size:
                    os.truncate(path, size)
                    changed.append(f"truncated {os.path.basename(path)} to {size}")
            self.unsynced_names.clear()
            for path, keep in sorted(self.unsynced_unlinks.items()):
                os.rename(keep, path)
                self.synced[path] = os.path.getsize(path)
                changed.append(f"restored {os.path.basename(path)}")
            self.unsynced_unlinks.clear()
            # What is on disk after the cut is, by definition, durable.
            self.synced = {p: os.path.getsize(p) for p in self.synced if os.path.exists(p)}
        return changed
