"""kill -9 at every named step of a compaction (design brief, guarantee 2).

For each crash point a real child process (compactor_crash_child.py) builds a store of
small files full of pins (messages a selector skips, dead-lettered messages, deliveries
never acked, acks in later files than their messages), prints what it knows, and is
SIGKILLed by the store itself at exactly that step. The parent then reopens a copy of the
store twice, once with the index as the crash left it (replay) and once without it
(rebuild from the data files and the MANIFEST rule), and checks:

* every live message is there exactly once, with its body, queue and delivery count;
* no acked message is back;
* no stray file: only data files the index knows, ``index/`` and ``LOCK``;
* ``verify()`` finds nothing, and a compaction after the reopen brings the disk down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

import msgcask
from draining import churn, each_available
from msgcask.check import scan_files
from msgcask.cli.main import main as cli_main
from msgcask.store import codec
from msgcask.store import format as fmt

HERE = Path(__file__).parent
CHILD = HERE / "compactor_crash_child.py"
sys.path.insert(0, str(HERE))
from compactor_crash_child import MAX_FILE_SIZE, body_for  # noqa: E402

pytestmark = pytest.mark.crash

ROUNDS = 8  # 800 messages of 1 KiB: ~17 data files of 64 KiB


@dataclass
class Crash:
    """A store left behind by a killed child, and what the child said before dying."""

    path: Path
    point: str
    returncode: int
    stderr: str
    live: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # id -> q, seq, dl
    acked: set[int] = field(default_factory=set)
    maybe_acked: set[int] = field(default_factory=set)  # ack started, never confirmed
    maybe_put: int | None = None  # seq of a put started, never confirmed
    armed: bool = False
    # The drain phase gets each message before acking it: one get may have been cut off
    # from its report, so that message's count may be one more than the child knew.
    gets_unreported: bool = False
    survived: str | None = None
    compacted_files: int = 0  # compacted data files on disk at the moment of death
    temp_files: int = 0


def _run_child(path: Path, point: str, phase: str, rounds: int) -> Crash:
    env = dict(os.environ, MSGCASK_CRASH_AT=point)
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(path), str(rounds), phase],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    crash = Crash(
        path, point, proc.returncode, proc.stderr, gets_unreported=phase in ("drain", "pressure")
    )
    # A half-written last line (the kill can land mid-write) says nothing.
    for line in proc.stdout.split("\n")[:-1]:
        obj = json.loads(line)
        if "state" in obj:
            for msg_id, queue, seq, deliveries in obj["state"]["live"]:
                crash.live[msg_id] = (queue, seq, deliveries)
            crash.acked = set(obj["state"]["acked"])
        elif "armed" in obj:
            crash.armed = True
        elif "acking" in obj:
            crash.maybe_acked.add(obj["acking"])
        elif "acked" in obj:
            crash.maybe_acked.discard(obj["acked"])
            crash.acked.add(obj["acked"])
        elif "putting" in obj:
            crash.maybe_put = obj["putting"]
        elif "put" in obj:
            crash.live[obj["put"]] = ("work", obj["seq"], 0)
            crash.maybe_put = None
        elif "survived" in obj:
            crash.survived = obj["survived"]
    for p in path.iterdir():
        if p.name.endswith(".tmp"):
            crash.temp_files += 1
        elif p.name.endswith(".log") and p.read_bytes()[10:11] == b"\x01":
            crash.compacted_files += 1
    return crash


# point -> (phase that reaches it, what the disk must show at death), and the failure mode
# each run guards against, as the test id.
POINTS = [
    pytest.param(
        "compact.before_output_fsync", "compact", "temp", id="unsynced_copy_is_not_trusted"
    ),
    pytest.param(
        "compact.after_output_fsync",
        "compact",
        "copy",
        id="published_copy_without_swap_duplicates_nothing",
    ),
    pytest.param(
        "compact.before_swap_commit",
        "compact",
        "copy",
        id="uncommitted_swap_duplicates_nothing",
    ),
    pytest.param(
        "compact.after_swap_commit",
        "compact",
        "copy",
        id="committed_swap_with_victims_still_on_disk_duplicates_nothing",
    ),
    pytest.param(
        "reclaim.before_unlink",
        "compact",
        "copy",
        id="retired_victims_not_yet_deleted_resurrect_nothing",
    ),
    pytest.param(
        "reclaim.after_unlink",
        "compact",
        "copy",
        id="deleted_victims_still_in_the_index_lose_nothing",
    ),
    pytest.param(
        "reclaim.before_unlink",
        "drain",
        "any",
        id="whole_file_deletion_cut_before_unlink_resurrects_nothing",
    ),
    pytest.param(
        "reclaim.after_unlink",
        "drain",
        "any",
        id="whole_file_deletion_cut_after_unlink_loses_nothing",
    ),
    pytest.param(
        "compact.before_swap_commit",
        "background",
        "copy",
        id="scheduled_pass_killed_before_swap_duplicates_nothing",
    ),
    pytest.param(
        "reclaim.before_unlink",
        "background",
        "copy",
        id="scheduled_pass_killed_before_unlink_resurrects_nothing",
    ),
    pytest.param(
        "compact.before_output_fsync",
        "pressure",
        "any",
        id="put_making_room_killed_mid_copy_loses_nothing",
    ),
    pytest.param(
        "compact.before_swap_commit",
        "pressure",
        "any",
        id="put_making_room_killed_before_swap_duplicates_nothing",
    ),
    pytest.param(
        "reclaim.after_unlink",
        "pressure",
        "any",
        id="put_making_room_killed_after_unlink_resurrects_nothing",
    ),
    pytest.param(
        "journal.before_seal_fsync",
        "pressure",
        "any",
        id="put_making_room_killed_sealing_the_head_loses_nothing",
    ),
    pytest.param(
        "journal.before_seal_fsync",
        "put",
        "any",
        id="unsealed_journal_file_loses_no_returned_put",
    ),
]


@pytest.fixture(scope="module")
def crashes(
    tmp_path_factory: pytest.TempPathFactory, scaled: Callable[[int], int]
) -> Iterator[Callable[..., Crash]]:
    """Run each crash point's child once; both reopen modes start from copies of it.
    ``rounds``: the size of the store it builds (``scaled(ROUNDS)`` unless given)."""
    cache: dict[tuple[str, str, int], Crash] = {}

    def get(point: str, phase: str, rounds: int | None = None) -> Crash:
        key = (point, phase, scaled(ROUNDS) if rounds is None else rounds)
        if key not in cache:
            path = tmp_path_factory.mktemp("crash") / "store"
            cache[key] = _run_child(path, point, phase, key[2])
        return cache[key]

    yield get


def _open_copy(crash: Crash, dest: Path, *, drop_index: bool) -> msgcask.Store:
    shutil.copytree(crash.path, dest)
    if drop_index:
        shutil.rmtree(dest / "index")
    return msgcask.open(dest, max_file_size=MAX_FILE_SIZE, compaction_interval=None)


def _disk_names(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


def _check_same_messages(store: msgcask.Store, crash: Crash) -> None:
    seen: Counter[int] = Counter()
    for name in store.queues():
        for m in store.queue(name).browse():
            seen[m.id] += 1
            if m.id not in crash.live and m.headers.get("seq") == str(crash.maybe_put):
                # The put cut short by the kill: it may or may not have been written.
                crash.live[m.id] = ("work", int(m.headers["seq"]), 0)
            assert m.id in crash.live, f"message {m.id} in {name!r} was never live: resurrected"
            queue, seq, deliveries = crash.live[m.id]
            assert m.queue == queue, f"message {m.id} moved from {queue!r} to {m.queue!r}"
            assert m.body == body_for(seq), f"message {m.id} has a different body"
            assert m.headers["seq"] == str(seq)
            slack = 1 if crash.gets_unreported else 0
            assert deliveries <= m.deliveries <= deliveries + slack, (
                f"message {m.id}: delivery count {m.deliveries}, was {deliveries}"
            )
    duplicated = sorted(i for i, n in seen.items() if n > 1)
    assert not duplicated, f"messages seen more than once: {duplicated[:10]}"
    lost = sorted(set(crash.live) - crash.acked - crash.maybe_acked - set(seen))
    assert not lost, f"{len(lost)} live messages lost, e.g. {lost[:10]}"
    back = sorted(i for i in crash.acked if store._message_state(i) in ("live", "delivered"))
    assert not back, f"{len(back)} acked messages resurrected, e.g. {back[:10]}"


def _check_no_orphans(store: msgcask.Store, path: Path) -> None:
    names = _disk_names(path)
    stray = sorted(n for n in names if n not in ("index", "LOCK") and not _is_data_file(n))
    assert not stray, f"stray files after reopen: {stray}"
    on_disk = {int(n[:10]) for n in names if _is_data_file(n)}
    indexed = {f.file_id for f in store.stats().files}
    assert on_disk == indexed, (
        f"data files on disk {sorted(on_disk)} != files the index knows {sorted(indexed)}"
    )


def _is_data_file(name: str) -> bool:
    return len(name) == 14 and name.endswith(".log") and name[:10].isdigit()


@pytest.mark.parametrize("drop_index", [False, True], ids=["index_kept", "index_lost"])
@pytest.mark.parametrize(("point", "phase", "disk"), POINTS)
def test_crash_at_compaction_step(
    crashes: Callable[[str, str], Crash],
    tmp_path: Path,
    point: str,
    phase: str,
    disk: str,
    drop_index: bool,
) -> None:
    crash = crashes(point, phase)
    assert crash.survived is None, f"the child never reached {point}: {crash.survived}"
    assert crash.returncode == -signal.SIGKILL, (
        f"child exited with {crash.returncode}, not SIGKILL at {point}:\n{crash.stderr[-3000:]}"
    )
    assert crash.armed, "the child died before arming the crash point"
    assert len(crash.live) > 20 and len(crash.acked) > 500, "the build pinned too little"
    # Where the kill landed, as the disk shows it: the point was the one named.
    if disk == "temp":
        assert crash.temp_files == 1 and crash.compacted_files == 0
    elif disk == "copy":
        assert crash.temp_files == 0 and crash.compacted_files == 1

    path = tmp_path / "store"
    store = _open_copy(crash, path, drop_index=drop_index)
    try:
        if drop_index:
            assert store.recovery.mode == "rebuild"
        else:
            assert store.recovery.mode in ("replay", "clean")
        _check_no_orphans(store, path)
        _check_same_messages(store, crash)
        assert store.verify() == []

        before = store.stats().data_bytes
        _settle(store)
        st = store.stats()
        # Threshold 0.5: each kept sealed file is at least half live; on top of that the
        # write head and the pass's own compacted output.
        assert st.data_bytes <= 2 * st.live_bytes + 3 * MAX_FILE_SIZE, (
            f"{st.data_bytes} data bytes for {st.live_bytes} live after compaction "
            f"(was {before}): {[(f.file_id, f.size, f.kept_by) for f in st.files]}"
        )
        _check_no_orphans(store, path)
        _check_same_messages(store, crash)
        assert store.verify() == []
    finally:
        store.close()

    # And the compacted store reopens to the same state.
    with msgcask.open(path, max_file_size=MAX_FILE_SIZE, compaction_interval=None) as again:
        _check_no_orphans(again, path)
        _check_same_messages(again, crash)
        assert again.verify() == []
        # The crash must leave no trap for later either: a stray copy of a message (say,
        # a compaction output the MANIFEST rule should have dropped) would bring it back
        # once the files the index does know are gone. Consume everything, compact, and
        # rebuild the index from the files: nothing may come back.
        consumed = _drain(again)
        _settle(again)
    _check_nothing_back_after_a_rebuild(path)
    assert set(consumed) <= set(crash.live)


def _manifest(path: Path) -> tuple[int, list[int]]:
    """The compacted file in a store directory and the victims its MANIFEST names."""
    for p in sorted(path.glob("*.log")):
        buf = p.read_bytes()
        if buf[10] != fmt.KIND_COMPACTED:
            continue
        first = next(codec.scan(buf, fmt.FILE_HEADER_SIZE))
        assert isinstance(first, codec.Record) and first.rtype == fmt.TYPE_MANIFEST
        return int(p.name[:10]), codec.decode_manifest(buf, first.payload_start)
    raise AssertionError(f"no compacted file in {path}")


@pytest.mark.parametrize("drop_index", [False, True], ids=["index_kept", "index_lost"])
@pytest.mark.parametrize("unlinked", ["first", "half", "all_but_last", "ack_holders"])
def test_crash_between_two_victim_unlinks_resurrects_nothing(
    crashes: Callable[..., Crash], tmp_path: Path, unlinked: str, drop_index: bool
) -> None:
    # The crash points fire before the first unlink and after the last; a kill between
    # two unlinks leaves a prefix of the victims (deleted in MANIFEST order) gone, and a
    # power cut before the directory fsync that ends them may keep any subset of them
    # ("ack_holders": the victims with ACK records gone, those with only the PUT records
    # they cancel left). The victims left may hold PUT records whose ACKs were in the
    # deleted ones and were not carried (their PUT was a victim too): only the MANIFEST
    # rule (or the retired marks in the index) keeps them from coming back.
    # "ack_holders" needs ACK records in some of the pass's victims, not all: a store of
    # ROUNDS rounds has them; in a bigger one the files' ages pick the victims, and
    # sometimes none of those holds an ACK.
    rounds = ROUNDS if unlinked == "ack_holders" else None
    crash = crashes("reclaim.before_unlink", "compact", rounds)
    assert crash.returncode == -signal.SIGKILL
    staged = tmp_path / "staged"
    shutil.copytree(crash.path, staged)
    _, victims = _manifest(staged)
    assert len(victims) >= 4
    if unlinked == "ack_holders":
        gone = [v for v in victims if _holds_acks(staged / f"{v:010d}.log")]
        assert 0 < len(gone) < len(victims)
    else:
        n = {"first": 1, "half": len(victims) // 2, "all_but_last": len(victims) - 1}[unlinked]
        gone = victims[:n]
    for victim in gone:
        (staged / f"{victim:010d}.log").unlink()
    crash = Crash(staged, crash.point, crash.returncode, crash.stderr, crash.live, crash.acked)
    scanned = scan_files(str(staged))  # what `msgcask check` reads before any reopen
    shown = CliRunner().invoke(cli_main, ["check", str(staged)])
    path = tmp_path / "store"
    with _open_copy(crash, path, drop_index=drop_index) as store:
        _check_no_orphans(store, path)
        _check_same_messages(store, crash)
        assert store.verify() == []
        # check counts what recovery keeps: not the PUT records of victims left behind
        live = {m.id for n in store.queues() for m in store.queue(n).browse()}
        assert scanned.live_ids == live, (
            f"check counts {len(scanned.live_ids)} live messages, the store has {len(live)}"
        )
        assert scanned.problems == []
        assert shown.exit_code == 0, shown.output
        assert f"{len(live)} live message" in shown.output
        for victim in set(victims) - set(gone):  # each one left says it does not count
            line = next(x for x in shown.output.splitlines() if f"{victim:010d}.log:" in x)
            assert "not counted: replaced by compacted file" in line, line
        consumed = _drain(store)
        _settle(store)
    _check_nothing_back_after_a_rebuild(path)
    assert set(consumed) == set(crash.live)


def _holds_acks(path: Path) -> bool:
    buf = path.read_bytes()
    return any(
        isinstance(item, codec.Record) and item.rtype == fmt.TYPE_ACK
        for item in codec.scan(buf, fmt.FILE_HEADER_SIZE)
    )


def _settle(store: msgcask.Store) -> None:
    """Compact until a pass has nothing left to do (one pass writes at most one file)."""
    for _ in range(200):
        r = store.compact()
        if not r.files_rewritten and not r.files_deleted:
            return
    raise AssertionError("compaction never settled")


def _drain(store: msgcask.Store) -> list[int]:
    """Ack every message (redelivered in-flight ones included), then push the write head
    past the files holding those ACKs and compact, so that every file the index knows
    from before can go; return the ids consumed."""
    ids = []
    for name in store.queues():
        q = store.queue(name)
        for m in each_available(q):
            q.ack(m)
            ids.append(m.id)
    churn(store.queue("filler"), 3 * MAX_FILE_SIZE // 1024, b"f" * 1000)
    _settle(store)
    return ids


def _check_nothing_back_after_a_rebuild(path: Path) -> None:
    """Rebuilt from its files, the drained store at ``path`` holds no message and
    verifies."""
    shutil.rmtree(path / "index")
    with msgcask.open(path, max_file_size=MAX_FILE_SIZE, compaction_interval=None) as rebuilt:
        back = sorted(m.id for n in rebuilt.queues() for m in rebuilt.queue(n).browse())
        assert back == [], f"{len(back)} consumed messages came back, e.g. {back[:10]}"
        assert rebuilt.verify() == []
