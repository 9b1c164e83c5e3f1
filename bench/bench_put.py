"""put: 1,000 single puts of 1 KiB per round, msgcask and every peer through one adapter."""

from __future__ import annotations

from pytest_benchmark.fixture import BenchmarkFixture

from conftest import BODY, OPS_PER_ROUND
from msgcask.workloads.subjects.base import Subject


def test_put(benchmark: BenchmarkFixture, subject: Subject) -> None:
    benchmark.group = "put (1,000 x 1 KiB)"
    benchmark.extra_info["subject"] = subject.name

    def round_() -> None:
        for _ in range(OPS_PER_ROUND):
            subject.put(BODY)

    benchmark.pedantic(round_, rounds=10, warmup_rounds=1)
