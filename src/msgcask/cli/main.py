"""The ``msgcask`` command: inspect, check and compact stores; run workloads.

``check`` only reads data files, so it is safe on a store that another process
has open (``check --index`` opens the store to verify its index too, which runs
recovery). ``stats``, ``why-kept`` and ``compact`` open the store, so they need
it closed elsewhere (the lock says who holds it).
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import replace

import click

import msgcask
from msgcask.check import ScanReport, scan_files
from msgcask.cli.bench import FILE_SIZE, BoundedFloat, bench, demo
from msgcask.cli.pipeline import pipeline
from msgcask.options import MAX_FILE_SIZE_LIMIT, MIN_FILE_SIZE
from msgcask.plural import counted
from msgcask.stats import unreadable
from msgcask.store.disk_advice import cannot_list
from msgcask.store.filenames import LOCK_FILE, data_file_ids, parse_data_file_name
from msgcask.store.lockfile import lock_holder


class _Commands(click.Group):
    """A store's error (a full disk, a failed index, ...) is the command's
    error message, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except msgcask.Error as e:
            raise click.ClickException(str(e)) from e


@click.group(cls=_Commands)
@click.version_option(msgcask.__version__, prog_name="msgcask")
def main() -> None:
    """msgcask: an embeddable persistent message store."""


def _guess_file_size(path: str) -> int:
    """The store's max_file_size as its files suggest: the largest data file,
    rounded up to a power of two (the setting itself is not stored), and no
    more than the setting allows (a file can outgrow it: appended to by hand)."""
    names = [n for n in os.listdir(path) if parse_data_file_name(n)]
    largest = max((_regular_size(os.path.join(path, n)) for n in names), default=0)
    size = MIN_FILE_SIZE
    while size < min(largest, MAX_FILE_SIZE_LIMIT):
        size *= 2
    return size


def _regular_size(path: str) -> int:
    """The size of the regular file at ``path``; 0 for anything else, or for
    a file gone meanwhile (the open that follows says what is wrong)."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _require_store(path: str) -> list[int]:
    """The ids of the store's data files, in order. These commands inspect
    stores; they never create one (a mistyped path would otherwise become a new,
    empty store)."""
    try:
        names = os.listdir(path)
    except OSError as e:  # say, a directory this user may not read
        raise click.ClickException(cannot_list(path, e)) from e
    ids = data_file_ids(names)
    if not ids:
        raise click.ClickException(
            f"{path} holds no msgcask data files: not a store. Give the directory of an "
            "existing store (msgcask.open creates stores; this command does not)."
        )
    return ids


def _open(path: str, max_file_size: int | None = None, *, look_only: bool = True) -> msgcask.Store:
    """Open the store with its background compaction off. ``look_only`` (all
    but ``compact``): emptied files are not deleted either (``keep_data_files``),
    so a look keeps a recording's whole journal; recovery still removes what a
    crash left unfinished, such as an interrupted pass's copy."""
    _require_store(path)
    return msgcask.open(
        path,
        compaction_interval=None,
        max_file_size=max_file_size or _guess_file_size(path),
        keep_data_files=look_only,
    )


# The store's directory, named STORE in --help as the docs name it.
STORE = click.argument("path", metavar="STORE", type=click.Path(exists=True, file_okay=False))

MAX_FILE_SIZE = click.option(
    "--max-file-size",
    type=FILE_SIZE,  # as bench and demo read it: 65536, 64KiB or 64k
    default=None,
    help="The store's max_file_size, 64 KiB to 2 GiB, in bytes or with KiB/MiB/GiB "
    "(default: guessed from its largest file).",
)


@main.command()
@STORE
@click.option(
    "--index/--no-index",
    default=False,
    help="Also verify the index against the data files. This opens the store and so "
    "runs its recovery; if another process has it open, only the data files are checked.",
)
@MAX_FILE_SIZE
def check(path: str, index: bool, max_file_size: int | None) -> None:
    """Scan every data file for damage; exit 1 if any problem is found."""
    if max_file_size is not None and not index:
        # Only the index check opens the store, with that size: the scan would ignore it.
        raise click.UsageError(
            "--max-file-size is read by check --index only (the plain scan does not open "
            "the store): add --index, or leave it out"
        )
    _require_store(path)
    holder = lock_holder(f"{path}/{LOCK_FILE}")  # before the scan: it may be mid-append
    report = scan_files(path)
    notes: list[str] = []
    if holder is None:
        problems = report.problems
    else:
        problems, notes = report.problems_while_written()
    _echo_files(report)
    for note in notes:
        click.echo(f"note: {note}")
    failed: msgcask.Error | None = None
    if index and holder is None:
        try:
            problems += _index_problems(path, max_file_size)
        except msgcask.Error as e:  # reported after the files' problems, which explain it
            failed = e
    elif index:
        click.echo(f"index not checked: the store is open in {holder}")
    live, files = len(report.live_ids), len(report.files)
    click.echo(f"{counted(live, 'live message')} in {counted(files, 'data file')}")
    for problem in problems:
        click.echo(f"PROBLEM: {problem}", err=True)
    if failed is not None:
        raise click.ClickException(f"index not checked: {failed}")
    if problems:
        sys.exit(1)
    click.echo("ok")


def _echo_files(report: ScanReport) -> None:
    """One line per data file: its size and records, or that it was not read."""
    for f in report.files:
        if f.read_error:
            click.echo(f"{f.path}: not read")
            continue
        counts = ", ".join(f"{n} {k}" for k, n in sorted(f.records.items())) or "no records"
        left_out = f" (not counted: {f.redundant}; the next open removes it)" if f.redundant else ""
        click.echo(f"{f.path}: {f.size} bytes, {counts}{left_out}")


def _index_problems(path: str, max_file_size: int | None) -> list[str]:
    with _open(path, max_file_size) as store:
        return [f"index: {p}" for p in store.verify()]


@main.command()
@STORE
@MAX_FILE_SIZE
def stats(path: str, max_file_size: int | None) -> None:
    """Print sizes, live data and per-file accounting."""
    with _open(path, max_file_size) as store:
        st = store.stats()
        click.echo(f"data files   {st.data_files}")
        click.echo(f"disk bytes   {st.disk_bytes} (data {st.data_bytes}, index {st.index_bytes})")
        click.echo(f"live         {counted(st.live_messages, 'message')}, {st.live_bytes} bytes")
        for name in store.queues():
            click.echo(f"queue        {name}: {len(store.queue(name))}")
        click.echo(f"{'file':>10} {'kind':>9} {'size':>12} {'live':>12} {'msgs':>8}  kept by")
        for f in st.files:
            if not (f.active or f.retired or f.live_messages or f.needed_acks or f.damage):
                f = replace(f, damage=_damage(store, f.file_id))
            click.echo(
                f"{f.file_id:>10} {f.kind:>9} {f.size:>12} {f.live_bytes:>12} "
                f"{f.live_messages:>8}  {f.kept_by}"
            )


def _damage(store: msgcask.Store, file_id: int) -> str:
    """What keeps a file its counts call reclaimable (``FileStats.damage``), read
    from the file: a store opened to look runs no compaction pass to find it."""
    try:
        return store.why_kept(file_id).damage
    except msgcask.CorruptionError as e:
        cause = e.__cause__
        return unreadable(str(cause.strerror or cause) if isinstance(cause, OSError) else str(e))


class _FileIdCommand(click.Command):
    """A negative FILE_ID reads as an option to click ("No such option '-1'"):
    say instead that it is no file id, and where the ids are."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes ``args``
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption:
            negative = next((a for a in given if re.fullmatch(r"-[0-9]+", a)), None)
            if negative is None:
                raise
            raise click.BadParameter(
                f"{negative} is not a data file id: ids are the numbers in the data files' "
                "names, from 1 (0000000001.log is 1); `msgcask stats STORE` lists them",
                ctx=ctx,
                param_hint="'FILE_ID'",
            ) from None


@main.command("why-kept", cls=_FileIdCommand)
@STORE
@click.argument("file_id", type=int)
@MAX_FILE_SIZE
def why_kept(path: str, file_id: int, max_file_size: int | None) -> None:
    """Say which live messages, needed acks and delivery counts keep data file FILE_ID."""
    ids = _require_store(path)
    if file_id not in ids:  # said without opening the store, which writes its index
        raise click.ClickException(f"no data file {file_id}; the store has files {ids}")
    with _open(path, max_file_size) as store:
        try:
            report = store.why_kept(file_id)
        except ValueError as e:
            raise click.ClickException(str(e)) from e
    if report.active:
        click.echo("the journal's write head (never deleted while active)")
    for queue, msg_id in report.live_messages:
        click.echo(f"live message {msg_id} in queue {queue!r}")
    for msg_id, put_file in report.needed_acks:
        click.echo(f"ack of message {msg_id}, needed while file {put_file} holds its record")
    for msg_id in report.needed_deliveries:
        click.echo(f"delivery count of live message {msg_id}")
    if report.damage:
        click.echo(
            f"kept: {report.damage}, and deleting the file needs them all; "
            f"`msgcask check {path}` shows where the damage is"
        )
    if report.reclaimable:
        click.echo("nothing: the next compaction pass deletes it")


@main.command()
@STORE
@click.option(
    "--threshold",
    metavar="FRACTION",
    type=BoundedFloat(0, 1, low_open=True),
    default=None,
    help=(
        "Rewrite files whose live fraction is below this (default: 0.5, the default "
        "compaction_threshold; an application's own setting is not stored in the store)."
    ),
)
@MAX_FILE_SIZE
def compact(path: str, threshold: float | None, max_file_size: int | None) -> None:
    """Run one compaction pass and report it."""
    with _open(path, max_file_size, look_only=False) as store:
        before = store.stats().data_bytes
        report = store.compact(threshold=threshold)
        after = store.stats().data_bytes
    click.echo(
        f"deleted {counted(report.files_deleted, 'file')}, rewrote {report.files_rewritten}, "
        f"copied {report.bytes_copied} bytes in {report.seconds:.3f} s; "
        f"data {before} -> {after} bytes"
    )


main.add_command(bench)
main.add_command(demo)
main.add_command(pipeline)

if __name__ == "__main__":  # pragma: no cover
    main()
