"""Tiny workload runs shared by the workload tests (seconds each, no wall-clock asserts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workload_sizes import TINY, Run

from msgcask.workloads.config import RunConfig
from msgcask.workloads.runner import run_and_write


@pytest.fixture
def run_tiny(tmp_path: Path) -> Run:
    """``run_tiny(workload, **overrides)`` -> (result document, JSON path)."""

    def _run(workload: str, plots: bool = False, **overrides: Any) -> tuple[dict[str, Any], str]:
        params = {**TINY, **overrides}
        cfg = RunConfig(workload=workload, **params)
        return run_and_write(
            cfg,
            str(tmp_path / "out"),
            workdir=str(tmp_path),
            plots=plots,
        )

    return _run
