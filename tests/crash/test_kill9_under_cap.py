"""kill -9 while producers, a consumer and background compaction share a tight
``max_store_size`` (docs/tuning.md, ``max_store_size``; docs/design.md, space pressure).

A writer process (capped_writer.py) runs three producer threads and a consumer
against passes every few milliseconds, with the cap a few data files above the live
data, so that puts meet the copy a pass is writing and wait for that pass
(``Store._wait_for_pass``). The parent SIGKILLs it, every other round at the moment a
put is waiting for a pass (the pass is then writing its copy, swapping it in or
deleting its victims), else after a random delay, and reopens the store, which the
next round's writer keeps using. After each kill it checks against everything the
writers reported: no put that returned is lost unless its ack started, no ack that
returned is undone, nothing is duplicated, a refused put wrote nothing, the data
files stayed under the cap (but for consumption's marks), and the store and
``msgcask check`` find no problem.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

import msgcask
from child_process import child_process
from draining import each_available
from msgcask.cli.main import main as cli_main
from msgcask.store import codec
from msgcask.store import format as fmt

WRITER = Path(__file__).with_name("capped_writer.py")
sys.path.insert(0, str(WRITER.parent))
from capped_writer import (  # noqa: E402
    BACKLOG,
    DLQ,
    MAX_FILE_SIZE,
    MAX_STORE_SIZE,
    PINS,
    PRODUCERS,
    body_for,
    token_of,
)

ROUNDS = 4
QUEUES = ("work", DLQ)
# ACK and DELIVER records are written past the cap, so that consuming never fails
# (docs/tuning.md, max_store_size): puts stop at the cap, and the consumer may then
# still deliver and ack each message live, once (the backlog, the pins, one put in
# flight per producer and the message being handled). An open after a crash rolls the
# write head over into a new data file, whose header is not checked against the cap.
MARKS_PAST_THE_CAP = (BACKLOG + PINS + PRODUCERS + 2) * (
    codec.ACK_RECORD_SIZE + len(codec.encode_deliver(1, 1))
) + fmt.FILE_HEADER_SIZE


@dataclass
class Reports:
    """What every writer so far said it did; an operation announced but not
    reported returned may or may not have happened."""

    announced: set[str] = field(default_factory=set)  # tokens whose put started
    put: dict[str, int] = field(default_factory=dict)  # token -> id, the put returned
    refused: set[str] = field(default_factory=set)  # the put raised StoreFullError
    ack_started: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)  # the ack returned
    nack_started: set[int] = field(default_factory=set)  # a dead-letter move started
    waits: int = 0  # puts that waited for a pass (this round, see ``add``)

    def add(self, text: str) -> None:
        self.waits = 0
        # A killed writer may leave a half-written last line; ignoring it only loses facts.
        for line in text.split("\n")[:-1]:
            kind, _, rest = line.partition(" ")
            if kind == "p":
                self.announced.add(rest)
            elif kind == "P":
                tok, msg_id = rest.split()
                self.put[tok] = int(msg_id)
            elif kind == "F" and not rest.startswith("n "):
                self.refused.add(rest)
            elif kind == "a":
                self.ack_started.add(int(rest))
            elif kind == "A":
                self.acked.add(int(rest))
            elif kind == "n":
                self.nack_started.add(int(rest))
            elif kind == "w":
                self.waits += 1


def waiting_for_a_pass(out: bytes) -> bool:
    """Whether a put is waiting for a pass now: it said it starts, not that it ended."""
    return out.count(b"\nw\n") > out.count(b"\nW\n")


def check_under_the_cap_now(path: Path) -> None:
    """Called whenever the parent polls the writer's output: the cap holds at every
    moment, not only at the kill."""
    names = [n for n in _listdir(path) if n.endswith((".log", ".tmp"))]
    # Skipped while a pass writes its copy: a listing taken while the copy is renamed
    # from .tmp to .log may name it twice.
    if any(n.endswith(".tmp") for n in names):
        return
    total = 0
    for name in names:
        with contextlib.suppress(FileNotFoundError):  # a victim deleted meanwhile
            total += (path / name).stat().st_size
    assert total <= MAX_STORE_SIZE + MARKS_PAST_THE_CAP, (
        f"while the writer ran, the data files took {total} bytes, "
        f"max_store_size is {MAX_STORE_SIZE}: {sorted(names)}"
    )


def _listdir(path: Path) -> list[str]:
    try:
        return [p.name for p in path.iterdir()]
    except FileNotFoundError:  # the writer has not created the store yet
        return []


def run_and_kill(path: Path, out_path: Path, seed: int, delay: float | None) -> str:
    """Run a writer on the store, watching its data files; SIGKILL it ``delay``
    seconds after it started, or (``delay`` None) as soon as a put waits for a pass.
    Return its report."""
    cmd = [sys.executable, str(WRITER), str(path), str(seed)]
    with child_process(cmd, out_path) as writer:
        writer.wait_for(lambda out: out.startswith(b"R\n"), "its start")
        kill_at = time.monotonic() + (delay or 0)

        def time_to_kill(out: bytes) -> bool:
            check_under_the_cap_now(path)
            return time.monotonic() >= kill_at if delay is not None else waiting_for_a_pass(out)

        writer.wait_for(time_to_kill, "a put waiting for a pass", poll=0.0005)
        writer.assert_running("before the kill")
        assert writer.kill9()
    return out_path.read_text()


def data_bytes_on_disk(path: Path) -> int:
    # Nothing is preallocated under a cap; a copy being written (.tmp) counts as taken.
    return sum(p.stat().st_size for p in path.iterdir() if p.suffix in (".log", ".tmp"))


def check_messages(store: msgcask.Store, reports: Reports) -> None:
    present: dict[int, str] = {}  # the id the put returned -> queue
    ids: set[int] = set()
    toks: Counter[str] = Counter()
    assert set(store.queues()) <= set(QUEUES), f"unexpected queues: {store.queues()}"
    for name in store.queues():
        for m in store.queue(name).browse():
            tok = token_of(bytes(m.body))
            assert bytes(m.body) == body_for(tok), f"message {m.id} has a damaged body"
            assert m.headers["tok"] == tok
            assert tok in reports.announced, f"message {m.id} ({tok}) was never put"
            assert tok not in reports.refused, f"{tok} was refused, yet stored"
            assert m.id not in ids, f"id {m.id} is stored twice"
            ids.add(m.id)
            original = int(m.headers.get("x-original-id", m.id))
            assert original not in present, f"message {original} is both moved and not"
            present[original] = name
            toks[tok] += 1
            if tok in reports.put:
                assert reports.put[tok] == original, f"{tok} came back with another id"
            if name == DLQ:
                assert original in reports.nack_started, f"{original} dead-lettered unasked"
    duplicated = [t for t, n in toks.items() if n > 1]
    assert not duplicated, f"messages stored twice: {duplicated[:10]}"
    lost = sorted(
        i for i in reports.put.values() if i not in present and i not in reports.ack_started
    )
    assert not lost, f"{len(lost)} puts that returned were lost, e.g. {lost[:10]}"
    resurrected = sorted(reports.acked & present.keys())
    assert not resurrected, f"acks that returned were undone: {resurrected[:10]}"


def check_store(
    path: Path,
    reports: Reports,
    verify: Callable[[msgcask.Store], None],
    unexpected_entries: Callable[[Path], list[str]],
) -> int:
    """Reopen the killed writer's store and check it; return its live messages."""
    with msgcask.open(
        path,
        max_file_size=MAX_FILE_SIZE,
        max_store_size=MAX_STORE_SIZE,
        compaction_interval=None,
    ) as store:
        assert unexpected_entries(path) == [], "stray files after reopening a killed store"
        known = {f.file_id for f in store.stats().files}
        on_disk = {int(p.name[:10]) for p in path.glob("*.log")}
        assert on_disk == known, f"files not accounted by the store: {sorted(on_disk ^ known)}"
        check_messages(store, reports)
        assert store.verify() == []
        verify(store)
        assert store.stats().data_bytes <= MAX_STORE_SIZE + MARKS_PAST_THE_CAP
        live = store.stats().live_messages
    assert data_bytes_on_disk(path) <= MAX_STORE_SIZE + MARKS_PAST_THE_CAP
    checked = CliRunner().invoke(cli_main, ["check", "--index", str(path)])
    assert checked.exit_code == 0, checked.output
    assert f"{live} live message" in checked.output, checked.output
    return live


@pytest.mark.crash
@pytest.mark.slow
def test_kill9_with_puts_waiting_for_a_passs_copy_under_the_cap(
    store_path: Path,
    tmp_path: Path,
    scaled: Callable[[int], int],
    verify: Callable[[msgcask.Store], None],
    unexpected_entries: Callable[[Path], list[str]],
) -> None:
    rng = random.Random(ROUNDS)
    reports = Reports()
    waits = 0
    for i in range(scaled(ROUNDS)):
        seed = rng.randrange(10**6) * 1000 + i
        # Every other kill is aimed at a put waiting for a pass.
        delay = None if i % 2 == 0 else rng.uniform(0.2, 1.5)
        try:
            reports.add(run_and_kill(store_path, tmp_path / f"writer-{i}.out", seed, delay))
            on_disk = data_bytes_on_disk(store_path)
            assert on_disk <= MAX_STORE_SIZE + MARKS_PAST_THE_CAP, (
                f"the data files took {on_disk} bytes, max_store_size is {MAX_STORE_SIZE}"
            )
            check_store(store_path, reports, verify, unexpected_entries)
        except AssertionError as e:  # the message must say which kill broke it
            raise AssertionError(f"kill #{i} (seed {seed}): {e}") from e
        waits += reports.waits
    refused = len(reports.refused)
    print(f"{waits} puts waited for a pass; {refused} of {len(reports.announced)} refused")
    assert waits, "no put waited for a pass: the path under test never ran"
    # The live data stays a few files under the cap: refusals are rare.
    assert refused * 100 <= len(reports.announced), f"{refused} puts refused"
    assert len(reports.put) > 100, "the writers did little before being killed"

    # The store stays usable under its cap: whatever is left drains.
    with msgcask.open(
        store_path, max_file_size=MAX_FILE_SIZE, max_store_size=MAX_STORE_SIZE
    ) as store:
        for name in store.queues():
            q = store.queue(name)
            for m in each_available(q):
                q.ack(m)
        assert store.stats().live_messages == 0
        verify(store)
