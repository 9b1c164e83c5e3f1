"""Memory does not grow with queue depth (design brief, guarantee 7).

A child process (tests/api/memory_probe.py) fills one queue to a shallow and then
a twenty times deeper depth, and reports its memory at each, and again after a
reopen that reads the whole queue. Two measures: the Python heap as tracemalloc
counts it, exact, where any per-message object kept (an id in a set, an entry in
a dict) shows as tens of bytes per message; and the anonymous resident memory,
which also covers LMDB's and the C library's allocations but not the mapped
index and data files (page cache, which the guarantee leaves out).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("memory_probe.py")
HEAP_GROWTH_LIMIT = 64 * 1024  # bytes, whatever the depth: measured 0.2-30 KB
ANON_GROWTH_LIMIT = 4 * 1024  # KiB, whatever the depth: measured 1.1-1.3 MiB


@pytest.mark.slow
def test_memory_does_not_grow_with_queue_depth(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    shallow, deep = scaled(5_000), scaled(100_000)
    done = subprocess.run(
        [sys.executable, str(PROBE), str(tmp_path / "store"), str(shallow), str(deep)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr
    first, filled, reopened = (json.loads(line) for line in done.stdout.splitlines())
    assert (first["depth"], filled["depth"], reopened["depth"]) == (shallow, deep, deep)
    for later in (filled, reopened):
        heap_growth = later["traced"] - first["traced"]
        anon_growth = later["anon_kib"] - first["anon_kib"]
        report = f"{deep - shallow} more messages: {first} -> {later}"
        assert heap_growth < HEAP_GROWTH_LIMIT, report
        assert anon_growth < ANON_GROWTH_LIMIT, report
