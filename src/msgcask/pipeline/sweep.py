"""The compaction sweep: one recorded workload replayed under many settings,
one Spark task per setting (``replay.replay``), so settings run in parallel on
as many cores or executors as there are."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from msgcask import validate
from msgcask.options import MAX_FILE_SIZE_LIMIT, MIN_FILE_SIZE, check_threshold
from msgcask.pipeline.files import local_directory_of
from msgcask.pipeline.replay import (
    DEFAULT_PASS_EVERY,
    ReplayResult,
    Setting,
    check_pass_every,
    largest_put,
    replay,
    whole_journal,
)
from msgcask.pipeline.session import check_session
from msgcask.store.format import FILE_HEADER_SIZE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_SQL_TYPES = {"int": "BIGINT", "float": "DOUBLE"}  # ReplayResult's annotations, as written
FIELDS = [f.name for f in dataclasses.fields(ReplayResult)]
RESULT_SCHEMA = ", ".join(
    f"{f.name} {_SQL_TYPES[str(f.type)]}" for f in dataclasses.fields(ReplayResult)
)


def settings(thresholds: Iterable[float], file_sizes: Iterable[int]) -> list[Setting]:
    """Every pair of a threshold and a file size, checked as ``msgcask.open`` would."""
    thresholds = validate.sequence("thresholds", thresholds, "compaction_threshold values")
    file_sizes = validate.sequence("file_sizes", file_sizes, "max_file_size values (bytes)")
    if not thresholds or not file_sizes:
        raise ValueError("a sweep needs at least one compaction_threshold and one max_file_size")
    for t in thresholds:
        check_threshold("compaction_threshold", t)
    for size in file_sizes:
        check_file_size(size)
    return [
        Setting(float(t), int(s)) for t in sorted(set(thresholds)) for s in sorted(set(file_sizes))
    ]


def check_file_size(size: object) -> None:
    """A max_file_size as ``msgcask.open`` takes it: whole bytes, 64 KiB to 2 GiB."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"max_file_size is a whole number of bytes, not {size!r}")
    if not MIN_FILE_SIZE <= size <= MAX_FILE_SIZE_LIMIT:
        raise ValueError(
            f"max_file_size must be {MIN_FILE_SIZE} to {MAX_FILE_SIZE_LIMIT} bytes, got {size}"
        )


def check_grid(grid: list[Setting]) -> None:
    """Each setting as ``settings`` and ``msgcask.open`` check it: a grid made
    by hand is refused here, not by a replay in a Spark task."""
    if not isinstance(grid, (list, tuple)):
        raise TypeError(f"the grid is a list of Setting, not {type(grid).__name__}")
    if not grid:
        raise ValueError("a sweep needs at least one setting")
    for s in grid:
        if not isinstance(s, Setting):
            raise TypeError(
                f"the grid is a list of Setting (sweep.settings(thresholds, file_sizes) "
                f"makes one), not of {type(s).__name__}: {s!r}"
            )
        check_threshold("compaction_threshold", s.compaction_threshold)
        check_file_size(s.max_file_size)


def check_recording(recording: str, grid: list[Setting]) -> None:
    """Refuse, before any replay starts, a recording that is not a whole
    journal (``msgcask.Error``) and a grid that is empty, holds a setting
    ``msgcask.open`` refuses (``check_grid``) or has a file size too small for a
    recorded message (``ValueError``, ``TypeError``)."""
    check_grid(grid)
    largest = largest_put(whole_journal(recording))
    too_small = [s.max_file_size for s in grid if largest + FILE_HEADER_SIZE > s.max_file_size]
    if too_small:
        raise ValueError(
            f"max_file_size {min(too_small)} cannot hold the recording's largest message "
            f"({largest} bytes as a record): sweep file sizes of at least "
            f"{largest + FILE_HEADER_SIZE} bytes"
        )


def sweep(
    spark: SparkSession,
    recording: str,
    grid: list[Setting],
    pass_every: int = DEFAULT_PASS_EVERY,
) -> DataFrame:
    """A row per setting (``FIELDS``), by threshold then file size. The
    recording and the grid are checked on the driver first
    (``check_recording``), before any task starts. Replay a recording nothing
    writes any more: each task reads it when it runs."""
    check_session(spark)
    check_pass_every(pass_every)
    check_recording(recording, grid)
    return replays(spark, recording, grid, pass_every)


def replays(spark: SparkSession, recording: str, grid: list[Setting], pass_every: int) -> DataFrame:
    """``sweep``'s job, for a recording and grid ``check_recording`` already
    passed: that check parses the whole recording on the driver, so a caller
    that checks before it starts Spark (the command) need not parse it again.
    What costs no parse is checked here too, so that a mistake is said on the
    driver and not by every task: the grid, ``pass_every``, and the recording's
    files (a whole journal)."""
    check_session(spark)
    check_pass_every(pass_every)
    check_grid(grid)
    whole_journal(recording)
    # Each task opens the recording itself, in its executor's working directory
    # (on a cluster, not the command's): a relative path is resolved here, and
    # a file: URI made the path it names.
    recording = os.path.abspath(local_directory_of(recording, "the recording"))
    grid = [Setting(float(s.compaction_threshold), s.max_file_size) for s in grid]

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        for batch in batches:
            results = [replay(recording, grid[i], pass_every).as_dict() for i in batch["id"]]
            if results:
                yield pd.DataFrame(results, columns=FIELDS)

    # One setting a task: range() splits its ids evenly, a partition each, where
    # repartition(n) deals rows round-robin from a random start, giving some
    # tasks two settings to replay one after the other and others none.
    return (
        spark.range(0, len(grid), 1, numPartitions=len(grid))
        .mapInPandas(run, RESULT_SCHEMA)
        # Sorted in one partition: orderBy's range partitioning would first run
        # every replay once more, to sample the rows it sorts.
        .repartition(1)
        .sortWithinPartitions("compaction_threshold", "max_file_size")
    )
