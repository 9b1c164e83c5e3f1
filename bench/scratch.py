"""Where the benchmark scripts keep their stores: one temporary directory per
run, removed when the script exits (a run leaves hundreds of megabytes)."""

from __future__ import annotations

import tempfile

_RUN = tempfile.TemporaryDirectory(prefix="msgcask-bench-")


def scratch_dir() -> str:
    """A new empty directory inside this run's temporary directory."""
    return tempfile.mkdtemp(dir=_RUN.name)
