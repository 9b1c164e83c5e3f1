"""sync="always": 1,000 puts per round from 1 or 8 threads (group commit shares fsyncs)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

import msgcask
from conftest import BODY, OPS_PER_ROUND


@pytest.mark.parametrize("threads", [1, 8])
def test_put_sync_always(
    benchmark: BenchmarkFixture, open_store: Callable[..., msgcask.Store], threads: int
) -> None:
    benchmark.group = "put sync=always (1,000 x 1 KiB)"
    benchmark.extra_info["threads"] = threads
    q = open_store(sync="always").queue("bench")
    share = OPS_PER_ROUND // threads

    def worker() -> None:
        for _ in range(share):
            q.put(BODY)

    def round_() -> None:
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()

    benchmark.pedantic(round_, rounds=5, warmup_rounds=1)
