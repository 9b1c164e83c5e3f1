"""Peers run on the same workload; skips say why; ratios come from the runs' numbers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from workload_sizes import Run

from msgcask.workloads.config import RunConfig
from msgcask.workloads.definitions import Context, run_steady
from msgcask.workloads.factory import make_subject
from msgcask.workloads.payload import Payloads
from msgcask.workloads.subjects import PEERS, parse_peers, peer_unavailable


def test_ratios_are_msgcask_over_each_peer(run_tiny: Run) -> None:
    doc, _ = run_tiny(
        "steady", peers=["sqlite3", "persistqueue-file", "diskcache-deque"], messages=800
    )
    runs = {r["label"]: r for r in doc["runs"]}
    assert set(runs) == {
        "msgcask[compaction on]",
        "sqlite3",
        "persistqueue-file",
        "diskcache-deque",
    }
    base = runs["msgcask[compaction on]"]
    assert {x["other"] for x in doc["ratios"]} == set(runs) - {base["label"]}
    for ratio in doc["ratios"]:
        other = runs[ratio["other"]]
        assert other["status"] == "ok"
        assert other["counts"]["put"] == other["counts"]["acked"] == base["counts"]["put"]
        assert ratio["put_throughput"] == pytest.approx(
            base["throughput"]["put_per_s"] / other["throughput"]["put_per_s"]
        )
        assert ratio["get_ack_throughput"] == pytest.approx(
            base["throughput"]["get_ack_per_s"] / other["throughput"]["get_ack_per_s"]
        )
        assert ratio["max_disk"] == pytest.approx(
            base["space"]["max_disk_bytes"] / other["space"]["max_disk_bytes"]
        )
        assert other["space"]["max_disk_bytes"] > 0


@pytest.mark.parametrize("peer", ["sqlite3", "persistqueue-ack", "litequeue"])
def test_peers_that_dead_letter_run_dlq_heavy(run_tiny: Run, peer: str) -> None:
    doc, _ = run_tiny("dlq-heavy", peers=[peer], messages=600, pin_every=60)
    (run,) = [r for r in doc["runs"] if r["subject"] == peer]
    assert run["status"] == "ok", run["errors"]
    assert run["counts"]["dead_lettered"] == 10
    assert run["counts"]["acked"] == 600 - 10


def test_peers_that_cannot_express_a_workload_are_skipped_with_a_reason(run_tiny: Run) -> None:
    doc, _ = run_tiny("selector-skip", peers=["sqlite3", "diskcache-deque", "no-such-peer"])
    reasons = {s["subject"]: s["reason"] for s in doc["skipped"]}
    assert "selector" in reasons["sqlite3"]
    assert "ack" in reasons["diskcache-deque"] and "selector" in reasons["diskcache-deque"]
    assert "unknown peer" in reasons["no-such-peer"]
    assert [r["subject"] for r in doc["runs"]] == ["msgcask"]


def test_priority_pin_runs_on_the_sqlite_peer_in_order(run_tiny: Run) -> None:
    doc, _ = run_tiny("priority-pin", peers=["sqlite3"])
    (run,) = [r for r in doc["runs"] if r["subject"] == "sqlite3"]
    # the consumer raises if a low-priority message comes before the high ones
    assert run["status"] == "ok", run["errors"]
    assert run["phases"]["priority_pin"]["rounds_completed"] == 12


def test_a_batch_is_noted_where_a_peer_has_no_atomic_one(run_tiny: Run) -> None:
    doc, _ = run_tiny("steady", peers=["sqlite3", "diskcache-deque"], batch=10)
    notes = {r["subject"]: r["notes"] for r in doc["runs"]}
    assert notes["diskcache-deque"] == [
        "--batch 10: diskcache-deque has no atomic batch here; each batch is 10 puts, "
        "each committed on its own"
    ]
    assert not any("atomic batch" in n for n in notes["msgcask"] + notes["sqlite3"])


def test_peer_selection() -> None:
    assert parse_peers("none") == []
    assert parse_peers("all") == list(PEERS)
    assert parse_peers(" sqlite3, litequeue ") == ["sqlite3", "litequeue"]
    assert parse_peers("sqlite3,litequeue,sqlite3") == ["sqlite3", "litequeue"]
    assert parse_peers(" all, all") == list(PEERS)
    assert peer_unavailable("sqlite3") is None
    reason = peer_unavailable("bogus")
    assert reason is not None and "unknown" in reason


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("all,none", "'all' and 'none' stand alone and cannot be combined with other names"),
        ("none,sqlite3", "'none' stands alone and cannot be combined with other names"),
        ("sqlite3,all", "'all' stands alone and cannot be combined with other names"),
    ],
)
def test_all_and_none_are_refused_in_a_list_of_peers(spec: str, says: str) -> None:
    # Each works alone; in a list they read as unknown peers ("unknown peer 'all', 'none'").
    with pytest.raises(ValueError, match="^" + says) as refused:
        parse_peers(spec)
    assert "unknown" not in str(refused.value)


def test_file_queue_consumption_is_persisted(tmp_path: Path) -> None:
    # get + task_done: after a steady run and a reopen nothing comes back
    cfg = RunConfig(workload="steady", messages=300, size=64, progress=False, reopen=False)
    subject = make_subject("persistqueue-file", str(tmp_path / "q"), cfg)
    subject.open()
    ctx = Context(subject, cfg, Payloads(cfg.size, cfg.size_mix, cfg.seed))
    run_steady(ctx)
    assert ctx.errors == []
    subject.close()
    subject.open()
    assert subject.get(0.0) is None
    subject.close()


class _PutAfterTheLook(threading.Condition):
    """A peer's put condition that lands one put just after the consumer found nothing
    (on its first entry, where the consumer would wait) and never sleeps in a wait,
    but records it."""

    def __init__(self, put: Callable[[], None]) -> None:
        super().__init__()
        self.put: Callable[[], None] | None = put
        self.waits: list[float | None] = []

    def __enter__(self) -> bool:
        if self.put is not None:
            put, self.put = self.put, None
            put()  # its own notify enters again, with self.put already None
        return super().__enter__()

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return False


@pytest.mark.parametrize("peer", ["sqlite3", "persistqueue-ack", "litequeue", "diskcache-deque"])
def test_a_put_between_a_peers_look_and_its_wait_wakes_the_consumer(
    tmp_path: Path, peer: str
) -> None:
    # The consumer looked, found nothing, and a producer's put and notify came before
    # it began to wait: it must take the message at once, not sleep through the put
    # (up to its whole timeout, 50 ms in a run).
    cfg = RunConfig(workload="steady", messages=10, size=64, progress=False, reopen=False)
    subject: Any = make_subject(peer, str(tmp_path / "q"), cfg)
    subject.open()
    arrived = _PutAfterTheLook(lambda: subject.put(b"m" * 64))
    subject._arrived = arrived
    delivery = subject.get(30.0)
    assert delivery is not None and delivery.body == b"m" * 64
    assert arrived.waits == []
    subject.close()
