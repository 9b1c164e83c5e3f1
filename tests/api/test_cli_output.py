"""What ``msgcask compact`` and ``msgcask why-kept`` print about a real store: each
line true of the store's files, counts in words."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import msgcask
from msgcask.cli.main import main
from msgcask.store import format as fmt
from msgcask.store.fs import DataFile

SMALL_FILE = 64 * 1024
BODY = 5000  # 13 bodies fill a 64 KiB data file


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.output


def _data_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log"))


@pytest.fixture
def consumed_first_file(store_path: Path) -> Path:
    """Files 1 and 2 full, file 3 the write head; every message of file 1 acked (its
    ACK records are in file 3, so nothing needs file 1: kept only by the option)."""
    options = {"max_file_size": SMALL_FILE, "keep_data_files": True}
    with msgcask.open(store_path, compaction_interval=None, **options) as store:
        q = store.queue("q")
        for i in range(30):
            q.put(bytes([i]) * BODY)
        for _ in range(13):
            q.ack(q.get(block=False))
        kept = {f.file_id: f.kept_by for f in store.stats().files}
    assert kept == {1: "nothing (reclaimable)", 2: "13 live messages", 3: "write head"}
    return store_path


def test_compact_says_one_file_deleted_in_the_singular(consumed_first_file: Path) -> None:
    before = _data_bytes(consumed_first_file)
    first = consumed_first_file / "0000000001.log"
    gone = first.stat().st_size
    output = _run(["compact", str(consumed_first_file)])
    assert not first.exists()
    assert _data_bytes(consumed_first_file) == before - gone
    assert re.fullmatch(
        rf"deleted 1 file, rewrote 0, copied 0 bytes in [0-9]+\.[0-9]{{3}} s; "
        rf"data {before} -> {before - gone} bytes\n",
        output,
    ), output


def test_why_kept_says_a_file_nothing_needs_is_deleted_by_the_next_pass(
    consumed_first_file: Path,
) -> None:
    output = _run(["why-kept", str(consumed_first_file), "1"])
    assert output == "nothing: the next compaction pass deletes it\n"
    assert (consumed_first_file / "0000000001.log").exists()  # a look deletes nothing


def test_stats_says_a_file_it_cannot_read_is_kept_for_that(
    consumed_first_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its counts say nothing keeps it, but a pass could not read the consumed PUT
    # records it must find to delete it: stats reads the file to say so.
    real = DataFile.read

    def read(handle: DataFile, offset: int, size: int) -> bytes:
        if handle.path.endswith("0000000001.log") and size > fmt.FILE_HEADER_SIZE:
            raise OSError(errno.EIO, "Input/output error")
        return real(handle, offset, size)

    monkeypatch.setattr(DataFile, "read", read)
    rows = {
        line.split()[0]: line for line in _run(["stats", str(consumed_first_file)]).splitlines()
    }
    assert rows["1"].endswith("  cannot be read (Input/output error): run msgcask check")
    assert rows["3"].endswith("  write head")


def test_why_kept_names_the_write_head_and_a_delivery_count(store_path: Path) -> None:
    # Message 1 is put in file 1 and delivered (not acked) once the journal has moved
    # on to file 2: its delivery count is a DELIVER record in file 2, the write head.
    with msgcask.open(store_path, compaction_interval=None, max_file_size=SMALL_FILE) as store:
        first = store.queue("a").put(b"first")
        q = store.queue("q")
        ids = [q.put(bytes([i]) * BODY) for i in range(20)]
        assert store.queue("a").get(block=False).id == first
        files = {f.file_id: f.live_messages for f in store.stats().files}
    assert sorted(files) == [1, 2]
    head = ids[files[1] - 1 :]  # file 1 holds message 1 and the first of queue q
    output = _run(["why-kept", str(store_path), "2"])
    assert output.splitlines() == [
        "the journal's write head (never deleted while active)",
        *(f"live message {m} in queue 'q'" for m in head),
        f"delivery count of live message {first}",
    ]


@pytest.mark.parametrize(("torn", "words"), [(1, "1 byte"), (12, "12 bytes")])
def test_check_gives_the_length_of_a_torn_tail_in_words(
    store_path: Path, torn: int, words: str
) -> None:
    with msgcask.open(store_path, compaction_interval=None) as store:
        store.queue("q").put(b"kept")
    [head] = sorted(store_path.glob("*.log"))
    good = head.stat().st_size
    with head.open("ab") as f:
        f.write(b"torn record!"[:torn])
    result = CliRunner().invoke(main, ["check", str(store_path)])
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"PROBLEM: {head}: torn tail at offset {good}, {words}: truncated record header\n"
    )
    assert head.stat().st_size == good + torn  # check only reads
