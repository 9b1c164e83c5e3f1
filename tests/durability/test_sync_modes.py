"""Durability per sync mode (design brief, guarantee 1), with real processes.

* In every mode, a put or ack that returned survives kill -9 of the process.
* ``always``: the data file is fsynced before a put returns (also with several threads,
  where one fsync may cover several puts: group commit).
* ``periodic``: a background fsync follows a put without any further call.
* ``never``: no data-file fsync while putting.
* However far away the next flush is, the index is committed every 50,000 or so
  changes, so a replay after kill -9 applies no more records than that.

fsyncs are observed by wrapping ``os.fsync``/``os.fdatasync`` in the child process before
msgcask is imported (see fsync_probe.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import msgcask
from child_process import child_process

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from put_and_print import body_for  # noqa: E402


def _kill_after_start(cmd: list[str], out_path: Path, delay: float) -> str:
    with child_process(cmd, out_path) as child:
        child.wait_for(lambda out: out.startswith(b"R\n"), "its start")
        time.sleep(delay)
        child.assert_running("before the kill")
        assert child.kill9()
    return out_path.read_text()


@pytest.mark.crash
@pytest.mark.parametrize(
    ("sync", "threads"),
    [("always", 1), ("always", 3), ("periodic", 1), ("periodic", 3), ("never", 1)],
)
def test_returned_puts_and_acks_survive_kill9(
    store_path: Path, tmp_path: Path, sync: str, threads: int
) -> None:
    rng = random.Random(f"{sync}-{threads}")
    text = _kill_after_start(
        [sys.executable, str(HERE / "put_and_print.py"), str(store_path), sync, str(threads)],
        tmp_path / "child.out",
        delay=rng.uniform(0.3, 0.8),
    )
    lines = [line.split() for line in text.split("\n")[:-1]]  # last line may be torn
    put = {int(x[1]) for x in lines if x[0] == "P"}
    ack_started = {int(x[1]) for x in lines if x[0] == "a"}
    acked = {int(x[1]) for x in lines if x[0] == "A"}
    assert len(put) > 5, "the child did some work before it was killed"

    with msgcask.open(store_path, compaction_interval=None) as store:
        present = {m.id: m for m in store.queue("q").browse()}
        lost = sorted(put - ack_started - present.keys())
        assert not lost, f"{len(lost)} puts that returned were lost, e.g. {lost[:5]}"
        resurrected = sorted(acked & present.keys())
        assert not resurrected, f"acks that returned were undone: {resurrected[:5]}"
        for m in present.values():
            assert bytes(m.body) == body_for(int(m.headers["n"])), f"damaged body: {m.id}"


@pytest.mark.crash
def test_a_crash_long_after_the_last_flush_replays_at_most_one_commits_worth(
    store_path: Path, tmp_path: Path
) -> None:
    # With the background flush an hour away, the index is committed only when
    # its open transaction passes about 50,000 changes: what a replay after
    # kill -9 applies stays bounded however long the flush waits.
    cmd = [sys.executable, str(HERE / "put_and_print.py"), str(store_path), "never", "1", "3600"]
    with child_process(cmd, tmp_path / "child.out") as child:
        # Every third put is followed by a get and an ack: 5 records per 3 puts.
        child.wait_for(lambda out: out.count(b"\nA ") >= 20_000, "100,000 records", seconds=300)
        assert child.kill9()
    lines = [line.split() for line in child.output().decode().split("\n")[:-1]]
    put = {int(x[1]) for x in lines if x[0] == "P"}
    ack_started = {int(x[1]) for x in lines if x[0] == "a"}
    journaled = len(put) + 2 * len({int(x[1]) for x in lines if x[0] == "A"})
    assert journaled >= 100_000
    with msgcask.open(store_path, compaction_interval=None) as store:
        assert store.recovery.mode == "replay"
        assert 0 < store.recovery.records <= 50_000, (store.recovery.records, journaled)
        present = {m.id for m in store.queue("q").browse()}
    assert not put - ack_started - present


def _probe(store_path: Path, sync: str, scenario: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(HERE / "fsync_probe.py"), str(store_path), sync, scenario],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def _split(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    puts = [e for e in doc["events"] if e["kind"] == "put"]
    syncs = [e for e in doc["events"] if e["kind"] == "sync"]
    return puts, syncs


def test_always_fsyncs_the_data_file_before_put_or_ack_returns(store_path: Path) -> None:
    doc = _probe(store_path, "always", "puts")
    puts, syncs = _split(doc)
    acks = [e for e in doc["events"] if e["kind"] == "ack"]
    assert (len(puts), len(acks)) == (20 + 3 * 15, 10)
    # An fsync that covers a call starts after the call began (its bytes were written
    # during the call) and ends before it returns; with threads it may be shared.
    uncovered = [
        c
        for c in puts + acks
        if not any(c["start"] <= s["start"] and s["end"] <= c["end"] for s in syncs)
    ]
    assert not uncovered, f"{len(uncovered)} puts/acks returned without an fsync: {uncovered[:3]}"


def test_periodic_fsyncs_in_the_background_after_a_put(store_path: Path) -> None:
    doc = _probe(store_path, "periodic", "puts")
    puts, syncs = _split(doc)
    last_put = max(p["end"] for p in puts)
    # The scenario sleeps 0.5 s (ten sync intervals) after its last put, then closes.
    later = [
        s for s in syncs if s["start"] >= last_put and s["end"] <= doc["marks"]["before_close"]
    ]
    assert later, "no background fsync of the data file followed the last put"


def test_never_does_not_fsync_data_files_during_puts(store_path: Path) -> None:
    doc = _probe(store_path, "never", "puts")
    puts, syncs = _split(doc)
    # Setting up a new file at open may sync it; the puts and the idle time after them
    # must not.
    first_put = min(p["start"] for p in puts)
    during = [s for s in syncs if first_put <= s["start"] < doc["marks"]["before_close"]]
    assert not during, f"sync='never' fsynced data files {len(during)} times during puts"
