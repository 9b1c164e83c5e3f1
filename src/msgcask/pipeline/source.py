"""The ``msgcask`` Spark data source: ``spark.read.format("msgcask").load(dir)``.

Built on PySpark's Python Data Source API. The driver takes the snapshot of
data files (``files.list_data_files``); runs of consecutive files make up the
partitions, each read by one task in a Python worker, so a store's files are
parsed in parallel. The reader is pickled to the workers: it holds only
paths, and opens each file in ``read``. On a cluster every executor must see
the store's directory at the same path (a shared file system).

Options: ``payload`` ("false" by default): "true" adds the ``body`` column;
``partition_bytes`` (64 MiB): data-file bytes one task reads, in whole files;
``deleted`` ("fail" by default): "row" makes a listed file that the store
deletes before its task reads it a ``deleted`` row instead of failing the job.
Any other option is refused, and so is a ``.schema(...)`` other than the rows' own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from msgcask.pipeline.files import DataFileInfo, list_data_files
from msgcask.pipeline.rows import AT, BODY, COLUMNS, file_rows, schema

NAME = "msgcask"
BATCH_ROWS = 8192  # rows per Arrow batch a task hands to Spark, at most
BATCH_BYTES = 64 * 2**20  # record bytes per Arrow batch, about
_TYPE, _SIZE = AT["type"], AT["size"]
DEFAULT_PARTITION_BYTES = 64 * 2**20  # data-file bytes per task (one file at least)
# Spark hands a source every option it was given, misspelt or meant for another
# source (pathGlobFilter, say): one not named here would be ignored without a word.
OPTIONS = ("path", "payload", "partition_bytes", "deleted")


def _choice(options: dict[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = options.get(name, default).strip().lower()
    if raw not in choices:
        raise ValueError(
            f"option {name!r} of the msgcask data source is "
            f"{' or '.join(map(repr, choices))}, not {raw!r}"
        )
    return raw


class MsgcaskDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        if not options.get("path"):
            raise ValueError(
                'the msgcask data source reads one store: spark.read.format("msgcask").load(dir)'
            )
        unknown = sorted(set(map(str.lower, options)) - set(OPTIONS))
        if unknown:
            raise ValueError(
                f"the msgcask data source has no option {', '.join(map(repr, unknown))}: "
                f"its options are {', '.join(OPTIONS[1:])} (the store's directory is load(dir))"
            )
        self.payload = _choice(options, "payload", ("true", "false"), "false") == "true"
        self.deleted_row = _choice(options, "deleted", ("fail", "row"), "fail") == "row"
        raw = options.get("partition_bytes", str(DEFAULT_PARTITION_BYTES))
        try:
            self.partition_bytes = int(raw)
        except ValueError:
            self.partition_bytes = 0
        if self.partition_bytes <= 0:
            raise ValueError(
                f"option 'partition_bytes' of the msgcask data source is a number of bytes > 0, "
                f"not {raw!r}"
            )

    def schema(self) -> str:
        return schema(self.payload)

    def reader(self, schema: Any) -> DataSourceReader:
        check_schema(schema, self.payload)
        files = list_data_files(self.options["path"])
        return MsgcaskReader(files, self.payload, self.partition_bytes, self.deleted_row)


def check_schema(given: Any, payload: bool) -> None:
    """Refuse a schema given with ``.schema(...)`` that is not the rows' own: the
    rows do not change to fit it, and the job would fail in a worker instead."""
    wanted = [(n, t.replace(" ", "").lower()) for n, t in COLUMNS if payload or n != BODY]
    if [(f.name, f.dataType.simpleString()) for f in given.fields] != wanted:
        raise ValueError(
            "the msgcask data source's columns are fixed (docs/pipeline.md): leave out "
            ".schema(...) and select the columns wanted from the rows"
        )


class FilesPartition(InputPartition):
    """Consecutive data files read by one task."""

    def __init__(self, files: list[DataFileInfo]) -> None:
        super().__init__(files[0].file_id)
        self.files = files


class MsgcaskReader(DataSourceReader):
    def __init__(
        self,
        files: list[DataFileInfo],
        payload: bool,
        partition_bytes: int,
        deleted_row: bool = False,
    ) -> None:
        self.files = files
        self.payload = payload
        self.partition_bytes = partition_bytes
        self.deleted_row = deleted_row

    def partitions(self) -> list[InputPartition]:
        """Files grouped up to ``partition_bytes`` a task: each task costs tens of
        milliseconds whatever it reads, so a task per small file would cost more
        than the parsing."""
        parts: list[InputPartition] = []
        group: list[DataFileInfo] = []
        size = 0
        for info in self.files:
            if group and size + info.size > self.partition_bytes:
                parts.append(FilesPartition(group))
                group, size = [], 0
            group.append(info)
            size += info.size
        if group:
            parts.append(FilesPartition(group))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches, which Spark takes faster than rows of tuples."""
        import pyarrow as pa

        assert isinstance(partition, FilesPartition)
        schema = arrow_schema(self.payload)
        rows = itertools.chain.from_iterable(
            file_rows(f, self.payload, self.deleted_row) for f in partition.files
        )
        for chunk in _batches(rows):
            columns = zip(*chunk, strict=True)
            arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _batches(rows: Iterator[tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    """Rows in lists of at most BATCH_ROWS rows and about BATCH_BYTES bytes of
    records (an Arrow ``binary`` column holds at most 2 GiB)."""
    chunk: list[tuple[Any, ...]] = []
    size = 0
    for row in rows:
        chunk.append(row)
        if row[_TYPE] not in ("file", "deleted"):  # rows that hold no bytes read
            size += row[_SIZE]
        if len(chunk) >= BATCH_ROWS or size >= BATCH_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def arrow_schema(payload: bool) -> Any:
    """The rows' schema in Arrow types, exactly as Spark maps the DDL types
    (an Arrow batch of any other type, even ``large_binary``, is refused)."""
    import pyarrow as pa

    types = {
        "BIGINT": pa.int64(),
        "INT": pa.int32(),
        "STRING": pa.string(),
        "BINARY": pa.binary(),
        "MAP<STRING, STRING>": pa.map_(pa.string(), pa.string()),
        "ARRAY<BIGINT>": pa.list_(pa.int64()),
    }
    return pa.schema([(name, types[t]) for name, t in COLUMNS if payload or name != BODY])
