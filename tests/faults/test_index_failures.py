"""LMDB fails while the store is open (a full disk, a failing disk under the map).

LMDB aborts the transaction it failed in, and with it index changes whose records
are already in the journal. The store must then refuse every call but close and
never commit again: a later commit would record a checkpoint past the lost
changes, and a replay after a crash would start after them. The next open finds
every returned put and no acked message.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import resource
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import lmdb
import pytest
from click.testing import CliRunner
from faulty_fs import FaultyFileSystem

import msgcask
from msgcask import db
from msgcask.cli.main import main
from msgcask.compactor.runner import Compactor
from msgcask.index.env import IndexEnv, IndexUnusable
from msgcask.store import disk_advice

FailCommits = Callable[..., None]


def _failing_commit(real: Callable[[IndexEnv], None], armed: list[int]) -> Callable[..., None]:
    """``armed``: [commits that fail, commits that succeed before them]."""

    def commit(self: IndexEnv) -> None:
        if armed[1]:
            armed[1] -= 1
        elif armed[0]:
            armed[0] -= 1
            # What LMDB does when the commit's write fails: the transaction is gone.
            self.txn.abort()
            self.txn = self.env.begin(write=True)
            self.changes = 0
            raise lmdb.DiskError("mdb_txn_commit: No space left on device (injected)")
        real(self)

    return commit


@pytest.fixture
def fail_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[FailCommits]:
    """``fail_commits(n, after=0)``: the ``n`` index commits after the next
    ``after`` fail."""
    armed = [0, 0]
    monkeypatch.setattr(IndexEnv, "commit", _failing_commit(IndexEnv.commit, armed))

    def arm(n: int, after: int = 0) -> None:
        armed[:] = [n, after]

    yield arm


def data_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.log"))


def quiet_store(path: Path, **options: object) -> msgcask.Store:
    """No background commits: the test decides when the index commits."""
    options.setdefault("compaction_interval", None)
    return msgcask.Store(path, sync_interval=3600, **options)  # type: ignore[arg-type]


def test_after_a_failed_commit_every_call_is_refused_and_writes_nothing(
    store_path: Path, fail_commits: FailCommits
) -> None:
    store = quiet_store(store_path)
    q = store.queue("q")
    ids = [q.put(b"m%d" % i) for i in range(10)]
    delivered = [q.get(block=False) for _ in range(3)]
    q.ack(delivered[0])
    fail_commits(1)
    with pytest.raises(msgcask.IndexFailedError, match="No space left"):
        store.sync()
    before = data_bytes(store_path)
    calls: dict[str, Callable[[], object]] = {
        "put": lambda: q.put(b"x"),
        "put_many": lambda: q.put_many([b"x", b"y"]),
        "get": lambda: q.get(block=False),
        "get with a timeout": lambda: q.get(timeout=0.01),
        "ack": lambda: q.ack(delivered[1]),
        "nack": lambda: q.nack(delivered[2]),
        "len": lambda: len(q),
        "browse": lambda: list(q.browse()),
        "purge": lambda: q.purge(),
        "queue": lambda: store.queue("other"),
        "queues": store.queues,
        "delete_queue": lambda: store.delete_queue("q"),
        "sync": store.sync,
        "stats": store.stats,
        "compact": store.compact,
        "why_kept": lambda: store.why_kept(1),
        "verify": store.verify,
    }
    for name, call in calls.items():
        with pytest.raises(msgcask.IndexFailedError, match="refuses further calls"):
            call()
            pytest.fail(f"{name} was not refused")
    with pytest.raises(msgcask.IndexFailedError):
        with store.transaction() as tx:
            tx.put("q", b"in a transaction")
    assert data_bytes(store_path) == before  # nothing of the refused calls was written
    store.close()
    assert not (store_path / "index").exists()  # distrusted: rebuilt on the next open
    with quiet_store(store_path) as reopened:
        assert reopened.recovery.mode == "rebuild"
        assert [m.id for m in reopened.queue("q").browse()] == ids[1:]


def _put_fail_commit_again_and_die(path: str, report: Connection) -> None:
    """In a child: puts and acks whose index changes a failing commit aborts, then
    another commit attempt, then SIGKILL (no close)."""
    armed = [0, 0]
    IndexEnv.commit = _failing_commit(IndexEnv.commit, armed)  # type: ignore[method-assign]
    store = quiet_store(Path(path))
    q = store.queue("q")
    ids = [q.put(b"committed %d" % i) for i in range(20)]
    store.sync()
    for _ in range(5):
        q.ack(q.get(block=False))
    ids += [q.put(b"in the aborted transaction %d" % i) for i in range(20)]
    armed[0] = 1
    with contextlib.suppress(msgcask.IndexFailedError):
        store.sync()  # fails, and LMDB drops the transaction
    with contextlib.suppress(msgcask.IndexFailedError):
        store.sync()  # must not commit what is left of the index
    report.send((ids, ids[:5]))  # sent before it returns: nothing is left to flush
    os.kill(os.getpid(), signal.SIGKILL)


# Calls that may commit the index before they write (here every time), met by a
# failing commit: the caller gets IndexFailedError, never LMDB's own error.
WRITES: dict[str, Callable[[msgcask.Queue, msgcask.Message], object]] = {
    "put_many": lambda q, m: q.put_many([b"x"]),
    "get": lambda q, m: q.get(block=False),
    "ack": lambda q, m: q.ack(m),
}


@pytest.mark.parametrize("call", WRITES.values(), ids=WRITES.keys())
def test_a_failed_commit_inside_a_call_is_raised_as_index_failed(
    store_path: Path,
    fail_commits: FailCommits,
    monkeypatch: pytest.MonkeyPatch,
    call: Callable[[msgcask.Queue, msgcask.Message], object],
) -> None:
    store = quiet_store(store_path)
    q = store.queue("q")
    q.put_many([b"a", b"b"])
    delivered = q.get(block=False)
    monkeypatch.setattr(db, "_MAX_CHANGES_PER_COMMIT", 0)
    fail_commits(1)
    with pytest.raises(msgcask.IndexFailedError, match="No space left"):
        call(q, delivered)
    store.close()


def test_a_crash_after_a_failed_commit_keeps_every_put_and_ack(store_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    received, sent = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_put_fail_commit_again_and_die, args=(str(store_path), sent))
    child.start()
    assert received.poll(60), "the child died before it reported"
    ids, acked = received.recv()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    with quiet_store(store_path) as reopened:
        got = [m.id for m in reopened.queue("q").browse()]
    assert got == [i for i in ids if i not in acked]


def test_a_compaction_pass_whose_swap_fails_loses_nothing(
    store_path: Path, fail_commits: FailCommits, make_sparse: Callable[..., list[int]]
) -> None:
    store = quiet_store(store_path, max_file_size=64 * 1024)
    kept = make_sparse(store.queue("q"))
    store.sync()
    fail_commits(1)
    with pytest.raises(msgcask.IndexFailedError):
        store.compact(threshold=0.9)
    with pytest.raises(msgcask.IndexFailedError, match="refuses further calls"):
        store.compact(threshold=0.9)  # no second pass planned from a broken index
    store.close()
    with quiet_store(store_path) as reopened:
        # Delivered and unacked before the close: back, redelivered.
        assert sorted(m.id for m in reopened.queue("q").browse()) == kept
        assert reopened.verify() == []


def _fail_a_pass_commit_sync_in_the_gap_and_die(
    path: str, make_sparse: Callable[..., list[int]], report: Connection
) -> None:
    """In a child: a compaction pass whose commit fails while puts and acks wait
    in the index transaction; another thread's routine sync comes in the gap
    after the pass lets go of the store's lock and before its error reaches
    the caller; then SIGKILL (no close)."""
    armed = [0, 0]
    IndexEnv.commit = _failing_commit(IndexEnv.commit, armed)  # type: ignore[method-assign]
    held = msgcask.Store._commits_held
    synced_in_gap = []

    @contextlib.contextmanager
    def held_then_sync_in_the_gap(self: msgcask.Store) -> Iterator[None]:
        try:
            with held(self):
                yield
        except lmdb.Error:
            with contextlib.suppress(msgcask.IndexFailedError):
                self.sync()  # what the flush thread may do between the two
            synced_in_gap.append(True)
            raise

    msgcask.Store._commits_held = held_then_sync_in_the_gap  # type: ignore[method-assign]
    store = quiet_store(Path(path), max_file_size=64 * 1024)
    q = store.queue("q")
    kept = make_sparse(q)
    store.sync()
    late = [q.put(b"after the last commit %d" % i) for i in range(20)]
    acked = [q.get(block=False).id for _ in range(5)]
    for msg_id in acked:
        q.ack(msg_id)
    armed[0] = 1
    with contextlib.suppress(msgcask.IndexFailedError):
        store.compact(threshold=0.9)
    report.send((sorted(set(kept + late) - set(acked)), bool(synced_in_gap)))
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_sync_between_a_failed_pass_commit_and_its_error_commits_nothing(
    store_path: Path, make_sparse: Callable[..., list[int]]
) -> None:
    ctx = multiprocessing.get_context("fork")
    received, sent = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_fail_a_pass_commit_sync_in_the_gap_and_die,
        args=(str(store_path), make_sparse, sent),
    )
    child.start()
    assert received.poll(60), "the child died before it reported"
    expected, synced_in_gap = received.recv()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert synced_in_gap  # the failure came inside the pass, as this test means
    with quiet_store(store_path) as reopened:
        assert sorted(m.id for m in reopened.queue("q").browse()) == expected


def test_a_failed_background_commit_stops_background_work_and_refuses_calls(
    store_path: Path, fail_commits: FailCommits, caplog: pytest.LogCaptureFixture
) -> None:
    store = msgcask.Store(store_path, sync_interval=0.01, compaction_interval=0.05)
    q = store.queue("q")
    ids = [q.put(b"m")]
    fail_commits(1)
    ids.append(q.put(b"m"))  # something for the next background sync to commit
    with pytest.raises(msgcask.IndexFailedError, match="refuses further calls"):
        for _ in range(10_000):  # the flush thread meets the failure within ms
            ids.append(q.put(b"m"))
            store._stop.wait(0.001)
    store._flusher.join(5)  # it stops by itself, and says so
    assert not store._flusher.is_alive()
    assert "background work in" in caplog.text and "its index failed" in caplog.text
    assert store._scheduler.paused
    store.close()
    with quiet_store(store_path) as reopened:
        assert [m.id for m in reopened.queue("q").browse()] == ids


def test_an_open_whose_index_cannot_be_written_raises_and_leaves_no_half_index(
    store_path: Path, fail_commits: FailCommits
) -> None:
    with quiet_store(store_path) as store:
        ids = [store.queue("q").put(b"m%d" % i) for i in range(5)]
    for index_file in (store_path / "index").iterdir():
        index_file.unlink()  # the next open rebuilds
    before = sorted(p.name for p in store_path.iterdir())
    fail_commits(1)
    with pytest.raises(msgcask.IndexFailedError, match=r"while opening it.*intact"):
        quiet_store(store_path)
    # The half-built index is gone; the data files are as they were.
    assert sorted(p.name for p in store_path.iterdir()) == [n for n in before if n != "index"]
    with quiet_store(store_path) as reopened:
        assert [m.id for m in reopened.queue("q").browse()] == ids


def test_the_cli_reports_index_failures_without_a_traceback(
    store_path: Path, fail_commits: FailCommits, make_sparse: Callable[..., list[int]]
) -> None:
    with quiet_store(store_path, max_file_size=64 * 1024) as store:
        make_sparse(store.queue("q"))
    runner = CliRunner()
    fail_commits(1, after=1)  # the open commits; the pass's first commit fails
    result = runner.invoke(main, ["compact", str(store_path)])
    assert isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 1
    assert "Error: the index of" in result.output and "Traceback" not in result.output
    assert not (store_path / "index").exists()  # distrusted: the next open rebuilds it
    fail_commits(1)
    result = runner.invoke(main, ["stats", str(store_path)])
    assert isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 1
    assert "Error: cannot write the index" in result.output
    result = runner.invoke(main, ["stats", str(store_path)])
    assert result.exit_code == 0, result.output
    assert "live         60 messages" in result.output


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        (errno.ENOSPC, "Free disk space"),
        (errno.EDQUOT, "Free disk space"),
        (errno.EACCES, "permissions"),
        (errno.EPERM, "permissions"),
        (errno.EROFS, "read-write"),
        (errno.EMFILE, "ulimit -n"),
        (errno.ENFILE, "fs.file-max"),
        (errno.EIO, "Check the disk"),
        (errno.EEXIST, "in the way"),
        (errno.ENOTDIR, "in the way"),
        (errno.EISDIR, "in the way"),
    ],
)
def test_the_remedy_follows_the_error(code: int, advice: str) -> None:
    assert advice in disk_advice.remedy(OSError(code, os.strerror(code)))


def test_an_index_that_is_a_file_is_named_as_in_the_way(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with msgcask.open(path) as store:
        store.queue("q").put(b"x")
    shutil.rmtree(path / "index")
    (path / "index").write_text("not a directory")
    with pytest.raises(msgcask.Error, match=r"index.*Move what is in the way"):
        msgcask.open(path)
    assert (path / "index").read_text() == "not a directory"


def test_low_free_space_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert disk_advice.free_space_note(str(tmp_path / "missing")) == ""

    class Full:
        f_bavail, f_frsize = 3, 4096

    monkeypatch.setattr(os, "statvfs", lambda path: Full())
    assert disk_advice.free_space_note(str(tmp_path)) == "; its file system has only 0.0 MiB free"


@pytest.mark.parametrize(
    ("free", "note"),
    [
        (disk_advice.LOW_FREE_SPACE - 4096, "; its file system has only 64.0 MiB free"),
        (disk_advice.LOW_FREE_SPACE, ""),
        (2**40, ""),
    ],
)
def test_free_space_is_named_only_below_the_low_mark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, free: int, note: str
) -> None:
    class Stat:
        f_bavail, f_frsize = free // 4096, 4096

    monkeypatch.setattr(os, "statvfs", lambda path: Stat())
    assert disk_advice.free_space_note(str(tmp_path)) == note


def test_a_get_blocked_on_another_queue_hears_of_the_failure(
    store_path: Path, fail_commits: FailCommits
) -> None:
    store = quiet_store(store_path)
    q = store.queue("q")
    q.put(b"m")
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            store.queue("idle").get()  # no timeout: only a put or a failure ends it
        except BaseException as e:
            outcome.append(e)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    while not store._queues.get("idle") or not store._queues["idle"].waiting:
        time.sleep(0.001)  # until it waits
    q.put(b"for the next commit to carry")
    fail_commits(1)
    with pytest.raises(msgcask.IndexFailedError):
        store.sync()
    consumer.join(10)
    alive = consumer.is_alive()
    store.close()  # wakes it in any case, so the test never hangs
    assert not alive, "the blocked get went on waiting after the index failed"
    assert len(outcome) == 1 and isinstance(outcome[0], msgcask.IndexFailedError)


def test_too_many_open_files_says_which_limit_to_raise(store_path: Path) -> None:
    # Every data file of an open store keeps a descriptor: the advice is about
    # that limit, not the disk, and the refused put stores nothing.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    store = quiet_store(store_path, max_file_size=64 * 1024)
    q = store.queue("q")
    q.put(b"x" * 1000)
    ids = []
    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 3, hard))
    try:
        with pytest.raises(msgcask.Error, match=r"Too many open files.*ulimit -n"):
            for _ in range(1000):  # a few data files
                ids.append(q.put(b"x" * 1000))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    ids.append(q.put(b"x" * 1000))  # the limit raised again: puts go on
    store.close()
    with quiet_store(store_path) as reopened:
        assert [m.id for m in reopened.queue("q").browse()][1:] == ids


def test_an_open_past_the_open_files_limit_says_which_limit_to_raise_and_changes_nothing(
    store_path: Path,
) -> None:
    # The other half of tuning.md's promise: an open that cannot keep every data
    # file open is refused the same way, and leaves the store as it was.
    with quiet_store(store_path, max_file_size=64 * 1024) as store:
        q = store.queue("q")
        ids = [q.put(b"x" * 1000) for _ in range(1000)]  # 16 data files
    before = {p.name: p.read_bytes() for p in store_path.glob("*.log")}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    try:
        with pytest.raises(msgcask.Error, match=r"Too many open files.*ulimit -n"):
            quiet_store(store_path, max_file_size=64 * 1024)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert {p.name: p.read_bytes() for p in store_path.glob("*.log")} == before
    with quiet_store(store_path, max_file_size=64 * 1024) as reopened:
        assert reopened.recovery.mode == "clean"
        assert [m.id for m in reopened.queue("q").browse()] == ids


def test_a_get_blocked_on_a_queue_being_deleted_hears_of_the_failure(
    store_path: Path, fail_commits: FailCommits
) -> None:
    store = quiet_store(store_path)
    q = store.queue("q")
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            q.get()
        except BaseException as e:
            outcome.append(e)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    while not store._queues["q"].waiting:
        time.sleep(0.001)
    fail_commits(1)
    with pytest.raises(msgcask.IndexFailedError):
        store.delete_queue("q")
    consumer.join(10)
    alive = consumer.is_alive()
    store.close()
    assert not alive, "the blocked get went on waiting after the index failed"
    assert len(outcome) == 1 and isinstance(outcome[0], msgcask.IndexFailedError)


def test_close_returns_when_a_background_pass_meets_an_index_failure(
    store_path: Path, fail_commits: FailCommits, monkeypatch: pytest.MonkeyPatch
) -> None:
    # close() waits for the running pass; the pass, failing, must not wait for
    # the scheduler that close() is shutting down.
    in_pass, go_on = threading.Event(), threading.Event()
    run = Compactor.run

    def slow_background_pass(self: Compactor, *args: object, **kwargs: object) -> object:
        if kwargs.get("background"):
            in_pass.set()
            go_on.wait(10)
        return run(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Compactor, "run", slow_background_pass)
    store = msgcask.Store(store_path, compaction_interval=0.05, sync_interval=3600)
    store.queue("q").put(b"m")
    assert in_pass.wait(10)
    fail_commits(1)
    with pytest.raises(msgcask.IndexFailedError):
        store.sync()
    closer = threading.Thread(target=store.close, daemon=True)
    closer.start()
    time.sleep(0.2)  # close() is waiting for the pass
    go_on.set()  # which now meets the failure
    closer.join(10)
    assert not closer.is_alive(), "close() hung"
    assert not (store_path / "index").exists()  # it finished: the index is discarded


def _puts_left_pending(store: msgcask.Store, n: int) -> None:
    """``n`` puts from another thread: they return with their index entries left
    for the next holder of the store's lock to write."""
    q = store.queue("q")
    producer = threading.Thread(target=lambda: [q.put(b"p%d" % i) for i in range(n)])
    producer.start()
    producer.join()
    assert store._pending, "the puts did not leave their entries pending"


def _catch_up_fails_once(
    store: msgcask.Store, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    real = store._catalog.add_many

    def add_many(*args: object, **kwargs: object) -> None:
        monkeypatch.setattr(store._catalog, "add_many", real)
        raise error

    monkeypatch.setattr(store._catalog, "add_many", add_many)


def test_a_catch_up_interrupted_by_ctrl_c_loses_no_returned_put(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = quiet_store(store_path)
    store.queue("q").put(b"first")
    _puts_left_pending(store, 5)
    _catch_up_fails_once(store, monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        store.queue("q").get(timeout=0.1)  # its lock catches up, and is interrupted
    with pytest.raises(msgcask.IndexFailedError, match="KeyboardInterrupt"):
        store.queue("q").put(b"refused")
    store.close()  # as leaving a ``with`` block would: it must not commit
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        bodies = sorted(m.body for m in reopened.queue("q").browse())
    assert bodies == sorted([b"first"] + [b"p%d" % i for i in range(5)])


@pytest.mark.parametrize("call", ["close", "transaction_ack", "transaction_put"])
def test_a_catch_up_whose_index_write_fails_raises_index_failed_and_closes_cleanly(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    fs = FaultyFileSystem()
    store = quiet_store(store_path, _fs=fs)
    q = store.queue("q")
    q.put(b"first")
    delivered = q.get(timeout=1)
    _puts_left_pending(store, 3)
    _catch_up_fails_once(store, monkeypatch, lmdb.CorruptedError("mdb_put: injected"))
    with pytest.raises(msgcask.IndexFailedError):
        if call == "close":
            store.close()
        elif call == "transaction_ack":
            store.transaction().ack(delivered)
        else:
            store.transaction().put("q", b"refused")
    store.close()
    # Closed for good: the lock is free, and close made the journal durable all the
    # same, so nothing returned is lost even to a power cut.
    fs.power_cut()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        bodies = sorted(m.body for m in reopened.queue("q").browse())
    assert bodies == sorted([b"first"] + [b"p%d" % i for i in range(3)])


class _CopyFails:
    """The LMDB environment, but its copy fails with ``error``."""

    def __init__(self, real: lmdb.Environment, error: lmdb.Error) -> None:
        self.real = real
        self.error = error

    def copy(self, *args: object, **kwargs: object) -> None:
        raise self.error

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


def _sparse_index(store: msgcask.Store) -> msgcask.Queue:
    """An index file mostly free pages, which the next pass shrinks."""
    q = store.queue("q")
    for _ in range(2000):
        q.put(b"x" * 100)
    store.sync()  # the index file grows to hold them
    for _ in range(1990):
        q.ack(q.get(block=False))
    store.sync()
    return q


def test_a_shrink_that_cannot_copy_the_index_is_no_index_failure(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The copy of a shrink fails on a full disk; the committed index it copies is
    # intact and in use, so only the space it would have given back is lost.
    store = quiet_store(store_path)
    q = _sparse_index(store)
    size_before = store.stats().index_bytes
    full = lmdb.DiskError("mdb_env_copy2: No space left on device (injected)")
    store._env.env = _CopyFails(store._env.env, full)  # type: ignore[assignment]
    for _ in range(2):
        store.compact()  # would shrink the sparse index; logs the failure once
    assert [r.getMessage() for r in caplog.records].count(
        "msgcask: shrinking the index file failed: cannot copy the index: "
        "mdb_env_copy2: No space left on device (injected)"
    ) == 1
    q.put(b"after")  # no IndexFailedError
    store._env.env = store._env.env.real  # type: ignore[attr-defined]
    assert store.stats().index_bytes == size_before
    store.close()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert reopened.recovery.mode == "clean"
        assert len(reopened.queue("q")) == 11


def test_a_shrink_whose_copy_finds_a_damaged_index_page_fails_the_index(
    store_path: Path,
) -> None:
    store = quiet_store(store_path)
    _sparse_index(store)
    damaged = lmdb.CorruptedError("mdb_env_copy2: MDB_CORRUPTED (injected)")
    store._env.env = _CopyFails(store._env.env, damaged)  # type: ignore[assignment]
    with pytest.raises(msgcask.IndexFailedError, match="MDB_CORRUPTED"):
        store.compact()
    store._env.env = store._env.env.real  # type: ignore[attr-defined]
    store.close()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert reopened.recovery.mode == "rebuild"
        assert len(reopened.queue("q")) == 10


def test_a_shrink_that_cannot_reopen_the_index_fails_the_index(store_path: Path) -> None:
    # The copy is in place, but the environment does not open again: the store
    # has no index to go on with, so it is failed, and the next open rebuilds it.
    store = quiet_store(store_path)
    _sparse_index(store)

    def cannot_open() -> None:
        raise IndexUnusable("cannot open the index: Input/output error (injected)")

    store._env._open = cannot_open  # type: ignore[method-assign]
    with pytest.raises(msgcask.IndexFailedError, match=r"Input/output error \(injected\)"):
        store.compact()
    with pytest.raises(msgcask.IndexFailedError):
        store.queue("q").put(b"refused")
    store.close()
    assert not (store_path / "index").exists()
    with msgcask.open(store_path, compaction_interval=None) as reopened:
        assert reopened.recovery.mode == "rebuild"
        assert len(reopened.queue("q")) == 10
