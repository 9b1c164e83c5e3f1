"""Compaction next to damaged data files.

A data file with a damaged stretch is never rewritten (what the damage hides -- a live
message, a needed ACK -- could not be carried forward), so it stays. That must cost only
that one file: its intact live messages stay readable, the damaged one is quarantined,
and the other files are compacted as usual, whatever the budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import msgcask
from msgcask.check import scan_files
from msgcask.cli.main import main
from msgcask.store import codec
from msgcask.store import format as fmt

MFS = 64 * 1024


def _fill(store: msgcask.Store, files: int, keep_in_first: int) -> list[int]:
    """``files`` sealed files of 60 messages; the first keeps ``keep_in_first`` live
    messages, the others 6 each. Returns the live ids."""
    q = store.queue("q")
    kept: list[int] = []
    for f in range(files):
        ids = [q.put(b"%05d" % i * 200) for i in range(60)]
        keep = set(ids[:: 60 // (keep_in_first if f == 0 else 6)])
        for m in [q.get(block=False) for _ in ids]:
            if m.id not in keep:
                q.ack(m)  # the kept ones stay delivered, out of the next round's gets
        kept += sorted(keep)
    return kept


def _flip_byte_of(path: Path, msg_id: int) -> int:
    """Flip a body byte of ``msg_id``'s PUT record in the data file that holds it;
    return that file's id."""
    for p in sorted(path.glob("*.log")):
        buf = bytearray(p.read_bytes())
        for item in codec.scan(bytes(buf), fmt.FILE_HEADER_SIZE):
            if not isinstance(item, codec.Record) or item.rtype != fmt.TYPE_PUT:
                continue
            if fmt.PUT_FIXED.unpack_from(buf, item.payload_start)[0] == msg_id:
                buf[item.end - 10] ^= 0xFF
                p.write_bytes(bytes(buf))
                return int(p.name[:10])
    raise AssertionError(f"no PUT record of {msg_id}")


def _open(path: Path, **options: object) -> msgcask.Store:
    return msgcask.open(path, max_file_size=MFS, compaction_interval=None, **options)


def test_damaged_file_is_kept_and_its_intact_messages_stay(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with _open(path) as store:
        kept = _fill(store, files=3, keep_in_first=6)
    damaged_id = kept[1]
    damaged_file = _flip_byte_of(path, damaged_id)
    with _open(path) as store:
        store.compact()
        store.compact()
        files = {f.file_id for f in store.stats().files}
        assert damaged_file in files, "a file with damage was rewritten or deleted"
        live = [m.id for m in store.queue("q").browse()]
        assert set(live) == set(kept) - {damaged_id}
        assert store._message_state(damaged_id) == "quarantined"
        assert any(c.file_id == damaged_file for c in store.stats().corruptions)
        assert store.verify() == []


def test_damaged_file_does_not_stall_compaction_of_the_other_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The damaged file is the emptiest, so the policy ranks it first every pass; with a
    # budget below its copy cost it is the pass's only victim, and the rewrite skips it.
    # If nothing else may run, the other sparse files are never compacted.
    path = tmp_path / "store"
    with _open(path) as store:
        kept = _fill(store, files=4, keep_in_first=3)
    damaged_file = _flip_byte_of(path, kept[0])
    with _open(path, compaction_budget=2048) as store:
        others = [f.file_id for f in store.stats().files if not f.active]
        others.remove(damaged_file)
        assert len(others) >= 2
        with caplog.at_level("WARNING", logger="msgcask"):
            for _ in range(6):
                store.compact()
        # Said once: later passes no longer pick it.
        assert [r.getMessage() for r in caplog.records] == [
            f"msgcask: data file {damaged_file} has damaged or unreadable records; not compacted"
        ]
        # The pass's finding is a corruption report too, once (not one per pass), where
        # the check of the file puts the damage.
        [stretch] = [p for p in scan_files(str(path)).problems if not p.startswith("index")]
        [report] = store.stats().corruptions
        assert (report.file_id, report.action) == (damaged_file, "kept")
        name = f"{path}/{damaged_file:010d}.log"
        said = f"{report.length} bytes: {report.reason}"
        assert stretch == f"{name}: damage at offset {report.offset}, {said}"
        assert str(report) == (
            f"{name}: {report.reason} at offset {report.offset}, {report.length} bytes kept"
        )
        left = {f.file_id for f in store.stats().files}
        assert not left & set(others), (
            f"sparse files never compacted next to damaged file {damaged_file}: "
            f"{[(f.file_id, f.size, f.kept_by) for f in store.stats().files]}"
        )
        assert store.verify() == []


def test_a_sealed_file_ending_in_zero_bytes_is_compacted_like_any_other(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Zero bytes at the end of a sealed file are space allocated ahead of writes
    # that its seal did not give back (recovery leaves them, unreported): not
    # damage, so the file is rewritten, and nothing is reported or logged.
    path = tmp_path / "store"
    with _open(path) as store:
        # Messages that stay delivered: their DELIVER records are needed,
        # so a pass reads the files rather than finding their records by id.
        kept = _fill(store, files=3, keep_in_first=6)
        first = min(f.file_id for f in store.stats().files)
    with open(path / f"{first:010d}.log", "ab") as f:
        f.write(bytes(4096))
    with _open(path) as store, caplog.at_level("WARNING", logger="msgcask"):
        assert store.stats().files[0].needed_acks > 0
        store.compact()
        assert first not in {f.file_id for f in store.stats().files}
        assert store.stats().corruptions == []
        assert caplog.records == []
        assert sorted(m.id for m in store.queue("q").browse()) == kept
        assert store.verify() == []


@pytest.mark.parametrize("copied", [18, 1])
def test_a_consumed_put_record_hidden_by_damage_keeps_its_file_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, copied: int
) -> None:
    # A compacted file whose messages were all consumed since: deleting it needs
    # each consumed PUT record found (to release the ACKs cancelling them). One
    # is damaged, so the file stays; pass after pass finds it so, and says it once.
    path = tmp_path / "store"
    with _open(path) as store:
        kept = _fill(store, files=3, keep_in_first=6)
        q = store.queue("q")
        for msg_id in kept[copied:]:
            q.ack(msg_id)
        store.compact()
        [compacted] = [f.file_id for f in store.stats().files if not f.active]
        for msg_id in kept[:copied]:
            q.ack(msg_id)
    assert _flip_byte_of(path, kept[0]) == compacted
    records = f"{copied} consumed PUT record" + ("s" if copied > 1 else "")
    hides = f"damage hides 1 of its {records}"
    with _open(path) as store, caplog.at_level("ERROR", logger="msgcask"):
        for _ in range(3):
            store.compact()
        # Its counts say nothing keeps it; stats() and why_kept() say what does.
        [stats] = [f for f in store.stats().files if f.file_id == compacted]
        assert (stats.live_messages, stats.needed_acks) == (0, 0)
        assert stats.kept_by == f"{hides}: run msgcask check"
        assert stats.damage == hides
        report = store.why_kept(compacted)
        assert not report.reclaimable
        assert report.damage == hides
        # Every pass reads the damage again; it is reported once.
        [corruption] = store.stats().corruptions
        assert (corruption.file_id, corruption.action) == (compacted, "kept")
    said = f"msgcask: file {compacted}: found {copied - 1} of its {records} (damaged?); kept"
    assert [r.getMessage() for r in caplog.records] == [said]
    # The commands open the store without compacting: they read the file themselves.
    [line] = [x for x in _cli(["stats", str(path)]).splitlines() if x.split()[0] == str(compacted)]
    assert line.split()[1:5] == ["compacted", str(stats.size), "0", "0"]
    assert line.endswith(f"  {hides}: run msgcask check")
    assert _cli(["why-kept", str(path), str(compacted)]) == (
        f"kept: {hides}, and deleting the file needs them all; "
        f"`msgcask check {path}` shows where the damage is\n"
    )


def _cli(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.output
