"""Where a pipeline job may write: never over or into the store it reads.

A job's output is either a directory that Spark writes (``dead-letters``),
which may be a URI such as ``file:///...`` or ``hdfs://...``, or a report that
the driver writes itself (``--json``), always a local path. Both are checked
before Spark starts, so a mistake costs no job and changes nothing.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def local_path(out: str) -> str | None:
    """The local path Spark writes for ``out``: itself, or the path of a ``file:``
    URI, taken as Hadoop takes it (literally: no %-decoding, and ``?`` and ``#``
    are part of the name). None for another scheme's URI (``hdfs:``, ``s3a:``),
    which names a file system that cannot hold a local store."""
    scheme = _SCHEME.match(out)
    if scheme is None:
        return out
    if scheme.group(1).lower() != "file":
        return None
    rest = out[scheme.end() :]
    if rest.startswith("//"):  # an authority (a host, or none) before the path
        slash = rest.find("/", 2)
        rest = rest[slash:] if slash >= 0 else "/"
    return rest


def _refuse_overlap(store: str, path: str, out: str) -> None:
    store_real, target = os.path.realpath(store), os.path.realpath(path)
    inside = target == store_real or target.startswith(store_real + os.sep)
    if inside or store_real.startswith(target.rstrip(os.sep) + os.sep):
        raise ValueError(
            f"{out} is the store, inside it or holds it: writing there would destroy the "
            "store. Choose a path outside the store."
        )


def check_spark_output(store: str, out: str, overwrite: bool) -> None:
    """A directory Spark will write: refused (ValueError) if it is the store at
    ``store``, is inside it or holds it, is under a file, cannot be made where
    it would be (a read-only directory), or, if it exists, unless ``overwrite``
    and it holds only what an export writes (checked here for a local path;
    Spark refuses an existing one elsewhere)."""
    if not out:  # realpath would take it for the current directory
        raise ValueError("the output's path is empty: give the directory to write")
    path = local_path(out)
    if path is None:
        return
    _refuse_overlap(store, path, out)
    if os.path.lexists(path) and not overwrite:
        raise ValueError(f"{out} exists: choose another path, or overwrite it")
    if os.path.lexists(path):
        _refuse_foreign_contents(path, out)
    # Spark makes the directories missing on the way, but fails (a Java stack,
    # once the job has run) where a file stands in for one.
    on_the_way = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(on_the_way):
        on_the_way = os.path.dirname(on_the_way)
    if not os.path.isdir(on_the_way):
        raise ValueError(f"{out}: {on_the_way} is not a directory: give a path in a directory")
    # Where Spark cannot make a directory (a read-only one, /proc), every task
    # fails with a Java stack in the log: tried, as the report is, and taken away.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".msgcask-", dir=on_the_way))
    except OSError as e:
        raise ValueError(f"{out} cannot be written: {e.strerror or e}") from None


def _is_spark_output(name: str) -> bool:
    """Whether ``name`` is an entry Spark writes into an output directory: the
    part files, their checksums, the success marker, a failed job's scratch."""
    return name.lstrip(".").startswith("part-") or name in _SPARK_MARKERS


_SPARK_MARKERS = {"_SUCCESS", "._SUCCESS.crc", "_temporary"}


def _refuse_foreign_contents(path: str, out: str) -> None:
    """Overwriting replaces the whole directory: refused (ValueError) unless it
    holds only what an export writes, so a mistyped OUT (``.``, a home
    directory) does not cost the files in it."""
    if not os.path.isdir(path):
        raise ValueError(
            f"{out} is not a directory an export wrote, and overwriting would delete it: "
            "choose another path"
        )
    try:
        foreign = sorted(n for n in os.listdir(path) if not _is_spark_output(n))
    except OSError as e:
        raise ValueError(f"{out} cannot be listed: {e.strerror or e}") from None
    if foreign:
        named = ", ".join(repr(n) for n in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise ValueError(
            f"{out} holds files no export writes ({named}), and overwriting replaces the "
            "whole directory: choose another path, or empty it first"
        )


def check_report(store: str, out: str) -> None:
    """A local file the driver will write after the job: refused (ValueError)
    if it overlaps the store, is a directory or a link to nothing, or cannot be
    written. Nothing is left changed: an existing regular file is opened for
    appending only, a new one is created and removed, and a device or a pipe
    (``/dev/stdout``, say) is not opened now: a pipe would wait for a reader,
    or tell its reader the stream had ended."""
    if not out:  # realpath would take it for the current directory
        raise ValueError("the report's path is empty: give a file's path")
    _refuse_overlap(store, out, out)
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        if os.path.lexists(parent):
            raise ValueError(f"{out}: {parent} is not a directory: give a path in a directory")
        raise ValueError(f"{out}: its directory does not exist")
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        if os.path.lexists(out):  # writing through it would create its target
            raise ValueError(f"{out} is a link to nothing: give a file's path") from None
        _try_writing(out, os.O_CREAT | os.O_EXCL)
        return
    except OSError as e:
        raise ValueError(f"{out} cannot be written: {e.strerror or e}") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"{out} is a directory: give a file's path")
    if stat.S_ISREG(mode):
        _try_writing(out, 0)


def _try_writing(out: str, create: int) -> None:
    """Open ``out`` for writing as the report will be (``create``: O_CREAT|O_EXCL
    for a new file, removed again), and close it. Tried, not predicted from
    permissions: root, read-only mounts and /proc answer os.access differently."""
    # O_NONBLOCK: should a pipe take the file's place meanwhile, the open fails or
    # returns at once instead of waiting for a reader.
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC | create
    try:
        os.close(os.open(out, flags, 0o644))
    except FileExistsError:
        return  # made meanwhile by someone else: the report will replace it
    except OSError as e:
        raise ValueError(f"{out} cannot be written: {e.strerror or e}") from None
    if create:
        os.unlink(out)
