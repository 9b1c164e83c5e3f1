"""Plots, the summary table, the CLI, and that the CLI module stays light to import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from workload_sizes import Run

from msgcask.cli.bench import bench, demo
from msgcask.workloads.report import summary, table

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
            "sqlite3,nope",
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
    assert "skipped nope: unknown peer" in result.output
    assert (out / "steady.json").is_file()
    assert _is_png(str(out / "steady-space.png"))


def test_bench_rejects_bad_values(tmp_path: Path) -> None:
    result = CliRunner().invoke(bench, ["steady", "--size", "4", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "size must be at least 16" in result.output


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
    assert (tmp_path / "demo-dlq-heavy.json").is_file()


def test_cli_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, msgcask.cli.bench\n"
        "heavy = [m for m in ('matplotlib', 'persistqueue', 'litequeue', 'diskcache', 'psutil',"
        " 'jsonschema') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
