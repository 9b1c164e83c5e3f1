"""scripts/bootstrap.sh refuses an interpreter asked for by name that it cannot use,
before it touches .venv (it used to fall back to another one without a word)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bootstrap.sh"


def _bootstrap(python: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MSGCASK_PYTHON=python, MSGCASK_SKIP_JAVA="1")
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("kind", ["missing", "too_old"])
def test_an_unusable_msgcask_python_stops_set_up(tmp_path: Path, kind: str) -> None:
    venv = ROOT / ".venv" / "bin" / "python"
    before = venv.stat().st_mtime_ns if venv.exists() else None
    if kind == "missing":
        python = str(tmp_path / "no-such-python")
        expected = "no such interpreter"
    else:
        python = str(tmp_path / "python3.9")
        Path(python).write_text("#!/bin/sh\nexit 1\n")  # fails the 3.11 check
        os.chmod(python, 0o755)
        expected = "is older than 3.11 (or does not run)"
    out = _bootstrap(python)
    assert out.returncode == 1, out.stderr
    assert f"bootstrap: error: MSGCASK_PYTHON={python}" in out.stderr
    assert expected in out.stderr
    assert "creating .venv" not in out.stderr and "removing .venv" not in out.stderr
    if before is not None:
        assert venv.stat().st_mtime_ns == before
