"""bench/compaction_latency.py refuses a command line it would not read in full, before
it measures anything (it used to run, ignoring what followed the repeats)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "compaction_latency.py"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["1", "--only", "backlog", "--bogus"], "'--bogus'"),
        (["1", "2", "--only", "backlog"], "'2'"),
        (["--bogus"], "'--bogus'"),
        (["0", "--only", "backlog"], "'0'"),
        (["1", "--only", "backlog", "--switch-interval", "soon"], "'soon'"),
        (["1", "--only", "backlog", "--switch-interval", "0"], "'0'"),
    ],
)
def test_compaction_latency_refuses_what_it_would_not_read(args: list[str], named: str) -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stdout == "", out.stdout  # nothing measured
    (line,) = out.stderr.splitlines()  # one line, no traceback
    assert named in line and "see --help" in line, line
