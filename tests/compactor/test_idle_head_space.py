"""A store gone quiet gives back its write head's space allocated ahead of writes.

The head is written through a map, a chunk (up to 1 MiB) allocated at a time; a
quiet store kept that chunk of zeros on disk for as long as it stayed quiet, which
for a store of a few kilobytes of live messages is most of its disk use.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import msgcask


def test_an_idle_pass_gives_back_the_heads_allocated_space(store_path: Path) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        ids = [q.put(b"m" * 500) for _ in range(20)]
        head = store._journal.head
        written = head.size
        assert os.path.getsize(head.path) > written  # a chunk allocated ahead
        store.compact()  # writes came since the last pass: not idle
        store.compact()  # nothing written since: idle
        assert store._journal.head is head, "the head was sealed: nothing to show"
        assert os.path.getsize(head.path) == written
        # Appends go on: the next one allocates a chunk again.
        ids.append(q.put(b"n" * 500))
        assert os.path.getsize(head.path) > head.size
        assert [m.id for m in q.browse()] == ids
        assert store.verify() == []
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.id for m in store.queue("q").browse()] == ids


def test_an_idle_pass_that_cannot_give_back_the_space_warns_and_loses_nothing(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Cutting the head's allocated tail fails (EIO): the pass still succeeds, the
    # log says the space is freed at close, and the head takes appends as before.
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        ids = [q.put(b"m" * 500) for _ in range(20)]
        head = store._journal.head
        allocated = os.path.getsize(head.path)
        store.compact()  # writes came since the last pass: not idle

        def failing_ftruncate(fd: int, size: int) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        with monkeypatch.context() as patch, caplog.at_level("WARNING", logger="msgcask"):
            patch.setattr(os, "ftruncate", failing_ftruncate)
            report = store.compact()  # idle: tries to give the space back
        assert report.files_deleted == report.files_rewritten == 0
        assert "freed when the store is closed" in caplog.text
        assert store._journal.head is head
        assert os.path.getsize(head.path) == allocated  # still allocated
        ids.append(q.put(b"n" * 500))
        assert [m.id for m in q.browse()] == ids
        assert store.stats().compaction.failed_passes == 0
        assert store.verify() == []
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert [m.id for m in store.queue("q").browse()] == ids
        assert store.verify() == []
