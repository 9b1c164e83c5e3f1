"""``msgcask pipeline``: Spark jobs over a store's data files (the ``spark`` extra).

They read the data files only, never the index or the lock, so they run on a
store another process has open, or on a copy of one. ``--master`` takes any
Spark master URL; on a cluster the store's directory must be visible to every
executor at the same path.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from msgcask.cli.bench import FILE_SIZE
from msgcask.errors import Error
from msgcask.options import check_threshold
from msgcask.pipeline.failures import job_failure, spark_cause
from msgcask.pipeline.files import list_data_files
from msgcask.pipeline.outputs import check_report, check_spark_output
from msgcask.pipeline.replay import DEFAULT_PASS_EVERY
from msgcask.pipeline.session import (
    DEFAULT_MASTER,
    QUIET_CONF,
    TERMINAL_CONF,
    running_master,
    spark_session,
)
from msgcask.plural import acks_or_delivery_counts, counted

_STARTED = "msgcask.pipeline.started_spark"  # click meta: the session a command started

MASTER = click.option(
    "--master",
    metavar="URL",
    default=DEFAULT_MASTER,
    show_default=True,
    help="Spark master URL: local[N] on this machine, or a cluster's.",
)
STORE = click.argument("path", metavar="STORE", type=click.Path(exists=True, file_okay=False))


def _spark(master: str):  # type: ignore[no-untyped-def]
    """The session; callers check their inputs first (starting Spark takes seconds)."""
    conf = dict(QUIET_CONF if master.startswith("local") else TERMINAL_CONF)
    # (No PySpark imported yet: no session can be running.)
    started = "pyspark" not in sys.modules or running_master() is None
    try:
        spark = spark_session(master, conf)
    except Error:
        raise
    except ValueError as e:  # refused before the JVM starts
        raise Error(f"cannot start Spark with --master {master!r}: {e}") from e
    except Exception as e:  # PySpark's own: a bad master URL ends the JVM at once
        raise Error(f"cannot start Spark with --master {master!r}: {spark_cause(e)}") from e
    spark.sparkContext.setLogLevel("ERROR")
    if started:
        click.get_current_context().meta[_STARTED] = spark
    return spark


def _check_json_out(store: str, json_out: str | None) -> None:
    """Before the job: a report that cannot be written, or would land in the
    store, is better refused now."""
    if json_out is not None:  # "" too: refused, not taken for no report
        try:
            check_report(store, json_out)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--json") from e


class _SparkJobs(click.Group):
    """A failed Spark job is the command's error message, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except Exception as e:
            # Stopped whatever the error: a msgcask.Error may be one a job raised
            # (a task's, a failed write's).
            _stop_started_spark(ctx)
            failure = job_failure(e)
            if failure is None:
                raise
            raise failure from e


def _stop_started_spark(ctx: click.Context) -> None:
    """Stop the Spark a failed command started, before it says why: left to
    stop as the process exits, its JVM may print the stack of a task it is
    cancelling after the command's error line. (A session that was running
    before the command, in a program that called it, is that program's.)"""
    spark = ctx.meta.pop(_STARTED, None)
    if spark is not None:
        with contextlib.suppress(Exception):  # the job's failure is what to report
            spark.stop()


@click.group(cls=_SparkJobs)
def pipeline() -> None:
    """Spark jobs over a store's data files: audit, export dead letters, sweep
    compaction settings over a recorded workload."""


@pipeline.command()
@STORE
@MASTER
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False), help="Also write the audit here."
)
@click.option(
    "--rows",
    metavar="N",
    default=40,
    show_default=True,
    type=click.IntRange(min=0),
    help="Files the table lists (--json writes them all).",
)
def audit(path: str, master: str, json_out: str | None, rows: int) -> None:
    """Account for every data file from its records: live messages and bytes,
    needed acks and delivery counts, damage, and the queues whose live messages keep
    each file."""
    from msgcask.pipeline.audit import audit as run_audit

    list_data_files(path)
    _check_json_out(path, json_out)
    result = run_audit(_spark(master), path)
    files = [r.asDict() for r in result.files.collect()]
    by_queue: dict[int, list[dict[str, Any]]] = {}
    for r in result.live_by_queue.collect():
        by_queue.setdefault(r.file_id, []).append(
            {"queue": r.queue, "messages": r.messages, "bytes": r.bytes}
        )
    result.release()
    t = result.totals
    ratio = f"{t['disk_bytes'] / t['live_bytes']:.1f}" if t["live_bytes"] else "-"
    click.echo(
        f"{counted(t['data_files'], 'data file')}, {t['disk_bytes']} bytes on disk; "
        f"{counted(t['live_messages'], 'live message')}, {t['live_bytes']} live bytes "
        f"(disk/live {ratio}); {acks_or_delivery_counts(t['needed_acks'])}; "
        f"{t['damaged_bytes']} damaged bytes"
    )
    if t["deleted_files"]:
        one = t["deleted_files"] == 1
        they, their = ("it was", "its") if one else ("they were", "their")
        click.echo(
            f"note: the store deleted {counted(t['deleted_files'], 'data file')} after "
            f"{they} listed and before {they} read (compacted, or emptied by acks): {their} "
            "records are not counted, and the figures are of a store that changed while it "
            "was read"
        )
    click.echo(
        f"{'file':>10} {'kind':>10} {'size':>10} {'live':>10} {'ratio':>6} {'needed':>6}  kept by"
    )
    newest_journal = max((f["file_id"] for f in files if f["kind"] == "journal"), default=None)
    for f in files[:rows]:
        kept = ", ".join(f"{q['messages']} in {q['queue']}" for q in by_queue.get(f["file_id"], []))
        if f["needed_acks"]:
            kept = ", ".join(filter(None, [kept, acks_or_delivery_counts(f["needed_acks"])]))
        if f["deleted"]:
            kept = "deleted by the store during the audit"
        elif f["redundant"]:
            kept = f"redundant: {f['redundant']}"
        elif f["file_id"] == newest_journal:
            kept = ", ".join(filter(None, [kept, "the newest journal file (the write head)"]))
        click.echo(
            f"{f['file_id']:>10} {f['kind']:>10} {f['size']:>10} {f['live_bytes']:>10} "
            f"{f['live_ratio']:>6.2f} {f['needed_acks']:>6}  {kept or 'nothing'}"
        )
    if len(files) > rows:
        more = counted(len(files) - rows, "more file")
        click.echo(f"... and {more} (--rows, or --json for all)")
    if json_out:
        for f in files:
            f["live_by_queue"] = by_queue.get(f["file_id"], [])
        with open(json_out, "w") as out:
            json.dump({"store": os.path.abspath(path), "totals": t, "files": files}, out, indent=1)
        click.echo(f"audit written to {json_out}")


@pipeline.command("dead-letters")
@STORE
@click.argument("out", type=click.Path())
@MASTER
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "json"]),
    default="parquet",
    show_default=True,
    help="Parquet, or JSON lines.",
)
@click.option(
    "--queue",
    "queues",
    metavar="QUEUE",
    multiple=True,
    help="Export every live message of this queue instead (repeatable).",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace OUT if it exists and holds only an earlier export."
)
def dead_letters(
    path: str, out: str, master: str, fmt: str, queues: tuple[str, ...], overwrite: bool
) -> None:
    """Export the store's dead letters (live messages with an x-dead-letter-from
    header) with their bodies to OUT, a directory Spark writes."""
    from msgcask.pipeline.dead_letters import check_queues, export_dead_letters

    try:
        names = check_queues(list(queues) or None)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--queue") from e
    list_data_files(path)
    try:
        check_spark_output(path, out, overwrite)
    except ValueError as e:
        raise click.ClickException(str(e).replace("overwrite it", "pass --overwrite")) from e
    count = export_dead_letters(_spark(master), path, out, fmt, names, overwrite)
    # --queue exports every live message of those queues, dead letter or not.
    what = "dead letter" if names is None else "live message"
    of = "" if names is None else f" of {_queues(names)}"
    click.echo(f"{counted(count, what)}{of} written to {out} ({fmt})")


def _queues(names: list[str]) -> str:
    """'queue DLQ.a' or 'queues DLQ.a, DLQ.b', once each."""
    unique = list(dict.fromkeys(names))
    return f"queue{'s' if len(unique) > 1 else ''} {', '.join(unique)}"


class _ListOf(click.ParamType):
    """A comma-separated list, each value read by ``item``: a bad one is refused
    naming the option."""

    name = "list"

    def __init__(self, item: click.ParamType) -> None:
        self.item = item

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> list[Any]:
        if isinstance(value, list):
            return value
        parts = [part.strip() for part in str(value).split(",") if part.strip()]
        if not parts:
            self.fail(f"{value!r} holds no value: give at least one", param, ctx)
        return [self.item.convert(part, param, ctx) for part in parts]


class _Setting(click.ParamType):
    """A number checked by ``check`` as ``msgcask.open`` checks that setting."""

    name = "number"

    def __init__(self, check: Callable[[float], None]) -> None:
        self.check = check

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a number", param, ctx)
        try:
            self.check(number)
        except (TypeError, ValueError) as e:
            self.fail(str(e), param, ctx)
        return number


def sweep_line(row: dict[str, Any]) -> str:
    """One setting's line of the sweep's table: a row of ``sweep.FIELDS``."""
    return (
        f"{row['compaction_threshold']:>9.2f} {row['max_file_size']:>10} "
        f"{row['max_disk_over_live']:>13.2f} {row['final_disk_over_live']:>6.2f} "
        f"{row['write_amplification']:>9.3f} {row['passes']:>6} {row['files_rewritten']:>9} "
        f"{row['bytes_copied']:>10} {row['seconds']:>7.1f}"
    )


@pipeline.command()
@click.argument("recording", type=click.Path(exists=True, file_okay=False))
@MASTER
@click.option(
    "--thresholds",
    metavar="T,T,...",
    type=_ListOf(_Setting(lambda t: check_threshold("compaction_threshold", t))),
    default="0.25,0.5,0.75",
    show_default=True,
    help="compaction_threshold values, comma-separated.",
)
@click.option(
    "--file-sizes",
    metavar="SIZE,SIZE,...",
    type=_ListOf(FILE_SIZE),  # as every other size option reads it
    default="256KiB,1MiB",
    show_default=True,
    help="max_file_size values, comma-separated, 64 KiB to 2 GiB, in bytes or with KiB/MiB/GiB.",
)
@click.option(
    "--pass-every",
    metavar="N",
    default=DEFAULT_PASS_EVERY,
    show_default=True,
    type=click.IntRange(min=1),
    help="Records replayed between two runs of the scheduled compaction (records a "
    "compaction_interval sees); it also starts early when a pass is due.",
)
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False), help="Also write the rows here."
)
def sweep(
    recording: str,
    master: str,
    thresholds: list[float],
    file_sizes: list[int],
    pass_every: int,
    json_out: str | None,
) -> None:
    """Replay the workload recorded in RECORDING (a store written with
    keep_data_files=True) under every pair of settings, one Spark task each."""
    from msgcask.pipeline.sweep import check_recording, replays, settings

    grid = settings(thresholds, file_sizes)  # each value checked as the options were read
    _check_json_out(recording, json_out)
    try:
        check_recording(recording, grid)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--file-sizes") from e
    # Checked once, here, before Spark starts: the check parses the whole recording.
    rows = [r.asDict() for r in replays(_spark(master), recording, grid, pass_every).collect()]
    click.echo(
        f"{'threshold':>9} {'file size':>10} {'max disk/live':>13} {'final':>6} "
        f"{'write amp':>9} {'passes':>6} {'rewritten':>9} {'copied':>10} {'seconds':>7}"
    )
    for r in rows:
        click.echo(sweep_line(r))
    unfaithful = [
        r for r in rows if r["gets_out_of_order"] or r["acks_not_replayed"] or r["damaged_records"]
    ]
    if unfaithful:
        r = unfaithful[0]
        click.echo(
            f"note: the replay differs from the recording: {r['gets_out_of_order']} gets "
            f"returned another message, {r['acks_not_replayed']} acks of undelivered messages "
            f"were not replayed, {r['damaged_records']} damaged records were skipped "
            "(see docs/pipeline.md)"
        )
    counts = sorted({r["records"] for r in rows})
    if len(counts) == 1:
        click.echo(f"{counted(counts[0], 'record')} replayed per setting")
    else:
        click.echo(
            f"note: the settings replayed {counts[0]} to {counts[-1]} records: the recording "
            "was written to while the sweep ran; sweep a closed recording"
        )
    if json_out:
        with open(json_out, "w") as out:
            json.dump({"recording": os.path.abspath(recording), "rows": rows}, out, indent=1)
        click.echo(f"sweep written to {json_out}")
