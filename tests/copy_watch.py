"""Watching a compaction pass's copy: what the data files take once it is written
(before its victims are deleted, the most they take in a pass), and holding it back."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from msgcask.compactor import rewrite


def data_files_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.log"))


def copies_held(
    monkeypatch: pytest.MonkeyPatch, path: Path, go: threading.Event | None = None
) -> tuple[threading.Event, list[int]]:
    """Make a pass's copy wait for ``go`` (if given) before it is written.
    Returns an event set when a copy is about to be written, and the list the
    data files' bytes after each copy is written are added to."""
    copying, on_disk_after_copy = threading.Event(), list[int]()
    real_write = rewrite._write_output

    def write_output(*args: object) -> object:
        copying.set()
        if go is not None:
            assert go.wait(30)
        out = real_write(*args)  # type: ignore[arg-type]
        on_disk_after_copy.append(data_files_bytes(path))
        return out

    monkeypatch.setattr(rewrite, "_write_output", write_output)
    return copying, on_disk_after_copy
