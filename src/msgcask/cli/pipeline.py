"""``msgcask pipeline``: Spark jobs over a store's data files (the ``spark`` extra).

They read the data files only, never the index or the lock, so they run on a
store another process has open, or on a copy of one. ``--master`` takes any
Spark master URL; on a cluster the store's directory must be visible to every
executor at the same path.
"""

from __future__ import annotations

import json
import os

import click

from msgcask.pipeline.session import DEFAULT_MASTER, QUIET_CONF, spark_session

MASTER = click.option(
    "--master",
    default=DEFAULT_MASTER,
    show_default=True,
    help="Spark master URL: local[N] on this machine, or a cluster's.",
)
STORE = click.argument("path", type=click.Path(exists=True, file_okay=False))


def _spark(master: str):  # type: ignore[no-untyped-def]
    conf = dict(QUIET_CONF) if master.startswith("local") else {}
    spark = spark_session(master, conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@click.group()
def pipeline() -> None:
    """Spark jobs over a store's data files: audit, export dead letters."""


@pipeline.command()
@STORE
@MASTER
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False), help="Also write the audit here."
)
@click.option(
    "--rows", default=40, show_default=True, type=click.IntRange(min=0), help="Files to list."
)
def audit(path: str, master: str, json_out: str | None, rows: int) -> None:
    """Account for every data file from its records: live messages and bytes,
    needed acks, damage, and the queues whose live messages keep each file."""
    from msgcask.pipeline.audit import audit as run_audit

    result = run_audit(_spark(master), path)
    files = [r.asDict() for r in result.files.collect()]
    by_queue: dict[int, list[str]] = {}
    for r in result.live_by_queue.collect():
        by_queue.setdefault(r.file_id, []).append(f"{r.messages} in {r.queue}")
    result.release()
    t = result.totals
    ratio = f"{t['disk_bytes'] / t['live_bytes']:.1f}" if t["live_bytes"] else "-"
    click.echo(
        f"{int(t['data_files'])} data files, {int(t['disk_bytes'])} bytes on disk; "
        f"{int(t['live_messages'])} live messages, {int(t['live_bytes'])} live bytes "
        f"(disk/live {ratio}); {int(t['needed_acks'])} needed acks; "
        f"{int(t['damaged_bytes'])} damaged bytes"
    )
    click.echo(
        f"{'file':>10} {'kind':>10} {'size':>10} {'live':>10} {'ratio':>6} {'acks':>6}  kept by"
    )
    newest_journal = max((f["file_id"] for f in files if f["kind"] == "journal"), default=None)
    for f in files[:rows]:
        kept = ", ".join(by_queue.get(f["file_id"], []))
        if f["needed_acks"]:
            kept = ", ".join(filter(None, [kept, f"{f['needed_acks']} needed acks"]))
        if f["redundant"]:
            kept = f"redundant: {f['redundant']}"
        elif f["file_id"] == newest_journal:
            kept = ", ".join(filter(None, [kept, "the newest journal file (the write head)"]))
        click.echo(
            f"{f['file_id']:>10} {f['kind']:>10} {f['size']:>10} {f['live_bytes']:>10} "
            f"{f['live_ratio']:>6.2f} {f['needed_acks']:>6}  {kept or 'nothing'}"
        )
    if len(files) > rows:
        click.echo(f"... and {len(files) - rows} more files (--rows, or --json for all)")
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
    "--format", "fmt", type=click.Choice(["parquet", "json"]), default="parquet", show_default=True
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    help="Export every live message of this queue instead (repeatable).",
)
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
def dead_letters(
    path: str, out: str, master: str, fmt: str, queues: tuple[str, ...], overwrite: bool
) -> None:
    """Export the store's dead letters (live messages with an x-dead-letter-from
    header) with their bodies to OUT, a directory Spark writes."""
    from msgcask.pipeline.dead_letters import export_dead_letters

    if os.path.exists(out) and not overwrite:
        raise click.ClickException(f"{out} exists: choose another path, or pass --overwrite")
    count = export_dead_letters(_spark(master), path, out, fmt, list(queues) or None, overwrite)
    click.echo(f"{count} dead letters written to {out} ({fmt})")
