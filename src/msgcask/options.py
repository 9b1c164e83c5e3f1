"""Store settings: one validated, immutable record (see docs/tuning.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

SYNC_MODES = ("always", "periodic", "never")
MIN_FILE_SIZE = 64 * 1024


def _check_number(name: str, value: object, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


@dataclass(frozen=True, slots=True)
class Options:
    """Settings of an open store. Defaults are the ones of ``msgcask.open``."""

    max_file_size: int = 32 * 2**20
    sync: str = "periodic"
    sync_interval: float = 0.1
    compaction_threshold: float = 0.5
    compaction_interval: float | None = 10.0
    max_store_size: int | None = None
    compaction_budget: int = 64 * 2**20

    def __post_init__(self) -> None:
        for name in ("max_file_size", "compaction_budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int (bytes), got {type(value).__name__}")
        if self.max_file_size < MIN_FILE_SIZE:
            raise ValueError(
                f"max_file_size must be at least {MIN_FILE_SIZE} bytes, got {self.max_file_size}"
            )
        if self.max_file_size > 2**31:
            raise ValueError(f"max_file_size must be at most 2 GiB, got {self.max_file_size}")
        if self.compaction_budget <= 0:
            raise ValueError("compaction_budget must be positive (bytes copied per pass)")
        if not isinstance(self.sync, str):
            raise TypeError(f"sync must be a str, one of {SYNC_MODES}")
        if self.sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, got {self.sync!r}")
        _check_number("sync_interval", self.sync_interval)
        if self.sync_interval <= 0:
            raise ValueError(f"sync_interval must be > 0 seconds, got {self.sync_interval}")
        _check_number("compaction_threshold", self.compaction_threshold)
        if not 0 < self.compaction_threshold <= 1:
            raise ValueError(
                "compaction_threshold must be in (0, 1] (the live fraction below which a "
                f"file is rewritten), got {self.compaction_threshold}"
            )
        _check_number("compaction_interval", self.compaction_interval, allow_none=True)
        if self.compaction_interval is not None and self.compaction_interval <= 0:
            raise ValueError(
                "compaction_interval must be > 0 seconds, or None to turn the schedule off"
            )
        if self.max_store_size is not None:
            if isinstance(self.max_store_size, bool) or not isinstance(self.max_store_size, int):
                raise TypeError("max_store_size must be an int (bytes) or None")
            if self.max_store_size < 4 * self.max_file_size:
                raise ValueError(
                    "max_store_size must be at least 4 data files "
                    f"(4 * max_file_size = {4 * self.max_file_size} bytes), "
                    f"got {self.max_store_size}"
                )
