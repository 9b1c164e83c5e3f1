"""Where a pipeline job may write: never over or into the store it reads.

A job's output is either a directory that Spark writes (``dead-letters``),
which may be a URI such as ``file:///...`` or ``hdfs://...``, or a report that
the driver writes itself (``--json``), always a local path. Both are checked
before Spark starts, so a mistake costs no job and changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msgcask.errors import Error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


@dataclass(frozen=True)
class Target:
    """Where a job writes an output (``written_beside``): ``path`` in ``mode``
    (``DataFrameWriter.mode``); ``replacing``: an earlier output is there, which the
    new one replaces once written."""

    path: str
    mode: str
    replacing: bool


@contextlib.contextmanager
def written_beside(spark: SparkSession, out: str, overwrite: bool) -> Iterator[Target]:
    """The ``Target`` a job writes the directory ``out`` at: a new sibling of it
    (``.NAME.msgcask-new-...``, on ``out``'s file system as Spark resolves it),
    which takes ``out``'s place once the block ends without an exception. An
    ``out`` that exists (refused unless ``overwrite``) is moved aside to another
    sibling then, and deleted once the new one is in place. If the block raises,
    the new sibling is deleted: ``out`` is left as it was (or not made), and
    nothing beside it. Spark's own overwrite would delete ``out`` before it
    writes, and a failed job would cost the old output.

    A Spark Connect session gives the driver no JVM to move files with: there
    Spark writes ``out`` itself, in its own way."""
    jvm, jsc = getattr(spark, "_jvm", None), getattr(spark, "_jsc", None)
    if jvm is None or jsc is None:
        yield Target(out, "overwrite" if overwrite else "errorifexists", False)
        return
    files = _HadoopFiles(jvm, jsc, out)
    replacing = overwrite and files.exists(files.out)
    new = files.sibling("new")
    try:
        yield Target(str(new.toString()), "errorifexists", replacing)
        files.put_in_place(new, out, overwrite)
    except BaseException:
        with contextlib.suppress(Exception):  # what stopped the job is what to say
            files.remove(new)
        raise


class _HadoopFiles:
    """``out``'s file system as Spark writes it: through Hadoop's ``FileSystem``
    of the session's JVM, which resolves ``out`` as the writer does (a path
    without a scheme is on the cluster's default file system; ``%20`` in a
    ``file:`` URI is part of a name), but for a relative local path, taken in
    this process's working directory."""

    def __init__(self, jvm: Any, jsc: Any, out: str) -> None:
        self.path = jvm.org.apache.hadoop.fs.Path
        given = self.path(out)
        self.fs = given.getFileSystem(jsc.hadoopConfiguration())
        if not given.isAbsolute() and self.fs.getUri().getScheme() == "file":
            # In this process's working directory, where it was checked: the JVM's
            # is the one this process had when the session started.
            given = self.path(os.path.abspath(out))
        self.out = self.fs.makeQualified(given)

    def sibling(self, kind: str) -> Any:
        """A new name beside ``out``: hidden, unique, and short enough for any
        file system (a name may be 255 bytes at most)."""
        name = f".{self.out.getName()[:100]}.msgcask-{kind}-{uuid.uuid4().hex[:12]}"
        return self.path(self.out.getParent(), name)

    def exists(self, path: Any) -> bool:
        return bool(self.fs.exists(path))

    def rename(self, source: Any, target: Any) -> None:
        if not self.fs.rename(source, target):
            raise OSError(f"cannot rename {source.toString()} to {target.toString()}")

    def remove(self, path: Any) -> None:
        """Delete ``path`` and what it holds (a symbolic link itself, not where it leads)."""
        self.fs.delete(path, True)

    def put_in_place(self, new: Any, out: str, overwrite: bool) -> None:
        """``new`` renamed to ``out``; an ``out`` there (when ``overwrite``) moved
        aside first and deleted after."""
        if not self.exists(self.out):
            self.rename(new, self.out)
            return
        if not overwrite:  # made while the job ran
            raise Error(f"{out} was made while the export was written: choose another path")
        old = self.sibling("old")
        self.rename(self.out, old)
        try:
            self.rename(new, self.out)
        except BaseException:
            self.rename(old, self.out)
            raise
        try:
            self.remove(old)
        except Exception as e:
            raise Error(
                f"the export is written to {out}, but the earlier one, moved to "
                f"{old.toString()}, could not be deleted ({e}): delete it"
            ) from e


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
