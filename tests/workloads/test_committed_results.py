"""The results kept in bench/results/ still match the schema the runner documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from workload_sizes import Run

from msgcask.workloads.result import validate

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
FILES = sorted(RESULTS.glob("*/*/*.json"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(RESULTS)) for p in FILES])
def test_committed_result_matches_the_schema(path: Path) -> None:
    with open(path) as f:
        doc = json.load(f)
    validate(doc)
    assert doc["runs"], "a result without runs"


def test_the_new_fields_are_written(run_tiny: Run) -> None:
    doc, _ = run_tiny("steady", peers=[])
    run = doc["runs"][0]
    for key in ("end_disk_bytes", "settle_seconds", "start_rss_bytes", "peak_rss_anon_bytes"):
        assert key in run, key
    assert "rss_anon_bytes" in run["samples"][0] and "runner_buffer_bytes" in run["samples"][0]
