"""Which messages are live, as Spark sees the rows of the ``msgcask`` source:
the rule recovery applies when it rebuilds the index, in DataFrame form."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_rows(
    spark: SparkSession,
    path: str | os.PathLike[str],
    payload: bool = False,
    partition_bytes: int | None = None,
    deleted_rows: bool = False,
) -> DataFrame:
    """The ``msgcask`` source's rows of the store at ``path`` (``partition_bytes``:
    the source's option of that name, its default if None; ``deleted_rows``: a
    file the store deletes before it is read is a ``deleted`` row, where it
    otherwise fails the job). Any SparkSession will do: the source is registered
    on it. A ``spark`` that is no SparkSession, a path that is no store, a ``payload`` or
    ``deleted_rows`` that is no bool, or a bad ``partition_bytes``, raises here
    (``msgcask.Error``, ``ValueError``, ``TypeError``) rather than from inside
    Spark's planner."""
    from msgcask.pipeline.files import list_data_files, path_text
    from msgcask.pipeline.session import with_source

    path = path_text(path, "the store")
    for name, flag in (("payload", payload), ("deleted_rows", deleted_rows)):
        if not isinstance(flag, bool):  # the option would say "1" or "none", or take "true"
            raise TypeError(f"{name} is True or False, not {flag!r}")
    list_data_files(path)
    if partition_bytes is not None and (
        isinstance(partition_bytes, bool)
        or not isinstance(partition_bytes, int)
        or partition_bytes <= 0
    ):
        raise ValueError(f"partition_bytes is a number of bytes > 0, not {partition_bytes!r}")
    spark = with_source(spark)  # after the arguments: what they are is said whatever spark is
    reader = spark.read.format("msgcask").option("payload", str(payload).lower())
    if deleted_rows:
        reader = reader.option("deleted", "row")
    if partition_bytes is not None:
        reader = reader.option("partition_bytes", str(partition_bytes))
    return reader.load(path)


def counted(rows: DataFrame) -> DataFrame:
    """The rows of the files whose records count: not made redundant by a compaction."""
    from pyspark.sql import functions as F

    return rows.where(F.col("redundant").isNull())


def live_puts(counted_rows: DataFrame) -> DataFrame:
    """The PUT rows of live messages: no ACK row of the same id in a counted file."""
    from pyspark.sql import functions as F

    acked = counted_rows.where(F.col("type") == "ack").select("msg_id").distinct()
    return counted_rows.where(F.col("type") == "put").join(acked, "msg_id", "left_anti")
