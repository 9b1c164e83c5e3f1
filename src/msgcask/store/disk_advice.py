"""What to tell the user when the disk refuses: the remedy depends on why.

A full disk, a permission, a read-only file system and a limit on open files
each need a different fix, and LMDB reports a short write on a full disk as a
plain I/O error, so the free space is worth saying when it is low.
"""

from __future__ import annotations

import errno
import os

LOW_FREE_SPACE = 64 * 2**20  # below this, an error message says how much is free


def remedy(error: OSError) -> str:
    """The fix for ``error``, as the start of a sentence."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "Free disk space"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "Check the permissions of the store's directory and files"
    if error.errno == errno.EROFS:
        return "Remount the file system read-write or move the store"
    if error.errno == errno.EMFILE:
        # Not the disk: every data file of an open store keeps a descriptor open.
        return (
            "Raise this process's limit on open files (ulimit -n, or RLIMIT_NOFILE), "
            "or use a bigger max_file_size: an open store keeps each data file open"
        )
    if error.errno == errno.ENFILE:
        return "Close files elsewhere or raise the system's limit on open files (fs.file-max)"
    if error.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
        # Say, an index that is a file: the store's names are taken by something else.
        return (
            "Move what is in the way out of the store's directory (index/ must be a "
            "directory, LOCK and the data files regular files)"
        )
    return "Check the disk"


def cannot_list(path: str, error: OSError) -> str:
    """What to say when the directory at ``path`` cannot be listed (say, one
    this user may not read): what failed, why, and the fix."""
    return f"cannot list {path}: {error.strerror}. {remedy(error)}."


def free_space_note(path: str) -> str:
    """``"; its file system has only N MiB free"`` when that is low, else ``""``."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return ""
    free = stat.f_bavail * stat.f_frsize
    if free >= LOW_FREE_SPACE:
        return ""
    return f"; its file system has only {free / 2**20:.1f} MiB free"
