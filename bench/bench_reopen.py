"""Reopen: open + close of a cleanly closed store holding 100,000 queued 1 KiB messages,
and open after deleting index/ (a rebuild from the data files)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

import msgcask
from conftest import BODY, STORE_OPTIONS

QUEUED = 100_000


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reopen") / "store"
    with msgcask.open(str(path), **STORE_OPTIONS) as store:
        q = store.queue("bench")
        for _ in range(QUEUED // 100):
            q.put_many([BODY] * 100)
    return path


def test_reopen_clean(benchmark: BenchmarkFixture, filled: Path) -> None:
    benchmark.group = "reopen (100,000 queued)"

    def round_() -> None:
        msgcask.open(str(filled), **STORE_OPTIONS).close()

    benchmark.pedantic(round_, rounds=10, warmup_rounds=1)


def test_reopen_rebuilding_the_index(
    benchmark: BenchmarkFixture, filled: Path, tmp_path: Path
) -> None:
    benchmark.group = "reopen (100,000 queued)"
    work = tmp_path / "store"

    def setup() -> None:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(filled, work)
        shutil.rmtree(work / "index")

    def round_() -> None:
        msgcask.open(str(work), **STORE_OPTIONS).close()

    benchmark.pedantic(round_, setup=setup, rounds=3)
