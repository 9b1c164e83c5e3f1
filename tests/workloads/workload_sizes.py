"""The tiny sizes every workload test runs at."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Small enough for seconds, big enough to span several 64 KiB data files.
TINY: dict[str, Any] = {
    "messages": 1500,
    "size": 256,
    "max_file_size": 64 * 1024,
    "fill": 800,
    "repeat": 2,
    "depth": 2000,
    "window": 50,
    "rounds": 12,
    "interval": 0.05,
    "compaction_interval": 0.2,
    "crash_messages": 300,
    "progress": False,
    "reopen": False,
}

Run = Callable[..., tuple[dict[str, Any], str]]
