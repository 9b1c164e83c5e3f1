"""get+ack: 1,000 non-blocking gets, each acked, per round; the queue is filled beforehand."""

from __future__ import annotations

from pytest_benchmark.fixture import BenchmarkFixture

from conftest import BODY, OPS_PER_ROUND
from msgcask.workloads.subjects.base import ACK, Subject

ROUNDS = 10


def test_get_ack(benchmark: BenchmarkFixture, subject: Subject) -> None:
    benchmark.group = "get+ack (1,000 x 1 KiB)"
    benchmark.extra_info["subject"] = subject.name
    benchmark.extra_info["acks"] = ACK in subject.capabilities  # else get is get-and-remove
    for _ in range((ROUNDS + 1) * OPS_PER_ROUND):  # + the warm-up round
        subject.put(BODY)

    def round_() -> None:
        for _ in range(OPS_PER_ROUND):
            d = subject.get(0.0)
            if d is None:
                raise RuntimeError(f"{subject.name}: queue ran dry before the round ended")
            subject.ack(d)

    benchmark.pedantic(round_, rounds=ROUNDS, warmup_rounds=1)
