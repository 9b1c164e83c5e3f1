"""Fixtures for the micro-benchmarks: stores and peers in temporary directories.

Every benchmark round does 1,000 messages' worth of work, so the times
pytest-benchmark reports are per 1,000 messages and comparable across files.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import msgcask
from msgcask.workloads.config import RunConfig
from msgcask.workloads.factory import MSGCASK, make_subject
from msgcask.workloads.subjects import PEERS, peer_unavailable
from msgcask.workloads.subjects.base import Subject

OPS_PER_ROUND = 1000
BODY = bytes(range(256)) * 4  # 1 KiB, the workload spec's default size
SUBJECTS = [MSGCASK, *PEERS]
# Benchmark stores get 32 MiB data files (the library default) and no compaction
# schedule, so a background pass never lands inside a timed round.
STORE_OPTIONS = {"compaction_interval": None}


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., msgcask.Store]]:
    """``open_store(**options)``: a store in a fresh directory, closed after the test."""
    opened: list[msgcask.Store] = []
    count = 0

    def _open(**options: object) -> msgcask.Store:
        nonlocal count
        count += 1
        store = msgcask.open(str(tmp_path / f"store{count}"), **{**STORE_OPTIONS, **options})
        opened.append(store)
        return store

    yield _open
    for store in opened:
        with contextlib.suppress(msgcask.ClosedError):  # the benchmark may have closed it
            store.close()


@pytest.fixture(params=SUBJECTS)
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    """msgcask and each installed peer behind the same adapter, for ratios."""
    name: str = request.param
    if name != MSGCASK:
        reason = peer_unavailable(name)
        if reason:
            pytest.skip(reason)
    cfg = RunConfig(workload="steady", max_file_size=32 * 2**20, compaction="off")
    subj = make_subject(name, str(tmp_path / name), cfg, compaction=False)
    subj.open()
    yield subj
    subj.close()
    shutil.rmtree(tmp_path / name, ignore_errors=True)
