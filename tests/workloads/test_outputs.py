"""Plots, the summary table, the CLI, and that the CLI module stays light to import."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from workload_sizes import Run

import msgcask
from msgcask.cli.bench import bench, demo
from msgcask.workloads import runner
from msgcask.workloads.config import RunConfig
from msgcask.workloads.report import summary, table
from msgcask.workloads.result import space_bound_check
from msgcask.workloads.subjects.msgcask_store import MsgcaskSubject

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(8)
    return head == PNG_MAGIC and os.path.getsize(path) > 2000


def test_plots_are_written(run_tiny: Run) -> None:
    doc, _ = run_tiny("dlq-heavy", peers=["sqlite3"], plots=True, compaction="both")
    assert set(doc["plots"]) == {"space", "latency", "files", "memory"}
    for path in doc["plots"].values():
        assert _is_png(path), path


def test_summary_lists_every_run_and_ratio(run_tiny: Run) -> None:
    doc, _ = run_tiny("steady", peers=["sqlite3"])
    text = summary(doc)
    assert "msgcask[compaction on]" in text and "sqlite3" in text
    assert "ratios msgcask[compaction on] / other" in text
    assert "not measured" not in text
    # A kill -9 reopen that could not be measured says why, not just "-".
    doc["runs"][0]["reopen"]["crash"] = {"seconds": None, "messages": None, "error": "boom"}
    assert "msgcask[compaction on]: reopen after kill -9 not measured: boom" in summary(doc)


def test_table_aligns_columns() -> None:
    lines = table(["name", "value"], [["a", "1"], ["longer", "12345"]]).splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[2].startswith("a ") and lines[2].endswith("    1")


def test_bench_command(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        bench,
        [
            "steady",
            "-n",
            "600",
            "--size",
            "200",
            "--max-file-size",
            "64KiB",
            "--peers",
            "sqlite3",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path),
            "--no-progress",
            "--no-reopen",
            "--interval",
            "0.05",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "put/s" in result.output and "sqlite3" in result.output
    assert (out / "steady.json").is_file()
    assert _is_png(str(out / "steady-space.png"))


def test_bench_one_cpu_runs_every_thread_on_one_cpu(tmp_path: Path) -> None:
    # In a child: confining is process-wide.
    code = (
        "import json, os, sys\n"
        "from click.testing import CliRunner\n"
        "from msgcask.cli.bench import bench\n"
        "r = CliRunner().invoke(bench, ['steady', '-n', '300', '--size', '100', '--peers',"
        " 'sqlite3', '--out', sys.argv[1], '--no-progress', '--no-reopen', '--no-plots',"
        " '--one-cpu'])\n"
        "masks = {len(os.sched_getaffinity(int(t))) for t in os.listdir('/proc/self/task')}\n"
        "print(json.dumps([r.exit_code, r.output, sorted(masks)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    exit_code, output, masks = json.loads(out.stdout)
    assert exit_code == 0, output
    assert "every thread runs on CPU" in output and " one_cpu" in output
    assert masks == [1]
    doc = json.loads((tmp_path / "steady.json").read_text())
    assert doc["params"]["one_cpu"] is True


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--size", "4"], "size must be at least 16"),
        (["--size", "2MiB"], "do not fit in a data file of 1048576 bytes"),
        (["--size", "1GiB"], "do not fit in a data file"),
        (
            ["--size-mix", "--max-file-size", "64KiB"],
            "bodies of 65536 bytes do not fit in a data file of 65536 bytes with their "
            "record's header and headers (512 bytes kept for them): leave out --size-mix, "
            "or raise --max-file-size to at least 66048 bytes",
        ),
        # A size no data file can have names the option and its bounds, not the bodies.
        (
            ["--max-file-size", "0"],
            "Invalid value for '--max-file-size': 0 bytes is too small; msgcask takes data "
            "files of 64 KiB (65536 bytes) to 2 GiB",
        ),
        (["--max-file-size", "65535"], "65535 bytes is too small; msgcask takes data files"),
        (["--max-file-size", "3GiB"], "3221225472 bytes is too large; msgcask takes data"),
        # A valid size too small for the bodies is the bodies' message.
        (
            ["--size", "65025", "--max-file-size", "64KiB"],
            "bodies of 65025 bytes do not fit in a data file of 65536 bytes with their "
            "record's header and headers (512 bytes kept for them): lower --size to at most "
            "65024, or raise --max-file-size to at least 65537 bytes",
        ),
        (["--peers", "sqlite3,sqlite"], "unknown peer 'sqlite'"),
        (["--peers", "all,none"], "'all' and 'none' stand alone and cannot be combined"),
        # Numbers: the option's name and its bounds, NaN and infinity refused.
        (["--interval", "1e-8"], "'--interval': must be 0.01 to 3,600 seconds, not '1e-8'"),
        (["--interval", "nan"], "'--interval': must be 0.01 to 3,600 seconds, not 'nan'"),
        (["--interval", "inf"], "'--interval': must be 0.01 to 3,600 seconds"),
        (["--time-limit", "nan"], "'--time-limit': must be more than 0 and at most 1,000,000,000"),
        (["--time-limit", "inf"], "'--time-limit': must be more than 0"),
        (["--time-limit", "0"], "'--time-limit': must be more than 0"),
        (["--threshold", "0"], "'--threshold': must be more than 0 and at most 1, not '0'"),
        (["--threshold", "nan"], "'--threshold': must be more than 0 and at most 1, not 'nan'"),
        (["--threshold", "1.01"], "'--threshold': must be more than 0 and at most 1"),
        (["--compaction-interval", "soon"], "'--compaction-interval': 'soon' is not a number"),
        (["--size", "infKiB"], "'infKiB' is not a size"),
        (["--max-file-size", "infMiB"], "'infMiB' is not a size"),
        (["--max-store-size", "infGiB"], "'infGiB' is not a size"),
        # The option the user typed, not the library setting it becomes.
        (
            ["--max-store-size", "3MiB"],
            "Invalid value for '--max-store-size': 3145728 bytes is too small; msgcask "
            "needs room for at least 4 data files of --max-file-size: 4 MiB (4194304 bytes)",
        ),
        (
            ["--max-store-size", "255KiB", "--max-file-size", "64KiB"],
            "261120 bytes is too small; msgcask needs room for at least 4 data files of "
            "--max-file-size: 256 KiB (262144 bytes)",
        ),
        (["--max-store-size", "0"], "0 bytes is too small"),
        (["--rounds", "-3"], "rounds must be at least 1"),
        (["--rounds", "0"], "rounds must be at least 1"),
        (["--crash-messages", "-1"], "crash_messages must be 0 to 1000000"),
        (["--crash-messages", "2000000"], "crash_messages must be 0 to 1000000, not 2000000"),
        (["--producers", "100000"], "producers must be 1 to 64, not 100000"),
        (["--consumers", "65"], "consumers must be 1 to 64, not 65"),
        (["-n", "2000", "--batch", "1000"], "does not fit in a data file of 1048576 bytes"),
    ],
)
def test_bench_rejects_bad_values_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    assert says in _refused_before_running(tmp_path, monkeypatch, ["steady", "-n", "10", *args])


def test_a_store_size_below_four_data_files_names_the_option_on_the_command_line_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["steady", "-n", "10", "--max-store-size", "2MiB"]
    assert "max_store_size" not in _refused_before_running(tmp_path, monkeypatch, args)
    # RunConfig's callers named the setting, and read the library's own words.
    with pytest.raises(ValueError, match=r"^max_store_size must be at least 4 data files"):
        RunConfig(max_store_size=2 * 2**20)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # 1,000 bodies of the size mix average about 4.3 MB, whatever the smallest.
        (
            ["steady", "--size-mix", "--batch", "1000"],
            "a batch of 1000 bodies of the size mix",
        ),
        # Each round's high-priority messages are one batch; a round writes within
        # half a message of a data file, consumer's records included, so its puts
        # alone can pass one.
        (
            ["priority-pin", "--size-mix", "--batch", "100000"],
            "a batch of 198 bodies of the size mix",
        ),
    ],
)
def test_bench_refuses_a_size_mix_batch_too_big_for_a_data_file_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    output = _refused_before_running(tmp_path, monkeypatch, args)
    assert says in output
    assert "does not fit in a data file of 1048576 bytes" in output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Past what the runner's ranges of message indices hold: the run failed midway.
        (["steady", "-n", str(10**30)], "messages must be at most 1,000,000,000,000,000"),
        (["deep-queue", "--depth", str(10**30)], "depth must be at most 1,000,000,000,000,000"),
        (["drain-history", "--fill", str(10**16)], "fill must be at most 1,000,000,000,000,000"),
        (["drain-history", "--repeat", str(10**16)], "repeat must be at most 1,000,000"),
        (["priority-pin", "--rounds", str(10**16)], "rounds must be at least 1 and at most"),
        # One message in P is pinned, index P - 1 first: a P past -n pins none.
        (
            ["dlq-heavy", "--pin-every", str(10**23)],
            "pin_every must be at most messages (200,000), or the run pins no message",
        ),
        (["selector-skip", "-n", "10", "--pin-every", "11"], "pin_every must be at most messages"),
        (["dlq-heavy", "--pin-every", "1"], "pin_every must be at least 2"),
        # An option the workload does not read: the run ignored it.
        (["steady", "--window", "5"], "--window is read by slow-consumer only; steady does"),
        (["steady", "--rounds", "3"], "--rounds is read by priority-pin only; steady does"),
        (["dlq-heavy", "--rounds", "3"], "--rounds is read by priority-pin only; dlq-heavy"),
        (["steady", "--pin-every", "3"], "--pin-every is read by dlq-heavy, selector-skip only"),
        (["steady", "--depth", "5"], "--depth is read by deep-queue only"),
        (["steady", "--fill", "5"], "--fill is read by drain-history only"),
        (["steady", "--repeat", "2"], "--repeat is read by drain-history only"),
        (["steady", "--max-deliveries", "5"], "--max-deliveries is read by dlq-heavy only"),
        (["deep-queue", "-n", "200"], "--messages is read by steady, dlq-heavy"),
        (["priority-pin", "--messages", "200"], "priority-pin does not use it: leave it out"),
        (
            ["steady", "--compaction", "off", "--compaction-interval", "5"],
            "--compaction-interval sets the schedule that --compaction off turns off",
        ),
        # With no cap, no pass runs, so nothing reads the threshold.
        (
            ["steady", "--compaction", "off", "--threshold", "0.3"],
            "--threshold is read by compaction passes, which --compaction off runs only "
            "under --max-store-size",
        ),
        (["dlq-heavy", "--compaction", "off", "--threshold", "0.3"], "--threshold is read by"),
        # An option another one given makes the run ignore.
        (
            ["steady", "--no-reopen", "--crash-messages", "5"],
            "--crash-messages sizes the kill -9 measurement that --no-reopen skips",
        ),
        (["steady", "--size-mix", "--size", "512"], "--size-mix draws every body's size"),
        # The clash is named before the size it makes unread is checked.
        (
            ["dlq-heavy", "--size", "10", "--size-mix", "-n", "10"],
            "--size-mix draws every body's size",
        ),
    ],
)
def test_bench_refuses_counts_it_cannot_run_and_options_the_workload_ignores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    assert says in _refused_before_running(tmp_path, monkeypatch, [*args, "--peers", "none"])


class _Ran(Exception):
    """Raised in place of a run, carrying its configuration."""


def _record_run(cfg: RunConfig, *args: object, **kwargs: object) -> None:
    raise _Ran(cfg)


@pytest.mark.parametrize(
    "args",
    [
        ["slow-consumer", "-n", "10", "--window", "5"],
        ["priority-pin", "--rounds", "3"],
        ["deep-queue", "--depth", "5"],
        ["drain-history", "-n", "5", "--fill", "5", "--repeat", "2"],
        ["dlq-heavy", "-n", "10", "--pin-every", "3", "--max-deliveries", "2"],
        ["selector-skip", "-n", "10", "--pin-every", "3"],
        ["selector-skip", "-n", "10", "--pin-every", "10"],  # pins message 9, the last
        ["steady", "-n", "10", "--compaction", "both", "--compaction-interval", "5"],
        ["steady", "-n", "10", "--compaction", "both", "--threshold", "0.3"],
        # A store past its cap compacts with no schedule, copying files below the threshold.
        [
            "steady",
            "-n",
            "10",
            "--compaction",
            "off",
            "--threshold",
            "0.3",
            "--max-store-size",
            "64MiB",
        ],
        ["priority-pin", "--compaction", "off", "--threshold", "0.3"],  # capped by default
        ["steady", "-n", "10", "--crash-messages", "5"],
        ["steady", "-n", "10", "--size-mix", "--no-reopen"],
    ],
)
def test_bench_takes_each_workloads_own_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.setattr(runner, "run_and_write", _record_run)
    result = CliRunner().invoke(bench, [*args, "--peers", "none", "--out", str(tmp_path)])
    assert isinstance(result.exception, _Ran), result.output
    assert result.exception.args[0].workload == args[0]


def test_bench_and_demo_restore_the_sigterm_handler_they_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They end a run on SIGTERM as on Ctrl-C, and only while it runs.
    def previous(signum: int, frame: object) -> None:
        raise AssertionError("not called")

    monkeypatch.setattr(runner, "run_and_write", _record_run)
    before = signal.signal(signal.SIGTERM, previous)
    try:
        for command, args in ((bench, ["steady", "-n", "10"]), (demo, ["-n", "10"])):
            result = CliRunner().invoke(command, [*args, "--peers", "none", "--out", "x"])
            assert isinstance(result.exception, _Ran), result.output
            assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, before)


def test_bench_runs_outside_the_main_thread_without_a_sigterm_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # signal.signal works only in the main thread; elsewhere SIGTERM is left as it is.
    monkeypatch.setattr(runner, "run_and_write", _record_run)
    monkeypatch.chdir(tmp_path)
    results = []
    thread = threading.Thread(
        target=lambda: results.append(CliRunner().invoke(bench, ["steady", "-n", "10"]))
    )
    thread.start()
    thread.join()
    assert isinstance(results[0].exception, _Ran), results[0].output


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("the workload ran: the bad input should have been refused first")


def _refused_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> str:
    """The output of ``msgcask bench ARGS``, which must be a usage error given before
    anything runs or --out is made."""
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, [*args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert not out.exists()
    return result.output


def test_run_and_write_refuses_unusable_directories_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    afile = tmp_path / "afile"
    afile.write_text("")
    cfg = RunConfig(messages=10, progress=False, reopen=False)
    with pytest.raises(ValueError, match=r"cannot write the result in .*Not a directory"):
        runner.run_and_write(cfg, str(afile / "x"))
    with pytest.raises(ValueError, match=r"cannot make the run's stores in .*No such file"):
        runner.run_and_write(cfg, str(tmp_path / "out"), workdir=str(tmp_path / "missing"))
    assert not (tmp_path / "out").exists()  # the work directory is checked first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        (bench, ["steady", "-n", "10", "--out", ""], "--out: the result's directory name is empty"),
        (bench, ["steady", "-n", "10", "--workdir", ""], "--workdir: the work directory's name is"),
        (demo, ["-n", "10", "--out", ""], "--out: the result's directory name is empty"),
    ],
)
def test_an_empty_directory_name_is_a_usage_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: click.Command,
    args: list[str],
    says: str,
) -> None:
    # --out "" said "cannot write the result in : No such file or directory", and
    # --workdir "" made the stores in the current directory.
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(command, [*args, "--peers", "none"])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert list(tmp_path.iterdir()) == []  # nothing made, here nor in ./results


def test_run_and_write_refuses_empty_directory_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig(messages=10, progress=False, reopen=False)
    with pytest.raises(ValueError, match=r"^the result's directory name is empty: give"):
        runner.run_and_write(cfg, "")
    with pytest.raises(ValueError, match=r"^the work directory's name is empty: give"):
        runner.run_and_write(cfg, "out", workdir="")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError], ids=["Ctrl-C", "a failure"])
def test_a_run_that_writes_nothing_leaves_no_out_directory_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: type[BaseException]
) -> None:
    # It left --out made and empty: every directory the run made goes again, the
    # ones that were there before stay.
    def run_stopped(*args: object, **kwargs: object) -> None:
        raise stop("stopped")

    monkeypatch.setattr(runner, "run_workload", run_stopped)
    cfg = RunConfig(messages=10, progress=False, reopen=False)
    (tmp_path / "there").mkdir()
    for out in (tmp_path / "there" / "made" / "too", tmp_path / "there"):
        with pytest.raises(stop):
            runner.run_and_write(cfg, str(out))
    assert [p.name for p in tmp_path.rglob("*")] == ["there"]
    result = CliRunner().invoke(bench, ["steady", "-n", "10", "--out", str(tmp_path / "cli")])
    assert result.exit_code == 1, result.output
    assert [p.name for p in tmp_path.rglob("*")] == ["there"]


def test_a_directory_in_the_results_place_is_refused_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to fail the rename after the whole run: a traceback, and no result.
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    cfg = RunConfig(messages=10, progress=False, reopen=False)
    for name in ("steady.json", "steady.json.tmp"):
        out = tmp_path / name.replace(".", "-")
        (out / name).mkdir(parents=True)
        with pytest.raises(ValueError, match=r"a directory has that name"):
            runner.run_and_write(cfg, str(out))
        result = CliRunner().invoke(bench, ["steady", "-n", "10", "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert "a directory has that name" in result.output
    out = tmp_path / "demo"
    (out / "demo-dlq-heavy.json").mkdir(parents=True)
    result = CliRunner().invoke(demo, ["-n", "10", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "a directory has that name" in result.output


def test_a_store_given_as_the_result_directory_is_refused_and_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mistyped --out naming a store: the result would go among its data files.
    monkeypatch.setattr(runner, "run_workload", _must_not_run)
    store_dir = tmp_path / "store"
    with msgcask.open(store_dir, compaction_interval=None) as store:
        store.queue("q").put(b"kept")
    before = {p.name: p.stat().st_size for p in store_dir.iterdir()}
    result = CliRunner().invoke(bench, ["steady", "-n", "10", "--out", str(store_dir)])
    assert result.exit_code == 2, result.output
    said = (
        f"Error: Invalid value for --out: {store_dir} is a msgcask store (it holds data "
        "files): the result would be written among them. Give another directory, such as "
        "results"
    )
    assert said in result.output.splitlines()
    assert {p.name: p.stat().st_size for p in store_dir.iterdir()} == before


def test_bench_exits_1_when_a_run_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_put(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(MsgcaskSubject, "put", failing_put)
    out = tmp_path / "out"
    args = ["steady", "-n", "100", "--peers", "none", "--no-reopen", "--no-plots"]
    result = CliRunner().invoke(bench, [*args, "--out", str(out), "--workdir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "the disk is on fire" in result.output
    assert "some runs failed" in result.output
    assert (out / "steady.json").is_file()  # the result is written all the same


def test_demo_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        demo,
        [
            "-n",
            "1000",
            "--size",
            "256",
            "--max-file-size",
            "64KiB",
            "--out",
            str(tmp_path),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "msgcask[compaction on]" in result.output
    assert "msgcask[compaction off]" in result.output
    assert "plot space:" in result.output
    doc = json.loads((tmp_path / "demo-dlq-heavy.json").read_text())
    on = next(r for r in doc["runs"] if r["label"] == "msgcask[compaction on]")
    # The closing line gives the final disk/live of each run, as in the result.
    assert f"{on['space']['final_amplification']:.1f} with it)" in result.output
    # One message of 256 bytes stays live (1 in 1,000 is dead-lettered): not "0 KiB".
    off = next(r for r in doc["runs"] if r["label"] == "msgcask[compaction off]")
    assert on["space"]["final_live_payload_bytes"] == 256
    on_disk, off_disk = on["space"]["final_disk_bytes"], off["space"]["final_disk_bytes"]
    assert (
        f"without compaction the store ends {off_disk / 2**20:.1f} MiB on disk, with it "
        f"{on_disk / 2**20:.1f} MiB ({off_disk / on_disk:.1f}x) for 256 bytes of live "
        f"messages (disk/live {off['space']['final_amplification']:.1f} without compaction, "
        f"{on['space']['final_amplification']:.1f} with it)"
    ) in result.output.splitlines()


def test_cli_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, msgcask.cli.bench\n"
        "heavy = [m for m in ('matplotlib', 'persistqueue', 'litequeue', 'diskcache', 'psutil',"
        " 'jsonschema') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_space_bound_is_checked_at_every_sample_after_the_first_pass() -> None:
    mib = 2**20

    def sample(passes: int, data: int, live: int, index: int = 0) -> dict[str, int]:
        return {
            "compaction_passes": passes,
            "data_bytes": data,
            "live_bytes": live,
            "index_bytes": index,
        }

    samples = [
        sample(0, 50 * mib, 1 * mib),  # before the first pass: not counted
        sample(1, 5 * mib, 1 * mib),  # bound at t=0.5: 2 + 3 = 5 MiB
        sample(2, 5 * mib + 1, 1 * mib),
        sample(3, 3 * mib, 0, index=mib),  # within it without the index only
        sample(4, 2 * mib, 0, index=mib),
    ]
    assert space_bound_check(samples, 0.5, mib) == {
        "samples_after_first_pass": 4,
        "samples_over_bound": 1,
        "samples_over_bound_with_index": 2,
    }
    peers = [{"compaction_passes": None, "data_bytes": None, "live_bytes": None}]
    assert space_bound_check(peers, 0.5, mib) == {}


def test_summary_reports_the_space_bound_for_msgcask_runs(run_tiny: Run) -> None:
    doc, _ = run_tiny("dlq-heavy", peers=["sqlite3"], compaction="on")
    (msgcask_run,) = [r for r in doc["runs"] if r["compaction_on"]]
    space = msgcask_run["space"]
    assert 0 <= space["samples_over_bound"] <= space["samples_after_first_pass"]
    assert 0 <= space["samples_over_bound_with_index"] <= space["samples_after_first_pass"]
    assert space["samples_over_bound"] <= space["samples_over_bound_with_index"]
    assert "space bound (data <= live / threshold + 3 files): exceeded in" in summary(doc)
    assert "counting the index file too, in" in summary(doc)
    sqlite_run = next(r for r in doc["runs"] if r["subject"] == "sqlite3")
    assert "samples_over_bound" not in sqlite_run["space"]


def test_the_space_bound_line_counts_its_samples_in_words(run_tiny: Run) -> None:
    # A run sampled rarely (a long --interval) may have one sample after the first pass.
    doc, _ = run_tiny("dlq-heavy", peers=[], compaction="on")
    (run,) = doc["runs"]
    space = run["space"]
    label = "msgcask[compaction on]: space bound (data <= live / threshold + 3 files)"
    n, over, with_index = (
        space["samples_after_first_pass"],
        space["samples_over_bound"],
        space["samples_over_bound_with_index"],
    )
    assert n > 1
    assert (
        f"{label}: exceeded in {over} of {n} samples after the first pass; counting the "
        f"index file too, in {with_index}"
    ) in summary(doc).splitlines()
    p = doc["params"]
    space.update(space_bound_check(run["samples"][-1:], p["threshold"], p["max_file_size"]))
    assert space["samples_after_first_pass"] == 1
    over, with_index = space["samples_over_bound"], space["samples_over_bound_with_index"]
    assert (
        f"{label}: exceeded in {over} of 1 sample after the first pass; counting the "
        f"index file too, in {with_index}"
    ) in summary(doc).splitlines()


def test_the_space_bound_is_left_out_of_a_compaction_off_run(run_tiny: Run) -> None:
    # priority-pin fills max_store_size: space pressure runs passes even with the
    # schedule off, but the bound is compaction's (threshold), so it is not checked.
    doc, _ = run_tiny("priority-pin", peers=[], compaction="off", rounds=24, max_store_size=2**19)
    (run,) = doc["runs"]
    assert run["status"] == "ok", run["errors"] + run["notes"]
    assert run["compaction"]["passes"] > 0  # space pressure's
    assert not any("bound" in key or "first_pass" in key for key in run["space"])
    assert "space bound" not in summary(doc)


def test_the_reopen_after_kill_9_keeps_its_torn_tail_warning_out_of_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import msgcask
    from msgcask.workloads.crash import COUNT_EVERY, kept_out_of_the_log, measure_crash_reopen

    path = tmp_path / "crashed"
    result = measure_crash_reopen("msgcask", str(path), RunConfig(crash_messages=200), True)
    assert result["error"] is None and result["killed_by"] == "SIGKILL"
    assert isinstance(result["recovery_log"], list)
    # It gives the size of the store it reopened: the fill, and what the child put
    # after it until the kill (it reports every COUNT_EVERY puts: the kill may land
    # after the put that completes a hundred and before its report).
    with msgcask.open(path, compaction_interval=None) as store:
        held = len(store.queue(store.queues()[0]))
    assert 200 < result["messages"] <= held <= result["messages"] + COUNT_EVERY
    # The kill may land between two puts: what a reopen does with a torn one.
    with max(path.glob("*.log")).open("ab") as f:
        f.write(b"\x07" * 20)
    capsys.readouterr()
    with kept_out_of_the_log() as kept:
        msgcask.open(path, compaction_interval=None).close()
    assert any("torn or damaged tail" in line for line in kept), kept
    assert "torn" not in capsys.readouterr().err


def test_the_kill_9_child_keeps_a_capped_store_at_its_cap(tmp_path: Path) -> None:
    # --crash-messages past what max_store_size holds: the child makes room by
    # consuming the oldest messages, and is killed with the store full.
    import msgcask
    from msgcask.workloads.crash import COUNT_EVERY, measure_crash_reopen

    path = tmp_path / "capped"
    cfg = RunConfig(crash_messages=1000, max_file_size=64 * 1024, max_store_size=4 * 64 * 1024)
    result = measure_crash_reopen("msgcask", str(path), cfg, True)
    assert result["error"] is None and result["killed_by"] == "SIGKILL", result
    with msgcask.open(path, compaction_interval=None, max_file_size=64 * 1024) as store:
        held = len(store.queue(store.queues()[0]))
    # 1,000 puts of 1 KiB do not fit in 256 KiB: some were consumed to make room.
    # The child's last count may miss the puts since, or one batch it consumed.
    assert abs(held - result["messages"]) <= COUNT_EVERY
    assert held < 1000


def test_the_result_is_kept_when_matplotlib_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # matplotlib is in the bench extra: without it the plots are skipped with a
    # note, and the JSON of a run that took minutes is still written.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "out"
    args = ["steady", "-n", "200", "--size", "64", "--max-file-size", "64KiB", "--peers", "none"]
    args += ["--no-reopen", "--no-progress", "--interval", "0.05"]
    result = CliRunner().invoke(bench, [*args, "--out", str(out), "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "no plots: matplotlib is not installed" in result.output
    with open(out / "steady.json") as f:
        assert json.load(f)["plots"] == {}


def test_msgcask_disk_bytes_are_measured_like_the_peers(tmp_path: Path) -> None:
    # Every file under the store's directory, allocated blocks capped at the apparent
    # size (docs/benchmarks.md): the write head's chunk allocated ahead counts too.
    from msgcask.workloads.subjects.base import directory_bytes

    subject = MsgcaskSubject(
        str(tmp_path / "s"),
        sync="never",
        max_deliveries=None,
        max_file_size=2**20,
        max_store_size=None,
        threshold=0.5,
        compaction=False,
        compaction_interval=1.0,
    )
    subject.open()
    try:
        for _ in range(100):
            subject.put(b"x" * 1024)
        assert subject.disk_bytes() == directory_bytes(subject.path)
        assert subject.disk_bytes() > 2**20  # the allocated head, not only 100 KiB written
    finally:
        subject.close()
