"""The msgcask exception hierarchy.

Every error says when it is raised and what to do about it. Errors from the
libraries underneath (LMDB, the OS) are re-raised as one of these ``from`` the
original, so callers need to catch only ``msgcask.Error``.
"""

from __future__ import annotations

import queue as _queue


class Error(Exception):
    """Base class of every error msgcask raises on purpose."""


class Empty(Error, _queue.Empty):
    """Raised by ``Queue.get`` when no message is available in time.

    It is also a ``queue.Empty``, so code written for the standard library's
    queues keeps working.
    """


class ClosedError(Error):
    """Raised by any call on a store (or one of its queues) after ``close()``.

    Fix: open the store again with ``msgcask.open(path)``.
    """


class StoreLockedError(Error):
    """Raised when another process (or another open Store in this process)
    holds the store's lock.

    Only one writer may have a store open. The message names the holder's pid;
    close that store first, or inspect this one read-only with ``msgcask check``.
    """


class StoreFullError(Error):
    """Raised by a put when the data files would exceed ``max_store_size``.

    The store first reclaims what compaction can: dead data does not cause it
    as long as there is room left to copy the live messages sharing a file with
    it (docs/tuning.md, ``max_store_size``). The message says how many bytes are
    live. Fix: consume messages, or raise ``max_store_size``.
    """


class MessageTooLargeError(Error, ValueError):
    """Raised when one message (or one atomic batch) does not fit in a data file.

    Fix: raise ``max_file_size`` above the record size, or split the batch.
    """


class CorruptionError(Error):
    """Raised when a data file cannot be used: its header is damaged, truncated or
    names another file, or the file cannot be read. (A damaged *record* is not
    raised: open truncates a torn tail and quarantines a record that fails its
    checksum, and reports both in ``stats().corruptions``.)

    ``path`` and ``offset`` name where the damage starts and ``length`` how many
    bytes are affected (``offset`` -1 when the file could not be read at all).
    ``msgcask check PATH`` lists every problem of every data file.
    """

    def __init__(self, message: str, *, path: str = "", offset: int = -1, length: int = 0):
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.length = length


class FormatVersionError(Error):
    """Raised when the store (a data file or the index) was written by a newer
    msgcask format version than this library reads.

    Fix: upgrade msgcask; never let an older version write to a newer store.
    """


class NotAStoreError(Error):
    """Raised when the path is a regular file, or a non-empty directory that does
    not look like a msgcask store.

    Fix: point ``msgcask.open`` at an empty or missing directory to create a
    store, or at an existing store's directory.
    """


class IndexFailedError(Error):
    """Raised when the LMDB index fails while the store is open (it was damaged
    on disk, or the disk failed under it).

    The data files are the truth and are not affected. Fix: close the store
    (which deletes the failed index) and open it again: the index is rebuilt
    from the data files.
    """
