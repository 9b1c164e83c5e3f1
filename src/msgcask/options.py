"""Store settings: one validated, immutable record (see docs/tuning.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from msgcask.cpu import check_cpus

SYNC_MODES = ("always", "periodic", "never")
MIN_FILE_SIZE = 64 * 1024
MAX_FILE_SIZE_LIMIT = 2**31
# The fewest data files max_store_size must hold (docs/tuning.md, max_store_size).
MIN_STORE_FILES = 4
# Longest intervals: beyond them a background wait or the schedule's next run
# date no longer fits the platform's timers (and no store needs more).
MAX_SYNC_INTERVAL = 3600.0
# Shortest: the flush thread wakes once per interval, even in an idle store. There
# it took 3% of a CPU at 0.001 s, 12% at 0.0001 s, and 80% (a spin: its next
# round is due before its wait starts) at 1e-6 s and below.
MIN_SYNC_INTERVAL = 0.001
MAX_COMPACTION_INTERVAL = 365 * 86400.0
# The schedule counts whole microseconds and takes a zero period for one second;
# below a millisecond, passes would run back to back anyway.
MIN_COMPACTION_INTERVAL = 0.001


def _check_number(name: str, value: object, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number (int or float), got {type(value).__name__}; convert "
            "other number types (NumPy's) with int() or float()"
        )
    if isinstance(value, float) and not math.isfinite(value):  # an int may not fit a float
        raise ValueError(f"{name} must be finite, got {value!r}")


def _check_bytes(name: str, value: object, *, allow_none: bool = False) -> None:
    """A size in bytes: an int. Only ints, as every integer the API takes
    (priorities, CPU numbers): another integer type is refused, not converted."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be an int (bytes){' or None' if allow_none else ''}, got "
            f"{type(value).__name__}; convert other integer types (NumPy's) with int()"
        )


def check_threshold(name: str, value: object) -> None:
    """A compaction threshold: a live fraction in (0, 1]."""
    _check_number(name, value)
    assert isinstance(value, (int, float))
    if not 0 < value <= 1:
        raise ValueError(
            f"{name} must be in (0, 1] (the live fraction below which a file is "
            f"rewritten), got {value}"
        )


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
    keep_data_files: bool = False
    # Any collection of ints is accepted and kept as a frozenset.
    background_cpus: frozenset[int] | None = None

    def __post_init__(self) -> None:
        _check_bytes("max_file_size", self.max_file_size)
        _check_bytes("compaction_budget", self.compaction_budget)
        if self.max_file_size < MIN_FILE_SIZE:
            raise ValueError(
                f"max_file_size must be at least {MIN_FILE_SIZE} bytes, got {self.max_file_size}"
            )
        if self.max_file_size > MAX_FILE_SIZE_LIMIT:
            raise ValueError(f"max_file_size must be at most 2 GiB, got {self.max_file_size}")
        if self.compaction_budget <= 0:
            raise ValueError("compaction_budget must be positive (bytes copied per pass)")
        if not isinstance(self.sync, str):
            raise TypeError(f"sync must be a str, one of {SYNC_MODES}")
        if self.sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, got {self.sync!r}")
        _check_number("sync_interval", self.sync_interval)
        if not MIN_SYNC_INTERVAL <= self.sync_interval <= MAX_SYNC_INTERVAL:
            raise ValueError(
                f"sync_interval must be at least {MIN_SYNC_INTERVAL:g} and at most "
                f"{MAX_SYNC_INTERVAL:g} seconds, got {self.sync_interval}"
            )
        check_threshold("compaction_threshold", self.compaction_threshold)
        _check_number("compaction_interval", self.compaction_interval, allow_none=True)
        if self.compaction_interval is not None and not (
            MIN_COMPACTION_INTERVAL <= self.compaction_interval <= MAX_COMPACTION_INTERVAL
        ):
            raise ValueError(
                f"compaction_interval must be at least {MIN_COMPACTION_INTERVAL} seconds and at "
                f"most {MAX_COMPACTION_INTERVAL:.0f} "
                f"seconds (a year), or None to turn the schedule off; got {self.compaction_interval}"
            )
        if not isinstance(self.keep_data_files, bool):
            raise TypeError(
                f"keep_data_files must be a bool, got {type(self.keep_data_files).__name__}"
            )
        _check_bytes("max_store_size", self.max_store_size, allow_none=True)
        # Frozen: the normalized value goes in the way the dataclass's own __init__ does.
        object.__setattr__(
            self, "background_cpus", check_cpus("background_cpus", self.background_cpus)
        )
        # After every setting's type: a bad type is a TypeError whatever it comes with.
        if self.keep_data_files and (
            self.compaction_interval is not None or self.max_store_size is not None
        ):
            raise ValueError(
                "keep_data_files=True keeps every data file, so nothing may compact: pass "
                "compaction_interval=None and no max_store_size with it"
            )
        least = MIN_STORE_FILES * self.max_file_size
        if self.max_store_size is not None and self.max_store_size < least:
            raise ValueError(
                f"max_store_size must be at least {MIN_STORE_FILES} data files "
                f"({MIN_STORE_FILES} * max_file_size = {least} bytes), "
                f"got {self.max_store_size}"
            )
