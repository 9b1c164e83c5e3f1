"""store/lockfile.py: one writer per store, within a process and across processes."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import msgcask
from msgcask.store.lockfile import StoreLock, lock_holder

# A child that takes the lock, says so, and holds it until its stdin closes.
HOLDER = """
import sys
from msgcask.store.lockfile import StoreLock
lock = StoreLock(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
lock.release()
"""


@pytest.fixture
def lock_path(tmp_path: Path) -> str:
    return str(tmp_path / "LOCK")


@pytest.fixture
def other_process(lock_path: str) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    yield child
    assert child.stdin is not None
    child.stdin.close()
    child.wait(30)


def test_lock_records_the_holder_pid(lock_path: str) -> None:
    lock = StoreLock(lock_path)
    try:
        assert Path(lock_path).read_text().strip() == str(os.getpid())
        assert lock_holder(lock_path) == f"process {os.getpid()}"
        # Asking, in the holder's own process, left the holder's lock in place.
        with pytest.raises(msgcask.StoreLockedError):
            StoreLock(lock_path)
    finally:
        lock.release()


def test_second_lock_in_the_same_process_is_refused(lock_path: str) -> None:
    lock = StoreLock(lock_path)
    try:
        with pytest.raises(
            msgcask.StoreLockedError, match=f"already open in this process \\(pid {os.getpid()}\\)"
        ):
            StoreLock(lock_path)
        # The refused attempt must not have disturbed the holder's record.
        assert lock_holder(lock_path) == f"process {os.getpid()}"
    finally:
        lock.release()


def test_lock_in_another_process_is_refused_naming_its_pid(
    lock_path: str, other_process: subprocess.Popen[str]
) -> None:
    with pytest.raises(msgcask.StoreLockedError, match=f"pid {other_process.pid}"):
        StoreLock(lock_path)
    assert lock_holder(lock_path) == f"process {other_process.pid}"
    # Asking did not release it.
    with pytest.raises(msgcask.StoreLockedError, match=f"pid {other_process.pid}"):
        StoreLock(lock_path)


# A parent that takes the lock, forks a child that holds it until its stdin closes,
# and exits without releasing it: the child keeps the lock, LOCK names the parent.
FORKING_HOLDER = """
import os, sys
from msgcask.store.lockfile import StoreLock
lock = StoreLock(sys.argv[1])
if os.fork() == 0:
    print(os.getpid(), flush=True)
    sys.stdin.read()
    os._exit(0)
os._exit(0)
"""


def test_a_lock_left_to_a_forked_child_is_not_said_to_be_held_by_the_parent(
    lock_path: str,
) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", FORKING_HOLDER, lock_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdin is not None and parent.stdout is not None
    try:
        assert parent.stdout.readline().strip().isdigit()  # the child holds the lock
        assert parent.wait(30) == 0
        assert Path(lock_path).read_text().strip() == str(parent.pid)
        with pytest.raises(msgcask.StoreLockedError) as refused:
            StoreLock(lock_path)
        assert str(refused.value) == (
            f"{os.path.dirname(lock_path)} is open in another process: its LOCK names pid "
            f"{parent.pid}, which has exited, so a process it forked holds the lock until "
            "that one exits; close it there first, or inspect it read-only with `msgcask check`"
        )
        assert lock_holder(lock_path) == "another process"
    finally:
        parent.stdin.close()  # the child's stdin too: it exits
    deadline = time.monotonic() + 30
    while True:  # the child is not ours to wait for: the lock says when it is gone
        try:
            StoreLock(lock_path).release()
            break
        except msgcask.StoreLockedError:
            assert time.monotonic() < deadline, "the forked child never gave the lock up"
            time.sleep(0.01)


def test_lock_is_free_again_after_the_other_process_exits(
    lock_path: str, other_process: subprocess.Popen[str]
) -> None:
    assert other_process.stdin is not None
    other_process.stdin.close()
    assert other_process.wait(30) == 0
    lock = StoreLock(lock_path)
    lock.release()


def test_released_lock_has_no_holder_and_can_be_taken_again(lock_path: str) -> None:
    StoreLock(lock_path).release()
    assert lock_holder(lock_path) is None
    lock = StoreLock(lock_path)
    lock.release()
    lock.release()  # twice is harmless


def test_no_lock_file_means_no_holder(tmp_path: Path) -> None:
    assert lock_holder(str(tmp_path / "missing")) is None


@pytest.mark.parametrize(
    "content", [b"0\n", b"99999999999999999999\n", b"-5\n", b"\xc2\xb2\n", b"pid\n", b""]
)
def test_a_lock_without_a_valid_pid_has_no_holder(lock_path: str, content: bytes) -> None:
    Path(lock_path).write_bytes(content)
    assert lock_holder(lock_path) is None


def test_a_copied_lock_naming_a_live_process_has_no_holder(
    tmp_path: Path, lock_path: str, other_process: subprocess.Popen[str]
) -> None:
    # As in a backup taken while the store was open: the pid is alive, the copy unlocked.
    copy = tmp_path / "copy-LOCK"
    copy.write_bytes(Path(lock_path).read_bytes())
    assert copy.read_text().strip() == str(other_process.pid)
    assert lock_holder(str(copy)) is None
    assert lock_holder(lock_path) == f"process {other_process.pid}"


@pytest.mark.parametrize("content", [b"", b"pid\n", f"{2**31 - 2}\n".encode(), b"0\n"])
def test_a_held_lock_without_a_live_pid_is_held_by_another_process(
    lock_path: str, content: bytes
) -> None:
    # An opener between taking the lock and writing its pid, or a forked child
    # holding the lock of a parent that exited.
    holder = os.open(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(holder, content)
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert lock_holder(lock_path) == "another process"
    finally:
        os.close(holder)


def test_an_opener_waits_out_the_instant_a_probe_holds_the_lock(
    lock_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lock_holder holds a shared lock for an instant: an open then must not be refused.
    probe = os.open(lock_path, os.O_RDONLY | os.O_CREAT)
    fcntl.flock(probe, fcntl.LOCK_SH)
    waits: list[float] = []

    def probe_lets_go(seconds: float) -> None:
        waits.append(seconds)
        fcntl.flock(probe, fcntl.LOCK_UN)

    try:
        with monkeypatch.context() as m:
            m.setattr(time, "sleep", probe_lets_go)
            lock = StoreLock(lock_path)
    finally:
        os.close(probe)
    lock.release()
    assert waits, "the open did not meet the probe's lock"


def test_a_lock_that_is_a_directory_has_no_holder(lock_path: str) -> None:
    os.mkdir(lock_path)
    assert lock_holder(lock_path) is None


def test_a_lock_that_is_a_pipe_has_no_holder_and_is_not_opened(lock_path: str) -> None:
    os.mkfifo(lock_path)  # opening it would wait for a writer for ever
    said: list[int | None] = []
    asking = threading.Thread(target=lambda: said.append(lock_holder(lock_path)), daemon=True)
    asking.start()
    asking.join(30)
    assert said == [None], "lock_holder waited on the pipe"


def test_second_open_of_a_store_in_the_same_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with msgcask.open(path, compaction_interval=None):
        with pytest.raises(msgcask.StoreLockedError, match=str(os.getpid())):
            msgcask.open(path, compaction_interval=None)
    with msgcask.open(path, compaction_interval=None):  # released on close
        pass


def test_a_lock_names_only_its_holders_pid_and_a_release_erases_it(lock_path: str) -> None:
    Path(lock_path).write_bytes(b"12345678901234567890\n")  # left by an earlier holder
    lock = StoreLock(lock_path)
    assert Path(lock_path).read_bytes() == f"{os.getpid()}\n".encode()
    lock.release()
    assert Path(lock_path).read_bytes() == b""


@pytest.mark.parametrize("created", [True, False], ids=["created", "found"])
def test_a_failed_open_removes_only_a_lock_file_it_created(lock_path: str, created: bool) -> None:
    if not created:
        Path(lock_path).write_bytes(b"")
    StoreLock(lock_path).release(remove_if_created=True)
    assert os.path.exists(lock_path) is not created


def test_a_lock_held_under_a_pid_past_any_process_is_refused_saying_so(lock_path: str) -> None:
    holder = os.open(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(holder, b"99999999999999999999\n")
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(msgcask.StoreLockedError, match=r"open in another process \(pid 9+\)"):
            StoreLock(lock_path)
    finally:
        os.close(holder)
