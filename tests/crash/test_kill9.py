"""kill -9 at a random instant, then reopen (design brief, guarantee 2).

A writer process (crash_writer.py) runs random operations and reports each one on
stdout after it returned. The parent SIGKILLs it after a random delay, reopens the store
and checks it against the report: no returned put is lost, no returned ack is undone,
nothing is duplicated, an in-flight batch or transaction is all-or-nothing, unacked
deliveries come back redelivered, and no stray file is left behind. Each iteration then
drains the store, so the next one starts from an empty store with a long history.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import msgcask
from child_process import child_process
from draining import each_available

WRITER = Path(__file__).with_name("crash_writer.py")
sys.path.insert(0, str(WRITER.parent))
from crash_writer import ALL_QUEUES, body_for, token_of  # noqa: E402

Verify = Callable[[msgcask.Store], None]


@dataclass
class Report:
    """What the writer said it did, split into certain and in-flight."""

    announced: set[str] = field(default_factory=set)  # tokens whose put may have happened
    put: dict[str, int] = field(default_factory=dict)  # token -> id, the put returned
    delivered: set[int] = field(default_factory=set)  # ids with a returned get
    ack_started: set[int] = field(default_factory=set)  # ack may have happened
    acked: set[int] = field(default_factory=set)  # ack returned
    pending: str | None = None  # the announced operation with no completion line
    lines: int = 0


def parse(text: str) -> Report:
    r = Report()
    # A killed writer may leave a half-written last line; ignoring it only loses facts.
    complete = text.split("\n")[:-1]
    for line in complete:
        r.lines += 1
        kind, _, rest = line.partition(" ")
        if kind in {"p", "m", "t", "a", "n", "c"}:
            r.pending = line
        else:
            r.pending = None
        if kind == "p":
            r.announced.add(rest)
        elif kind == "P":
            tok, mid = rest.split()
            r.put[tok] = int(mid)
        elif kind == "m":
            r.announced.update(rest.split(","))
        elif kind in {"M", "T"} and rest:
            for pair in rest.split(","):
                tok, mid = pair.split(":")
                r.put[tok] = int(mid)
        elif kind == "t":
            toks, _, acks = rest.partition("|")
            r.announced.update(t for t in toks.split(",") if t)
            r.ack_started.update(int(a) for a in acks.split(",") if a)
        elif kind == "G":
            r.delivered.add(int(rest.split()[0]))
        elif kind == "a":
            r.ack_started.add(int(rest))
        elif kind == "A":
            r.acked.add(int(rest))
    # Acks inside a transaction returned when its T line was written.
    for i, line in enumerate(complete):
        if line.startswith("t ") and i + 1 < len(complete) and complete[i + 1].startswith("T"):
            acks = line.partition("|")[2]
            r.acked.update(int(a) for a in acks.split(",") if a)
    return r


def run_and_kill(
    path: Path,
    sync: str,
    seed: int,
    max_file_size: int,
    workload: str,
    delay: float,
    kill_inside: str | None = None,
) -> str:
    """Run the writer, SIGKILL it ``delay`` seconds after it started; return its report.

    With ``kill_inside="c"`` the kill then waits (up to 5 s) until the last reported
    line announces that operation, so that it lands while the operation runs.
    """
    out_path = path.parent / f"writer-{seed}.out"
    cmd = [sys.executable, str(WRITER), str(path), sync, str(seed), str(max_file_size), workload]
    with child_process(cmd, out_path) as writer:
        writer.wait_for(lambda out: out.startswith(b"R\n"), "its start")
        time.sleep(delay)
        if kill_inside is not None:
            marker = f"\n{kill_inside}\n".encode()
            until = time.monotonic() + 5
            while not writer.output().endswith(marker) and time.monotonic() < until:
                time.sleep(0.0005)
        writer.assert_running("before the kill")
        assert writer.kill9()
    return out_path.read_text()


def check_after_crash(
    store: msgcask.Store,
    path: Path,
    report: Report,
    unexpected_entries: Callable[[Path], list[str]],
    data_files: Callable[[Path], list[Path]],
) -> None:
    assert unexpected_entries(path) == [], "stray files after reopening a killed store"
    on_disk = {int(p.name[:10]) for p in data_files(path)}
    known = {f.file_id for f in store.stats().files}
    assert on_disk == known, f"files not accounted by the store: {sorted(on_disk ^ known)}"

    present: dict[int, Any] = {}  # by the id the writer knew (a dead letter has a new one)
    ids: set[int] = set()
    toks: Counter[str] = Counter()
    for name in existing_queues(store):
        for m in store.queue(name).browse():
            body = bytes(m.body)
            tok = token_of(body)
            assert m.id not in ids, f"id {m.id} is stored twice"
            ids.add(m.id)
            original = int((m.headers or {}).get("x-original-id", m.id))
            assert original not in present, f"message {original} is both moved and not"
            present[original] = m
            toks[tok] += 1
            assert body == body_for(tok), f"message {m.id} has a damaged body"
            assert tok in report.announced, f"message {m.id} ({tok}) was never put"
            if "tok" in (m.headers or {}):
                assert m.headers["tok"] == tok
            if tok in report.put:
                assert report.put[tok] == original, f"{tok} came back with a different id"
    dup = [t for t, c in toks.items() if c > 1]
    assert not dup, f"messages duplicated after the crash: {dup}"

    lost = [
        (tok, mid)
        for tok, mid in report.put.items()
        if mid not in report.ack_started and mid not in present
    ]
    assert not lost, f"puts that returned were lost: {lost[:10]}"
    resurrected = sorted(report.acked & present.keys())
    assert not resurrected, f"acks that returned were undone: {resurrected[:10]}"

    pending = report.pending or ""
    if pending.startswith(("m ", "t ")):
        toks_part, _, acks_part = pending[2:].partition("|")
        batch = [t for t in toks_part.split(",") if t]
        acks = [int(a) for a in acks_part.split(",") if a]
        here = sum(1 for t in batch if toks[t])
        assert here in (0, len(batch)), f"in-flight batch half applied: {pending}"
        if pending.startswith("t "):
            gone = sum(1 for a in acks if a not in present)
            committed = here == len(batch) and (bool(batch) or gone == len(acks))
            want_gone = len(acks) if committed else 0
            assert gone == want_gone, f"in-flight transaction half applied: {pending}"


def existing_queues(store: msgcask.Store) -> list[str]:
    # Asking for DLQ.q2 before anything was dead-lettered would create it.
    names = set(store.queues())
    assert names <= set(ALL_QUEUES), f"unexpected queues: {sorted(names)}"
    return [n for n in ALL_QUEUES if n in names]


def drain_and_check_redelivery(store: msgcask.Store, report: Report) -> int:
    """Get and ack everything; return the highest id seen (0 if none)."""
    phantom = 0
    highest = 0
    for name in existing_queues(store):
        q = store.queue(name)
        for m in each_available(q):
            if m.id in report.delivered:
                # Its delivery was journaled before get returned.
                assert m.redelivered and m.deliveries >= 2, f"{m.id} lost its delivery count"
            elif m.redelivered:
                phantom += 1
            highest = max(highest, m.id)
            q.ack(m)
    # Only the one operation in flight can have delivered a message unreported.
    assert phantom <= 1, f"{phantom} never-delivered messages came back as redelivered"
    return highest


def crash_loop(
    path: Path,
    sync: str,
    iterations: int,
    workload: str,
    max_file_size: int,
    verify: Verify,
    unexpected_entries: Callable[[Path], list[str]],
    data_files: Callable[[Path], list[Path]],
) -> tuple[int, int]:
    """Kill and check ``iterations`` times; return (report lines, kills inside compact)."""
    rng = random.Random(f"{sync}-{workload}-{iterations}")
    total_lines = 0
    in_compaction = 0
    highest = 0  # every id any earlier iteration saw
    for i in range(iterations):
        seed = rng.randrange(10**6) * 1000 + i
        # In the compaction workload every other kill is aimed at a running compact().
        aim = "c" if workload == "compact" and i % 2 == 0 else None
        delay = rng.uniform(0.05, 0.8)
        text = run_and_kill(path, sync, seed, max_file_size, workload, delay, aim)
        report = parse(text)
        total_lines += report.lines
        in_compaction += report.pending == "c"
        if report.put:
            # Ids are never reused, not even after a crash and a fully drained store.
            first = min(report.put.values())
            assert first > highest, f"kill #{i}: new id {first} not above earlier id {highest}"
        highest = max([highest, *report.put.values(), *report.delivered])
        try:
            store = msgcask.open(path, max_file_size=max_file_size, compaction_interval=None)
        except Exception as e:  # the message must say which iteration broke
            raise AssertionError(f"reopen after kill #{i} (seed {seed}) failed: {e!r}") from e
        try:
            check_after_crash(store, path, report, unexpected_entries, data_files)
            highest = max(highest, drain_and_check_redelivery(store, report))
            verify(store)
        finally:
            store.close()
    return total_lines, in_compaction


KillLoop = Callable[[str, int, str], tuple[int, int]]


@pytest.fixture
def kill_loop(
    store_path: Path,
    verify: Verify,
    unexpected_entries: Callable[[Path], list[str]],
    data_files: Callable[[Path], list[Path]],
) -> KillLoop:
    """``crash_loop(sync, iterations, workload)`` on ``store_path``, 64 KiB data files."""

    def run(sync: str, iterations: int, workload: str) -> tuple[int, int]:
        return crash_loop(
            store_path, sync, iterations, workload, 65536, verify, unexpected_entries, data_files
        )

    return run


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("sync", ["always", "periodic", "never"])
def test_kill9_loses_no_returned_put_and_undoes_no_returned_ack(
    kill_loop: KillLoop, sync: str, scaled: Callable[[int], int]
) -> None:
    lines, _ = kill_loop(sync, scaled(6), "mixed")
    # The writer really worked before being killed (otherwise nothing was tested).
    assert lines > 10


@pytest.mark.crash
@pytest.mark.slow
def test_kill9_during_compaction_leaves_a_consistent_store(
    kill_loop: KillLoop,
    store_path: Path,
    scaled: Callable[[int], int],
    verify: Verify,
    unexpected_entries: Callable[[Path], list[str]],
) -> None:
    lines, in_compaction = kill_loop("periodic", scaled(4), "compact")
    assert lines > 10
    print(f"{in_compaction} kills landed inside compact()")
    # The store still compacts cleanly after all those interrupted passes.
    with msgcask.open(store_path, max_file_size=65536, compaction_interval=None) as store:
        store.compact()
        verify(store)
        assert unexpected_entries(store_path) == []


@pytest.mark.crash
@pytest.mark.slow
def test_kill9_while_background_compaction_runs_beside_the_writer(
    kill_loop: KillLoop, scaled: Callable[[int], int]
) -> None:
    # The scheduler's passes race with puts and acks (compare-and-swap territory).
    lines, _ = kill_loop("never", scaled(4), "background")
    assert lines > 10
