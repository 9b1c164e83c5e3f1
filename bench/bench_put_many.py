"""put_many: 10 atomic batches of 100 x 1 KiB per round (1,000 messages)."""

from __future__ import annotations

from collections.abc import Callable

from pytest_benchmark.fixture import BenchmarkFixture

import msgcask
from conftest import BODY, OPS_PER_ROUND

BATCH = 100


def test_put_many(benchmark: BenchmarkFixture, open_store: Callable[..., msgcask.Store]) -> None:
    benchmark.group = "put_many (10 x 100 x 1 KiB)"
    q = open_store().queue("bench")
    batch = [BODY] * BATCH

    def round_() -> None:
        for _ in range(OPS_PER_ROUND // BATCH):
            q.put_many(batch)

    benchmark.pedantic(round_, rounds=20, warmup_rounds=1)
