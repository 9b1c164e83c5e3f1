"""A child process that reports its progress in a file and is killed with SIGKILL.

The crash tests run a store in a child, wait until its output says it reached
the point the test aims at, and kill it there. The child's stdout goes to a
file (not a pipe) so the parent can read everything it wrote before the kill,
torn last line included; its stderr goes next to it (``.err``) for the
messages of a child that died on its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path


class Child:
    def __init__(self, proc: subprocess.Popen[bytes], out_path: Path, err_path: Path) -> None:
        self.proc = proc
        self.out_path = out_path
        self.err_path = err_path

    def output(self) -> bytes:
        return self.out_path.read_bytes()

    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_for(
        self, reached: Callable[[bytes], bool], what: str, seconds: float = 60, poll: float = 0.01
    ) -> None:
        """Wait until ``reached(output)``; fail if the child exits first or
        ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while not reached(self.output()):
            if self.proc.poll() is not None and not reached(self.output()):
                raise AssertionError(f"the child exited before {what}: {self.stderr()}")
            assert time.monotonic() < deadline, f"the child did not reach {what} in {seconds} s"
            time.sleep(poll)

    def assert_running(self, when: str) -> None:
        # A child that exited on its own raised in the middle of its work.
        assert self.proc.poll() is None, f"the child exited {when}: {self.stderr()}"

    def kill9(self) -> bool:
        """SIGKILL the child and reap it; whether the kill is what ended it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        return self.proc.returncode == -signal.SIGKILL


@contextlib.contextmanager
def child_process(cmd: list[str], out_path: Path) -> Iterator[Child]:
    """Start ``cmd`` with its stdout in ``out_path`` and its stderr beside it;
    whatever happens in the block, the child does not outlive it."""
    err_path = out_path.with_suffix(".err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
    try:
        yield Child(proc, out_path, err_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``msgcask ARGS...`` run to its end in a process of its own, as a user runs
    it: its exit status and its whole stdout and stderr, as text."""
    return subprocess.run(
        [sys.executable, "-m", "msgcask.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
