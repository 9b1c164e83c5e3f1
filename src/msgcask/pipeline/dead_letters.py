"""Export dead letters: the live messages a store dead-lettered, with their
bodies, to Parquet or JSON lines, for a person or another system to look at.

A dead letter is a live message whose headers say where it came from
(``x-dead-letter-from``, set when a nack moves a message past its queue's
``max_deliveries``); ``queues`` instead takes every live message of the
queues named (a dead-letter queue that also receives messages by other means).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from msgcask import validate
from msgcask.errors import Error
from msgcask.pipeline.failures import task_errors, write_failure
from msgcask.pipeline.files import local_directory_of, path_text
from msgcask.pipeline.live import counted, read_rows
from msgcask.pipeline.outputs import check_spark_output, written_beside

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMATS = ("parquet", "json")
COLUMNS = (
    "msg_id",
    "queue",
    "dead_letter_from",
    "original_id",
    "priority",
    "deliveries",
    "headers",
    "body",
    "file_id",
    "offset",
)


def check_queues(queues: object) -> list[str] | None:
    """``queues`` as ``dead_letters`` takes it: None, or a list of at least one
    queue name, each one a store can have (``Store.queue`` checks them alike).
    A name no queue can have, or none at all, would only ever export nothing."""
    if queues is None:
        return None
    names = [
        validate.queue_name(q) for q in validate.sequence("queues", queues, "queue names (or None)")
    ]
    if not names:
        raise ValueError(
            "queues=[] names no queue: pass None to export the dead letters (by their "
            "x-dead-letter-from header), or the queues whose live messages to export"
        )
    return names


def dead_letters(
    spark: SparkSession,
    path: str | os.PathLike[str],
    queues: list[str] | None = None,
    partition_bytes: int | None = None,
) -> DataFrame:
    """The dead letters of the store at ``path`` (``COLUMNS``), oldest first.
    ``deliveries`` is the highest count of its DELIVER records and of the PUT
    record recovery keeps (other copies' counts are not read, as in recovery);
    ``partition_bytes``: data-file bytes a task reads (the source's option).

    The store is scanned once, so each data file is read once, by one task: a
    scan of its PUTs and another of its ACKs would read a file that is being
    written at two moments, and could pair a PUT with the ACKs of an earlier one."""
    queues = check_queues(queues)
    from pyspark.sql import functions as F

    rows = counted(read_rows(spark, path, payload=True, partition_bytes=partition_bytes))
    kind = F.col("type")
    if queues:
        wanted = F.col("queue").isin(queues)
    else:
        wanted = F.col("headers").getItem("x-dead-letter-from").isNotNull()
    put_fields = ("queue", "priority", "deliveries", "headers", "body", "file_id", "offset")
    by_id = (
        # Only the wanted PUTs (and so their bodies) go through the shuffle.
        rows.where(((kind == "put") & wanted) | kind.isin("ack", "deliver"))
        .groupBy("msg_id")
        .agg(
            # Of several PUT records of one id (copies), the one recovery keeps:
            # the first read, oldest file first. Which one comes first in a
            # group is up to the shuffle.
            F.min_by(
                F.struct(*put_fields),
                F.when(kind == "put", F.struct("file_id", "offset")),
            ).alias("put"),
            F.count(F.when(kind == "ack", 1)).alias("acks"),
            F.max(F.when(kind == "deliver", F.col("deliveries"))).alias("delivered"),
        )
        .where(F.col("put").isNotNull() & (F.col("acks") == 0))
    )
    return (
        by_id.select("msg_id", "delivered", "put.*")
        .withColumn("deliveries", F.greatest("deliveries", F.coalesce("delivered", F.lit(0))))
        .withColumn("dead_letter_from", F.col("headers").getItem("x-dead-letter-from"))
        .withColumn("original_id", F.col("headers").getItem("x-original-id").try_cast("bigint"))
        .select(*COLUMNS)
        .orderBy("msg_id")
    )


def export_dead_letters(
    spark: SparkSession,
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fmt: str = "parquet",
    queues: list[str] | None = None,
    overwrite: bool = False,
) -> int:
    """Write the dead letters to ``out`` (a directory of ``fmt`` files, as Spark
    writes); return how many. JSON carries bodies as base64, and NULL columns as
    ``null``. ``out`` must not exist unless ``overwrite`` (which replaces it
    whole, so it must hold only what an export writes), and may not be the
    store, be inside it or hold it. The export is written beside ``out`` and
    takes its place once written (``outputs.written_beside``): a job that fails
    leaves ``out`` as it was. One that fails writing (a full disk, say) is a
    ``msgcask.Error`` that says why, and what to do."""
    # The store's local path: the output is checked against it, not its URI.
    path, out = local_directory_of(path, "the store"), path_text(out, "the output")
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if not isinstance(overwrite, bool):  # "false" would be true, and delete ``out``
        raise TypeError(f"overwrite is True or False, not {overwrite!r}")
    queues = check_queues(queues)
    check_spark_output(path, out, overwrite)
    frame = dead_letters(spark, path, queues).cache()  # written and counted: read once
    try:
        with written_beside(spark, out, overwrite) as target:
            writer = frame.write.mode(target.mode)
            if fmt == "json":
                # Every line has every column: Spark leaves a NULL one out (the
                # dead_letter_from of a message a --queue export takes), and a reader
                # that infers the schema from the lines would then not have the column.
                writer = writer.option("ignoreNullFields", "false")
            try:
                with task_errors():
                    getattr(writer, fmt)(target.path)
            except Exception as e:
                cause = write_failure(e)
                if cause is None:
                    raise
                kept = "The export already there is kept" if target.replacing else "Nothing is left"
                raise Error(
                    f"Spark could not write the export to {out}: {cause}. {kept}: once the "
                    "file system there can take it (space, quota, file size limit, "
                    "permissions), or with another output, run it again"
                ) from e
            with task_errors():
                return frame.count()
    finally:
        frame.unpersist()
