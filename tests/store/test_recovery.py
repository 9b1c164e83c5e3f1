"""store/recovery.py: what opening a store does with the files and index it finds.

Directory states are built two ways: through the API and then damaged, or by hand with
the codec functions (``write_data_file``), so each test states exactly which bytes are on
disk. Each test is named after the state it recovers from.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xxhash import xxh3_64_intdigest

import msgcask
from abandon import abandon
from disk_files import index_table
from msgcask.check import scan_files
from msgcask.index import keys
from msgcask.index.accounting import FileAccount
from msgcask.index.env import INDEX_FORMAT_VERSION, IndexEnv, boot_id
from msgcask.options import MIN_FILE_SIZE
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import data_file_name

HEADER = fmt.FILE_HEADER_SIZE


def open_store(path: Path, **kw: object) -> msgcask.Store:
    return msgcask.open(path, compaction_interval=None, **kw)


def put_record(msg_id: int, queue: str = "q", body: bytes | None = None) -> bytes:
    body = b"message %d" % msg_id if body is None else body
    return codec.encode_put(msg_id, queue.encode(), 4, 0, b"", body)


def write_data_file(
    directory: Path, file_id: int, records: list[bytes], *, kind: int = fmt.KIND_JOURNAL
) -> Path:
    """A data file as the store writes it: header, then records back to back."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / data_file_name(file_id)
    path.write_bytes(codec.encode_file_header(kind, file_id, 1) + b"".join(records))
    return path


def record_offsets(records: list[bytes]) -> list[int]:
    out, pos = [], HEADER
    for r in records:
        out.append(pos)
        pos += len(r)
    return out


def browse(store: msgcask.Store, queue: str = "q") -> list[tuple[int, bytes]]:
    return [(m.id, bytes(m.body)) for m in store.queue(queue).browse()]


def set_meta(store_path: Path, values: dict[bytes, bytes]) -> None:
    """Overwrite values in the index's meta table, behind the store's back."""
    with index_table(store_path, b"meta") as (txn, meta):
        for key, value in values.items():
            txn.put(key, value, db=meta)


def make_store(path: Path, n: int = 5) -> dict[int, bytes]:
    with open_store(path) as store:
        q = store.queue("q")
        return {q.put(b"message %d" % i): b"message %d" % i for i in range(n)}


# -- fresh and clean ---------------------------------------------------------------


def test_new_store(store_path: Path) -> None:
    with open_store(store_path) as store:
        assert store.recovery.mode == "new"
        assert store.recovery.corruptions == []


def test_clean_close_reopens_without_replay(store_path: Path) -> None:
    expected = make_store(store_path)
    with open_store(store_path) as store:
        assert (store.recovery.mode, store.recovery.records) == ("clean", 0)
        assert browse(store) == sorted(expected.items())


def test_unclean_close_in_this_boot_replays_from_the_checkpoint(store_path: Path) -> None:
    # The index committed at open; the puts after it are only in the journal.
    store = open_store(store_path, sync_interval=3600)
    q = store.queue("q")
    ids = [q.put(b"x%d" % i) for i in range(4)]
    abandon(store)
    with open_store(store_path) as store:
        assert store.recovery.mode == "replay"
        assert store.recovery.records == 4
        assert [m for m, _ in browse(store)] == ids
        assert store.verify() == []


# -- torn tail ---------------------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 12, 13, 30])
@pytest.mark.parametrize("index", ["kept", "removed"])
def test_torn_tail_is_truncated_to_the_last_good_record(
    store_path: Path, keep: int, index: str
) -> None:
    expected = make_store(store_path)
    [last] = sorted(store_path.glob("*.log"))
    good = last.read_bytes()
    with last.open("ab") as f:
        f.write(put_record(99, body=b"y" * 40)[:keep])
    if index == "removed":
        shutil.rmtree(store_path / "index")
    with open_store(store_path) as store:
        assert last.stat().st_size == len(good)
        assert last.read_bytes() == good
        [report] = store.recovery.corruptions
        assert (report.file_id, report.offset, report.length, report.action) == (
            1,
            len(good),
            keep,
            "truncated",
        )
        assert browse(store) == sorted(expected.items())
        assert store.stats().corruptions == [report]
        assert store.verify() == []
    with open_store(store_path) as store:  # nothing left to report the second time
        assert store.recovery.corruptions == []


@pytest.mark.parametrize(("keep", "words"), [(1, "1 byte"), (12, "12 bytes")])
def test_a_torn_tail_is_logged_once_with_its_length_in_words(
    store_path: Path, caplog: pytest.LogCaptureFixture, keep: int, words: str
) -> None:
    make_store(store_path)
    [last] = sorted(store_path.glob("*.log"))
    good = last.stat().st_size
    with last.open("ab") as f:
        f.write(put_record(99)[:keep])
    with caplog.at_level("WARNING", logger="msgcask"), open_store(store_path) as store:
        [report] = store.recovery.corruptions
    said = (
        f"{last}: torn or damaged tail at offset {good} (truncated record header), "
        f"{words} truncated"
    )
    assert str(report) == said
    assert [r.getMessage() for r in caplog.records] == [f"msgcask: {said}"]


@pytest.mark.parametrize(("junk", "words"), [(1, "1 byte"), (50, "50 bytes")])
def test_damage_at_the_end_of_an_older_file_is_reported_with_its_length_in_words(
    store_path: Path, junk: int, words: str
) -> None:
    old = write_data_file(store_path, 1, [put_record(1)])
    good = old.stat().st_size
    with old.open("ab") as f:
        f.write(b"\xa1" * junk)
    write_data_file(store_path, 2, [put_record(2)])
    with open_store(store_path) as store:
        [report] = store.recovery.corruptions
    assert str(report) == f"{old}: {report.reason} at offset {good}, {words} skipped"


@pytest.mark.parametrize("newer", [False, True])
def test_the_scan_reads_only_the_newest_journal_file_as_the_head(
    store_path: Path, newer: bool
) -> None:
    # File 1's last record is cut short, and its body holds an intact ACK of message 1.
    # As the head, the cut is a torn append, whole; sealed, the ACK inside counts: the
    # scan reads it as recovery does.
    body = b"x" * 10 + codec.encode_ack(1) + b"y" * 50
    path = write_data_file(store_path, 1, [put_record(1), put_record(2, body=body)])
    path.write_bytes(path.read_bytes()[:-20])
    if newer:
        write_data_file(store_path, 2, [put_record(3)])
    report = scan_files(str(store_path))
    [damaged] = [f for f in report.files if f.damage]
    assert [d.at_tail for d in damaged.damage] == ([False, True] if newer else [True])
    assert report.live_ids == ({3} if newer else {1})
    with open_store(store_path) as store:
        assert {m for m, _ in browse(store)} == report.live_ids


def test_torn_batch_at_the_tail_is_truncated_whole(store_path: Path) -> None:
    records = [put_record(1)]
    batch = [put_record(2), put_record(3)]
    torn = codec.encode_batch_header(2, sum(map(len, batch))) + b"".join(batch)
    path = write_data_file(store_path, 1, records)
    good = path.stat().st_size
    with path.open("ab") as f:
        f.write(torn[:-5])
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert [m for m, _ in browse(store)] == [1]  # none of the batch
        assert path.stat().st_size == good
        assert store.verify() == []


# -- damage that is not a torn tail --------------------------------------------------


# With an ACK record in the file, a rebuild reads it twice (PUT records, then the
# ACKs and DELIVERs): its damage is still reported once.
@pytest.mark.parametrize("acked", [[], [5]], ids=["puts only", "with an ACK"])
def test_mid_file_damage_is_reported_with_file_offset_length_and_skipped(
    store_path: Path, acked: list[int]
) -> None:
    records = [put_record(i) for i in range(1, 6)] + [codec.encode_ack(i) for i in acked]
    at = record_offsets(records)
    path = write_data_file(store_path, 1, records)
    raw = bytearray(path.read_bytes())
    raw[at[2] + 20] ^= 0x01
    path.write_bytes(bytes(raw))
    with open_store(store_path) as store:
        [report] = store.recovery.corruptions
        assert (report.file_id, report.path, report.offset, report.length, report.action) == (
            1,
            str(path),
            at[2],
            len(records[2]),
            "skipped",
        )
        assert "checksum" in report.reason
        assert data_file_name(1) in str(report) and str(at[2]) in str(report)
        assert [m for m, _ in browse(store)] == [m for m in (1, 2, 4, 5) if m not in acked]
        assert store.stats().corruptions == [report]
    # Skipped bytes stay on disk for inspection.
    assert path.read_bytes() == bytes(raw)


def test_damaged_end_of_an_older_file_is_skipped_not_truncated(store_path: Path) -> None:
    # Only the last journal file can have a torn tail; elsewhere it is damage.
    old = write_data_file(store_path, 1, [put_record(1), put_record(2)])
    with old.open("ab") as f:
        f.write(b"\xa1" * 50)
    size = old.stat().st_size
    write_data_file(store_path, 2, [put_record(3)])
    with open_store(store_path) as store:
        [report] = store.recovery.corruptions
        assert (report.file_id, report.action) == (1, "skipped")
        assert [m for m, _ in browse(store)] == [1, 2, 3]
    assert old.stat().st_size == size


def test_leftover_temp_file_is_removed_on_open(store_path: Path) -> None:
    make_store(store_path)
    leftover = store_path / (data_file_name(7) + ".tmp")
    leftover.write_bytes(codec.encode_file_header(fmt.KIND_JOURNAL, 7, 1)[:20])
    with open_store(store_path) as store:
        assert not leftover.exists()
        assert len(store.queue("q")) == 5
        assert store.verify() == []


# -- the index ---------------------------------------------------------------------


def test_missing_index_is_rebuilt(store_path: Path) -> None:
    with open_store(store_path) as store:
        q = store.queue("q")
        ids = [q.put(b"m%d" % i, priority=i % 3) for i in range(6)]
        m = q.get(block=False)
        q.ack(m)
        expected = browse(store)
    shutil.rmtree(store_path / "index")
    with open_store(store_path) as store:
        assert (store.recovery.mode, store.recovery.reason) == ("rebuild", "no index")
        assert browse(store) == expected
        assert m.id in ids and store._message_state(m.id) in ("acked", "unknown")
        assert store.verify() == []


@pytest.mark.parametrize("terminal", [False, True])
def test_rebuild_progress_bar_only_on_a_terminal(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    # The bar appears after a second; shown at once here, so the short rebuild
    # would draw it. A service's stderr (here pytest's capture) is no terminal.
    import sys

    from msgcask.store import recovery

    shown = []

    class Bar(recovery._RebuildBar):
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs["delay"] = 0
            super().__init__(*args, **kwargs)
            shown.append(not self.disable)

    monkeypatch.setattr(recovery, "_RebuildBar", Bar)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    make_store(store_path)
    shutil.rmtree(store_path / "index")
    shown.clear()
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
    assert shown == [terminal]


def test_a_rebuild_leaves_no_thread_behind(tmp_path: Path) -> None:
    # In a process of its own: a bar drawn by another test would have started
    # tqdm's monitor thread in this one already.
    child = textwrap.dedent(
        """
        import shutil, sys, threading, msgcask
        before = {t.name for t in threading.enumerate()}
        with msgcask.open(sys.argv[1], compaction_interval=None) as s:
            s.queue("q").put(b"x")
        shutil.rmtree(sys.argv[1] + "/index")
        with msgcask.open(sys.argv[1], compaction_interval=None) as s:
            assert s.recovery.mode == "rebuild", s.recovery.mode
        print(sorted({t.name for t in threading.enumerate()} - before))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_index_from_another_boot_after_unclean_close_is_rebuilt(store_path: Path) -> None:
    expected = make_store(store_path)
    # A power cut may have lost index pages: a different boot + not clean = distrust it.
    set_meta(store_path, {keys.META_BOOT: b"some-earlier-boot", keys.META_CLEAN: keys.U64.pack(0)})
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == "the store was not closed cleanly before the last reboot"
        assert browse(store) == sorted(expected.items())


def test_index_from_another_boot_after_clean_close_is_trusted(store_path: Path) -> None:
    make_store(store_path)
    set_meta(store_path, {keys.META_BOOT: b"some-earlier-boot"})
    with open_store(store_path) as store:
        assert store.recovery.mode == "clean"


def test_index_from_this_boot_after_unclean_close_is_replayed(store_path: Path) -> None:
    make_store(store_path)
    set_meta(store_path, {keys.META_BOOT: boot_id(), keys.META_CLEAN: keys.U64.pack(0)})
    with open_store(store_path) as store:
        assert store.recovery.mode != "rebuild"


def test_the_index_is_fsynced_once_open_clears_its_clean_flag_and_once_close_sets_it(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Commits are not fsynced, but these two are: after a power cut the index on disk
    # must never claim a clean close it did not have, and a clean close must survive
    # a reboot (else the boot check would rebuild a cleanly closed store).
    make_store(store_path)
    events: list[tuple[str, int]] = []  # ("commit", clean flag committed) or ("sync", 0)
    commit, sync = IndexEnv.commit, IndexEnv.sync

    def spy_commit(env: IndexEnv) -> None:
        commit(env)
        events.append(("commit", env.get_u64(keys.META_CLEAN)))

    def spy_sync(env: IndexEnv) -> None:
        events.append(("sync", 0))
        sync(env)

    monkeypatch.setattr(IndexEnv, "commit", spy_commit)
    monkeypatch.setattr(IndexEnv, "sync", spy_sync)
    store = open_store(store_path)
    assert events[-2:] == [("commit", 0), ("sync", 0)]
    store.queue("q").put(b"one more")
    store.close()
    assert events[-2:] == [("commit", 1), ("sync", 0)]
    assert events.count(("sync", 0)) == 2


def test_checkpoint_past_the_journal_end_forces_a_rebuild(store_path: Path) -> None:
    # As after a power cut that kept index pages but lost journal bytes.
    expected = make_store(store_path)
    set_meta(store_path, {keys.META_CHECKPOINT: keys.CHECKPOINT.pack(1, 10**9)})
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == "the journal ends before the index's checkpoint"
        assert browse(store) == sorted(expected.items())
        assert store.verify() == []


def delete_meta(store_path: Path, key: bytes) -> None:
    """Remove a value from the index's meta table, behind the store's back."""
    with index_table(store_path, b"meta") as (txn, meta):
        assert txn.delete(key, db=meta)


def test_index_without_a_checkpoint_forces_a_rebuild(store_path: Path) -> None:
    # Without a checkpoint, nothing says where replay starts: rebuild from the files.
    expected = make_store(store_path)
    delete_meta(store_path, keys.META_CHECKPOINT)
    set_meta(store_path, {keys.META_CLEAN: keys.U64.pack(0)})
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == "the index has no checkpoint"
        assert browse(store) == sorted(expected.items())
        assert store.verify() == []


@pytest.mark.parametrize(
    "key",
    [
        keys.META_CHECKPOINT,
        keys.META_CLEAN,
        keys.META_FORMAT,
        keys.META_NEXT_ID,
        keys.META_NEXT_QUEUE,
        keys.META_NEXT_FILE,
    ],
)
def test_a_damaged_checkpoint_or_meta_counter_makes_the_index_rebuilt(
    store_path: Path, key: bytes
) -> None:
    # LMDB has no page checksums: a damaged page can hand back a value of the wrong
    # length. Like a damaged file account, it is a reason to rebuild, not a crash.
    expected = make_store(store_path)
    set_meta(store_path, {key: b"\x01\x02\x03"})
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        if key == keys.META_CHECKPOINT:
            assert store.recovery.reason == "the index's checkpoint is damaged (3 bytes)"
        else:
            assert store.recovery.reason.startswith(
                f"the index is damaged: meta value {key.decode()!r} has 3 bytes"
            )
        assert browse(store) == sorted(expected.items())
        assert store.verify() == []


def test_journal_shorter_than_indexed_forces_a_rebuild(store_path: Path) -> None:
    make_store(store_path, n=3)
    [path] = sorted(store_path.glob("*.log"))
    records = list(codec.scan(path.read_bytes(), HEADER))
    os.truncate(path, records[-1].offset)  # lose the last put
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == f"data file {path.name} is shorter than indexed"
        assert len(store.queue("q")) == 2
        assert store.verify() == []


def _fill(store: msgcask.Store, n: int) -> msgcask.Queue:
    """``n`` messages of 5,000 bytes put in queue "q" (13 to a 64 KiB data file)."""
    q = store.queue("q")
    for i in range(n):
        q.put(bytes([i % 256]) * 5000)
    return q


def test_missing_data_file_forces_a_rebuild(store_path: Path) -> None:
    with open_store(store_path, max_file_size=64 * 1024) as store:
        _fill(store, 30)
    files = sorted(store_path.glob("*.log"))
    assert len(files) >= 3
    files[0].unlink()
    with open_store(store_path, max_file_size=64 * 1024) as store:
        assert store.recovery.mode == "rebuild"
        assert f"data file {files[0].name} is missing" in store.recovery.reason
        assert store.verify() == []
        left = len(store.queue("q"))
    # The reason says how much the index knew the file to hold: 30 puts, fewer now.
    assert f"the index counted {30 - left} live messages" in store.recovery.reason


def test_a_store_whose_data_files_are_all_missing_is_rebuilt_with_a_warning(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Not taken for a new store: the index knew files and messages, which are lost.
    with open_store(store_path, max_file_size=64 * 1024) as store:
        q = _fill(store, 30)
        last = max(m.id for m in q.browse())
    files = sorted(store_path.glob("*.log"))
    for path in files:
        path.unlink()
    with caplog.at_level("WARNING", logger="msgcask"), open_store(store_path) as store:
        assert (store.recovery.mode, store.recovery.unclean) == ("rebuild", True)
        assert store.recovery.reason.startswith(f"data files {files[0].name}, ")
        assert "the index counted 30 live messages" in store.recovery.reason
        assert store.queues() == []
        assert store.queue("q").put(b"new") > last + 2**20  # no old id again
    assert [r.getMessage() for r in caplog.records] == [
        f"msgcask: rebuilding the index of {store_path} ({store.recovery.reason})"
    ]


@pytest.mark.parametrize("removed", ["every data file", "the newest data files"])
def test_data_files_put_back_after_a_rebuild_without_them_clash_with_no_new_file(
    store_path: Path, tmp_path: Path, removed: str
) -> None:
    # The index still counts the file ids and message ids it handed out: the rebuild
    # goes on from there, so the files moved out can be put back beside the new ones.
    with open_store(store_path, max_file_size=64 * 1024) as store:
        old = [m.id for m in _fill(store, 30).browse()]
    files = sorted(store_path.glob("*.log"))
    assert len(files) >= 3
    moved = files if removed == "every data file" else files[-2:]
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in moved:
        path.rename(aside / path.name)
    with open_store(store_path, max_file_size=64 * 1024) as store:
        assert store.recovery.mode == "rebuild"
        new = store.queue("q").put(b"new")
        assert new > max(old)
    made = sorted(set(store_path.glob("*.log")) - (set(files) - set(moved)))
    assert made, "the open starts a journal file"
    assert made[0].name > files[-1].name  # past every name the index handed out
    for path in moved:
        (aside / path.name).rename(path)
    with open_store(store_path, max_file_size=64 * 1024) as store:
        assert store.recovery.mode == "rebuild"
        assert sorted(m.id for m in store.queue("q").browse()) == [*old, new]
        assert store.verify() == []


def test_every_missing_data_file_is_named_and_counted(store_path: Path) -> None:
    # Two files removed by hand: the reason names both and counts what both held.
    with open_store(store_path, max_file_size=64 * 1024) as store:
        _fill(store, 30)
        held = {f.file_id: (f.live_messages, f.live_bytes) for f in store.stats().files}
    files = sorted(store_path.glob("*.log"))
    assert len(files) >= 3
    files[0].unlink()
    files[1].unlink()
    messages, size = (held[1][0] + held[2][0], held[1][1] + held[2][1])
    with open_store(store_path, max_file_size=64 * 1024) as store:
        assert len(store.queue("q")) == 30 - messages
        assert store.recovery.reason == (
            f"data files {files[0].name} and {files[1].name} are missing; the index counted "
            f"{messages} live messages ({size} bytes) in them, and those no other data file "
            "holds are lost"
        )


def test_missing_data_files_past_the_third_are_counted(store_path: Path) -> None:
    with open_store(store_path, max_file_size=64 * 1024) as store:
        _fill(store, 90)
    files = sorted(store_path.glob("*.log"))
    assert len(files) >= 6
    for f in files[:5]:
        f.unlink()
    with open_store(store_path, max_file_size=64 * 1024) as store:
        lost = 90 - len(store.queue("q"))
        shown = ", ".join(f.name for f in files[:3])
        assert store.recovery.reason.startswith(
            f"data files {shown} and 2 more are missing; the index counted {lost} live messages ("
        )


def test_a_missing_file_that_held_nothing_live_is_reported_without_a_count(
    store_path: Path,
) -> None:
    settings = {"max_file_size": 64 * 1024, "keep_data_files": True}
    with open_store(store_path, **settings) as store:
        q = _fill(store, 30)
        for _ in range(15):  # consume the first file's messages; the acks keep it
            q.ack(q.get(block=False))
    files = sorted(store_path.glob("*.log"))
    files[0].unlink()
    with open_store(store_path, **settings) as store:
        assert store.recovery.reason == f"data file {files[0].name} is missing"
        assert len(store.queue("q")) == 15


def test_a_journal_file_put_back_after_its_deletion_forces_a_rebuild_that_names_it(
    store_path: Path, tmp_path: Path
) -> None:
    # File 1 is consumed and deleted by a pass; a copy of it put back by hand is a
    # journal file the index does not know, older than its checkpoint.
    settings = {"max_file_size": 64 * 1024}
    with open_store(store_path, **settings) as store:
        q = _fill(store, 30)
        first = store_path / data_file_name(1)
        shutil.copy(first, tmp_path / first.name)
        for _ in range(13):
            q.ack(q.get(block=False))
        assert store.compact().files_deleted == 1
        assert not first.exists()
    shutil.copy(tmp_path / first.name, first)
    with open_store(store_path, **settings) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == "journal file 1 is older than the checkpoint"


@pytest.mark.parametrize("other_puts", [120, 300], ids=["longer", "longer-and-newer"])
def test_data_files_of_another_store_beside_a_clean_index_force_a_rebuild(
    store_path: Path, tmp_path: Path, other_puts: int
) -> None:
    # A backup's data files restored over a closed store whose index/ was left in
    # place: the files go on past what that index saw when it was closed cleanly.
    settings = {"max_file_size": 64 * 1024}
    with open_store(store_path, **settings) as store:
        q = store.queue("q")
        for i in range(100):
            q.put(b"a%d" % i + b"a" * 300)
    other = tmp_path / "other"
    with open_store(other, **settings) as store:
        q = store.queue("q")
        expected = [
            (q.put(b"b%d" % i + b"b" * 400), b"b%d" % i + b"b" * 400) for i in range(other_puts)
        ]
    for path in store_path.glob("*.log"):
        path.unlink()
    for path in other.glob("*.log"):
        shutil.copy(path, store_path / path.name)
    with open_store(store_path, **settings) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == (
            f"data file {data_file_name(1)} goes on past what the index saw at its clean close"
        )
        assert store.recovery.corruptions == []
        assert browse(store) == expected
        assert store.verify() == []
        assert store.stats().corruptions == []


def test_a_rebuild_is_logged_once_with_the_store_and_its_reason(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="msgcask"):
        make_store(store_path)  # a new store: nothing rebuilt, nothing said
        assert caplog.records == []
        set_meta(
            store_path, {keys.META_BOOT: b"some-earlier-boot", keys.META_CLEAN: keys.U64.pack(0)}
        )
        with open_store(store_path) as store:
            assert store.recovery.mode == "rebuild"
    assert [r.getMessage() for r in caplog.records] == [
        f"msgcask: rebuilding the index of {store_path} "
        "(the store was not closed cleanly before the last reboot)"
    ]
    assert [r.levelname for r in caplog.records] == ["WARNING"]


# -- compaction leftovers ------------------------------------------------------------


def compacted_state(store_path: Path) -> dict[int, list[int]]:
    """Journal files 1 and 2 (victims), compacted file 3 holding copies of their live
    messages, journal file 4 (the head). Returns the message ids each file holds."""
    write_data_file(store_path, 1, [put_record(1), put_record(2), codec.encode_ack(1)])
    write_data_file(store_path, 2, [put_record(3), put_record(4), codec.encode_ack(4)])
    write_data_file(
        store_path,
        3,
        [codec.encode_manifest([1, 2]), put_record(2), put_record(3)],
        kind=fmt.KIND_COMPACTED,
    )
    write_data_file(store_path, 4, [put_record(5)])
    return {1: [1, 2], 2: [3, 4], 3: [2, 3], 4: [5]}


def test_compacted_file_whose_victims_all_exist_is_removed_as_orphan(store_path: Path) -> None:
    # The compaction never committed: the victims are the real homes, the copy is redundant.
    compacted_state(store_path)
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.removed_files == [3]
        assert [m for m, _ in browse(store)] == [2, 3, 5]
        assert store.verify() == []
    assert not (store_path / data_file_name(3)).exists()
    assert (store_path / data_file_name(1)).exists() and (store_path / data_file_name(2)).exists()


def test_the_scan_counts_no_record_of_an_orphan_compacted_file(store_path: Path) -> None:
    # Compacted file 3 is redundant (its victims are all there): neither its copies
    # nor an ACK it holds (of message 5, in head file 4) count, as recovery removes it.
    compacted_state(store_path)
    write_data_file(
        store_path,
        3,
        [codec.encode_manifest([1, 2]), put_record(2), put_record(9), codec.encode_ack(5)],
        kind=fmt.KIND_COMPACTED,
    )
    report = scan_files(str(store_path))
    assert [f.file_id for f in report.files if f.redundant] == [3]
    assert report.live_ids == {2, 3, 5}
    with open_store(store_path) as store:
        assert store.recovery.removed_files == [3]
        assert [m for m, _ in browse(store)] == [2, 3, 5]
        assert store.verify() == []


def test_compacted_file_with_a_missing_victim_is_kept_and_other_victims_removed(
    store_path: Path,
) -> None:
    # The compaction committed and deleted victim 1: the copy is now the real home.
    compacted_state(store_path)
    (store_path / data_file_name(1)).unlink()
    with open_store(store_path) as store:
        assert store.recovery.removed_files == [2]
        assert [m for m, _ in browse(store)] == [2, 3, 5]
        files = {f.file_id for f in store.stats().files}
        assert {3, 4} <= files and not {1, 2} & files
        assert store.verify() == []
    assert (store_path / data_file_name(3)).exists()
    assert not (store_path / data_file_name(2)).exists()


def test_a_compacted_file_naming_an_unfinished_one_is_judged_by_the_files_found(
    store_path: Path,
) -> None:
    # Compacted file 3 never finished (its victims 1 and 2 are there), and file 5
    # names it with journal file 4. Removing 3 here does not make 5 finished: 4,
    # which holds the ACK of message 2 (PUT in victim 1), must stay.
    compacted_state(store_path)
    write_data_file(store_path, 4, [put_record(5), codec.encode_ack(2)])
    write_data_file(
        store_path,
        5,
        [codec.encode_manifest([3, 4]), put_record(3), put_record(5)],
        kind=fmt.KIND_COMPACTED,
    )
    write_data_file(store_path, 6, [put_record(6)])
    with open_store(store_path) as store:
        assert store.recovery.removed_files == [3, 5]
        assert [m for m, _ in browse(store)] == [3, 5, 6]
        assert store.verify() == []


def test_orphan_compacted_file_unknown_to_a_good_index_is_removed(store_path: Path) -> None:
    # Crash after the copy was published, before the swap committed: the index is fine.
    make_store(store_path)
    write_data_file(
        store_path,
        9,
        [codec.encode_manifest([1]), put_record(1, body=b"message 0")],
        kind=fmt.KIND_COMPACTED,
    )
    with open_store(store_path) as store:
        assert store.recovery.mode != "rebuild"
        assert store.recovery.removed_files == [9]
        assert len(store.queue("q")) == 5
        assert store.verify() == []
    assert not (store_path / data_file_name(9)).exists()


def test_compacted_file_unknown_to_the_index_whose_victim_is_gone_forces_a_rebuild(
    store_path: Path,
) -> None:
    # A copy the index does not know, naming a victim that is no longer on disk (an
    # index older than the files, say, restored from a backup): the copy is the only
    # home of what it holds, so the open must neither replay past it nor remove it.
    expected = make_store(store_path)
    write_data_file(
        store_path,
        9,
        [codec.encode_manifest([7]), put_record(100, body=b"copied")],
        kind=fmt.KIND_COMPACTED,
    )
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert "compacted file 9 is not in the index" in store.recovery.reason
        assert store.recovery.removed_files == []
        assert browse(store) == sorted({**expected, 100: b"copied"}.items())
        assert store.verify() == []
    assert (store_path / data_file_name(9)).exists()


def test_a_compacted_file_without_an_intact_manifest_is_reported_once_as_kept_whole(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The index does not know the copy, and its MANIFEST is damaged: the open judges it
    # while replaying, then again while rebuilding. It is one damaged file, said once,
    # and all of it after the file header is kept.
    expected = make_store(store_path)
    path = write_data_file(
        store_path,
        9,
        [codec.encode_manifest([1]), put_record(100, body=b"copied")],
        kind=fmt.KIND_COMPACTED,
    )
    raw = bytearray(path.read_bytes())
    raw[HEADER + 5] ^= 0x01
    path.write_bytes(bytes(raw))
    with caplog.at_level("WARNING", logger="msgcask"), open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert store.recovery.reason == "compacted file 9 is not in the index"
        kept = [c for c in store.recovery.corruptions if c.action == "kept"]
        assert browse(store) == sorted({**expected, 100: b"copied"}.items())
        assert [c for c in store.stats().corruptions if c.action == "kept"] == kept
    said = (
        f"{path}: compacted file without an intact MANIFEST (kept; its victims are kept too) "
        f"at offset {HEADER}, {len(raw) - HEADER} bytes kept"
    )
    assert [str(c) for c in kept] == [said]
    assert [r.getMessage() for r in caplog.records if "MANIFEST" in r.getMessage()] == [
        f"msgcask: {said}"
    ]
    assert path.read_bytes() == bytes(raw)


def test_torn_tail_of_the_journal_head_below_a_newer_compacted_file_is_truncated(
    store_path: Path,
) -> None:
    # After a compaction the newest file is a compacted one; the journal's write head
    # (an older id) is still the file whose tail a crash can tear.
    write_data_file(store_path, 3, [put_record(5), put_record(6)])
    head = store_path / data_file_name(3)
    good = head.stat().st_size
    with head.open("ab") as f:
        f.write(put_record(7)[:20])
    write_data_file(
        store_path,
        4,
        [codec.encode_manifest([1]), put_record(2)],  # victim 1 is gone: the copy is real
        kind=fmt.KIND_COMPACTED,
    )
    with open_store(store_path) as store:
        [report] = store.recovery.corruptions
        assert (report.file_id, report.offset, report.action) == (3, good, "truncated")
        assert str(report).startswith(f"{head}: torn or damaged tail at offset {good} (")
        assert [m for m, _ in browse(store)] == [2, 5, 6]
        new = store.queue("q").put(b"after")
        assert new > 6
        assert store.verify() == []
    assert head.stat().st_size == good
    with open_store(store_path) as store:
        assert [m for m, _ in browse(store)] == [2, 5, 6, new]


# -- files that cannot be used -----------------------------------------------------------


def test_data_file_from_a_newer_format_refuses_to_open(store_path: Path) -> None:
    make_store(store_path)
    head = fmt.FILE_HEADER.pack(fmt.MAGIC, fmt.FORMAT_VERSION + 1, fmt.KIND_JOURNAL, 0, 2, 1)
    (store_path / data_file_name(2)).write_bytes(
        head + fmt.FILE_HEADER_CHECKSUM.pack(xxh3_64_intdigest(head))
    )
    with pytest.raises(msgcask.FormatVersionError, match="Upgrade"):
        open_store(store_path)
    # Refusing changed nothing: the lock is free and the file is still there.
    assert (store_path / data_file_name(2)).exists()
    (store_path / data_file_name(2)).unlink()
    with open_store(store_path) as store:
        assert len(store.queue("q")) == 5


def test_index_from_a_newer_format_refuses_to_open(store_path: Path) -> None:
    make_store(store_path)
    set_meta(store_path, {keys.META_FORMAT: keys.U64.pack(99)})
    with pytest.raises(msgcask.FormatVersionError):
        open_store(store_path)
    assert (store_path / "index").is_dir()  # not rebuilt over a newer msgcask's index


def test_index_from_an_older_format_is_rebuilt(store_path: Path) -> None:
    messages = make_store(store_path)
    set_meta(store_path, {keys.META_FORMAT: keys.U64.pack(INDEX_FORMAT_VERSION - 1)})
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert f"older than {INDEX_FORMAT_VERSION}" in store.recovery.reason
        assert {m: body for m, body in browse(store)} == messages
        assert store.verify() == []


def test_a_damaged_file_account_makes_the_index_rebuilt(store_path: Path) -> None:
    messages = make_store(store_path)
    with index_table(store_path, b"files") as (txn, files):
        key, value = next(iter(txn.cursor(db=files)))
        txn.put(key, value[:-3], db=files)  # a pair cut short
    with open_store(store_path) as store:
        assert store.recovery.mode == "rebuild"
        assert "file account in the index is damaged" in store.recovery.reason
        assert {m: body for m, body in browse(store)} == messages
        assert store.verify() == []


def test_data_file_copied_under_another_name_refuses_to_open(store_path: Path) -> None:
    make_store(store_path)
    shutil.copy(store_path / data_file_name(1), store_path / data_file_name(5))
    with pytest.raises(msgcask.CorruptionError, match=data_file_name(5)) as err:
        open_store(store_path)
    assert err.value.offset == 12  # the file id field of the header


def test_a_damaged_header_refuses_the_open_saying_what_to_do_and_changes_nothing(
    store_path: Path,
) -> None:
    with open_store(store_path, max_file_size=64 * 1024) as store:
        _fill(store, 20)
    first = store_path / data_file_name(1)
    raw = bytearray(first.read_bytes())
    raw[0] ^= 0x01  # the magic
    first.write_bytes(bytes(raw))
    before = {
        p.relative_to(store_path): p.read_bytes() for p in store_path.rglob("*") if p.is_file()
    }
    with pytest.raises(msgcask.CorruptionError) as err:
        open_store(store_path, max_file_size=64 * 1024)
    assert str(err.value) == (
        f"{first}: not a msgcask data file (bad magic). Run `msgcask check {store_path}` to "
        "list every problem; then restore the store from a backup, or move the file out and "
        "reopen (see CorruptionError in docs/operations.md for what that loses)"
    )
    assert (err.value.path, err.value.offset) == (str(first), 0)
    after = {
        p.relative_to(store_path): p.read_bytes() for p in store_path.rglob("*") if p.is_file()
    }
    assert after == before


# -- rebuild is order-independent ---------------------------------------------------------


@st.composite
def scattered_journals(draw: st.DrawFn) -> dict[int, list[tuple[str, int, int]]]:
    """Records of up to 10 messages scattered over files 1-4 in any order:
    ("put"|"ack"|"deliver", msg_id, count)."""
    files: dict[int, list[tuple[str, int, int]]] = {f: [] for f in range(1, 5)}
    for msg_id in range(1, draw(st.integers(1, 10)) + 1):
        files[draw(st.integers(1, 4))].append(("put", msg_id, 0))
        for count in range(1, draw(st.integers(0, 2)) + 1):
            files[draw(st.integers(1, 4))].append(("deliver", msg_id, count))
        if draw(st.booleans()):
            files[draw(st.integers(1, 4))].append(("ack", msg_id, 0))
    return {f: draw(st.permutations(recs)) for f, recs in files.items()}


@settings(max_examples=40, deadline=None)
@given(scattered_journals())
def test_rebuild_gives_puts_minus_acks_whatever_the_record_order(
    files: dict[int, list[tuple[str, int, int]]],
) -> None:
    # Ids, not locations, tie ACK and DELIVER records to messages: a rebuild must not
    # care which file or position they sit in (compaction moves records around).
    tmp = Path(tempfile.mkdtemp())
    try:
        encode = {
            "put": lambda m, c: put_record(m),
            "ack": lambda m, c: codec.encode_ack(m),
            "deliver": lambda m, c: codec.encode_deliver(m, c),
        }
        for file_id, recs in files.items():
            write_data_file(tmp, file_id, [encode[kind](m, c) for kind, m, c in recs])
        all_recs = [r for recs in files.values() for r in recs]
        acked = {m for kind, m, _ in all_recs if kind == "ack"}
        live = sorted({m for kind, m, _ in all_recs if kind == "put"} - acked)
        delivered = {m: max(c for k, i, c in all_recs if i == m and k != "ack") for m in live}
        with open_store(tmp) as store:
            assert store.recovery.mode == "rebuild"
            got = list(store.queue("q").browse()) if live else []
            assert [m.id for m in got] == live
            assert {m.id: m.deliveries for m in got} == delivered
            assert store.verify() == []
    finally:
        shutil.rmtree(tmp)


@pytest.mark.parametrize("content", [b"", bytes(32), bytes(20)], ids=["empty", "zeros", "short"])
def test_newest_data_file_without_a_header_is_removed_and_reported(
    store_path: Path, content: bytes
) -> None:
    # A crash caught its creation before any byte of it reached the disk.
    expected = make_store(store_path)
    newest = store_path / data_file_name(2)
    newest.write_bytes(content)
    with open_store(store_path) as store:
        [report] = store.recovery.corruptions
        assert (report.file_id, report.action) == (2, "removed")
        assert str(report).count(str(newest)) == 1, str(report)  # the path, said once
        assert browse(store) == sorted(expected.items())
        assert store.verify() == []
    assert not newest.exists()


@pytest.mark.parametrize("content", [b"", bytes(32)], ids=["empty", "zeros"])
def test_an_older_data_file_without_a_header_refuses_to_open(
    store_path: Path, content: bytes
) -> None:
    # Only the newest file can be one whose creation a crash caught: an older one
    # held records, and removing it would lose them without a word.
    make_store(store_path)
    newest = codec.encode_file_header(fmt.KIND_JOURNAL, 2, 100)
    (store_path / data_file_name(2)).write_bytes(newest)
    older = store_path / data_file_name(1)
    older.write_bytes(content)
    with pytest.raises(msgcask.CorruptionError, match=r"file header is truncated|bad magic"):
        open_store(store_path)
    assert older.exists()


# verify() against an index edited behind the store's back. The store was closed
# cleanly, so opening it trusts the index as it is: only verify() can see the edit.


def _consumed_store(store_path: Path) -> tuple[list[int], int]:
    """Five messages put in queue "q", the first consumed: (ids, the queue's id)."""
    with open_store(store_path) as store:
        q = store.queue("q")
        ids = [q.put(b"message %d" % i) for i in range(5)]
        q.ack(q.get(block=False))
        qid = store._catalog.queue_ids["q"]
    return ids, qid


def _verify_trusted(store_path: Path) -> list[str]:
    with open_store(store_path) as store:
        assert store.recovery.mode != "rebuild", store.recovery.reason
        return store.verify()


def test_verify_names_a_live_message_without_an_order_key(store_path: Path) -> None:
    ids, qid = _consumed_store(store_path)
    with index_table(store_path, b"order") as (txn, order):
        assert txn.delete(keys.order_key(qid, 4, ids[2]), db=order)
    assert _verify_trusted(store_path) == [f"live message {ids[2]} has no order key"]


@pytest.mark.parametrize("which", ["consumed", "never put"])
def test_verify_names_an_order_key_of_a_message_not_live(store_path: Path, which: str) -> None:
    ids, qid = _consumed_store(store_path)
    msg_id = ids[0] if which == "consumed" else ids[-1] + 100
    with index_table(store_path, b"order") as (txn, order):
        txn.put(keys.order_key(qid, 4, msg_id), b"", db=order)
    assert _verify_trusted(store_path) == [
        f"order key of message {msg_id} in queue 'q', which is not live in the index"
    ]


def test_verify_names_twenty_stray_order_keys_and_counts_the_rest(store_path: Path) -> None:
    ids, qid = _consumed_store(store_path)
    strays = [ids[-1] + 100 + i for i in range(25)]
    with index_table(store_path, b"order") as (txn, order):
        for msg_id in strays:
            txn.put(keys.order_key(qid, 4, msg_id), b"", db=order)
    problems = _verify_trusted(store_path)
    assert problems[:20] == [
        f"order key of message {msg_id} in queue 'q', which is not live in the index"
        for msg_id in strays[:20]
    ]
    assert problems[20:] == ["5 more order keys like these"]


def test_verify_names_an_order_key_that_disagrees_with_its_message(store_path: Path) -> None:
    ids, qid = _consumed_store(store_path)
    with index_table(store_path, b"order") as (txn, order):
        assert txn.delete(keys.order_key(qid, 4, ids[1]), db=order)
        txn.put(keys.order_key(qid, 7, ids[1]), b"", db=order)  # another priority
    assert _verify_trusted(store_path) == [
        f"live message {ids[1]} has no order key",
        f"order key of message {ids[1]} in queue 'q', which does not match its index"
        " entry's queue and priority",
    ]


def test_verify_names_a_queue_whose_count_disagrees(store_path: Path) -> None:
    _, qid = _consumed_store(store_path)
    with index_table(store_path, b"queues") as (txn, queues):
        txn.put(b"q", keys.QUEUE_VALUE.pack(qid, 6), db=queues)
    assert _verify_trusted(store_path) == ["queue 'q' counts 6 messages, index holds 4"]


def test_verify_names_a_count_of_a_queue_that_holds_no_message(store_path: Path) -> None:
    with open_store(store_path) as store:
        q = store.queue("q")
        q.put(b"only")
        q.ack(q.get(block=False))
        qid = store._catalog.queue_ids["q"]
    with index_table(store_path, b"queues") as (txn, queues):
        txn.put(b"q", keys.QUEUE_VALUE.pack(qid, 2), db=queues)
    assert _verify_trusted(store_path) == ["queue 'q' counts 2 messages, index holds 0"]


def test_verify_names_a_file_account_whose_live_counts_disagree(store_path: Path) -> None:
    from msgcask.index.accounting import FileAccount

    _consumed_store(store_path)
    with index_table(store_path, b"files") as (txn, files):
        key, value = next(iter(txn.cursor(db=files)))
        account = FileAccount.unpack(keys.FILE_KEY.unpack(key)[0], value)
        account.live_messages += 1
        account.live_bytes -= 7
        txn.put(key, account.pack(), db=files)
    [problem] = _verify_trusted(store_path)
    assert problem == (
        f"file {account.file_id}'s account in the index says"
        f" live bytes {account.live_bytes} (its index entries add up to {account.live_bytes + 7}),"
        " live messages 5 (its index entries add up to 4)"
    )


def test_verify_names_a_message_whose_entry_points_at_no_put_record(store_path: Path) -> None:
    ids, _ = _consumed_store(store_path)
    with index_table(store_path, b"msgs") as (txn, msgs):
        entry = keys.unpack_msg(txn.get(keys.msg_key(ids[3]), db=msgs))
        assert isinstance(entry, keys.Live)
        txn.put(
            keys.msg_key(ids[3]), keys.pack_live(entry._replace(offset=entry.offset + 1)), db=msgs
        )
    assert _verify_trusted(store_path) == [f"message {ids[3]} points at no PUT record of its id"]


def test_verify_names_a_message_whose_entry_has_another_size_than_its_put_record(
    store_path: Path,
) -> None:
    # The file's account is changed to match, so only the record itself disagrees.
    ids, _ = _consumed_store(store_path)
    entry = _edit_entry(store_path, ids[3], size=0)  # found by its offset, read by its size
    _edit_account(store_path, 1, lambda account: setattr(account, "live_bytes", 3 * entry.size))
    assert _verify_trusted(store_path) == [
        f"message {ids[3]}'s index entry says 0 bytes, its PUT record is {entry.size}"
    ]


def test_verify_names_a_live_message_missing_from_the_index(store_path: Path) -> None:
    ids, _ = _consumed_store(store_path)
    with index_table(store_path, b"msgs") as (txn, msgs):
        assert txn.delete(keys.msg_key(ids[4]), db=msgs)
    problems = _verify_trusted(store_path)
    assert problems[0] == f"message {ids[4]} is live in the data files but not in the index"
    assert f"order key of message {ids[4]} in queue 'q', which is not live in the index" in problems


def _edit_entry(store_path: Path, msg_id: int, **changes: int) -> keys.Live:
    """Rewrite the LIVE entry of ``msg_id`` with ``changes``; return it as it was."""
    with index_table(store_path, b"msgs") as (txn, msgs):
        entry = keys.unpack_msg(txn.get(keys.msg_key(msg_id), db=msgs))
        assert isinstance(entry, keys.Live)
        txn.put(keys.msg_key(msg_id), keys.pack_live(entry._replace(**changes)), db=msgs)
    return entry


def _edit_account(store_path: Path, file_id: int, edit: Callable[[FileAccount], object]) -> None:
    """Change the index's account of ``file_id`` with ``edit``."""
    with index_table(store_path, b"files") as (txn, files):
        key = keys.FILE_KEY.pack(file_id)
        account = FileAccount.unpack(file_id, txn.get(key, db=files))
        edit(account)
        txn.put(key, account.pack(), db=files)


def _two_file_store(store_path: Path) -> list[int]:
    """Messages 1 and 2 in file 1, message 3 in file 2; message 1 consumed, its ACK
    in file 2 and counted in file 1's ``acked_in`` (no entry of its own)."""
    with open_store(store_path, max_file_size=MIN_FILE_SIZE) as store:
        q = store.queue("q")
        ids = [q.put(b"a" * 40_000), q.put(b"b"), q.put(b"c" * 40_000)]
        q.ack(q.get(block=False))
        assert [(f, a.acked_in) for f, a in store._acct.files.items()] == [(1, {2: 1}), (2, {})]
        assert store._catalog.lookup(ids[0]) is None
    return ids


@pytest.mark.parametrize("unknown", ["put_file", "ack_file"])
def test_verify_names_an_acked_entry_that_refers_to_an_unknown_file(
    store_path: Path, unknown: str
) -> None:
    ids, _ = _consumed_store(store_path)  # one file: the consumed message has no entry
    files = {"put_file": 1, "ack_file": 1, unknown: 77}
    with index_table(store_path, b"msgs") as (txn, msgs):
        txn.put(keys.msg_key(ids[0]), keys.pack_acked(**files), db=msgs)
    # The entry's other file is counted as the entry says.
    counter = "needed ACK marks" if unknown == "put_file" else "dead PUTs"
    assert _verify_trusted(store_path) == [
        f"acked message {ids[0]} refers to unknown file 77",
        f"file 1's account in the index says {counter} 0 (its index entries add up to 1)",
    ]


def test_verify_names_a_live_message_in_an_unknown_file(store_path: Path) -> None:
    ids, _ = _consumed_store(store_path)
    entry = _edit_entry(store_path, ids[2], file_id=77)
    assert _verify_trusted(store_path) == _moved_to_file_77(ids[2], entry.size)


def _moved_to_file_77(msg_id: int, size: int) -> list[str]:
    """What verify says of one of file 1's four live messages whose entry moved
    to file 77, which the index does not know."""
    return [
        f"message {msg_id} is in unknown file 77",
        f"message {msg_id} points at no PUT record of its id",
        f"file 1's account in the index says live bytes {4 * size}"
        f" (its index entries add up to {3 * size}),"
        " live messages 4 (its index entries add up to 3)",
    ]


def test_verify_names_a_count_of_acks_in_an_unknown_file(store_path: Path) -> None:
    _consumed_store(store_path)
    _edit_account(store_path, 1, lambda account: account.acked_in.update({77: 1}))
    assert _verify_trusted(store_path) == ["file 1 counts ACKs in unknown file 77"]


def test_verify_names_a_file_whose_size_is_not_its_accounted_size(store_path: Path) -> None:
    _two_file_store(store_path)
    size = (store_path / data_file_name(1)).stat().st_size
    _edit_account(store_path, 1, lambda account: setattr(account, "size", size - 5))
    assert _verify_trusted(store_path) == [f"file 1 is {size} bytes, accounted {size - 5}"]


@pytest.mark.parametrize("copies", [1, 2])
@pytest.mark.parametrize("queue", ["r", "no such queue"])
def test_verify_names_a_message_whose_index_queue_is_not_its_put_records(
    store_path: Path, copies: int, queue: str
) -> None:
    # The index moves message 1 to another queue whole (entry, order key and
    # counts agree), so the one disagreement left is with its PUT records' queue.
    records = [put_record(1)] * copies + [put_record(2), put_record(3, "r")]
    write_data_file(store_path, 1, records)
    with open_store(store_path) as store:
        assert store.verify() == []
        qid, rid = store._catalog.queue_ids["q"], store._catalog.queue_ids["r"]
    to = rid if queue == "r" else 99
    _edit_entry(store_path, 1, queue_id=to)
    with index_table(store_path, b"order") as (txn, order):
        assert txn.delete(keys.order_key(qid, 4, 1), db=order)
        txn.put(keys.order_key(to, 4, 1), b"", db=order)
    with index_table(store_path, b"queues") as (txn, queues):
        txn.put(b"q", keys.QUEUE_VALUE.pack(qid, 1), db=queues)
        if queue == "r":
            txn.put(b"r", keys.QUEUE_VALUE.pack(rid, 2), db=queues)
    named = "'r'" if queue == "r" else "id 99 (no such queue)"
    assert _verify_trusted(store_path) == [
        f"message 1 is in queue {named} in the index but in queue 'q' in its PUT record"
    ]


def test_verify_names_a_deliver_record_in_an_unknown_file(store_path: Path) -> None:
    ids, _ = _consumed_store(store_path)
    _edit_entry(store_path, ids[2], deliveries=1, deliver_file=77)
    assert _verify_trusted(store_path) == [
        f"message {ids[2]}'s delivery count is in unknown file 77"
    ]


def test_verify_counts_the_deliver_record_of_a_message_in_an_unknown_file(
    store_path: Path,
) -> None:
    # The entry's DELIVER record is in a known file: that file's needed marks count it.
    ids, _ = _consumed_store(store_path)
    with open_store(store_path) as store:
        q = store.queue("q")
        q.nack(q.get(block=False))
        delivered = store._catalog.lookup(ids[1])
        assert isinstance(delivered, keys.Live) and delivered.deliver_file == 1
    entry = _edit_entry(store_path, ids[1], file_id=77)
    assert _verify_trusted(store_path) == _moved_to_file_77(ids[1], entry.size)


def test_verify_names_a_count_of_acks_the_data_files_disagree_with(store_path: Path) -> None:
    _two_file_store(store_path)
    _edit_account(store_path, 1, lambda account: account.acked_in.update({2: 3}))
    assert _verify_trusted(store_path) == [
        "file 1 counts 3 ACKs of its messages in file 2, the data files hold 1",
        "file 2's account in the index says needed ACK marks 1 (its index entries add up to 3)",
    ]


def test_verify_names_acks_that_no_count_accounts_for(store_path: Path) -> None:
    _two_file_store(store_path)
    _edit_account(store_path, 1, lambda account: account.acked_in.clear())
    assert _verify_trusted(store_path) == [
        "file 2 holds 1 ACK of messages in file 1 that nothing in the index accounts for",
        "file 2's account in the index says needed ACK marks 1 (its index entries add up to 0)",
    ]


def test_verify_counts_an_ack_only_against_a_put_record_in_its_files_id_range(
    store_path: Path,
) -> None:
    # Message 1 is consumed (PUT in file 1, ACK in file 2, counted by file 1) and
    # compacted file 3 holds a copy of it too: a compacted file has no range of ids,
    # so the copy is no PUT record the ACK must be counted against.
    write_data_file(store_path, 1, [put_record(1), put_record(2)])
    write_data_file(store_path, 2, [put_record(3), codec.encode_ack(1)])
    write_data_file(
        store_path, 3, [codec.encode_manifest([7]), put_record(1)], kind=fmt.KIND_COMPACTED
    )
    write_data_file(store_path, 4, [put_record(4)])
    with open_store(store_path) as store:
        assert store._catalog.lookup(1) is None
        assert store._acct.files[1].acked_in == {2: 1}
        assert [m for m, _ in browse(store)] == [2, 3, 4]
        assert store.verify() == []


@pytest.mark.parametrize("which", ["consumed", "never put"])
def test_verify_names_a_message_live_in_the_index_but_not_in_the_data_files(
    store_path: Path, which: str
) -> None:
    # The index holds the message live, whole (entry, order key and counts agree);
    # only the data files say otherwise: its ACK record, or no PUT record at all.
    ids, qid = _consumed_store(store_path)
    msg_id = ids[0] if which == "consumed" else ids[-1] + 100
    [(file_id, offset, size, _, _)] = scan_files(str(store_path)).puts[ids[0]]
    with index_table(store_path, b"msgs") as (txn, msgs):
        entry = keys.Live(keys.STATE_LIVE, qid, 4, file_id, offset, size, 0, 0)
        txn.put(keys.msg_key(msg_id), keys.pack_live(entry), db=msgs)
    with index_table(store_path, b"order") as (txn, order):
        txn.put(keys.order_key(qid, 4, msg_id), b"", db=order)
    with index_table(store_path, b"queues") as (txn, queues):
        txn.put(b"q", keys.QUEUE_VALUE.pack(qid, 5), db=queues)

    def one_more(account: FileAccount) -> None:
        account.live_messages += 1
        account.live_bytes += size

    _edit_account(store_path, file_id, one_more)
    assert _verify_trusted(store_path) == [
        f"message {msg_id} is live in the index but acked or absent in the data files"
    ]


def test_verify_leaves_to_the_scan_what_a_damaged_file_hides(store_path: Path) -> None:
    # File 1's last record (message 2's PUT) is damaged: that message and the ACKs
    # of file 1's messages the index does not count are not differences.
    _two_file_store(store_path)
    _edit_account(store_path, 1, lambda account: account.acked_in.clear())
    path = store_path / data_file_name(1)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    [damaged] = [f for f in scan_files(str(store_path)).files if f.damage]
    assert damaged.file_id == 1
    assert _verify_trusted(store_path) == [
        # The index's own entries and counts still disagree with its account of file 2.
        "file 2's account in the index says needed ACK marks 1 (its index entries add up to 0)"
    ]


# ... and against data files changed behind an open store's back.


def test_verify_names_a_data_file_the_index_does_not_know(store_path: Path) -> None:
    _consumed_store(store_path)
    with open_store(store_path) as store:
        write_data_file(store_path, 9, [put_record(1000)])  # behind the open store's back
        assert store.verify() == ["file 9 is on disk but unknown to the index"]


def test_verify_names_an_accounted_file_missing_on_disk(store_path: Path) -> None:
    # What the file held is gone with it: its live message and the ACKs its account
    # counts are not differences of their own, as for a file that cannot be read.
    _two_file_store(store_path)
    with open_store(store_path) as store:
        (store_path / data_file_name(1)).unlink()  # behind the open store's back
        assert store.verify() == ["file 1 is accounted but missing on disk"]
