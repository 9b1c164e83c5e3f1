"""The ``msgcask`` command refuses bad input with a usage message and an exit
status, never a traceback, and never turns a path that is not a store into one."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import msgcask
from msgcask.cli.bench import bench, demo
from msgcask.cli.main import main


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
    [
        ["compact", "--threshold", "nan"],
        ["stats", "--max-file-size", "99999999999"],
        ["check", "--index", "--max-file-size", "99999999999"],
    ],
)
def test_bad_options_are_usage_errors(store_dir: Path, args: list[str]) -> None:
    code, output = _run(main, [*args, str(store_dir)])
    assert code == 2, output
    with msgcask.open(store_dir, compaction_interval=None) as store:
        assert store.queue("q").get(block=False).body == b"kept"


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (demo, ["--messages", "0"]),
        (demo, ["--size", "-5"]),
        (demo, ["--max-file-size", "1"]),
        (bench, ["dlq-heavy", "--compaction-interval", "0"]),
        (bench, ["dlq-heavy", "--compaction-interval", "nan"]),
    ],
)
def test_bad_run_settings_are_usage_errors(
    tmp_path: Path, command: click.Command, args: list[str]
) -> None:
    out = tmp_path / "out"
    code, output = _run(command, [*args, "--out", str(out)])
    assert code == 2, output
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
