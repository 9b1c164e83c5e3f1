"""The audit: what each data file holds and what keeps it, from the files alone.

The same accounting the store's index keeps (``Store.stats().files``), worked
out again by Spark from the records, so it scales to stores too large to open
on one machine and checks the index from outside:

- a message is live when the store's counted files hold its PUT record and no
  ACK record of it (files a compaction made redundant do not count);
- an ACK is needed while its message's PUT record is in another counted file
  (dropping it would bring the message back on a rebuild);
- a DELIVER is needed when it holds a live message's delivery count: the first
  record, in file order, of the highest count above the PUT record's own.

``live_by_queue`` says which queues' live messages keep each file.

On a store that a process has open, a listed file that the store deletes
before its task reads it (compacted, or emptied by acks) is reported as
``deleted``, and its records are not counted: the figures are then those of a
store that changed while it was read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msgcask.pipeline.failures import task_errors
from msgcask.pipeline.live import counted, live_puts, read_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FILE_COLUMNS = (
    "file_id",
    "kind",
    "size",
    "records",
    "live_messages",
    "live_bytes",
    "needed_acks",
    "damaged_bytes",
    "live_ratio",
    "redundant",
    "deleted",
)


@dataclass
class Audit:
    """``files``: a row per data file (``FILE_COLUMNS``); ``live_by_queue``: a row
    per (file_id, queue) with live messages and bytes; ``totals``: store-wide sums
    (``data_files`` read, ``deleted_files`` deleted by the store before they were).
    Both frames are computed from ``rows``, the store's rows cached in Spark (read
    once): ``release()`` frees them when done."""

    files: DataFrame
    live_by_queue: DataFrame
    totals: dict[str, int]
    rows: DataFrame

    def release(self) -> None:
        self.rows.unpersist()


def audit(
    spark: SparkSession, path: str | os.PathLike[str], partition_bytes: int | None = None
) -> Audit:
    """Audit the store at ``path`` (read-only; safe beside a process using it).
    ``partition_bytes``: data-file bytes a task reads (the source's option)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = read_rows(spark, path, partition_bytes=partition_bytes, deleted_rows=True).cache()
    kept = counted(rows)

    def put_columns(df: DataFrame) -> DataFrame:
        return df.select(
            "msg_id",
            F.col("file_id").alias("put_file"),
            F.col("size").alias("put_size"),
            "queue",
            F.col("deliveries").alias("put_deliveries"),
        )

    puts = put_columns(kept.where(F.col("type") == "put"))
    live = put_columns(live_puts(kept))
    acks = kept.where(F.col("type") == "ack").select("msg_id", "file_id", "offset")
    needed_acks = (
        acks.join(puts.select("msg_id", "put_file"), "msg_id")
        .where(F.col("put_file") != F.col("file_id"))
        .select("file_id", "offset")
        .distinct()
    )
    first_highest = Window.partitionBy("msg_id").orderBy(
        F.col("deliveries").desc(), "file_id", "offset"
    )
    needed_delivers = (
        kept.where(F.col("type") == "deliver")
        .join(live.select("msg_id", "put_deliveries"), "msg_id")
        .where(F.col("deliveries") > F.col("put_deliveries"))
        .withColumn("rank", F.row_number().over(first_highest))
        .where(F.col("rank") == 1)
        .select("file_id", "offset")
    )
    marks = needed_acks.unionByName(needed_delivers).groupBy("file_id").count()
    per_file_live = live.groupBy(F.col("put_file").alias("file_id")).agg(
        F.count("*").alias("live_messages"), F.sum("put_size").alias("live_bytes")
    )
    per_file = rows.groupBy("file_id", "file_kind", "redundant").agg(
        F.sum(F.when(F.col("type") == "file", F.col("size")).otherwise(0)).alias("size"),
        F.count(F.when(~F.col("type").isin("file", "damage", "deleted"), 1)).alias("records"),
        F.sum(F.when(F.col("type") == "damage", F.col("size")).otherwise(0)).alias("damaged_bytes"),
        F.max(F.col("type") == "deleted").alias("deleted"),
    )
    files = (
        per_file.join(per_file_live, "file_id", "left")
        .join(marks.withColumnRenamed("count", "needed_acks"), "file_id", "left")
        .fillna(0, ["records", "live_messages", "live_bytes", "needed_acks", "damaged_bytes"])
        .withColumn(
            "live_ratio",
            F.when(F.col("size") > 0, F.col("live_bytes") / F.col("size")).otherwise(0.0),
        )
        .withColumnRenamed("file_kind", "kind")
        .select(*FILE_COLUMNS)
        .orderBy("file_id")
    )
    live_by_queue = (
        live.groupBy(F.col("put_file").alias("file_id"), "queue")
        .agg(F.count("*").alias("messages"), F.sum("put_size").alias("bytes"))
        .orderBy("file_id", "queue")
    )
    aggregated = files.agg(
        F.count(F.when(~F.col("deleted"), 1)).alias("data_files"),
        F.count(F.when(F.col("deleted"), 1)).alias("deleted_files"),
        F.sum("size").alias("disk_bytes"),
        F.sum("live_bytes").alias("live_bytes"),
        F.sum("live_messages").alias("live_messages"),
        F.sum("needed_acks").alias("needed_acks"),
        F.sum("damaged_bytes").alias("damaged_bytes"),
    )
    try:
        with task_errors():
            summed = aggregated.first()
    except BaseException:
        rows.unpersist()
        raise
    assert summed is not None
    totals = {k: int(v or 0) for k, v in summed.asDict().items()}
    return Audit(files, live_by_queue, totals, rows)
