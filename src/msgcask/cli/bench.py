"""``msgcask bench WORKLOAD`` and ``msgcask demo``.

Imports nothing heavy at module level: the CLI group loads this module on
every command, and matplotlib or the peers are only needed by these two.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Iterator

import click

from msgcask.options import (
    MAX_COMPACTION_INTERVAL,
    MAX_FILE_SIZE_LIMIT,
    MIN_COMPACTION_INTERVAL,
    MIN_FILE_SIZE,
    MIN_STORE_FILES,
)
from msgcask.plural import counted
from msgcask.workloads.config import (
    MAX_CRASH_MESSAGES,
    MAX_INTERVAL,
    MAX_THREADS,
    MAX_TIME_LIMIT,
    MIN_INTERVAL,
    READ_BY,
    WORKLOAD_NAMES,
    RunConfig,
    store_size_limit,
)

MiB = 2**20
DEMO_STEM = "demo-dlq-heavy"  # the demo's result is <out>/demo-dlq-heavy.json
THREADS_HELP = f"Threads, 1 to {MAX_THREADS}."


def _quiet_scheduler_log() -> None:
    # A compaction pass longer than --compaction-interval makes APScheduler log a skipped
    # run each time; the pass counters in the result already show how many ran.
    import logging

    logging.getLogger("apscheduler").setLevel(logging.ERROR)


# The binary units sizes are read and said in, largest first.
UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _size(text: str) -> int:
    """Bytes from '1048576', '1MiB', '64KiB', '2GiB' (or 1m, 64k, 2g); ValueError if
    it is none."""
    units = {name.lower(): mult for name, mult in UNITS}
    units |= {name[0].lower(): mult for name, mult in UNITS}
    t = text.strip().lower()
    for suffix, mult in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if t.endswith(suffix):
            number = float(t[: -len(suffix)]) * mult
            if not math.isfinite(number):  # int() of inf overflows, of NaN fails
                raise ValueError(f"{text!r} is not a finite size")
            size = int(number)
            break
    else:
        size = int(t)
    if size < 0:
        raise ValueError(f"{text!r} is negative")
    return size


def _human(size: int) -> str:
    """``size`` in the largest binary unit that divides it: '64 KiB', '2 GiB'."""
    for unit, mult in UNITS:
        if size % mult == 0:
            return f"{size // mult} {unit}"
    return f"{size} bytes"


class SizeType(click.ParamType):
    """A size in bytes, with or without a unit; with bounds, refused outside them."""

    name = "size"

    def __init__(self, bounds: tuple[int, int] | None = None, what: str = "") -> None:
        self.bounds, self.what = bounds, what

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        try:
            size = value if isinstance(value, int) else _size(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a size (bytes, or with KiB/MiB/GiB)", param, ctx)
        if self.bounds is not None and not self.bounds[0] <= size <= self.bounds[1]:
            low, high = self.bounds
            self.fail(
                f"{counted(size, 'byte')} is too {'small' if size < low else 'large'}; {self.what} "
                f"{_human(low)} ({low} bytes) to {_human(high)}",
                param,
                ctx,
            )
        return size


class BoundedFloat(click.ParamType):
    """A number from ``low`` (excluded with ``low_open``) to ``high``. Unlike
    click.FloatRange, it refuses NaN, which passes every comparison."""

    name = "float"

    def __init__(self, low: float, high: float, *, low_open: bool = False, unit: str = "") -> None:
        self.low, self.high, self.low_open, self.unit = low, high, low_open, unit

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)  # type: ignore[arg-type]  # refused below if it is not one
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        low, high = _number(self.low), _number(self.high)
        above_low = self.low < number if self.low_open else self.low <= number
        if not (above_low and number <= self.high):  # False for NaN too
            span = f"more than {low} and at most {high}" if self.low_open else f"{low} to {high}"
            self.fail(f"must be {span}{self.unit}, not {value!r}", param, ctx)
        return number


def _number(x: float) -> str:
    """``x`` as a reader writes it: 31,536,000 rather than 3.1536e+07."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


SIZE = SizeType()
# The store's own bounds: msgcask.open refuses a data file below 64 KiB or past 2 GiB.
FILE_SIZE = SizeType((MIN_FILE_SIZE, MAX_FILE_SIZE_LIMIT), "msgcask takes data files of")


MAX_FILE_SIZE_OPTION = click.option(
    "--max-file-size",
    type=FILE_SIZE,
    default=MiB,
    show_default=True,
    help="Data file size, 64 KiB to 2 GiB.",
)


def _check_dirs(out_dir: str, workdir: str | None, stem: str) -> None:
    """A usage error now for a --workdir or --out that cannot be used, not a
    traceback after the run (the work directory first: it creates nothing).
    Leaves nothing made: run_and_write makes --out again, and removes it if the
    run ends before writing in it."""
    from msgcask.made_dirs import remove_made_dirs
    from msgcask.workloads.runner import check_workdir, prepare_out_dir

    try:
        check_workdir(workdir)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--workdir") from e
    try:
        remove_made_dirs(prepare_out_dir(out_dir, stem))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--out") from e


def _check_store_size(ctx: click.Context, max_store_size: int | None, max_file_size: int) -> None:
    """A usage error naming --max-store-size for a cap msgcask refuses: the store's
    own message names its setting, max_store_size, which the user did not type."""
    least = MIN_STORE_FILES * max_file_size
    if max_store_size is not None and max_store_size < least:
        raise click.BadParameter(
            f"{counted(max_store_size, 'byte')} is too small; msgcask needs room for at least "
            f"{MIN_STORE_FILES} data files of --max-file-size: {_human(least)} ({least} bytes)",
            ctx,
            _param(ctx, "max_store_size"),
        )


def _param(ctx: click.Context, name: str) -> click.Parameter:
    """The command's parameter ``name``."""
    return next(p for p in ctx.command.params if p.name == name)


@contextlib.contextmanager
def _ended_by_sigterm() -> Iterator[None]:
    """SIGTERM during the block ends the run as Ctrl-C does (its threads stopped, its
    stores removed, no result), then the process with TERMINATED_STATUS."""
    from msgcask.cli.termination import TERMINATED_STATUS, Terminated, sigterm_raises

    try:
        with sigterm_raises():
            yield
    except Terminated:
        click.echo("Terminated: the run's stores are removed and no result written", err=True)
        raise SystemExit(TERMINATED_STATUS) from None


def _given(ctx: click.Context, name: str) -> bool:
    """Whether the user gave parameter ``name`` (on the command line or otherwise)."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def _refuse_unread_options(ctx: click.Context, workload: str) -> None:
    """A usage error for an option given for a workload that does not read it: the
    run would ignore it and measure something else than asked."""
    for name, readers in READ_BY.items():
        if workload not in readers and _given(ctx, name):
            param = _param(ctx, name)
            raise click.UsageError(
                f"{max(param.opts, key=len)} is read by {', '.join(readers)} only; "
                f"{workload} does not use it: leave it out"
            )


def _refuse_overridden_options(ctx: click.Context, compaction: str, capped: bool) -> None:
    """A usage error for an option another option given makes the run ignore.
    Called before the values are checked: a value of an option the run would not
    read (--size 10 with --size-mix) is not the problem to name. ``capped``: the
    run's store has a max_store_size (given, or the workload's default)."""
    # (option, whether another option given makes the run ignore it, what to do)
    overridden = (
        (
            "compaction_interval",
            compaction == "off",
            "--compaction-interval sets the schedule that --compaction off turns off: "
            "leave it out, or run --compaction on or both",
        ),
        (
            # Past its cap a store compacts with no schedule, copying the files
            # below the threshold: only an uncapped run never reads it.
            "threshold",
            compaction == "off" and not capped,
            "--threshold is read by compaction passes, which --compaction off runs only "
            "under --max-store-size (a store past its cap compacts): leave it out, give "
            "--max-store-size, or run --compaction on or both",
        ),
        (
            "crash_messages",
            ctx.params["no_reopen"],
            "--crash-messages sizes the kill -9 measurement that --no-reopen skips: "
            "leave one of them out",
        ),
        (
            "size",
            ctx.params["size_mix"],
            "--size-mix draws every body's size, so --size would be ignored: leave one of them out",
        ),
    )
    for name, ignored, message in overridden:
        if ignored and _given(ctx, name):
            raise click.UsageError(message)


# Usage says WORKLOAD, as the docs write it; the help names the choices.
@click.command(
    help=f"Run one standard WORKLOAD ({', '.join(WORKLOAD_NAMES)}) on msgcask and its "
    "peers; write JSON and plots to --out."
)
@click.pass_context
@click.argument("workload", metavar="WORKLOAD", type=click.Choice(WORKLOAD_NAMES))
@click.option(
    "--messages",
    "-n",
    type=int,
    default=200_000,
    show_default=True,
    help="N: messages put (steady-like workloads; steady phases of drain-history).",
)
@click.option("--size", type=SIZE, default=1024, show_default=True, help="S: body bytes.")
@click.option("--size-mix", is_flag=True, help="80% 512 B, 15% 4 KiB, 5% 64 KiB bodies.")
@click.option(
    "--pin-every",
    type=int,
    default=None,
    help="P: pin 1 message in P, 2 to N [dlq-heavy 1000, selector-skip 500].",
)
@click.option(
    "--batch",
    type=int,
    default=1,
    show_default=True,
    help="Messages per put call; the batched variant of steady uses 100.",
)
@click.option(
    "--sync",
    type=click.Choice(["always", "periodic", "never"]),
    default="periodic",
    show_default=True,
)
@click.option(
    "--window",
    type=int,
    default=1000,
    show_default=True,
    help="W: delivered-unacked messages a slow consumer holds.",
)
@click.option(
    "--rounds",
    type=int,
    default=None,
    help="priority-pin rounds, at least 1 [4x the data files max_store_size holds].",
)
@click.option(
    "--depth", type=int, default=2_000_000, show_default=True, help="D: messages deep-queue puts."
)
@click.option(
    "--fill",
    type=int,
    default=500_000,
    show_default=True,
    help="M: messages per fill of drain-history.",
)
@click.option(
    "--repeat",
    type=int,
    default=3,
    show_default=True,
    help="R: fill/drain cycles of drain-history.",
)
@MAX_FILE_SIZE_OPTION
@click.option(
    "--max-store-size", type=SIZE, default=None, help="[none; priority-pin: 32 data files]"
)
@click.option(
    "--threshold",
    type=BoundedFloat(0, 1, low_open=True),
    default=0.5,
    show_default=True,
    help="compaction_threshold (with --compaction off, read only under a store cap).",
)
@click.option(
    "--compaction",
    type=click.Choice(["on", "off", "both"]),
    default="on",
    show_default=True,
    help="off opens msgcask with no compaction schedule.",
)
@click.option(
    "--compaction-interval",
    type=BoundedFloat(MIN_COMPACTION_INTERVAL, MAX_COMPACTION_INTERVAL, unit=" seconds"),
    default=1.0,
    show_default=True,
    help="Seconds between background compaction passes, 0.001 to a year "
    "(--compaction off runs without them).",
)
@click.option(
    "--max-deliveries",
    type=int,
    default=1,
    show_default=True,
    help="dlq-heavy: deliveries before a nacked message is dead-lettered.",
)
@click.option(
    "--peers",
    default="all",
    show_default=True,
    help="Comma-separated peers, 'all' or 'none': sqlite3, persistqueue-ack, "
    "persistqueue-file, litequeue, diskcache-deque.",
)
@click.option("--producers", type=int, default=1, show_default=True, help=THREADS_HELP)
@click.option("--consumers", type=int, default=1, show_default=True, help=THREADS_HELP)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--interval",
    type=BoundedFloat(MIN_INTERVAL, MAX_INTERVAL, unit=" seconds"),
    default=0.5,
    show_default=True,
    help="Seconds between samples, 0.01 to 3600; also the latency window.",
)
@click.option(
    "--crash-messages",
    type=int,
    default=20_000,
    show_default=True,
    help=f"Messages the kill -9 child puts before it is killed, 0 to {MAX_CRASH_MESSAGES}.",
)
@click.option(
    "--time-limit",
    type=BoundedFloat(0, MAX_TIME_LIMIT, low_open=True, unit=" seconds"),
    default=600.0,
    show_default=True,
    help="Seconds per subject, at most 1e9 (no limit, in effect); a run still going then stops "
    "and is marked incomplete (a slow peer at full size can take hours).",
)
@click.option("--no-reopen", is_flag=True, help="Skip the reopen and kill -9 measurements.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="results",
    show_default=True,
    help="Where the JSON and the plots go.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the stores live during the run [a temporary directory].",
)
@click.option("--no-plots", is_flag=True)
@click.option("--no-progress", is_flag=True)
@click.option(
    "--one-cpu",
    is_flag=True,
    help="Run every thread on one CPU (msgcask.confine_to_one_cpu; see docs/tuning.md).",
)
def bench(
    ctx: click.Context,
    workload: str,
    messages: int,
    size: int,
    size_mix: bool,
    pin_every: int | None,
    batch: int,
    sync: str,
    window: int,
    rounds: int | None,
    depth: int,
    fill: int,
    repeat: int,
    max_file_size: int,
    max_store_size: int | None,
    threshold: float,
    compaction: str,
    compaction_interval: float,
    max_deliveries: int,
    peers: str,
    producers: int,
    consumers: int,
    seed: int,
    interval: float,
    crash_messages: int,
    time_limit: float | None,
    no_reopen: bool,
    out_dir: str,
    workdir: str | None,
    no_plots: bool,
    no_progress: bool,
    one_cpu: bool,
) -> None:
    """``msgcask bench WORKLOAD`` (its help is the command's ``help``, which names the workloads)."""
    from msgcask.workloads.report import summary
    from msgcask.workloads.runner import run_and_write
    from msgcask.workloads.subjects import parse_peers

    _quiet_scheduler_log()
    _check_store_size(ctx, max_store_size, max_file_size)
    capped = store_size_limit(workload, max_store_size, max_file_size) is not None
    _refuse_overridden_options(ctx, compaction, capped)
    try:
        cfg = RunConfig(
            workload=workload,
            messages=messages,
            size=size,
            size_mix=size_mix,
            pin_every=pin_every,
            batch=batch,
            sync=sync,
            window=window,
            rounds=rounds,
            depth=depth,
            fill=fill,
            repeat=repeat,
            max_file_size=max_file_size,
            max_store_size=max_store_size,
            threshold=threshold,
            compaction=compaction,
            compaction_interval=compaction_interval,
            max_deliveries=max_deliveries,
            producers=producers,
            consumers=consumers,
            peers=parse_peers(peers),
            seed=seed,
            interval=interval,
            crash_messages=crash_messages,
            reopen=not no_reopen,
            time_limit=time_limit,
            progress=not no_progress,
            one_cpu=one_cpu,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    _refuse_unread_options(ctx, workload)
    _check_dirs(out_dir, workdir, workload)
    with _ended_by_sigterm():
        doc, path = run_and_write(
            cfg,
            out_dir,
            workdir=workdir,
            plots=not no_plots,
            echo=lambda m: click.echo(m, err=True),
        )
    click.echo(summary(doc))
    click.echo(f"result: {path}")
    if any(r["status"] == "failed" for r in doc["runs"]):
        click.echo("some runs failed; see the errors above", err=True)
        raise SystemExit(1)


@click.command()
@click.option("--messages", "-n", type=int, default=150_000, show_default=True)
@click.option("--size", type=SIZE, default=1024, show_default=True)
@MAX_FILE_SIZE_OPTION
@click.option(
    "--peers",
    default="sqlite3",
    show_default=True,
    help="Peers to run too: 'none', 'all' (adds minutes) or a comma-separated list.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the JSON and plots go [a new temporary directory].",
)
@click.option("--no-progress", is_flag=True)
def demo(
    messages: int, size: int, max_file_size: int, peers: str, out_dir: str | None, no_progress: bool
) -> None:
    """dlq-heavy on an embedded store with compaction on, then off: what compaction buys.

    1 message in 1,000 is dead-lettered and never consumed, so without compaction
    nearly every data file keeps one live message and disk grows with everything
    ever put; with compaction disk follows the live data.
    """
    from msgcask.made_dirs import remove_made_dirs
    from msgcask.workloads.report import fmt, summary
    from msgcask.workloads.runner import run_and_write
    from msgcask.workloads.subjects import parse_peers

    _quiet_scheduler_log()
    try:
        cfg = RunConfig(
            workload="dlq-heavy",
            messages=messages,
            size=size,
            max_file_size=max_file_size,
            compaction="both",
            peers=parse_peers(peers),
            crash_messages=min(messages, 20_000),
            progress=not no_progress,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    if out_dir is not None:
        _check_dirs(out_dir, None, DEMO_STEM)
    out = out_dir or tempfile.mkdtemp(prefix="msgcask-demo-")
    click.echo(
        f"msgcask demo: dlq-heavy, {messages} messages of {size} B, 1 in "
        f"{cfg.pin_period} dead-lettered, {max_file_size // 1024} KiB data files; "
        "compaction on, then off"
    )
    start = time.monotonic()
    try:
        with _ended_by_sigterm():
            doc, path = run_and_write(
                cfg, out, stem=DEMO_STEM, echo=lambda m: click.echo(m, err=True)
            )
    except BaseException:  # Ctrl-C too: the temporary directory goes if nothing is in it
        if out_dir is None:
            remove_made_dirs([out])
        raise
    click.echo(summary(doc))
    runs = {r["compaction_on"]: r for r in doc["runs"] if r["subject"] == "msgcask"}
    on, off = runs.get(True), runs.get(False)
    if on and off and on["space"]["max_disk_bytes"] and off["space"]["final_disk_bytes"]:
        live = on["space"]["final_live_payload_bytes"]
        # Under a KiB in bytes: a few live messages are not "0 KiB".
        live_text = counted(live, "byte") if live < 1024 else f"{live / 1024:.0f} KiB"
        click.echo(
            f"\nwithout compaction the store ends {off['space']['final_disk_bytes'] / MiB:.1f}"
            f" MiB on disk, with it {on['space']['final_disk_bytes'] / MiB:.1f} MiB "
            f"({off['space']['final_disk_bytes'] / max(1, on['space']['final_disk_bytes']):.1f}x)"
            f" for {live_text} of live messages"
            f" (disk/live {fmt(off['space']['final_amplification'], '.1f')} without compaction,"
            f" {fmt(on['space']['final_amplification'], '.1f')} with it)"
        )
    click.echo(f"result: {path}")
    click.echo(f"demo took {time.monotonic() - start:.0f} s; files in {os.path.abspath(out)}")
    if any(r["status"] == "failed" for r in doc["runs"]):
        click.echo("some runs failed; see the errors above", err=True)
        raise SystemExit(1)
