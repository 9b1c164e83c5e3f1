"""A store's data files as the pipeline reads them: a snapshot taken once, on
the driver, whose files the Spark tasks then read.

Reading needs no lock and opens nothing for writing, so it is safe beside a
process that has the store open: data files are append-only. What such a
process does meanwhile is not all seen: appends to a listed file are, files
created after the listing are not. A listed file that the store deletes
before it is read fails the read (``rows.file_rows``), or is a ``deleted`` row
for a reader that reports it (the audit): a compaction pass may have moved its
records to a file the snapshot does not have. One deleted between the listing
and the opening of its header makes the snapshot be taken again.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from msgcask.errors import Error
from msgcask.pipeline.outputs import local_path
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.disk_advice import cannot_list
from msgcask.store.filenames import parse_data_file_name
from msgcask.store.manifest_rule import MAX_MANIFEST_BYTES, parse_manifest, redundant_files

KIND_NAMES = {fmt.KIND_JOURNAL: "journal", fmt.KIND_COMPACTED: "compacted"}
# Listings taken, at most, while each finds a file it names deleted before it
# could be opened (by compaction passes of a process that has the store open).
LISTING_ATTEMPTS = 10
# Why a listed data file can be gone, and what to do.
DELETED_WHILE_READ = (
    "a process that has the store open deletes a data file once a compaction pass has "
    "moved its records to a newer file, which this read does not include, and once a file "
    "holds nothing needed any more (store.pause_compaction() stops the passes, not that). "
    "Run it again while the store is closed or idle, or read a copy of the store."
)


@dataclass(frozen=True)
class DataFileInfo:
    """One data file of the snapshot. ``kind`` is "journal", "compacted" or
    "unreadable" (its header cannot be read: its records are still scanned,
    and the header's damage is reported as a row). ``redundant`` says why the
    file's records do not count (a compaction made them redundant), or is ""."""

    file_id: int
    path: str
    size: int
    kind: str
    redundant: str = ""
    # The newest journal file: the one a crash may have left with its last append
    # cut short, read as recovery reads it (``codec.scan(head=True)``).
    head: bool = False


def path_text(path: object, what: str) -> str:
    """``path`` (a ``str`` or an ``os.PathLike`` such as ``pathlib.Path``) as the
    ``str`` Spark takes; anything else is a TypeError naming ``what`` it is, and
    an empty one a ValueError (the file system would take it for the current
    directory, as ``msgcask.open`` refuses to)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(
            f"{what} is a path (a str or a pathlib.Path), not {type(path).__name__}: {path!r}"
        )
    if not path:
        raise ValueError(f"{what}'s path is empty: give its directory")
    return path


def local_directory_of(path: object, what: str) -> str:
    """``local_directory`` of ``path`` given by a caller (``path_text``'s checks)."""
    return local_directory(path_text(path, what))


def local_directory(path: str) -> str:
    """The local directory ``path`` names: itself, or the path of a ``file:`` URI
    (as Spark takes one). The files are read with Python's own ``open``, so the
    URI of another file system (``hdfs://``, ``s3a://``) is a ``msgcask.Error``."""
    if os.path.isdir(path):  # a directory named like a URI is still that directory
        return path
    local = local_path(path)
    if local is None and "://" in path:
        raise Error(
            f"{path}: a store is read from a local path (on a cluster, a shared file "
            "system mounted at the same path on every machine), not another file system's URI"
        )
    return local or path


def list_data_files(directory: str) -> list[DataFileInfo]:
    """The data files of the store at ``directory``, oldest first (absolute
    paths: Spark's workers need not share the driver's working directory)."""
    directory = os.path.abspath(local_directory(directory))
    if not os.path.isdir(directory):
        raise Error(f"{directory} is not a directory: give the directory of a msgcask store")
    for _ in range(LISTING_ATTEMPTS):
        found = _open_listed(directory)
        if found is not None:
            break
    else:
        raise Error(
            f"{directory}: data files were deleted while they were being listed, "
            f"{LISTING_ATTEMPTS} times over: {DELETED_WHILE_READ}"
        )
    if not found:
        raise Error(
            f"{directory} holds no msgcask data files: not a store. Give the directory "
            "of an existing store."
        )
    compacted = [f for f, (_, _, kind) in found.items() if kind == "compacted"]
    redundant = redundant_files(set(found), compacted, lambda f: _victims(found[f][0]))
    newest = max((f for f, (_, _, kind) in found.items() if kind == "journal"), default=None)
    return [
        DataFileInfo(f, path, size, kind, redundant.get(f, ""), f == newest)
        for f, (path, size, kind) in sorted(found.items())
    ]


def _open_listed(directory: str) -> dict[int, tuple[str, int, str]] | None:
    """Each listed data file's path, size and kind; None if one of them was
    deleted before it could be opened. A compaction pass deletes its victims
    once their records are in a new file, which a listing taken before may not
    hold: leaving the victim out would lose its records, so the caller lists again."""
    found: dict[int, tuple[str, int, str]] = {}
    try:
        names = os.listdir(directory)
    except OSError as e:  # say, a directory this user may not read
        raise Error(cannot_list(directory, e)) from e
    for name in names:
        file_id = parse_data_file_name(name)
        if file_id is None:
            continue
        path = os.path.join(directory, name)
        try:
            # O_NONBLOCK: opening a FIFO for reading would wait for a writer.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:  # closed here: open(fd) of a directory fails and leaves fd open
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise Error(f"{path}: cannot be read as a data file (not a regular file)")
                size = st.st_size
                head = os.read(fd, fmt.FILE_HEADER_SIZE)
            finally:
                os.close(fd)
        except FileNotFoundError as e:
            if os.path.islink(path):  # not deleted: it never led to a file
                raise Error(
                    f"{path}: cannot be read as a data file (a symbolic link to a missing file)"
                ) from e
            return None
        except OSError as e:  # an I/O error
            raise Error(f"{path}: cannot be read as a data file ({e})") from e
        try:
            header = codec.decode_file_header(head, path)
        except Error:
            kind = "unreadable"
        else:
            # Recovery refuses such a file too: its records would count twice.
            codec.check_file_id(header, file_id, path)
            kind = KIND_NAMES[header.kind]
        found[file_id] = (path, size, kind)
    return found


def _victims(path: str) -> list[int] | None:
    """The files a compacted file's MANIFEST names; None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(fmt.FILE_HEADER_SIZE)
            return parse_manifest(f.read(MAX_MANIFEST_BYTES))
    except OSError:
        return None
