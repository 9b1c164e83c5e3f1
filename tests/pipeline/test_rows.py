"""The pipeline's reading of data files, without Spark: every record the store
wrote comes out as a row, damage is a row of its own, and the files a
compaction made redundant are the ones recovery removes."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import msgcask
from msgcask.pipeline.files import list_data_files
from msgcask.pipeline.rows import AT, COLUMNS, file_rows
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import data_file_name
from msgcask.store.manifest_rule import redundant_files

FIELD = AT
SMALL = 2**16


def all_rows(path: Path, payload: bool = False) -> list[tuple]:
    return [row for info in list_data_files(str(path)) for row in file_rows(info, payload)]


def live_from_rows(rows: list[tuple]) -> dict[int, tuple]:
    """Live messages as the rows tell it: PUTs of counted files with no ACK."""
    counted = [r for r in rows if r[FIELD["redundant"]] is None]
    acked = {r[FIELD["msg_id"]] for r in counted if r[FIELD["type"]] == "ack"}
    return {
        r[FIELD["msg_id"]]: r
        for r in counted
        if r[FIELD["type"]] == "put" and r[FIELD["msg_id"]] not in acked
    }


def live_from_store(path: Path) -> dict[int, msgcask.Message]:
    with msgcask.open(path, max_file_size=SMALL, compaction_interval=None) as store:
        return {m.id: m for name in store.queues() for m in store.queue(name).browse()}


def fill(path: Path) -> None:
    """Several files of puts, acks in later files, a delivery count, dead letters."""
    with msgcask.open(path, max_file_size=SMALL, compaction_interval=None) as store:
        work = store.queue("work", max_deliveries=1)
        for i in range(400):
            work.put(b"%d" % i * 50, headers={"n": str(i)}, priority=i % 10)
        for i in range(300):
            message = work.get(block=False)
            if i % 50 == 3:
                work.nack(message)  # delivered max_deliveries times: into DLQ.work
            else:
                work.ack(message)


def test_rows_give_exactly_the_live_messages_and_their_contents(
    tmp_path: Path, data_files: Any
) -> None:
    fill(tmp_path)
    rows = all_rows(tmp_path, payload=True)
    assert all(len(r) == len(COLUMNS) for r in rows)
    live = live_from_rows(rows)
    expected = live_from_store(tmp_path)
    assert sorted(live) == sorted(expected) and len(expected) > 100
    for msg_id, m in expected.items():
        row = live[msg_id]
        assert row[FIELD["body"]] == m.body
        assert row[FIELD["headers"]] == dict(m.headers)
        assert (row[FIELD["queue"]], row[FIELD["priority"]]) == (m.queue, m.priority)
    dead = [r for r in live.values() if r[FIELD["queue"]] == "DLQ.work"]
    assert len(dead) == 6
    assert all(r[FIELD["headers"]]["x-dead-letter-from"] == "work" for r in dead)
    counts = {t: sum(r[FIELD["type"]] == t for r in rows) for t in ("file", "deliver", "damage")}
    assert counts["file"] == len(data_files(tmp_path))
    assert counts["deliver"] == 300 and counts["damage"] == 0


def test_without_payload_there_is_no_body_column(tmp_path: Path) -> None:
    fill(tmp_path)
    rows = all_rows(tmp_path, payload=False)
    assert {len(r) for r in rows} == {len(COLUMNS) - 1}
    assert sorted(live_from_rows(rows)) == sorted(live_from_store(tmp_path))


def test_a_batch_is_the_records_it_holds(tmp_path: Path) -> None:
    """A put_many and a transaction write BATCH records: their rows are the
    records inside, in order, and the BATCH framing has no row of its own."""
    with msgcask.open(tmp_path, compaction_interval=None) as store:
        queue = store.queue("q")
        ids = queue.put_many([b"a", b"bb", b"ccc"])
        delivered = queue.get(block=False)
        with store.transaction() as t:
            t.put("q", b"dddd")
            t.ack(delivered)
    rows = [
        (r[FIELD["type"]], r[FIELD["msg_id"]], r[FIELD["body"]]) for r in all_rows(tmp_path, True)
    ]
    # The transaction (a put, and the ack of the delivered message) comes last.
    assert rows[:5] == [
        ("file", None, None),
        ("put", ids[0], b"a"),
        ("put", ids[1], b"bb"),
        ("put", ids[2], b"ccc"),
        ("deliver", ids[0], None),
    ], rows
    assert [(kind, body) for kind, _, body in rows[5:]] == [("put", b"dddd"), ("ack", None)], rows
    assert rows[6][1] == delivered.id
    # The first put starts after the BATCH record that frames put_many's three.
    first_put = next(r for r in all_rows(tmp_path) if r[FIELD["type"]] == "put")
    assert first_put[FIELD["offset"]] == fmt.FILE_HEADER_SIZE + len(codec.encode_batch_header(3, 0))


def test_the_space_a_write_head_allocates_ahead_is_no_damage(tmp_path: Path) -> None:
    """Read while the store is open: its write head runs on past its records in
    zeros allocated ahead of the writes, which are neither damage nor rows."""
    with msgcask.open(tmp_path, compaction_interval=None) as store:
        ids = [store.queue("q").put(b"x" * 100) for _ in range(5)]
        (head,) = list_data_files(str(tmp_path))
        rows = list(file_rows(head, False))
        ends = max(r[FIELD["offset"]] + r[FIELD["size"]] for r in rows if r[FIELD["type"]] == "put")
        assert rows[0][FIELD["size"]] > ends  # the allocated tail is there to be read
    assert [r[FIELD["type"]] for r in rows] == ["file"] + ["put"] * 5, rows
    assert [r[FIELD["msg_id"]] for r in rows[1:]] == ids


def test_a_damaged_record_is_a_damage_row_and_the_rest_are_read(
    tmp_path: Path, data_files: Any
) -> None:
    fill(tmp_path)
    victim = data_files(tmp_path)[0]
    before = [r for r in all_rows(tmp_path) if r[FIELD["file_id"]] == 1]
    target = next(r for r in before if r[FIELD["type"]] == "put" and r[FIELD["offset"]] > 1000)
    raw = bytearray(victim.read_bytes())
    raw[target[FIELD["offset"]] + fmt.RECORD_HEADER_SIZE + 2] ^= 0xFF  # inside its payload
    victim.write_bytes(bytes(raw))
    after = [r for r in all_rows(tmp_path) if r[FIELD["file_id"]] == 1]
    damage = [r for r in after if r[FIELD["type"]] == "damage"]
    assert [(r[FIELD["offset"]], r[FIELD["size"]]) for r in damage] == [
        (target[FIELD["offset"]], target[FIELD["size"]])
    ]
    assert damage[0][FIELD["damage"]] == "checksum mismatch"
    assert len(after) == len(before)  # the record's row became the damage row


def test_a_file_with_a_bad_header_still_has_its_records_read(
    tmp_path: Path, data_files: Any
) -> None:
    fill(tmp_path)
    victim = data_files(tmp_path)[1]
    raw = bytearray(victim.read_bytes())
    raw[0:8] = b"notcask\x00"
    victim.write_bytes(bytes(raw))
    info = next(f for f in list_data_files(str(tmp_path)) if f.path == str(victim))
    rows = list(file_rows(info, False))
    assert info.kind == "unreadable"
    assert rows[1][FIELD["type"]] == "damage" and "bad magic" in rows[1][FIELD["damage"]]
    assert sum(r[FIELD["type"]] == "put" for r in rows) > 10


def compacted_store(path: Path, before: Path, make_sparse: Any) -> tuple[int, list[int]]:
    """A store whose one compaction rewrote several files; ``before`` keeps a
    copy of the directory from just before it. Returns the compacted file's id
    and its victims."""
    with msgcask.open(path, max_file_size=SMALL, compaction_interval=None) as store:
        make_sparse(store.queue("q"), messages=900)
    shutil.copytree(path, before)
    with msgcask.open(path, max_file_size=SMALL, compaction_interval=None) as store:
        assert store.compact(threshold=0.5).files_rewritten >= 2
    compacted = [f for f in list_data_files(str(path)) if f.kind == "compacted"]
    assert len(compacted) == 1
    head = Path(compacted[0].path).read_bytes()[fmt.FILE_HEADER_SIZE :]
    item = next(iter(codec.scan(head, 0)))
    assert isinstance(item, codec.Record)
    return compacted[0].file_id, codec.decode_manifest(head, item.payload_start)


@pytest.mark.parametrize("restored", ["one victim", "every victim"])
def test_files_a_compaction_made_redundant_do_not_count(
    tmp_path: Path, restored: str, make_sparse: Any
) -> None:
    """As if the pass had deleted fewer files (one victim back) or none (every
    victim back) before a crash: the rows leave out what recovery removes."""
    store, before = tmp_path / "store", tmp_path / "before"
    copy_id, victims = compacted_store(store, before, make_sparse)
    back = victims[:1] if restored == "one victim" else victims
    for victim in back:
        name = f"{victim:010d}.log"
        shutil.copy(before / name, store / name)
    files = {f.file_id: f for f in list_data_files(str(store))}
    if restored == "one victim":
        assert files[victims[0]].redundant == f"replaced by compacted file {copy_id}"
        assert not files[copy_id].redundant
    else:
        assert files[copy_id].redundant.startswith("an unfinished compaction's copy")
        assert not any(files[v].redundant for v in victims)
    live = live_from_rows(all_rows(store))
    assert sorted(live) == sorted(live_from_store(store))  # recovery ran: the same rule
    # (An id freed by removing the newest file may come back as the new write head.)
    after = {(f.file_id, f.kind) for f in list_data_files(str(store))}
    removed = {(f, info.kind) for f, info in files.items()} - after
    assert removed == {(f, info.kind) for f, info in files.items() if info.redundant}


def test_a_file_a_compaction_deletes_while_it_is_listed_makes_the_listing_start_again(
    tmp_path: Path, make_sparse: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory listed before a pass, its files opened after the pass swapped
    them: the victims are gone and the listing lacks the compacted file that holds
    their live messages. Skipping the victims would lose them."""
    import msgcask.pipeline.files as files_module

    store, before = tmp_path / "store", tmp_path / "before"
    copy_id, victims = compacted_store(store, before, make_sparse)
    listdir = files_module.os.listdir
    listings = iter([listdir(before)])
    monkeypatch.setattr(files_module.os, "listdir", lambda d: next(listings, None) or listdir(d))
    files = {f.file_id for f in list_data_files(str(store))}
    assert copy_id in files and not files & set(victims)
    assert sorted(live_from_rows(all_rows(store))) == sorted(live_from_store(store))
    # A pass every time: refused, saying what to do.
    monkeypatch.setattr(files_module.os, "listdir", lambda d: listdir(before))
    with pytest.raises(msgcask.Error, match=r"deleted while they were being listed.*a copy"):
        list_data_files(str(store))


def test_redundant_files_judges_copies_oldest_first() -> None:
    manifests = {5: [1, 2], 6: [5, 3], 7: [4]}
    # 5's victims are both here: 5 is an unfinished copy. 6 replaced 5 and 3 (3 is
    # gone): 5 is redundant already. 7's only victim is gone: 7 counts.
    assert redundant_files({1, 2, 5, 6, 7}, [5, 6, 7], manifests.get) == {
        5: "an unfinished compaction's copy: every file it replaced is here"
    }
    assert redundant_files({1, 2, 5, 6}, [5, 6], lambda f: None) == {}
    assert redundant_files({2, 5}, [5], manifests.get) == {2: "replaced by compacted file 5"}


def test_a_directory_without_data_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(msgcask.Error, match="holds no msgcask data files"):
        list_data_files(str(tmp_path))
    with pytest.raises(msgcask.Error, match="not a directory"):
        list_data_files(str(tmp_path / "missing"))


def test_a_relative_store_path_gives_absolute_file_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's workers read the files, and need not share the driver's directory."""
    fill(tmp_path / "store")
    monkeypatch.chdir(tmp_path)
    files = list_data_files("store")
    assert files and all(Path(f.path).is_absolute() and Path(f.path).exists() for f in files)


def test_a_copied_data_file_is_refused_not_counted_twice(tmp_path: Path, data_files: Any) -> None:
    fill(tmp_path)
    shutil.copy(data_files(tmp_path)[1], tmp_path / "0000000099.log")
    with pytest.raises(msgcask.Error, match="header names file 2; the file was renamed or copied"):
        list_data_files(str(tmp_path))


def test_a_directory_named_like_a_data_file_is_a_clear_error(tmp_path: Path) -> None:
    fill(tmp_path)
    (tmp_path / "0000000099.log").mkdir()
    open_fds = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(msgcask.Error, match=r"0000000099\.log: cannot be read as a data file"):
            list_data_files(str(tmp_path))
    assert len(os.listdir("/proc/self/fd")) == open_fds  # no descriptor left open


def test_a_paused_store_still_deletes_a_file_that_empties_and_the_read_says_so(
    tmp_path: Path,
) -> None:
    """store.pause_compaction() stops passes, not the deletion of emptied files
    every sync_interval: the error must not offer the pause as the way out."""
    import time

    with msgcask.open(tmp_path, max_file_size=SMALL, sync_interval=0.01) as store:
        store.pause_compaction()
        q = store.queue("q")
        for _ in range(300):
            q.put(b"x" * 500)
        snapshot = list_data_files(str(tmp_path))
        for _ in range(300):
            q.ack(q.get(block=False))
        deadline = time.monotonic() + 10
        while Path(snapshot[0].path).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not Path(snapshot[0].path).exists()
        with pytest.raises(msgcask.Error, match="was deleted while the store was being read") as e:
            list(file_rows(snapshot[0], False))
    assert "holds nothing needed any more (store.pause_compaction() stops the passes, not" in str(
        e.value
    )


def test_a_file_compaction_deletes_before_it_is_read_fails_the_read(
    tmp_path: Path, make_sparse: Any
) -> None:
    """Its records moved to a file the snapshot does not have: skipping it would
    drop live messages from the count."""
    with msgcask.open(tmp_path, max_file_size=SMALL, compaction_interval=None) as store:
        make_sparse(store.queue("q"), messages=900)
        snapshot = list_data_files(str(tmp_path))
        assert store.compact(threshold=0.9).files_rewritten
    gone = [f for f in snapshot if not Path(f.path).exists()]
    assert gone
    with pytest.raises(msgcask.Error, match="was deleted while the store was being read"):
        list(file_rows(gone[0], False))


def test_a_link_to_nothing_named_as_a_data_file_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not taken for a file deleted while the store was listed: listing again
    would find it every time."""
    fill(tmp_path)
    (tmp_path / data_file_name(999)).symlink_to(tmp_path / "nowhere")
    listed: list[str] = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda d: listed.append(d) or real_listdir(d))
    with pytest.raises(
        msgcask.Error, match=r"log: cannot be read as a data file \(a symbolic link"
    ):
        list_data_files(str(tmp_path))
    assert len(listed) == 1


def test_a_fifo_named_as_a_data_file_is_refused_without_waiting(tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer: the listing must not."""
    fill(tmp_path)
    fifo = tmp_path / data_file_name(999)
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def listing() -> None:
        try:
            list_data_files(str(tmp_path))
        except BaseException as e:
            outcome.append(e)

    reader = threading.Thread(target=listing, daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():
        # Release the listing blocked in open(): a writer at the other end.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=60)
        pytest.fail("the listing waited on the FIFO for a writer")
    assert len(outcome) == 1 and isinstance(outcome[0], msgcask.Error), outcome
    assert f"{fifo}: cannot be read as a data file (not a regular file)" in str(outcome[0])


@pytest.mark.parametrize("record", ["PUT", "ACK", "DELIVER"])
def test_a_message_id_past_bigint_is_an_error_naming_the_file_and_offset(
    tmp_path: Path, record: str
) -> None:
    """Ids in the format are unsigned 64-bit; Spark's BIGINT is signed. The
    largest id it holds is read, the next one is refused, not read as another id."""
    big = 2**63
    encoded = {
        "PUT": codec.encode_put(big, b"q", 0, 0, codec.encode_headers(None), b"body"),
        "ACK": codec.encode_ack(big),
        "DELIVER": codec.encode_deliver(big, 1),
    }[record]
    largest = codec.encode_put(big - 1, b"q", 0, 0, codec.encode_headers(None), b"body")
    path = tmp_path / data_file_name(1)
    path.write_bytes(codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1) + largest + encoded)
    (info,) = list_data_files(str(tmp_path))
    rows = file_rows(info, False)
    assert next(rows)[FIELD["type"]] == "file"
    assert next(rows)[FIELD["msg_id"]] == big - 1
    offset = fmt.FILE_HEADER_SIZE + len(largest)
    with pytest.raises(msgcask.Error) as e:
        next(rows)
    assert str(e.value).startswith(
        f"{path}: the {record} record at offset {offset} holds message id {big}, 2^63 or more"
    )
    assert "read the store with msgcask.open" in str(e.value)


def test_a_file_deleted_before_it_is_read_is_a_deleted_row_when_asked(tmp_path: Path) -> None:
    """For a reader that reports it (the audit): the file's bytes when listed,
    and no other row, where by default the read fails."""
    fill(tmp_path)
    snapshot = list_data_files(str(tmp_path))
    os.remove(snapshot[0].path)
    (row,) = file_rows(snapshot[0], False, deleted_row=True)
    assert (row[FIELD["file_id"]], row[FIELD["type"]]) == (snapshot[0].file_id, "deleted")
    assert row[FIELD["size"]] == snapshot[0].size and len(row) == len(COLUMNS) - 1
    with pytest.raises(msgcask.Error, match="was deleted while the store was being read"):
        list(file_rows(snapshot[0], False))


DEAD_LETTERS_THEN_COMPACT = """
import sys

import msgcask
from msgcask.store import fs

with msgcask.open(sys.argv[1], max_file_size=2**16, compaction_interval=None) as store:
    work = store.queue("work", max_deliveries=1)
    for i in range(900):
        work.put(b"%d" % i * 100)
    for i in range(900):
        message = work.get(block=False)
        work.nack(message) if i % 10 == 0 else work.ack(message)  # a tenth: into DLQ.work
    fs.set_crash_point(sys.argv[2])
    store.compact(threshold=0.9)
"""


def test_the_files_cannot_tell_a_crash_after_the_swaps_commit_from_one_before(
    tmp_path: Path,
) -> None:
    """Why the pipeline may place a message in a victim where an open with the
    index keeps the compacted copy (docs/pipeline.md): killed just before the
    pass commits its swap or just after, a store leaves the same data files,
    byte for byte, and the MANIFEST rule keeps the victims for both; opened, the
    first keeps its victims and the second its copy."""
    import subprocess
    import sys

    from disk_files import written_size

    kept = {}
    for point in ("compact.before_swap_commit", "compact.after_swap_commit"):
        store = tmp_path / point
        run = subprocess.run(
            [sys.executable, "-c", DEAD_LETTERS_THEN_COMPACT, str(store), point],
            capture_output=True,
            timeout=120,
        )
        assert run.returncode == -9, run.stderr  # SIGKILLed at the point
        files = list_data_files(str(store))
        (copy,) = [f for f in files if f.kind == "compacted"]
        (victims,) = [r[FIELD["victims"]] for r in file_rows(copy, False) if r[FIELD["victims"]]]
        assert {f.file_id for f in files if f.redundant} == {copy.file_id}  # victims counted
        assert any(r[FIELD["queue"]] == "DLQ.work" for r in file_rows(copy, False))
        written = {
            f.file_id: Path(f.path).read_bytes()[: written_size(Path(f.path))] for f in files
        }
        with msgcask.open(store, max_file_size=2**16, compaction_interval=None) as opened:
            dead = sorted(m.id for m in opened.queue("DLQ.work").browse())
        # The copy and victims left (an orphan copy's id, the newest, may come
        # back as the new write head's).
        left = list_data_files(str(store))
        on_disk = {f.file_id for f in left if f.kind == "compacted" or f.file_id in victims}
        kept[point] = (written, on_disk, dead, copy.file_id, set(victims))
    (before, kept_before, dead_before, copy, victims), after = kept.values()
    assert (before, dead_before, copy, victims) == (after[0], after[2], after[3], after[4])
    assert len(dead_before) == 90 and victims
    assert kept_before & ({copy} | victims) == victims  # an orphan copy, removed
    assert after[1] & ({copy} | victims) == {copy}  # retired victims, removed
