"""Runs one workload against msgcask (compaction on and/or off) and the chosen peers."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from msgcask.cpu import confine_to_one_cpu
from msgcask.made_dirs import missing_dirs, remove_made_dirs
from msgcask.store.filenames import data_file_ids
from msgcask.workloads.config import RunConfig
from msgcask.workloads.crash import measure_crash_reopen
from msgcask.workloads.definitions import (
    WORKLOADS,
    Context,
    expected_operations,
    missing_capabilities,
)
from msgcask.workloads.factory import MSGCASK, make_subject
from msgcask.workloads.payload import Payloads
from msgcask.workloads.recorder import GET_ACK, OPS, PUT, Recorder, phased_throughput
from msgcask.workloads.result import build_result
from msgcask.workloads.sampler import Sampler, written_bytes
from msgcask.workloads.subjects import PEERS, peer_unavailable

Echo = Callable[[str], None]


def label_of(name: str, compaction: bool) -> str:
    """The name a run goes by in the result, the table and the plots."""
    if name == MSGCASK:
        return f"msgcask[compaction {'on' if compaction else 'off'}]"
    return name


def run_workload(
    cfg: RunConfig, workdir: str | None = None, echo: Echo | None = None
) -> dict[str, Any]:
    """Run ``cfg.workload`` on every subject; return the result document (not yet written)."""
    say = echo or (lambda _msg: None)
    if cfg.one_cpu:
        say(f"every thread runs on CPU {confine_to_one_cpu()}")
    plan: list[tuple[str, bool]] = [(MSGCASK, c) for c in cfg.compaction_variants()]
    skipped: list[dict[str, str]] = []
    for peer in cfg.peers:
        reason = peer_unavailable(peer)
        if reason is None:
            lacking = missing_capabilities(cfg.workload, PEERS[peer][0].capabilities)
            if lacking:
                reason = f"cannot express {cfg.workload}: no {', '.join(lacking)}"
        if reason is not None:
            say(f"skipping peer {peer}: {reason}")
            skipped.append({"subject": peer, "reason": reason})
        else:
            plan.append((peer, True))
    runs = []
    base = tempfile.mkdtemp(prefix="msgcask-bench-", dir=workdir)
    try:
        for name, compaction in plan:
            say(f"running {cfg.workload} on {label_of(name, compaction)}")
            runs.append(run_one(cfg, name, compaction, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return build_result(cfg, runs, skipped)


def _attempt(ctx: Context, where: str, call: Callable[[], object]) -> bool:
    """``call()``; whether it returned. A failure is recorded as the run's."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the run records its failure and the others go on
        ctx.fail(where, e)
        return False
    return True


def run_one(cfg: RunConfig, name: str, compaction: bool, base: str) -> dict[str, Any]:
    """One subject, one workload: the run object of the result."""
    label = label_of(name, compaction)
    path = os.path.join(base, label.replace("[", "-").replace("]", "").replace(" ", "-"))
    subject = make_subject(name, path, cfg, compaction)
    ctx = Context(subject, cfg, Payloads(cfg.size, cfg.size_mix, cfg.seed))
    # A failure of the subject itself (an open, a close, a reopen) fails this run
    # and is recorded in it; the other subjects still run.
    opened = _attempt(ctx, "open", subject.open)
    if cfg.batch > 1 and not subject.atomic_batch:
        ctx.notes.append(
            f"--batch {cfg.batch}: {name} has no atomic batch here; each batch is "
            f"{cfg.batch} puts, each committed on its own"
        )
    bar = _progress(cfg, label)

    def on_sample(s: dict[str, Any]) -> None:
        if bar is not None:
            bar.n = s["messages_put"] + s["messages_acked"]
            bar.refresh()

    wchar0 = written_bytes()
    sampler = Sampler(subject, ctx.t0, cfg.interval, ctx.totals, on_sample, ctx.buffer_bytes)
    sampler.start()
    timer = _time_limit(ctx, cfg.time_limit)
    if opened:
        _attempt(ctx, "workload", lambda: WORKLOADS[cfg.workload](ctx))
    duration = time.perf_counter() - ctx.t0
    if timer is not None:
        timer.cancel()
    end_disk = subject.disk_bytes()
    settle = 0.0
    if name == MSGCASK and compaction and opened:
        # The schedule may be a pass or two behind when the workload stops; "final" is
        # after three more passes ended, "end" is the moment the workload stopped. A
        # store settles in the second pass that starts after the writes stop (the
        # first still sees them, and may be running already).
        settle = ctx.wait_for_compaction(3)
    sampler.stop()
    if bar is not None:
        bar.close()
    wchar1 = written_bytes()
    final: list[Any] = [None, None]  # store stats, file map

    def read_final() -> None:
        final[:] = [subject.store_stats(), subject.file_map()]

    reopen: dict[str, Any] = {"clean_seconds": None, "close_seconds": None, "crash": None}
    if opened:
        _attempt(ctx, "final stats", read_final)
        start = time.perf_counter()
        if _attempt(ctx, "close", subject.close):
            reopen["close_seconds"] = time.perf_counter() - start
    final_stats, files = final
    if opened and cfg.reopen and reopen["close_seconds"] is not None:
        start = time.perf_counter()
        if _attempt(ctx, "reopen", subject.open):
            reopen["clean_seconds"] = time.perf_counter() - start
            _attempt(ctx, "close after the reopen", subject.close)
    if opened and cfg.reopen:
        shutil.rmtree(path, ignore_errors=True)
        try:
            reopen["crash"] = measure_crash_reopen(name, path + "-crash", cfg, compaction)
        except Exception as e:  # noqa: BLE001 - a failed crash measurement is reported
            reopen["crash"] = {
                "seconds": None,
                "messages": None,
                "error": f"{type(e).__name__}: {e}",
            }
        shutil.rmtree(path + "-crash", ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)

    whole = Recorder(ctx.t0)
    for rec in ctx.recorders.values():
        whole.extend(rec)
    bytes_put = whole.bytes(PUT)
    io_written = (wchar1 - wchar0) if wchar0 is not None and wchar1 is not None else None
    counts = {k: v for k, v in ctx.counts.items() if not k.startswith("settled:")}
    counts.update({"put": whole.messages(PUT), "acked": whole.messages(GET_ACK)})
    status = "ok"
    if ctx.errors:
        status = "failed"
    elif ctx.stop.is_set():
        status = "incomplete"
    return {
        "subject": name,
        "label": label,
        "compaction_on": compaction if name == MSGCASK else None,
        "sync": subject.sync_note,
        "status": status,
        "errors": ctx.errors + [f"sampler: {e}" for e in sampler.errors[:5]],
        "notes": ctx.notes,
        "duration_seconds": duration,
        "counts": counts,
        # Per phase: drain-history's waits for compaction after each drain (msgcask
        # only) and its phases without puts or gets do not dilute the figure.
        "throughput": {
            "put_per_s": phased_throughput(ctx.recorders.values(), PUT),
            "get_ack_per_s": phased_throughput(ctx.recorders.values(), GET_ACK),
        },
        "latency": {op: whole.summary(op) for op in OPS},
        "latency_windows": whole.windows(cfg.interval),
        "samples": sampler.samples,
        "compaction_events": sampler.compaction_events,
        "final_stats": final_stats,
        "files": files,
        "end_disk_bytes": end_disk,
        "settle_seconds": settle,
        "bytes_put": bytes_put,
        "io_bytes_written": io_written,
        "reopen": reopen,
        "phases": ctx.phases,
    }


def _time_limit(ctx: Context, limit: float | None) -> threading.Timer | None:
    """Stop the run's workers after ``limit`` seconds; the run is then "incomplete"."""
    if limit is None:
        return None

    def expire() -> None:
        ctx.notes.append(f"stopped at the time limit of {limit:g} s")
        ctx.stop.set()

    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()
    return timer


def _progress(cfg: RunConfig, label: str) -> Any:
    if not cfg.progress:
        return None
    from tqdm import tqdm

    return tqdm(
        total=expected_operations(cfg),
        desc=f"{cfg.workload} {label}",
        unit="op",
        leave=False,
        mininterval=0.5,
    )


def run_and_write(
    cfg: RunConfig,
    out_dir: str,
    stem: str | None = None,
    workdir: str | None = None,
    plots: bool = True,
    echo: Echo | None = None,
) -> tuple[dict[str, Any], str]:
    """Run, then write ``<stem>.json`` and the PNG plots into ``out_dir``; return both.

    ValueError, before anything runs, if ``workdir`` or ``out_dir`` cannot be used.
    """
    from msgcask.workloads.result import write_json

    stem = stem or cfg.workload
    check_workdir(workdir)
    made = prepare_out_dir(out_dir, stem)
    try:
        doc = run_workload(cfg, workdir, echo)
    except BaseException:  # Ctrl-C too: a run that writes nothing leaves nothing
        remove_made_dirs(made)
        raise
    path = os.path.join(out_dir, f"{stem}.json")
    # The result first: a plot that cannot be drawn must not lose the run.
    write_json(doc, path)
    if plots:
        try:
            import matplotlib  # noqa: F401 - an optional dependency (the bench extra)
        except ImportError:
            if echo is not None:
                echo("no plots: matplotlib is not installed (pip install 'msgcask[bench]')")
        else:
            from msgcask.workloads.plots import write_plots

            doc["plots"] = write_plots(doc, out_dir, stem)
            write_json(doc, path)
    return doc, path


def check_workdir(workdir: str | None) -> None:
    """ValueError unless the run can make its stores in ``workdir`` (None: a
    temporary directory); creates nothing there."""
    if workdir is None:
        return
    if not workdir:  # mkdtemp would take it for the current directory
        raise ValueError(
            "the work directory's name is empty: give a directory, or none for a temporary one"
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix="msgcask-bench-", dir=workdir))
    except OSError as e:
        raise ValueError(
            f"cannot make the run's stores in {workdir}: {e.strerror or e}. Give an existing "
            "directory this user can write in (or none, for a temporary one)"
        ) from e


def prepare_out_dir(out_dir: str, stem: str | None = None) -> list[str]:
    """Create ``out_dir`` if it is missing and check that files can be written
    in it, and (given ``stem``) that ``<stem>.json`` can be written there;
    ValueError if not, leaving no directory made. Checked before a run, not
    after it, when a bad directory would lose the whole run's result.

    Returns the directories it made, outermost first, for ``remove_made_dirs``.
    """
    if not out_dir:
        raise ValueError("the result's directory name is empty: give a directory, such as results")
    _refuse_a_store(out_dir)
    made = missing_dirs(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
        if stem is not None:
            _check_result_names(out_dir, stem)
    except OSError as e:
        remove_made_dirs(made)
        raise ValueError(
            f"cannot write the result in {out_dir}: {e.strerror or e}. Give a directory "
            "that exists or can be created, and that this user can write in"
        ) from e
    except ValueError:
        remove_made_dirs(made)
        raise
    return made


def _refuse_a_store(out_dir: str) -> None:
    """ValueError if ``out_dir`` is a msgcask store: the result and plots would
    be written among its data files (a mistyped --out naming the store)."""
    try:
        names = os.listdir(out_dir)
    except OSError:  # missing, or not a directory: prepare_out_dir says which
        return
    if data_file_ids(names):
        raise ValueError(
            f"{out_dir} is a msgcask store (it holds data files): the result would be "
            "written among them. Give another directory, such as results"
        )


def _check_result_names(out_dir: str, stem: str) -> None:
    # write_json writes <stem>.json.tmp, then renames it over <stem>.json.
    for name in (f"{stem}.json", f"{stem}.json.tmp"):
        target = os.path.join(out_dir, name)
        if os.path.isdir(target):
            raise ValueError(
                f"cannot write the result as {target}: a directory has that name. Move it "
                "away or give another --out"
            )
