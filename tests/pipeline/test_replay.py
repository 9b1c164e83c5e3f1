"""Replays of a recorded workload: faithful to the recording, the same every
time, and honest about what they could not replay."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import msgcask
from msgcask.pipeline.replay import Setting, replay, whole_journal

SMALL = 2**16
RECORDING = {"max_file_size": SMALL, "compaction_interval": None, "keep_data_files": True}


def record(path: Path, messages: int) -> int:
    """dlq-heavy with redeliveries and priorities, kept whole; returns the
    recording's live bytes (the index's count, after reopen)."""
    with msgcask.open(path, **RECORDING) as store:
        orders = store.queue("orders", max_deliveries=2)
        for i in range(messages):
            orders.put(b"o" * (100 + i % 400), headers={"n": str(i)}, priority=i % 3)
            message = orders.get(block=False)
            if i % 50 == 7:
                orders.nack(message)  # count 1: back in the queue
                orders.nack(orders.get(block=False))  # count 2: dead-lettered
            elif i % 40 == 3:
                orders.nack(message)  # left in the queue with a delivery count
            else:
                orders.ack(message)
    with msgcask.open(path, **RECORDING) as store:
        return store.stats().live_bytes


def test_a_replay_ends_with_the_recordings_live_data(tmp_path: Path, scaled: Any) -> None:
    live = record(tmp_path / "rec", scaled(1500))
    result = replay(str(tmp_path / "rec"), Setting(0.5, SMALL), pass_every=500)
    assert result.final_live_bytes == live > 0
    assert (result.gets_out_of_order, result.acks_not_replayed) == (0, 0)
    assert result.passes >= 3 * scaled(1500) // 500 - 1  # one per pass_every records, and a last
    assert result.final_data_bytes < result.max_data_bytes  # passes brought disk down
    assert 1.0 <= result.write_amplification < 2.0


def test_the_same_setting_gives_the_same_figures(tmp_path: Path) -> None:
    record(tmp_path / "rec", 800)
    runs = [replay(str(tmp_path / "rec"), Setting(0.6, SMALL), pass_every=300) for _ in range(2)]
    first, second = (r.as_dict() for r in runs)
    first.pop("seconds"), second.pop("seconds")
    assert first == second


def test_the_wall_clock_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction weighs files by age: a replay dates them in records, so a
    slow or jumpy wall clock (a busy machine) cannot change which it rewrites."""
    import random
    import time

    with msgcask.open(tmp_path / "rec", **RECORDING) as store:
        queue = store.queue("q")
        for i in range(3000):
            queue.put(bytes(1000))
            message = queue.get(block=False)
            if i % (2 + (i // 64) % 5):  # files a half to a sixth live: victims to choose from
                queue.ack(message)
    setting = Setting(0.7, SMALL)
    steady = replay(str(tmp_path / "rec"), setting, pass_every=2000).as_dict()
    wall = time.time
    jitter = random.Random(7)
    monkeypatch.setattr(time, "time", lambda: wall() + jitter.uniform(0, 1000))
    jumpy = replay(str(tmp_path / "rec"), setting, pass_every=2000).as_dict()
    steady.pop("seconds"), jumpy.pop("seconds")
    assert steady == jumpy
    assert steady["files_rewritten"] > 5


def test_settings_change_the_figures(tmp_path: Path) -> None:
    record(tmp_path / "rec", 1500)
    small = replay(str(tmp_path / "rec"), Setting(0.5, SMALL), pass_every=500)
    big = replay(str(tmp_path / "rec"), Setting(0.5, 4 * SMALL), pass_every=500)
    assert small.final_live_bytes == big.final_live_bytes
    assert small.max_data_bytes != big.max_data_bytes


def record_what_cannot_be_replayed(path: Path) -> None:
    """A consumer with a selector skips messages (10 gets out of order), and a
    purge acks messages never delivered (20 acks): neither is in the journal as such."""
    with msgcask.open(path, **RECORDING) as store:
        queue = store.queue("q")
        for i in range(30):
            queue.put(b"m", headers={"kind": "odd" if i % 2 else "even"})
        for _ in range(10):
            queue.ack(queue.get(block=False, selector=lambda h: h["kind"] == "odd"))
        assert store.queue("q").purge() == 20


def test_what_cannot_be_replayed_is_counted(tmp_path: Path) -> None:
    record_what_cannot_be_replayed(tmp_path / "rec")
    result = replay(str(tmp_path / "rec"), Setting(0.5, SMALL))
    # The replay's plain gets take messages 1, 2, 3, ... where the recording took 2, 4, 6, ...
    assert result.gets_out_of_order == 10
    assert result.acks_not_replayed == 20


@pytest.mark.parametrize("gap", ["a deleted file", "a compacted file"])
def test_a_recording_that_is_not_a_whole_journal_is_refused(tmp_path: Path, gap: str) -> None:
    path = tmp_path / "rec"
    record(path, 600)
    if gap == "a deleted file":
        (path / "0000000002.log").unlink()
        match = "data file 2 is missing"
    else:
        shutil.copytree(path, tmp_path / "copy")
        with msgcask.open(tmp_path / "copy", max_file_size=SMALL, compaction_interval=None) as s:
            s.compact(threshold=1.0)
        path = tmp_path / "copy"
        match = "is compacted"
    with pytest.raises(msgcask.Error, match=f"not a whole journal .*{match}.*keep_data_files=True"):
        whole_journal(str(path))
    with pytest.raises(msgcask.Error, match="not a whole journal"):
        replay(str(path), Setting(0.5, SMALL))
    with pytest.raises(ValueError, match="pass_every"):
        replay(str(tmp_path / "rec"), Setting(0.5, SMALL), pass_every=0)


def test_a_file_size_too_small_for_a_recorded_message_is_refused(tmp_path: Path) -> None:
    from msgcask.pipeline.sweep import check_recording

    with msgcask.open(
        tmp_path, max_file_size=2**20, compaction_interval=None, keep_data_files=True
    ) as s:
        s.queue("q").put(bytes(200_000))
    with pytest.raises(ValueError, match=r"cannot hold a recorded message.*at least 200"):
        replay(str(tmp_path), Setting(0.5, SMALL))
    with pytest.raises(ValueError, match="cannot hold the recording's largest message"):
        check_recording(str(tmp_path), [Setting(0.5, 2**20), Setting(0.5, SMALL)])
    check_recording(str(tmp_path), [Setting(0.5, 2**20)])  # fits: no error


def test_damaged_records_are_counted(tmp_path: Path, data_files: Any) -> None:
    record(tmp_path, 600)
    victim = data_files(tmp_path)[1]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))
    result = replay(str(tmp_path), Setting(0.5, SMALL), pass_every=300)
    assert result.damaged_records == 1


def test_the_inspection_commands_open_a_store_that_deletes_nothing(tmp_path: Path) -> None:
    from msgcask.cli.main import _open

    record(tmp_path, 100)
    with _open(str(tmp_path)) as store:
        assert store.options.keep_data_files
    with _open(str(tmp_path), look_only=False) as store:  # compact's
        assert not store.options.keep_data_files


def test_a_pass_starts_early_when_one_is_due_as_in_the_store(tmp_path: Path) -> None:
    """A store's background loop starts its scheduled compaction before the
    interval once the files a pass could rewrite hold a data file's worth of dead
    bytes (``due``); a replay whose interval is never reached does the same,
    with background passes, so disk use stays near what that store keeps."""
    record(tmp_path / "rec", 3000)
    result = replay(str(tmp_path / "rec"), Setting(0.5, SMALL), pass_every=10**9)
    recorded = sum(f.size for f in whole_journal(str(tmp_path / "rec")))
    assert result.passes > 3
    assert result.max_data_bytes < recorded / 3


def test_sweep_arguments_of_the_wrong_kind_are_type_errors_saying_what_to_pass(
    tmp_path: Path,
) -> None:
    from msgcask.pipeline.sweep import settings

    for thresholds, file_sizes, error in [
        (0.5, [SMALL], "thresholds is a list of compaction_threshold values, not float"),
        (None, [SMALL], "thresholds is a list of compaction_threshold values, not NoneType"),
        ("0.5", [SMALL], "thresholds is a list of compaction_threshold values, not str"),
        ([0.5], SMALL, r"file_sizes is a list of max_file_size values \(bytes\), not int"),
    ]:
        with pytest.raises(TypeError, match=error):
            settings(thresholds, file_sizes)  # type: ignore[arg-type]
    assert settings((t for t in [1, 0.5]), (SMALL,)) == [Setting(0.5, SMALL), Setting(1.0, SMALL)]
    record(tmp_path, 20)
    with pytest.raises(TypeError, match=r"the recording is a path \(a str or a pathlib.Path\)"):
        replay(5, Setting(0.5, SMALL))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"setting is a Setting\(compaction_threshold, max_file"):
        replay(str(tmp_path), (0.5, SMALL))  # type: ignore[arg-type]
    assert replay(tmp_path, Setting(0.5, SMALL)).records > 0


def test_a_replay_writes_nothing_into_the_recording(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    record(rec, 20)
    names = sorted(p.name for p in rec.iterdir())
    for inside in (rec, rec / "sub"):
        inside.mkdir(exist_ok=True)
        for named in (rec, rec.as_uri()):  # a file: URI names the same recording
            with pytest.raises(ValueError, match=r"inside the recording .* give a directory out"):
                replay(named, Setting(0.5, SMALL), workdir=str(inside))
    (rec / "sub").rmdir()
    assert sorted(p.name for p in rec.iterdir()) == names
    with pytest.raises(ValueError, match="is not a directory: give an existing directory"):
        replay(rec, Setting(0.5, SMALL), workdir=str(tmp_path / "missing"))
    assert replay(rec, Setting(0.5, SMALL), workdir=str(tmp_path)).records > 0
