"""One compaction pass over 16 MiB of 1 MiB data files where 1 message in 100 is still live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_benchmark.fixture import BenchmarkFixture

import msgcask
from conftest import BODY, STORE_OPTIONS

MESSAGES = 16_000
KEEP_EVERY = 100


def test_compaction_pass(benchmark: BenchmarkFixture, tmp_path: Path) -> None:
    benchmark.group = "compaction pass"
    stores: list[msgcask.Store] = []
    reports: list[Any] = []

    def setup() -> tuple[tuple[msgcask.Store], dict[str, Any]]:
        store = msgcask.open(
            str(tmp_path / f"s{len(stores)}"), max_file_size=2**20, **STORE_OPTIONS
        )
        stores.append(store)
        q = store.queue("bench")
        for _ in range(MESSAGES // 100):
            q.put_many([BODY] * 100)
        for i in range(MESSAGES):
            m = q.get(block=False)
            if i % KEEP_EVERY:
                q.ack(m)
            else:
                q.nack(m)  # back to the queue: stays live, pins its file
        return (store,), {}

    def round_(store: msgcask.Store) -> None:
        reports.append(store.compact())

    benchmark.pedantic(round_, setup=setup, rounds=3)
    last = reports[-1]
    benchmark.extra_info.update(
        files_deleted=last.files_deleted,
        files_rewritten=last.files_rewritten,
        bytes_copied=last.bytes_copied,
    )
    for store in stores:
        store.close()
