"""Where a pipeline job may write: never over or into the store it reads.

A job's output is either a directory that Spark writes (``dead-letters``),
which may be a URI such as ``file:///...`` or ``hdfs://...``, or a report that
the driver writes itself (``--json``), always a local file. Both are checked
before Spark starts, so a mistake costs no job and changes nothing.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def local_path(out: str) -> str | None:
    """The local path ``out`` names: itself, or the path of a ``file:`` URI.
    None for another scheme's URI (``hdfs:``, ``s3a:``), which Spark writes to a
    file system that cannot hold a local store."""
    scheme = _SCHEME.match(out)
    if scheme is None:
        return out
    if scheme.group(1).lower() == "file":
        return unquote(urlsplit(out).path) or "/"
    return None


def refuse_the_store(store: str, out: str) -> None:
    """ValueError if ``out`` is the store at ``store``, is inside it or holds it."""
    path = local_path(out)
    if path is None:
        return
    store_real, target = os.path.realpath(store), os.path.realpath(path)
    if (
        target == store_real
        or target.startswith(store_real + os.sep)
        or (store_real.startswith(target.rstrip(os.sep) + os.sep))
    ):
        raise ValueError(
            f"{out} is the store, inside it or holds it: writing there would destroy the "
            "store. Choose a path outside the store."
        )


def check_spark_output(store: str, out: str, overwrite: bool) -> None:
    """A directory Spark will write: refused (ValueError) if it overlaps the
    store, or, unless ``overwrite``, if it exists (checked here for a local path;
    Spark refuses an existing one elsewhere)."""
    refuse_the_store(store, out)
    path = local_path(out)
    if path is not None and os.path.lexists(path) and not overwrite:
        raise ValueError(f"{out} exists: choose another path, or overwrite it")


def check_report(store: str, out: str) -> None:
    """A local file the driver will write after the job: refused (ValueError)
    if it overlaps the store or cannot be written."""
    refuse_the_store(store, out)
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise ValueError(f"{out}: its directory does not exist")
    if os.path.isdir(out):
        raise ValueError(f"{out} is a directory: give a file's path")
    # Tried, not predicted from permissions: root, read-only mounts and /proc
    # answer os.access differently from open.
    existed = os.path.exists(out)
    try:
        with open(out, "a"):
            pass
    except OSError as e:
        raise ValueError(f"{out} cannot be written: {e.strerror or e}") from None
    if not existed:
        os.unlink(out)
