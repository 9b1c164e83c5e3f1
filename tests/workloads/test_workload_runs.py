"""Every standard workload at tiny size: the result validates and its numbers add up."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from workload_sizes import TINY, Run

from msgcask.store import codec
from msgcask.store.format import FILE_HEADER_SIZE
from msgcask.workloads import definitions
from msgcask.workloads.batches import largest_batch, put_calls, put_ranges
from msgcask.workloads.config import BENCH_QUEUE, WORKLOAD_NAMES, MiB, RunConfig
from msgcask.workloads.payload import Payloads, index_of
from msgcask.workloads.report import summary
from msgcask.workloads.result import validate
from msgcask.workloads.subjects.msgcask_store import MsgcaskSubject


def _only_msgcask(doc: dict[str, Any]) -> dict[str, Any]:
    (run,) = [r for r in doc["runs"] if r["subject"] == "msgcask"]
    return run


def _expected_counts(workload: str) -> dict[str, int]:
    """What a run of ``workload`` at TINY size must have put and acked."""
    n = TINY["messages"]
    if workload == "dlq-heavy":
        dead = n // 1000  # indices 999, 1999, ... of n
        return {"put": n, "acked": n - dead, "dead_lettered": dead}
    if workload == "selector-skip":
        skipped = n // 500
        return {"put": n, "acked": n - skipped, "skipped": skipped}
    if workload == "priority-pin":
        # The round whose records (puts, and each high one's DELIVER and ACK) come
        # nearest the record room of one data file.
        put = codec.put_record_size(BENCH_QUEUE.encode(), b"", TINY["size"])
        taken = put + len(codec.encode_deliver(0, 1)) + codec.ACK_RECORD_SIZE
        per_round = round((TINY["max_file_size"] - FILE_HEADER_SIZE - put) / taken)
        return {"put": TINY["rounds"] * (per_round + 1), "acked": TINY["rounds"] * per_round}
    if workload == "drain-history":
        total = 2 * n + TINY["repeat"] * TINY["fill"]
        return {"put": total, "acked": total}
    if workload == "deep-queue":
        return {"put": TINY["depth"], "acked": 0}
    return {"put": n, "acked": n}


@pytest.mark.parametrize("workload", WORKLOAD_NAMES)
def test_workload_runs_and_counts_add_up(run_tiny: Run, workload: str) -> None:
    _doc, path = run_tiny(workload, peers=[])
    with open(path) as f:
        on_disk = json.load(f)
    validate(on_disk)
    assert on_disk["workload"] == workload
    run = _only_msgcask(on_disk)
    assert run["status"] == "ok", run["errors"] + run["notes"]
    for key, value in _expected_counts(workload).items():
        assert run["counts"][key] == value, key
    assert run["latency"]["put"]["count"] > 0
    assert run["latency"]["put"]["p50"] <= run["latency"]["put"]["p99"]
    assert run["latency"]["put"]["p99"] <= run["latency"]["put"]["max"]
    assert run["throughput"]["put_per_s"] > 0
    assert len(run["samples"]) >= 2
    # the store's own counters came through, and files were reported
    stats = run["final_stats"]
    assert stats["bytes_put"] > 0
    assert run["write_amplification"] == stats["bytes_written"] / stats["bytes_put"]
    assert run["files"]
    assert sum(f["size"] for f in run["files"]) == stats["data_bytes"]
    assert run["bytes_put"] == run["counts"]["put"] * TINY["size"]  # fixed-size bodies


def test_a_size_mix_batch_that_just_fits_in_a_data_file_is_taken_and_put(run_tiny: Run) -> None:
    # The run's largest batch record (of its 6 calls: 2 producers, 3 calls each)
    # fills a data file to the byte: the run is taken and msgcask puts every batch.
    # A byte less of data file, and it is refused before it starts.
    params = {"size_mix": True, "messages": 600, "batch": 100, "producers": 2}
    largest = largest_batch(RunConfig(workload="steady", **params, max_file_size=MiB))
    assert largest is not None and largest.count == 100
    fits = largest.record + FILE_HEADER_SIZE
    with pytest.raises(ValueError, match=r"a batch of 100 bodies of the size mix .* that fits is"):
        RunConfig(workload="steady", **params, max_file_size=fits - 1)
    doc, _ = run_tiny("steady", peers=[], max_file_size=fits, **params)
    run = _only_msgcask(doc)
    assert run["status"] == "ok", run["errors"] + run["notes"]
    assert run["counts"]["put"] == run["counts"]["acked"] == 600


@pytest.mark.parametrize(
    "workload", ["steady", "selector-skip", "priority-pin", "drain-history", "deep-queue"]
)
def test_the_put_calls_a_run_makes_are_the_ones_its_batch_check_reads(
    run_tiny: Run, monkeypatch: pytest.MonkeyPatch, workload: str
) -> None:
    # The check before a run (largest_batch) reads batches.put_ranges: a run that
    # sliced its messages otherwise could put a batch the check never saw.
    calls: list[tuple[int, ...]] = []
    real_put_many = MsgcaskSubject.put_many

    def put_many(self: MsgcaskSubject, bodies: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(tuple(index_of(b) for b in bodies))
        real_put_many(self, bodies, *args, **kwargs)

    monkeypatch.setattr(MsgcaskSubject, "put_many", put_many)
    params = {"size_mix": True, "batch": 7, "producers": 2, "rounds": 3, "crash_messages": 0}
    params["max_file_size"] = MiB  # room for a round of the size mix's bodies
    doc, _ = run_tiny(workload, peers=[], compaction="off", **params)
    assert _only_msgcask(doc)["status"] == "ok"
    cfg = RunConfig(workload=workload, **{**TINY, **params})
    payloads = Payloads(cfg.size, cfg.size_mix, cfg.seed)
    read = [tuple(c) for r in put_ranges(cfg, payloads) for c in put_calls(r, cfg.batch)]
    assert sorted(calls) == sorted(read)


def test_io_written_counts_what_goes_through_the_mapped_write_head(run_tiny: Run) -> None:
    # deep-queue deletes nothing, so every record put stays written: the bytes the
    # process caused to be written cover the bodies, the ones put through the map too.
    doc, _ = run_tiny("deep-queue", peers=[], compaction="off")
    run = _only_msgcask(doc)
    assert run["io_write_amplification"] >= 1.0, run["io_bytes_written"]


def test_waits_for_compaction_are_bounded_however_long_the_interval(
    run_tiny: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # drain-history waits two passes after each drain and every run three at the end:
    # with a 30 s interval that is minutes, cut to MAX_SETTLE each time (and noted).
    monkeypatch.setattr(definitions, "MAX_SETTLE", 0.05)
    doc, _ = run_tiny("drain-history", peers=[], compaction="on", compaction_interval=30.0)
    run = _only_msgcask(doc)
    assert run["status"] == "ok", run["errors"] + run["notes"]
    assert run["settle_seconds"] >= 0.05
    assert sum("waited at most 0.05 s for compaction" in n for n in run["notes"]) == 1


def test_the_wait_for_compaction_counts_passes_not_intervals() -> None:
    # On a loaded machine a pass takes longer than its interval: "final" must still
    # come after the passes that settle the store, not after so many intervals.
    started = time.perf_counter()

    def passes_ended() -> int:  # one pass ends every 0.2 s, whatever the interval
        return int((time.perf_counter() - started) / 0.2)

    subject = SimpleNamespace(store_stats=lambda: {"compaction": {"passes": passes_ended()}})
    cfg = RunConfig(workload="dlq-heavy", compaction_interval=0.001, progress=False)
    ctx = definitions.Context(subject, cfg, Payloads(64, False, 0))  # type: ignore[arg-type]
    before = passes_ended()
    ctx.wait_for_compaction(3)
    assert passes_ended() - before >= 3
    assert ctx.notes == []


@pytest.mark.parametrize("failing_call", [1, 2], ids=["open", "reopen"])
def test_a_subject_that_fails_to_open_fails_its_run_and_the_others_go_on(
    run_tiny: Run, monkeypatch: pytest.MonkeyPatch, failing_call: int
) -> None:
    # A store that cannot be opened (or reopened) is what a benchmark must report,
    # not a traceback that loses the peers' runs.
    real_open, calls = MsgcaskSubject.open, []

    def open_or_fail(self: MsgcaskSubject) -> None:
        calls.append(1)
        if len(calls) == failing_call:
            raise OSError(5, "Input/output error")
        real_open(self)

    monkeypatch.setattr(MsgcaskSubject, "open", open_or_fail)
    doc, path = run_tiny("steady", peers=["sqlite3"], compaction="on", reopen=True)
    with open(path) as f:
        validate(json.load(f))
    run = _only_msgcask(doc)
    where = "open" if failing_call == 1 else "reopen"
    assert run["status"] == "failed"
    assert run["errors"] == [f"{where}: OSError: [Errno 5] Input/output error"]
    error = f"msgcask[compaction on]: error: {where}: OSError: [Errno 5] Input/output error"
    assert summary(doc).splitlines().count(error) == 1
    assert (run["counts"]["put"] > 0) == (where == "reopen")
    sqlite_run = next(r for r in doc["runs"] if r["subject"] == "sqlite3")
    assert sqlite_run["status"] == "ok"


@pytest.mark.parametrize(
    ("workload", "size_mix"),
    [
        ("steady", False),
        ("dlq-heavy", False),
        ("selector-skip", False),
        ("deep-queue", False),
        ("priority-pin", True),
    ],
)
def test_the_progress_bar_ends_full(run_tiny: Run, workload: str, size_mix: bool) -> None:
    # Its total is the puts and acks the run will do: messages never acked
    # (dead letters, skipped ones) are not counted in it; priority-pin's rounds
    # are sized by their bodies' bytes, the size mix's too.
    sizes = {"size_mix": True, "max_file_size": 256 * 1024, "rounds": 3} if size_mix else {}
    doc, _ = run_tiny(workload, peers=[], compaction="off", **sizes)
    run = _only_msgcask(doc)
    assert run["status"] == "ok"
    cfg = RunConfig(workload=workload, **{**TINY, **sizes})
    assert definitions.expected_operations(cfg) == run["counts"]["put"] + run["counts"]["acked"]


def test_dlq_heavy_keeps_dead_letters_live(run_tiny: Run) -> None:
    doc, _ = run_tiny("dlq-heavy", peers=[], pin_every=100)
    run = _only_msgcask(doc)
    dead = TINY["messages"] // 100
    assert run["counts"]["dead_lettered"] == dead
    # the dead-lettered bodies are still live, both in our count and in the store's
    assert run["samples"][-1]["live_payload_bytes"] == dead * TINY["size"]
    assert run["final_stats"]["live_messages"] == dead
    assert run["space"]["final_amplification"] == pytest.approx(
        run["samples"][-1]["disk_bytes"] / (dead * TINY["size"])
    )


def test_drain_history_compares_fresh_and_after(run_tiny: Run) -> None:
    doc, _ = run_tiny("drain-history", peers=[])
    phases = _only_msgcask(doc)["phases"]["drain_history"]
    assert len(phases["drains"]) == TINY["repeat"]
    fresh, after = phases["fresh"], phases["after_history"]
    assert phases["put_throughput_ratio"] == pytest.approx(after["put_per_s"] / fresh["put_per_s"])
    assert fresh["put"]["count"] > 0 and after["put"]["count"] > 0
    # With compaction, a drained store goes back to about one data file (the write head
    # plus at most a file being rewritten).
    for drain in phases["drains"]:
        assert drain["data_files_settled"] <= 3, drain


def test_drain_history_summary_gives_a_peers_disk_after_each_drain(run_tiny: Run) -> None:
    from msgcask.workloads.report import summary

    doc, _ = run_tiny("drain-history", peers=["sqlite3"], repeat=1, compaction="off")
    lines = {
        line.split(":")[0]: line for line in summary(doc).splitlines() if "after/fresh" in line
    }
    assert "data files after each drain: " in lines["msgcask[compaction off]"]
    peer = lines["sqlite3"]
    assert "None" not in peer  # it has no data files to count
    [drain] = next(r for r in doc["runs"] if r["subject"] == "sqlite3")["phases"]["drain_history"][
        "drains"
    ]
    assert peer.endswith(f"disk after each drain: {drain['disk_bytes'] / 2**20:.1f} MiB")


def test_deep_queue_reports_latency_per_tenth_of_depth(run_tiny: Run) -> None:
    doc, _ = run_tiny("deep-queue", peers=[])
    deciles = _only_msgcask(doc)["phases"]["deep_queue"]["deciles"]
    assert [d["depth_upto"] for d in deciles] == [TINY["depth"] * k // 10 for k in range(1, 11)]
    assert sum(d["count"] for d in deciles) == TINY["depth"]
    samples = _only_msgcask(doc)["samples"]
    # the runner counts its own latency arrays: 8 bytes per put for the decile, 16 per op log
    assert samples[-1]["runner_buffer_bytes"] == TINY["depth"] * (8 + 16)
    assert samples[-1]["rss_anon_bytes"] > 0


def test_threads_share_the_messages(run_tiny: Run) -> None:
    doc, _ = run_tiny("steady", peers=[], producers=2, consumers=2, batch=10)
    run = _only_msgcask(doc)
    assert run["status"] == "ok"
    assert run["counts"]["put"] == run["counts"]["acked"] == TINY["messages"]
    # one latency sample per put_many call of 10
    assert run["latency"]["put"]["count"] == TINY["messages"] // 10


def test_schema_rejects_a_broken_result(run_tiny: Run) -> None:
    doc, _ = run_tiny("steady", peers=[])
    validate(doc)
    missing = copy.deepcopy(doc)
    del missing["runs"][0]["throughput"]
    with pytest.raises(jsonschema.ValidationError):
        validate(missing)
    wrong = copy.deepcopy(doc)
    wrong["runs"][0]["status"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        validate(wrong)


def test_crash_reopen_is_measured_after_sigkill(run_tiny: Run) -> None:
    doc, _ = run_tiny("steady", peers=["sqlite3"], reopen=True)
    for run in doc["runs"]:
        crash = run["reopen"]["crash"]
        assert crash["error"] is None, crash
        assert crash["killed_by"] == "SIGKILL"
        assert crash["seconds"] > 0
        assert run["reopen"]["clean_seconds"] > 0


def test_time_limit_stops_a_run_and_marks_it_incomplete(run_tiny: Run) -> None:
    doc, _ = run_tiny("steady", peers=["sqlite3"], messages=10_000_000, time_limit=0.5)
    run = _only_msgcask(doc)
    assert run["status"] == "incomplete"
    assert any("time limit" in n for n in run["notes"])
    assert 0 < run["counts"]["put"] < 10_000_000
    # Runs stopped at different counts are not compared, on disk either.
    [ratio] = doc["ratios"]
    assert ratio["comparable"] is False
    assert {k: v for k, v in ratio.items() if k not in ("base", "other", "comparable")} == {
        "put_throughput": None,
        "get_ack_throughput": None,
        "put_p99": None,
        "max_disk": None,
        "final_disk": None,
    }


def test_selector_skip_batched_puts_still_mark_the_skipped_messages(tmp_path: Path) -> None:
    # --batch > 1 used to drop the skip header: nothing was skipped, and the run
    # left the last messages put instead of one in P spread over every file.
    from msgcask.workloads.definitions import WORKLOADS, Context
    from msgcask.workloads.factory import make_subject
    from msgcask.workloads.payload import Payloads, index_of

    left = {}
    for batch in (1, 10):
        cfg = RunConfig(
            workload="selector-skip",
            messages=1000,
            size=64,
            max_file_size=64 * 1024,
            pin_every=100,
            batch=batch,
            compaction="off",
            progress=False,
            reopen=False,
        )
        subject = make_subject("msgcask", str(tmp_path / f"b{batch}"), cfg, compaction=False)
        subject.open()
        try:
            WORKLOADS["selector-skip"](Context(subject, cfg, Payloads(64, False, 0)))
            left[batch] = sorted(index_of(m.body) for m in subject.queue.browse())
        finally:
            subject.close()
    assert left[1] == list(range(99, 1000, 100))
    assert left[10] == left[1]


@pytest.mark.timeout(60)
def test_selector_skip_with_a_huge_count_starts_at_once_and_stops_at_the_time_limit(
    run_tiny: Run,
) -> None:
    # The skipped messages used to be counted by walking every index before the run
    # began, where the time limit cannot stop it: hours for a count like this one.
    doc, _ = run_tiny("selector-skip", messages=10**15, time_limit=0.5)
    run = _only_msgcask(doc)
    assert run["status"] == "incomplete"
    assert run["counts"]["skipped"] == 10**15 // 500
    assert 0 < run["counts"]["put"] < 10**15


@pytest.mark.parametrize(("workload", "period"), [("dlq-heavy", 1000), ("selector-skip", 500)])
def test_a_run_shorter_than_the_default_pin_period_notes_that_it_pins_nothing(
    run_tiny: Run, workload: str, period: int
) -> None:
    # An explicit --pin-every past -n is refused; the default one is taken (tiny
    # runs use it), but the run must not pass for one that measured pinning.
    for n, pinned in ((period - 1, 0), (period, 1)):
        doc, _ = run_tiny(workload, peers=[], messages=n)
        run = _only_msgcask(doc)
        assert run["status"] == "ok", run["errors"] + run["notes"]
        assert run["counts"]["acked"] == n - pinned
        noted = [note for note in run["notes"] if "pin" in note]
        if pinned:
            assert noted == []
            continue
        assert noted == [
            f"{n:,} messages are fewer than the default pin period ({period:,}): no "
            "message was pinned, so the disk figures say nothing about pinned messages; "
            f"pass --pin-every 2 to {n:,} to pin some"
        ]
        assert f"msgcask[compaction on]: note: {noted[0]}" in summary(doc)


@pytest.mark.parametrize(("workload", "period"), [("dlq-heavy", 1000), ("selector-skip", 500)])
def test_a_run_of_one_message_notes_it_pins_nothing_and_what_pins_some(
    run_tiny: Run, workload: str, period: int
) -> None:
    # One message: --pin-every cannot be taken (2 at least, -n at most), and two
    # messages alone keep the default period: the note names both.
    doc, _ = run_tiny(workload, peers=[], messages=1)
    assert _only_msgcask(doc)["notes"] == [
        f"1 message is fewer than the default pin period ({period:,}): no message was "
        "pinned, so the disk figures say nothing about pinned messages; run 2 messages "
        "or more with --pin-every 2 to pin some"
    ]
    # Doing what it says pins one.
    doc, _ = run_tiny(workload, peers=[], messages=2, pin_every=2)
    run = _only_msgcask(doc)
    assert run["status"] == "ok", run["errors"] + run["notes"]
    assert run["counts"]["acked"] == 1
    assert [note for note in run["notes"] if "pin" in note] == []


def test_selector_skip_counts_one_in_p_as_skipped(run_tiny: Run) -> None:
    for n, period in ((1499, 500), (1000, 500), (7, 2)):
        doc, _ = run_tiny("selector-skip", messages=n, pin_every=period)
        run = _only_msgcask(doc)
        expected = sum(1 for i in range(n) if i % period == period - 1)
        assert run["counts"]["skipped"] == expected
        assert run["counts"]["acked"] == n - expected


@pytest.mark.parametrize(
    ("signum", "status", "says"),
    [
        (signal.SIGINT, 1, "Aborted!"),
        (signal.SIGTERM, 143, "Terminated: the run's stores are removed and no result written"),
    ],
    ids=["Ctrl-C", "SIGTERM"],
)
def test_an_interrupt_stops_the_run_at_once_and_leaves_no_store_nor_result(
    tmp_path: Path, signum: signal.Signals, status: int, says: str
) -> None:
    # SIGINT raised KeyboardInterrupt in the main thread, but the producer and consumer
    # threads went on until they had put and taken every message, here about forever.
    # SIGTERM (kill PID, a CI job's timeout) ended the process where it was, leaving
    # the run's store in --workdir.
    out, work = tmp_path / "out", tmp_path / "work"
    work.mkdir()
    args = ["steady", "-n", str(10**9), "--peers", "none", "--no-progress", "--no-reopen"]
    exited, output = _interrupted(
        ["bench", *args, "--out", str(out), "--workdir", str(work)], signum, work, tmp_path
    )
    said = f"exit {exited}\n{output}"  # for any failure below
    assert exited == status, said
    assert says in said
    assert "Traceback" not in said
    assert not out.exists(), said  # no result, not even a part of one, nor its directory
    assert list(work.rglob("*")) == [], said  # the run's stores are gone


def test_an_interrupt_of_the_main_thread_stops_the_workers_before_it_goes_on() -> None:
    # KeyboardInterrupt left run_threads at once, the workers still running: they went
    # on putting into the stores that the runner was removing.
    ctx = SimpleNamespace(stop=threading.Event(), fail=None)
    returned = threading.Event()
    returned_by_then: list[bool] = []

    def worker() -> None:
        ctx.stop.wait(60)  # bounded: a worker never stopped must not hold pytest up
        returned.set()

    def interrupter() -> None:
        time.sleep(0.05)  # the main thread is waiting for the workers by then
        # As Ctrl-C does: a real signal, which wakes the main thread from its wait.
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    def run() -> None:
        try:
            definitions.run_threads(ctx, [("worker", worker), ("interrupter", interrupter)])
        finally:
            returned_by_then.append(returned.is_set())

    try:
        with pytest.raises(KeyboardInterrupt):
            run()
        assert ctx.stop.is_set()
        assert returned_by_then == [True]
    finally:
        ctx.stop.set()  # a worker left running would keep pytest from exiting


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_an_interrupted_demo_without_out_leaves_no_temporary_directory(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # Without --out the demo writes into a temporary directory it makes first; an
    # interrupt before the result was written left that directory behind, empty.
    temp = tmp_path / "tmp"
    temp.mkdir()
    args = ["demo", "-n", str(10**9), "--peers", "none", "--no-progress"]
    status, said = _interrupted(args, signum, temp, tmp_path, {"TMPDIR": str(temp)})
    assert status in (1, 143), said
    assert list(temp.iterdir()) == [], said


def _interrupted(
    args: list[str],
    signum: signal.Signals,
    stores: Path,
    tmp_path: Path,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``msgcask ARGS``, send it ``signum`` mid-workload (once puts have filled a
    few data files under ``stores``: their names count up, and compaction deletes
    the drained ones), and return its exit status and output."""
    output = tmp_path / "output"
    with open(output, "wb") as out:  # a file, not a pipe: nothing blocks the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "msgcask.cli.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            # A child of a shell's background job starts with SIGINT ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        while max((int(p.stem) for p in stores.rglob("*.log")), default=0) < 3:
            assert proc.poll() is None, output.read_text()
            time.sleep(0.05)
        proc.send_signal(signum)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, output.read_text()
