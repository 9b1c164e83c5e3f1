"""The ``msgcask`` command refuses bad input with a usage message and an exit
status, never a traceback, and never turns a path that is not a store into one."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hold_store import start_holder

import msgcask
from child_process import run_cli
from disk_files import index_table, listdir_refusing
from msgcask.cli.bench import bench, demo
from msgcask.cli.main import _guess_file_size, main
from msgcask.options import MAX_FILE_SIZE_LIMIT
from msgcask.store.fs import DataFile, FileSystem
from msgcask.workloads import runner


def _run(command: click.Command, args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(command, args)
    # A usage error or ClickException ends in SystemExit; anything else is a crash.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "args", [["stats"], ["why-kept", "{path}", "1"], ["compact"], ["check"], ["check", "--index"]]
)
def test_a_directory_without_data_files_is_not_made_a_store(
    tmp_path: Path, args: list[str]
) -> None:
    empty = tmp_path / "typo"
    empty.mkdir()
    argv = [a.format(path=empty) for a in args]
    if "{path}" not in args:
        argv.append(str(empty))
    code, output = _run(main, argv)
    assert code == 1
    assert "not a store" in output
    assert list(empty.iterdir()) == []


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with msgcask.open(path, compaction_interval=None) as store:
        store.queue("q").put(b"kept")
    return path


@pytest.mark.parametrize(
    "args",
    [["check"], ["check", "--index"], ["stats"], ["compact"], ["why-kept", "{path}", "1"]],
)
def test_a_store_directory_that_cannot_be_listed_is_an_error_message(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.setattr(os, "listdir", listdir_refusing(store_dir))
    argv = [a.format(path=store_dir) for a in args]
    if "{path}" not in args:
        argv.append(str(store_dir))
    code, output = _run(main, argv)
    assert code == 1, output
    assert f"cannot list {store_dir}: Permission denied" in output
    assert "Check the permissions" in output
    monkeypatch.undo()
    with msgcask.open(store_dir, compaction_interval=None) as store:
        assert store.queue("q").get(block=False).body == b"kept"


@pytest.mark.parametrize(
    "args",
    [
        ["compact", "--threshold", "nan"],
        ["stats", "--max-file-size", "99999999999"],
        ["check", "--index", "--max-file-size", "99999999999"],
        # Without --index the store is not opened: the size would be ignored.
        ["check", "--max-file-size", "65536"],
    ],
)
def test_bad_options_are_usage_errors(store_dir: Path, args: list[str]) -> None:
    before = sorted(p.name for p in store_dir.iterdir())
    code, output = _run(main, [*args, str(store_dir)])
    assert code == 2, output
    assert "Error: " in output and "Traceback" not in output
    assert sorted(p.name for p in store_dir.iterdir()) == before
    with msgcask.open(store_dir, compaction_interval=None) as store:
        assert store.queue("q").get(block=False).body == b"kept"


@pytest.mark.parametrize("size", ["64KiB", "64k", "65536"])
def test_max_file_size_takes_a_unit_as_bench_does(store_dir: Path, size: str) -> None:
    code, output = _run(main, ["stats", "--max-file-size", size, str(store_dir)])
    assert code == 0, output
    assert "live         1 message," in output


def test_a_max_file_size_out_of_bounds_says_the_bounds(store_dir: Path) -> None:
    code, output = _run(main, ["compact", "--max-file-size", "1KiB", str(store_dir)])
    assert code == 2, output
    assert "1024 bytes is too small; msgcask takes data files of 64 KiB" in output
    with msgcask.open(store_dir, compaction_interval=None) as store:
        assert store.queue("q").get(block=False).body == b"kept"


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        (demo, ["--messages", "0"], "messages must be at least 1"),
        (demo, ["--size", "-5"], "'-5' is not a size"),
        (
            demo,
            ["--max-file-size", "1"],
            "Invalid value for '--max-file-size': 1 byte is too small; msgcask takes data "
            "files of 64 KiB (65536 bytes)",
        ),
        (demo, ["--size", "70000", "--max-file-size", "64KiB"], "bodies of 70000 bytes do not fit"),
        # A command line cannot pass None: the library's "or None to turn the schedule
        # off" becomes the option's bounds (--compaction off turns the schedule off).
        (
            bench,
            ["dlq-heavy", "--compaction-interval", "0"],
            "'--compaction-interval': must be 0.001 to 31,536,000 seconds, not '0'",
        ),
        (
            bench,
            ["dlq-heavy", "--compaction-interval", "nan"],
            "'--compaction-interval': must be 0.001 to 31,536,000 seconds, not 'nan'",
        ),
        # Past the 16-bit delivery count; small, so that a run that starts ends soon.
        (
            bench,
            ["dlq-heavy", "--max-deliveries", "65536", "-n", "20", "--peers", "none"],
            "max_deliveries must be at most 65535",
        ),
    ],
)
def test_bad_run_settings_are_usage_errors(
    tmp_path: Path, command: click.Command, args: list[str], says: str
) -> None:
    out = tmp_path / "out"
    code, output = _run(command, [*args, "--out", str(out)])
    assert code == 2, output
    assert says in output
    assert not out.exists()


def test_check_names_a_file_with_a_damaged_header_once(store_dir: Path) -> None:
    data_file = next(store_dir.glob("*.log"))
    with data_file.open("r+b") as f:
        f.write(b"NOTMAGIC")
    code, output = _run(main, ["check", str(store_dir)])
    assert code == 1
    problems = [line for line in output.splitlines() if "bad magic" in line]
    assert len(problems) == 1, output
    assert problems[0].count(str(data_file)) == 1, problems[0]


def test_check_says_when_a_torn_tail_is_mostly_space_allocated_ahead(store_dir: Path) -> None:
    # A crash mid-append in a preallocated head leaves a few written bytes, then
    # zeros up to the allocated end: the tail's size alone reads like much damage.
    head = max(store_dir.glob("*.log"))
    size = head.stat().st_size
    with head.open("r+b") as f:
        f.seek(size)
        f.write(b"\x01" * 12 + bytes(100_000))
    code, output = _run(main, ["check", str(store_dir)])
    assert code == 1
    assert f"torn tail at offset {size}, 100012 bytes" in output, output
    assert "the last 100000 of them zero bytes: space allocated ahead of writes" in output


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("the workload ran: the bad directory should have been refused first")


@pytest.mark.parametrize(
    ("command", "args", "option"),
    [
        (bench, ["steady", "--out", "{file}/x"], "--out"),
        (bench, ["steady", "--out", "/proc/msgcask-out"], "--out"),
        (bench, ["steady", "--workdir", "{missing}/x", "--out", "{out}"], "--workdir"),
        (bench, ["steady", "--workdir", "{file}/x", "--out", "{out}"], "--workdir"),
        (demo, ["--out", "{file}/x"], "--out"),
    ],
)
def test_unusable_directories_are_usage_errors_before_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: click.Command,
    args: list[str],
    option: str,
) -> None:
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    afile = tmp_path / "afile"
    afile.write_text("kept")
    names = {"file": afile, "missing": tmp_path / "missing", "out": tmp_path / "out"}
    argv = [a.format(**names) for a in args] + ["-n", "200", "--peers", "none"]
    code, output = _run(command, argv)
    assert code == 2, output
    assert f"Invalid value for {option}: cannot" in output, output
    assert "this user can write in" in output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing made
    assert afile.read_text() == "kept"


@pytest.mark.parametrize("command", [bench, demo])
def test_an_out_that_is_a_store_is_refused_before_the_run(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch, command: click.Command
) -> None:
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    before = sorted(p.name for p in store_dir.iterdir())
    args = ["steady"] if command is bench else []
    code, output = _run(command, [*args, "-n", "200", "--peers", "none", "--out", str(store_dir)])
    assert code == 2, output
    assert f"Invalid value for --out: {store_dir} is a msgcask store" in output, output
    assert sorted(p.name for p in store_dir.iterdir()) == before


@pytest.mark.parametrize("args", [["--size", "infKiB"], ["--max-file-size", "infMiB"]])
def test_demo_refuses_infinite_sizes(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "out"
    code, output = _run(demo, [*args, "--out", str(out)])
    assert code == 2, output
    assert "is not a size" in output
    assert not out.exists()


def test_the_guess_of_max_file_size_skips_what_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "0000000001.log").symlink_to(tmp_path / "nonexistent")
    (tmp_path / "0000000002.log").mkdir()
    os.mkfifo(tmp_path / "0000000003.log")
    (tmp_path / "0000000004.log").write_bytes(bytes(100_000))
    assert _guess_file_size(str(tmp_path)) == 128 * 1024


def test_the_guess_of_max_file_size_is_capped_at_the_options_limit(tmp_path: Path) -> None:
    # A data file grown past any setting (appended to by hand) must not make the
    # guess a size the store refuses.
    with (tmp_path / "0000000001.log").open("wb") as f:
        f.truncate(3 * 2**30)  # sparse: takes no room
    assert _guess_file_size(str(tmp_path)) == MAX_FILE_SIZE_LIMIT


@pytest.mark.parametrize("args", [["stats"], ["why-kept", "1"], ["compact"], ["check", "--index"]])
def test_a_dangling_link_named_like_a_data_file_is_no_traceback(
    tmp_path: Path, store_dir: Path, args: list[str]
) -> None:
    # A file the store's owner deleted while the guess looked at it behaves the
    # same way: the store is open elsewhere, and the open must say so.
    holder = start_holder(store_dir)
    try:
        (store_dir / "0000000003.log").symlink_to(tmp_path / "nonexistent")
        argv = [args[0], str(store_dir), *args[1:]]
        code, output = _run(main, argv)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(60)
    if args[0] == "check":
        assert code == 1, output
        assert "index not checked: the store is open in process" in output
        assert "symbolic link to a missing file" in output
    else:
        assert code == 1, output
        assert "open in another process" in output, output


def test_check_index_inspects_a_copy_of_a_held_store_and_leaves_the_holder_alone(
    tmp_path: Path, store_dir: Path
) -> None:
    # A backup taken while the store was open: its LOCK names a live process that
    # holds the original, not the copy.
    copy = tmp_path / "backup"
    holder = start_holder(store_dir)
    try:
        shutil.copytree(store_dir, copy)
        assert (copy / "LOCK").read_text().strip() == str(holder.pid)
        code, output = _run(main, ["check", "--index", str(copy)])
        assert code == 0, output
        assert "open in process" not in output
        assert output.splitlines()[-1] == "ok"
        code, output = _run(main, ["check", "--index", str(store_dir)])
        assert code == 0, output
        assert f"index not checked: the store is open in process {holder.pid}" in output
        # Asking twice left the holder's lock where it was.
        with pytest.raises(msgcask.StoreLockedError, match=f"pid {holder.pid}"):
            msgcask.open(store_dir, compaction_interval=None)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(60)
    with msgcask.open(copy, compaction_interval=None) as store:
        assert [m.body for m in store.queue("held").browse()] == [b"by the holder"]


@pytest.mark.parametrize("index", [[], ["--index"]])
def test_check_reports_a_directory_named_like_a_data_file(
    store_dir: Path, index: list[str]
) -> None:
    odd = store_dir / "0000000009.log"
    odd.mkdir()
    code, output = _run(main, ["check", *index, str(store_dir)])
    assert code == 1, output
    assert f"PROBLEM: {odd}: not a regular file" in output
    assert "1 live message in 2 data files" in output
    assert odd.is_dir()


def test_check_reports_a_fifo_named_like_a_data_file_without_opening_it(
    store_dir: Path,
) -> None:
    # In a child, with a time limit: opening a FIFO for reading waits for a writer.
    fifo = store_dir / "0000000002.log"
    os.mkfifo(fifo)
    run = run_cli("check", str(store_dir), timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"PROBLEM: {fifo}: not a regular file" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("index", [[], ["--index"]])
def test_check_reports_a_data_file_it_cannot_read(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch, index: list[str]
) -> None:
    # Tests run as root, which reads any file: refuse the open the way chmod 000 would.
    locked = next(store_dir.glob("*.log"))
    real_open = FileSystem.open

    def refusing_open(self: FileSystem, path: str, *, writable: bool = True) -> DataFile:
        if path == str(locked):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(self, path, writable=writable)

    monkeypatch.setattr(FileSystem, "open", refusing_open)
    code, output = _run(main, ["check", *index, str(store_dir)])
    assert code == 1, output
    assert f"PROBLEM: {locked}: cannot read: Permission denied" in output
    assert f"{locked}: not read" in output


def test_check_index_lists_the_files_problems_when_the_store_cannot_open(
    store_dir: Path,
) -> None:
    data_file = next(store_dir.glob("*.log"))
    data_file.write_bytes(bytes(range(100)))  # a damaged file header
    code, output = _run(main, ["check", "--index", str(store_dir)])
    assert code == 1, output
    lines = output.splitlines()
    problem = next(i for i, line in enumerate(lines) if line.startswith("PROBLEM:"))
    assert str(data_file) in lines[problem]
    assert "0 live messages in 1 data file" in output
    assert lines[-1].startswith("Error: index not checked: "), output
    assert problem < len(lines) - 1


@pytest.mark.parametrize("content", [b"0\n", b"99999999999999999999\n", b"-5\n", b"\xc2\xb2"])
def test_check_index_ignores_a_lock_without_a_valid_pid(store_dir: Path, content: bytes) -> None:
    (store_dir / "LOCK").write_bytes(content)
    code, output = _run(main, ["check", "--index", str(store_dir)])
    assert code == 0, output
    assert "open in process" not in output
    assert output.splitlines()[-1] == "ok"


def test_check_with_a_lock_that_is_a_directory_is_no_traceback(store_dir: Path) -> None:
    lock = store_dir / "LOCK"
    lock.unlink()
    lock.mkdir()
    code, output = _run(main, ["check", str(store_dir)])
    assert (code, output.splitlines()[-1]) == (0, "ok"), output
    code, output = _run(main, ["check", "--index", str(store_dir)])
    assert code == 1, output
    assert "Error: index not checked: cannot use" in output
    assert "1 live message in 1 data file" in output


def test_check_index_fails_when_the_index_disagrees_with_intact_data_files(
    store_dir: Path,
) -> None:
    # The data files are intact, so a plain check passes; the index has lost the
    # order key of the one live message (as a stale or damaged index could), which
    # only --index can see: it must name the problem and exit 1.
    with msgcask.open(store_dir, compaction_interval=None) as store:
        [message] = store.queue("q").browse()
    with index_table(store_dir, b"order") as (txn, order):
        [key] = list(txn.cursor(db=order).iternext(values=False))
        txn.delete(key, db=order)
    code, output = _run(main, ["check", str(store_dir)])
    assert code == 0, output
    code, output = _run(main, ["check", "--index", str(store_dir)])
    assert code == 1, output
    assert f"PROBLEM: index: live message {message.id} has no order key" in output, output
    assert "ok" not in output.splitlines()


def _contents(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize("file_id", ["0", "7", "99999999999999999999"])
def test_why_kept_of_a_file_the_store_does_not_have_leaves_the_store_as_it_was(
    store_dir: Path, file_id: str
) -> None:
    # Opening the store would write its index (and run recovery) for nothing.
    before = _contents(store_dir)
    code, output = _run(main, ["why-kept", str(store_dir), file_id])
    assert code == 1, output
    assert f"Error: no data file {file_id}; the store has files [1]" in output
    assert _contents(store_dir) == before


@pytest.mark.parametrize("file_id", ["-1", "-12"])
def test_why_kept_of_a_negative_file_id_says_what_file_ids_are(
    store_dir: Path, file_id: str
) -> None:
    # Not "No such option '-1'": a negative number there is a file id that cannot be.
    before = sorted(p.name for p in store_dir.iterdir())
    code, output = _run(main, ["why-kept", str(store_dir), file_id])
    assert code == 2, output
    assert f"Invalid value for 'FILE_ID': {file_id} is not a data file id" in output
    assert "msgcask stats" in output
    assert sorted(p.name for p in store_dir.iterdir()) == before
    # A misspelt option is still one.
    code, output = _run(main, ["why-kept", str(store_dir), "1", "--max-file-sise", "65536"])
    assert code == 2 and "No such option" in output


def test_check_index_names_an_order_key_of_a_message_not_live(store_dir: Path) -> None:
    # The index keeps an order key for a message nothing holds live: the report
    # names the message and its queue, not only a count of keys.
    from msgcask.index import keys

    with msgcask.open(store_dir, compaction_interval=None) as store:
        [message] = store.queue("q").browse()
        qid = store._catalog.queue_ids["q"]
    stray = message.id + 1000
    with index_table(store_dir, b"order") as (txn, order):
        txn.put(keys.order_key(qid, 4, stray), b"", db=order)
    code, output = _run(main, ["check", "--index", str(store_dir)])
    assert code == 1, output
    expected = f"PROBLEM: index: order key of message {stray} in queue 'q', which is not live"
    assert expected in output, output


def test_check_index_names_a_message_whose_delivery_count_is_in_an_unknown_file(
    store_dir: Path,
) -> None:
    from msgcask.index import keys

    with msgcask.open(store_dir, compaction_interval=None) as store:
        [message] = store.queue("q").browse()
    with index_table(store_dir, b"msgs") as (txn, msgs):
        entry = keys.unpack_msg(txn.get(keys.msg_key(message.id), db=msgs))
        assert isinstance(entry, keys.Live)
        live = entry._replace(deliveries=1, deliver_file=77)
        txn.put(keys.msg_key(message.id), keys.pack_live(live), db=msgs)
    code, output = _run(main, ["check", str(store_dir)])  # the data files alone are fine
    assert code == 0, output
    code, output = _run(main, ["check", "--index", str(store_dir)])
    assert code == 1, output
    assert output.splitlines()[1:] == [
        "1 live message in 1 data file",
        f"PROBLEM: index: message {message.id}'s delivery count is in unknown file 77",
    ]
