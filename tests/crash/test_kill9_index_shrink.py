"""kill -9 while a pass shrinks the index file (docs/design.md, "The index file shrinks").

A shrink writes a compacted copy of the index into ``index/shrink/`` and renames it over
``index/data.mdb``, while puts that need only the append lock go on in other threads. A
real writer (shrink_writer.py) drains a backlog, keeps a producer thread putting, and is
SIGKILLed by the store itself just before the rename or just after it. The reopened
store must trust whichever index file it finds (replay, no rebuild), leave no copy
behind, and hold every message it held, every put that returned, and no acked message;
a rebuild from the data files must agree.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import msgcask
from child_process import child_process

WRITER = Path(__file__).with_name("shrink_writer.py")
sys.path.insert(0, str(WRITER.parent))
from shrink_writer import BACKLOG_QUEUE, FRESH_QUEUE, body_for  # noqa: E402

BACKLOG = 2000  # drained to one in fifty: the index file is then mostly free pages

Verify = Callable[[msgcask.Store], None]


@dataclass
class Report:
    kept: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)
    index_inode: int = 0
    armed: bool = False
    survived: bool = False
    announced: set[int] = field(default_factory=set)  # producer puts that may have happened
    put: dict[int, int] = field(default_factory=dict)  # id -> n, the put returned


def parse(text: str) -> Report:
    r = Report()
    for line in text.split("\n")[:-1]:  # a half-written last line says nothing
        kind, _, rest = line.partition(" ")
        if kind == "K":
            r.kept = {int(i) for i in rest.split(",") if i}
        elif kind == "A":
            r.acked = {int(i) for i in rest.split(",") if i}
        elif kind == "I":
            r.index_inode = int(rest)
        elif kind == "armed":
            r.armed = True
        elif kind == "survived":
            r.survived = True
        elif kind == "p":
            r.announced.add(int(rest))
        elif kind == "P":
            n, msg_id = rest.split()
            r.put[int(msg_id)] = int(n)
    return r


def run_until_killed(path: Path, point: str, backlog: int, seed: int) -> Report:
    out = path.parent / f"writer-{seed}.out"
    cmd = [sys.executable, str(WRITER), str(path), point, str(backlog), str(seed)]
    with child_process(cmd, out) as writer:
        returncode = writer.proc.wait(timeout=120)
        report = parse(writer.output().decode())
        assert report.armed and not report.survived, (
            f"the pass never reached {point}: {writer.stderr()}"
        )
        assert returncode == -signal.SIGKILL, (
            f"the writer died otherwise ({returncode}): {writer.stderr()}"
        )
    return report


def messages(store: msgcask.Store) -> dict[str, dict[int, bytes]]:
    return {
        name: {m.id: bytes(m.body) for m in store.queue(name).browse()} for name in store.queues()
    }


def check_reopened(store: msgcask.Store, report: Report, verify: Verify) -> None:
    assert store.recovery.mode != "rebuild", (
        f"the index a shrink left was not trusted: {store.recovery.reason}"
    )
    found = messages(store)
    backlog = found.get(BACKLOG_QUEUE, {})
    assert set(backlog) == report.kept, (
        f"backlog: lost {sorted(report.kept - set(backlog))[:10]}, "
        f"acked and back {sorted(set(backlog) & report.acked)[:10]}"
    )
    for m in store.queue(BACKLOG_QUEUE).browse():
        assert m.deliveries == 1, f"{m.id} was delivered once before the kill, not {m.deliveries}"
    fresh = found.get(FRESH_QUEUE, {})
    lost = sorted(set(report.put) - set(fresh))
    assert not lost, f"puts that returned before the kill are gone: {lost[:10]}"
    for msg_id, body in fresh.items():
        n = report.put.get(msg_id)
        if n is None:  # the one put in flight at the kill, which may have happened
            assert body in {body_for(k) for k in report.announced - set(report.put.values())}
        else:
            assert body == body_for(n), f"message {msg_id} has another put's body"
    verify(store)


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("point", ["index.before_shrink_swap", "index.after_shrink_swap"])
def test_kill9_during_an_index_shrink_keeps_every_message_and_no_copy(
    tmp_path: Path,
    point: str,
    scaled: Callable[[int], int],
    verify: Verify,
    unexpected_entries: Callable[[Path], list[str]],
) -> None:
    rng = random.Random(point)
    for round_ in range(scaled(1)):
        path = tmp_path / f"store{round_}"
        report = run_until_killed(path, point, BACKLOG + rng.randrange(BACKLOG), round_)
        index = path / "index"
        copy = index / "shrink" / "data.mdb"
        swapped = (index / "data.mdb").stat().st_ino != report.index_inode
        if point == "index.before_shrink_swap":
            assert copy.exists() and not swapped, "the kill missed the copy, or came later"
        else:
            assert swapped and not copy.exists(), "the kill came before the rename"
        with msgcask.open(path, compaction_interval=None) as store:
            assert unexpected_entries(path) == []
            assert sorted(os.listdir(index)) == ["data.mdb"], "a shrink's copy was left behind"
            check_reopened(store, report, verify)
            before = messages(store)
        shutil.rmtree(index)
        with msgcask.open(path, compaction_interval=None) as rebuilt:
            assert rebuilt.recovery.mode == "rebuild"
            assert messages(rebuilt) == before, f"round {round_}: a rebuild disagrees"
