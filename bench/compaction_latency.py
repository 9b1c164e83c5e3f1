"""Put latency while compaction runs, against the same load without it.

Run: ``.venv/bin/python bench/compaction_latency.py [repeats] [--one-cpu]
[--switch-interval SECONDS] [--lock-holds] [--pin] [--nice STEPS] [--busy N]
[--only NAME] [--stand-in KIND]`` (``--one-cpu``: every
thread on one CPU, ``msgcask.confine_to_one_cpu``; ``--switch-interval``: the
interpreter's ``sys.setswitchinterval``, how long a thread may keep the
interpreter lock while another waits for it, 0.005 by default;
``--lock-holds``: in the backlog runs, also time every hold of the store's lock
by the compacting thread and print them by the line that took the lock;
``--pin``: the prober on the lowest CPU, and the passes' thread, the churn
thread and the store's flush and compaction pool threads (through its
``background_cpus`` setting) on the next one, so the scheduler cannot move
the prober onto a CPU the passes just ran on (threads the prober's thread
starts itself, such as APScheduler's, stay with it, and only sleep); ``--nice STEPS``:
the store's background passes (each pool thread lowers itself at its first pass),
and the passes' and churn threads this script starts, run that many nice steps
below the prober;
``--busy N``: N other processes keep CPUs busy all along (a loop each), for a
machine with no CPU to spare; ``--only NAME``: run only the
``steady``, ``backlog``, ``interleaved`` or ``background`` measurement;
``--stand-in KIND``: in the interleaved measurement, a thread that does no store
work takes the passes' turns, to tell what kind of work slows the prober: see
``STAND_INS``). Not a test: it
prints p50 / p99 / max of single 1 KiB puts from a steady prober, and the ratio
of the p99s, in four situations. The prober pauses after every 50th put, and the
first put after a pause runs on cold caches: those puts are 2 % of all, so the
p99 falls among them. Each line also gives their p50 (``after a pause``) and
the p99 of the other puts (``others``), to tell the two apart.

* ``steady``: another thread keeps turning data files sparse (it fills one
  1 MiB file, consumes 90 % of it, rests 0.2 s, and again) while the prober runs
  for a fixed time; once with the background job compacting every 0.2 s, once
  with compaction off. Compaction keeps up here, so passes step aside for the
  foreground calls (compactor/pacing.py).
* ``backlog``: 80 sparse files are already there; back-to-back ``compact()``
  calls rewrite them all while the prober runs, against the same store when
  quiet; it also prints how long the passes took to clear the backlog. This
  is compaction behind the space bound, where it takes the CPU it
  needs and latency is expected to suffer.
* ``interleaved``: the backlog again, with passes and their absence taking
  turns within one run: the passes' thread alternates one ``compact()`` call
  with a rest as long as that call took, and each put counts as busy or quiet
  by what that thread did all through it (puts within 5 ms of a change count
  as neither). A stretch where the whole machine runs slow falls on both
  sides alike, which the ``backlog`` measurement, quiet second first, cannot
  promise.
* ``background``: the backlog again, cleared by the background job (every
  0.05 s, passes back to back while behind) instead of ``compact()`` calls: it
  is resumed for 0.1 s, paused (its running pass let finish), and rests 0.1 s,
  in turns; a put counts as busy only if a pass held the pass lock all through
  it, and as quiet only if none did. With ``--pin`` the store's
  ``background_cpus`` keeps the passes apart from the prober.
"""

from __future__ import annotations

import hashlib
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

import msgcask
from scratch import scratch_dir
from script_args import exit_if_help_asked, take_option

STEADY_SECONDS = 8.0
PAUSE_EVERY = 50  # puts between two pauses of the prober
GUARD = 0.005  # seconds after each change of the interleaved phases, counted in neither
BACKLOG_FILES = 80
TURN = 0.1  # seconds the background job runs, then rests, in the background situation
MAX_TURNS = 200


class Pinning:
    """With ``--pin``: the prober's CPU and the CPU of everything else."""

    prober: set[int] | None = None
    others: set[int] | None = None

    @classmethod
    def plan(cls) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit(f"--pin needs two CPUs; this process may use {cpus}")
        cls.prober, cls.others = {cpus[0]}, {cpus[1]}

    @classmethod
    def thread(cls, cpus: set[int] | None) -> None:
        """Keep the calling thread on ``cpus`` (no-op without ``--pin``)."""
        if cpus is not None:
            os.sched_setaffinity(0, cpus)  # 0: the calling thread


NICE = 0  # --nice: steps below the prober for every thread but its own


def lower_this_thread() -> None:
    """The calling thread, ``NICE`` steps below the priority it inherited."""
    if NICE:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + NICE)


def in_background(work: Any) -> Any:
    """``work`` run on the CPU of everything but the prober (with ``--pin``),
    ``NICE`` steps below it (with ``--nice``)."""

    def placed(*args: Any) -> Any:
        Pinning.thread(Pinning.others)
        lower_this_thread()
        return work(*args)

    return placed


def lower_background_passes(store: msgcask.Store) -> None:
    """With ``--nice``: each thread of the store's compaction pool lowers itself
    at its first pass (through the store's private pass hook)."""
    if not NICE:
        return
    inner, lowered = store._compact_in_background, threading.local()

    def lowering() -> None:
        if not getattr(lowered, "done", False):
            lowered.done = True
            lower_this_thread()
        inner()

    store._compact_in_background = lowering  # type: ignore[method-assign]


# puts, p50, p99, max, p50 of the first puts after a pause, p99 of the others (ms)
Measured = tuple[int, float, float, float, float, float]


def make_sparse(queue: msgcask.Queue, files: int) -> None:
    """About ``files`` 1 MiB data files, each with 10 % of its messages left live."""
    for _ in range(files * 1000):
        queue.put(b"y" * 1000)
    delivered = [queue.get(block=False) for _ in range(files * 1000)]
    for i, m in enumerate(delivered):
        if i % 10:
            queue.ack(m)


class Phases:
    """What the other thread is doing, as (label, turn), replaced as one object:
    a put counts under ``label`` only if the same turn lasted all through it."""

    def __init__(self, label: str) -> None:
        self.now = (label, 0)

    def enter(self, label: str) -> None:
        self.now = (label, self.now[1] + 1)

    def rest(self, seconds: float) -> None:
        """A quiet turn of ``seconds``, with GUARD counted in neither before and after."""
        for label, wait in (("", GUARD), ("quiet", seconds), ("", GUARD)):
            self.enter(label)
            time.sleep(wait)


def measure(
    probe: msgcask.Queue,
    until: threading.Event,
    phases: Phases,
    pass_lock: threading.Lock | None = None,
) -> dict[str, Measured]:
    """Put until ``until`` is set; the figures of the puts under each label
    (puts under the empty label are left out). With ``pass_lock``, a put counts
    as ``busy`` only if a pass held the lock all through it, and under any
    other label only if none did."""
    latencies: dict[str, list[float]] = {}
    after_pause: dict[str, list[float]] = {}
    others: dict[str, list[float]] = {}
    i = 0
    while not until.is_set():
        now = phases.now
        held = pass_lock is not None and pass_lock.locked()
        started = time.perf_counter()
        probe.put(b"z" * 1024)
        latency = (time.perf_counter() - started) * 1e3
        # With pass_lock: no pass may start, end or be missing during a counted put.
        as_labelled = pass_lock is None or held == (now[0] == "busy") == pass_lock.locked()
        if as_labelled and now[0] and phases.now is now:
            latencies.setdefault(now[0], []).append(latency)
            pick = after_pause if i % PAUSE_EVERY == 1 else others
            pick.setdefault(now[0], []).append(latency)
        if i % PAUSE_EVERY == 0:
            time.sleep(0.0005)  # a steady producer, not a saturating one
        i += 1
    return {
        label: summarize(ms, after_pause.get(label, []), others.get(label, []))
        for label, ms in latencies.items()
    }


def summarize(latencies: list[float], after_pause: list[float], others: list[float]) -> Measured:
    for ms in (latencies, after_pause, others):
        ms.sort()
    return (
        len(latencies),
        latencies[len(latencies) // 2],
        latencies[int(len(latencies) * 0.99)],
        latencies[-1],
        after_pause[len(after_pause) // 2] if after_pause else float("nan"),
        others[int(len(others) * 0.99)] if others else float("nan"),
    )


def measure_all(probe: msgcask.Queue, until: threading.Event) -> Measured:
    return measure(probe, until, Phases("all"))["all"]


def after(seconds: float) -> threading.Event:
    done = threading.Event()
    threading.Timer(seconds, done.set).start()
    return done


def churn(store: msgcask.Store, stop: threading.Event) -> None:
    queue = store.queue("churn")
    while not stop.is_set():
        make_sparse(queue, 1)
        stop.wait(0.2)


def steady_run(compaction: bool) -> tuple[Measured, int]:
    interval = 0.2 if compaction else None
    with msgcask.open(
        scratch_dir(),
        max_file_size=2**20,
        compaction_interval=interval,
        background_cpus=Pinning.others,
    ) as s:
        lower_background_passes(s)
        stop = after(STEADY_SECONDS)
        worker = threading.Thread(target=in_background(churn), args=(s, stop))
        worker.start()
        result = measure_all(s.queue("probe"), stop)
        worker.join()
        return result, s.stats().compaction.files_rewritten


def compact_until_done(store: msgcask.Store, done: threading.Event, rewritten: list[int]) -> None:
    while (report := store.compact(threshold=0.5)).files_rewritten:
        rewritten[0] += report.files_rewritten
    done.set()


class TimedLock:
    """The store's lock, timing the outermost holds taken by one thread, by the
    line that took it (the lock is reentrant: nested holds are part of the outer)."""

    def __init__(self, inner: Any, thread_name: str) -> None:
        self.inner = inner
        self.thread_name = thread_name
        self.holds: dict[str, list[float]] = {}
        self._local = threading.local()

    def __enter__(self) -> TimedLock:
        self.inner.acquire()
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth == 0:
            caller = sys._getframe(1)
            name = caller.f_code.co_filename.rsplit("/", 1)[-1]
            self._local.site = f"{name}:{caller.f_lineno}"
            self._local.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1
        if self._local.depth == 0 and threading.current_thread().name == self.thread_name:
            held = time.perf_counter() - self._local.started
            self.holds.setdefault(self._local.site, []).append(held)
        self.inner.release()

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self.inner.acquire(*args, **kwargs))

    def release(self) -> None:
        self.inner.release()

    def report(self) -> str:
        everything = sorted(x for holds in self.holds.values() for x in holds)
        lines = [f"  lock holds by the passes: {len(everything)}, {sum(everything) * 1e3:.1f} ms"]
        by_total = sorted(self.holds.items(), key=lambda item: -sum(item[1]))
        for site, holds in by_total[:8]:
            holds.sort()
            lines.append(
                f"    {site:24} {len(holds):5} holds, {sum(holds) * 1e3:6.1f} ms, "
                f"p50 {holds[len(holds) // 2] * 1e3:.3f} p90 {holds[int(len(holds) * 0.9)] * 1e3:.3f} "
                f"max {holds[-1] * 1e3:.3f} ms"
            )
        return "\n".join(lines)


def backlog_store(compaction_interval: float | None = None) -> msgcask.Store:
    """A store holding 80 sparse 1 MiB files, their index committed (with a
    ``compaction_interval``, its background job is paused)."""
    s = msgcask.open(
        scratch_dir(),
        max_file_size=2**20,
        compaction_interval=compaction_interval,
        background_cpus=Pinning.others,
    )
    lower_background_passes(s)
    s.pause_compaction()
    make_sparse(s.queue("load"), BACKLOG_FILES)
    # The first commit after the fill writes its 160,000 index changes: let
    # it happen now, not in the middle of a measurement.
    s.sync()
    return s


def backlog_run(lock_holds: bool) -> tuple[Measured, Measured, int, float, str]:
    """Quiet and busy measurements, files rewritten, the seconds the passes
    took to clear the backlog, and (with ``lock_holds``) the passes' lock holds."""
    with backlog_store() as s:
        probe = s.queue("probe")
        quiet = measure_all(probe, after(1.0))
        done = threading.Event()
        rewritten = [0]
        worker = threading.Thread(
            target=in_background(compact_until_done), args=(s, done, rewritten), name="passes"
        )
        timed = TimedLock(s._lock, worker.name) if lock_holds else None
        if timed is not None:
            s._lock = timed  # type: ignore[assignment]
        started = time.perf_counter()
        worker.start()
        busy = measure_all(probe, done)
        worker.join()
        seconds = time.perf_counter() - started
        if timed is not None:
            s._lock = timed.inner
    return quiet, busy, rewritten[0], seconds, timed.report() if timed else ""


def take_turns(
    store: msgcask.Store, phases: Phases, done: threading.Event, calls: list[int]
) -> None:
    """One compact() call, then a rest as long as it took, until a call rewrites nothing."""
    try:
        while True:
            phases.enter("busy")
            started = time.perf_counter()
            report = store.compact(threshold=0.5)
            took = time.perf_counter() - started
            calls.append(report.files_rewritten)
            phases.rest(took)
            if not report.files_rewritten:
                return
    finally:
        done.set()


def resume_and_pause(
    store: msgcask.Store, phases: Phases, done: threading.Event, turns: list[int]
) -> None:
    """Let the background job run for a turn, pause it, wait for its pass to end,
    rest as long, until it has rewritten the backlog (or after MAX_TURNS)."""
    try:
        for _ in range(MAX_TURNS):
            if store.stats().compaction.files_rewritten >= BACKLOG_FILES:
                return
            phases.enter("busy")
            store.resume_compaction()
            time.sleep(TURN)
            store.pause_compaction()
            with store._compactor.pass_lock():
                pass  # the pass running now ends; no other starts while paused
            turns.append(1)
            phases.rest(TURN)
    finally:
        done.set()


def background_run() -> tuple[Measured, Measured, int, int]:
    """Quiet and busy measurements taken in turns while the background job clears
    the backlog, files rewritten, turns."""
    with backlog_store(compaction_interval=0.05) as s:
        probe = s.queue("probe")
        measure_all(probe, after(0.3))
        phases, done, turns = Phases(""), threading.Event(), []
        worker = threading.Thread(
            target=in_background(resume_and_pause), args=(s, phases, done, turns), name="turns"
        )
        worker.start()
        by_phase = measure(probe, done, phases, s._compactor.pass_lock())
        worker.join()
        rewritten = s.stats().compaction.files_rewritten
    return by_phase["quiet"], by_phase["busy"], rewritten, len(turns)


STAND_IN_TURN = 0.045  # seconds, about as long as one compact() call of the backlog
STAND_IN_TURNS = 40
STAND_IN_BUFFER = os.urandom(4 * 2**20)


def python_loop(until: float) -> None:
    """Interpreted work, holding the interpreter lock as a pass parsing records does."""
    total = 0
    while time.perf_counter() < until:
        for i in range(200):
            total += i


def copying(until: float) -> None:
    """Memory traffic with the interpreter lock held: copies of a 4 MiB buffer."""
    while time.perf_counter() < until:
        bytes(bytearray(STAND_IN_BUFFER))


def hashing(until: float) -> None:
    """Memory traffic without the interpreter lock: hashlib lets go of it for large data."""
    while time.perf_counter() < until:
        hashlib.sha256(STAND_IN_BUFFER).digest()


def system_calls(until: float) -> None:
    """Lets go of the interpreter lock and takes it back at every call."""
    while time.perf_counter() < until:
        os.stat(".")


class ChildLoop:
    """A Python loop in a child process, started once per script: a pass's reading
    and classifying, moved out of the store's process, would run like this."""

    _process: subprocess.Popen[str] | None = None

    @classmethod
    def start(cls, seconds: float) -> subprocess.Popen[str]:
        """Hand the child a turn of ``seconds``; read its answer from stdout."""
        if cls._process is None:
            code = (
                "import sys, time\n"
                "for line in sys.stdin:\n"
                "    until, total = time.perf_counter() + float(line), 0\n"
                "    while time.perf_counter() < until:\n"
                "        for i in range(200):\n"
                "            total += i\n"
                "    print(total, flush=True)\n"
            )
            cls._process = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        assert cls._process.stdin is not None
        cls._process.stdin.write(f"{seconds}\n")
        cls._process.stdin.flush()
        return cls._process


def child_process(until: float) -> None:
    """A child process does the turn's work; this thread waits for its answer
    (a pipe read lets go of the interpreter lock)."""
    child = ChildLoop.start(until - time.perf_counter())
    assert child.stdout is not None
    child.stdout.readline()


SWAP_STRETCH = 0.00045  # seconds: about one swap batch (64 messages) of a backlog pass


def child_and_quarter(until: float) -> None:
    """A child process does the turn's work, while this thread runs Python a
    quarter of the time, in stretches as long as a swap batch, and waits the
    rest: as a pass would if only its swap stayed in the store's process."""
    child = ChildLoop.start(until - time.perf_counter())
    assert child.stdout is not None
    while time.perf_counter() < until:
        python_loop(time.perf_counter() + SWAP_STRETCH)
        select.select([child.stdout], [], [], 3 * SWAP_STRETCH)
    child.stdout.readline()


STAND_INS = {
    "python": python_loop,
    "copying": copying,
    "gil-free": hashing,
    "syscalls": system_calls,
    "child": child_process,
    "child-and-quarter": child_and_quarter,
}
STAND_IN: str | None = None  # --stand-in


def stand_in_turns(
    store: msgcask.Store, phases: Phases, done: threading.Event, calls: list[int]
) -> None:
    """The stand-in's work for STAND_IN_TURN, then a rest as long, STAND_IN_TURNS times."""
    assert STAND_IN is not None
    work = STAND_INS[STAND_IN]
    try:
        for _ in range(STAND_IN_TURNS):
            phases.enter("busy")
            work(time.perf_counter() + STAND_IN_TURN)
            calls.append(0)
            phases.rest(STAND_IN_TURN)
    finally:
        done.set()


def interleaved_run() -> tuple[Measured, Measured, int, int]:
    """Quiet and busy measurements taken in turns, files rewritten, compact() calls
    (or turns of the stand-in)."""
    with backlog_store() as s:
        probe = s.queue("probe")
        measure_all(probe, after(0.3))  # warm up, as the backlog run's quiet second does
        phases, done, calls = Phases(""), threading.Event(), []
        turns = take_turns if STAND_IN is None else stand_in_turns
        worker = threading.Thread(
            target=in_background(turns), args=(s, phases, done, calls), name="passes"
        )
        worker.start()
        by_phase = measure(probe, done, phases)
        worker.join()
    return by_phase["quiet"], by_phase["busy"], sum(calls), len(calls)


def line(name: str, m: Measured) -> str:
    return (
        f"{name}: {m[0]} puts p50 {m[1]:.3f} p99 {m[2]:.3f} max {m[3]:.1f} ms "
        f"(after a pause p50 {m[4]:.3f}, others p99 {m[5]:.3f})"
    )


SITUATIONS = ("steady", "backlog", "interleaved", "background")


def main(repeats: int, lock_holds: bool, only: str | None) -> None:
    for _ in range(repeats if only in (None, "steady") else 0):
        off, _ = steady_run(compaction=False)
        on, rewritten = steady_run(compaction=True)
        print(
            f"steady  | {line('compaction off', off)} | {line('on', on)} | "
            f"files rewritten {rewritten} | p99 ratio {on[2] / off[2]:.2f}"
        )
    for _ in range(repeats if only in (None, "backlog") else 0):
        quiet, busy, rewritten, seconds, holds = backlog_run(lock_holds)
        print(
            f"backlog | {line('quiet', quiet)} | {line('during passes', busy)} | "
            f"files rewritten {rewritten} in {seconds:.2f} s | p99 ratio {busy[2] / quiet[2]:.2f}"
        )
        if holds:
            print(holds)
    for _ in range(repeats if only in (None, "interleaved") else 0):
        quiet, busy, rewritten, calls = interleaved_run()
        busy_name = "during passes" if STAND_IN is None else f"during {STAND_IN}"
        print(
            f"interleaved | {line('quiet', quiet)} | "
            f"{line(busy_name, busy)} | files rewritten {rewritten} in {calls} calls | "
            f"p99 ratio {busy[2] / quiet[2]:.2f}"
        )
    for _ in range(repeats if only in (None, "background") else 0):
        quiet, busy, rewritten, turns = background_run()
        print(
            f"background | {line('quiet', quiet)} | {line('during passes', busy)} | "
            f"files rewritten {rewritten} in {turns} turns | p99 ratio {busy[2] / quiet[2]:.2f}"
        )


if __name__ == "__main__":
    exit_if_help_asked(__doc__)
    args = sys.argv[1:]
    switch_interval = take_option(args, "--switch-interval")
    if switch_interval is not None:
        try:
            seconds = float(switch_interval)
        except ValueError:
            seconds = float("nan")
        if not 0 < seconds < float("inf"):
            raise SystemExit(
                f"--switch-interval takes seconds above 0, got {switch_interval!r}; see --help"
            )
        sys.setswitchinterval(seconds)
        print(f"switch interval {sys.getswitchinterval()} s")
    if "--one-cpu" in args and "--pin" in args:
        raise SystemExit("--one-cpu and --pin contradict each other: give one of them")
    if "--one-cpu" in args:
        args.remove("--one-cpu")
        print(f"every thread runs on CPU {msgcask.confine_to_one_cpu()}")
    lock_holds = "--lock-holds" in args
    if lock_holds:
        args.remove("--lock-holds")
    if "--pin" in args:
        args.remove("--pin")
        Pinning.plan()
        Pinning.thread(Pinning.prober)  # this thread is the prober
        print(
            f"the prober runs on CPU {Pinning.prober}; the passes, the churn thread and "
            f"the store's flush and pool threads on {Pinning.others}"
        )
    nice = take_option(args, "--nice")
    if nice is not None:
        if not (nice.isdigit() and int(nice) <= 19):
            raise SystemExit("--nice takes a number of steps from 0 to 19")
        NICE = int(nice)
        print(f"the store's passes and the script's other threads run {NICE} nice steps lower")
    busy_count = take_option(args, "--busy") or "0"
    if not busy_count.isdigit():
        raise SystemExit("--busy takes a number of processes")
    only = take_option(args, "--only")
    if only is not None and only not in SITUATIONS:
        raise SystemExit(f"--only takes one of {', '.join(SITUATIONS)}, got {only!r}")
    STAND_IN = take_option(args, "--stand-in")
    if STAND_IN is not None and STAND_IN not in STAND_INS:
        raise SystemExit(f"--stand-in takes one of {', '.join(STAND_INS)}, got {STAND_IN!r}")
    if STAND_IN is not None and only != "interleaved":
        raise SystemExit(
            "--stand-in replaces the passes of the interleaved measurement only: "
            "give --only interleaved too"
        )
    if len(args) > 1 or (args and not (args[0].isdigit() and int(args[0]) > 0)):
        raise SystemExit(
            "expected at most one number of repeats (a whole number above 0) besides the "
            f"options, got {' '.join(map(repr, args))}; see --help"
        )
    busy: list[subprocess.Popen[bytes]] = []
    try:  # the busy processes start last, so no refused option leaves them running
        for _ in range(int(busy_count)):
            busy.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        if busy:
            print(f"{len(busy)} other processes keep CPUs busy")
        main(int(args[0]) if args else 3, lock_holds, only)
    finally:
        for process in busy:
            process.kill()
