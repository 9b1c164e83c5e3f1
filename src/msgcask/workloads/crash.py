"""Reopen time after kill -9: a child process fills a store and is killed mid-put.

The parent runs ``python -m msgcask.workloads.crash``, waits until the child
says it has put ``crash_messages`` messages, lets it go on putting for a
moment, sends SIGKILL, then times opening the store again. The child goes on
saying how many messages its store holds, every ``COUNT_EVERY`` puts, so the
result gives the size of the store each subject reopened (they put at different
speeds meanwhile). A store with a ``max_store_size`` is kept at its cap: when a
put is refused, the child consumes the oldest messages to make room.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from msgcask.workloads.config import RunConfig
from msgcask.workloads.factory import make_subject
from msgcask.workloads.payload import Payloads
from msgcask.workloads.subjects.base import Subject

READY_LINE = "filled"
FILL_TIMEOUT = 600.0  # seconds the parent waits for the child to fill
KEEP_PUTTING = 0.2  # seconds between "filled" and the kill, so the kill lands mid-put
CHILD_LIMIT = 60.0  # a child whose parent vanished stops putting after this many seconds
COUNT_EVERY = 100  # puts between the child's reports of how many it has put


def measure_crash_reopen(
    name: str,
    path: str,
    cfg: RunConfig,
    compaction: bool,
) -> dict[str, Any]:
    """Fill a store at ``path`` in a child, kill -9 it, time the reopen in this process."""
    spec = {"name": name, "path": path, "compaction": compaction, "config": dataclasses.asdict(cfg)}
    # stderr goes to a file: a pipe nobody reads could fill and stall the child.
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "msgcask.workloads.crash", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        held = cfg.crash_messages
        try:
            line = _read_line(child, FILL_TIMEOUT)
            if line == READY_LINE:
                time.sleep(KEEP_PUTTING)
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
            child.wait()
        if line == READY_LINE:
            assert child.stdout is not None
            # The last count the child reported (a line the kill cut short says nothing).
            counts = [n for n in child.stdout.read().split("\n")[:-1] if n.isdigit()]
            held = int(counts[-1]) if counts else held
        if line != READY_LINE:
            err.seek(0)
            tail = err.read().strip()[-800:]
            return {
                "seconds": None,
                "messages": None,
                "error": f"child did not fill the store (exit {child.returncode}): {tail}",
            }
    subject = make_subject(name, path, cfg, compaction)
    with kept_out_of_the_log() as recovery_log:
        start = time.perf_counter()
        subject.open()
        seconds = time.perf_counter() - start
    subject.close()
    return {
        "seconds": seconds,
        "messages": held,  # messages held at the kill (put, not consumed), to within COUNT_EVERY
        "error": None,
        "killed_by": "SIGKILL" if child.returncode == -signal.SIGKILL else child.returncode,
        "recovery_log": recovery_log,
    }


@contextlib.contextmanager
def kept_out_of_the_log() -> Iterator[list[str]]:
    """What msgcask logs while it reopens the killed store (a torn tail the kill
    left, truncated): expected here, so it goes into the result, not stderr."""
    kept: list[str] = []

    def keep(record: logging.LogRecord) -> bool:
        kept.append(record.getMessage())
        return False

    logger = logging.getLogger("msgcask")
    logger.addFilter(keep)
    try:
        yield kept
    finally:
        logger.removeFilter(keep)


def _read_line(child: subprocess.Popen[str], timeout: float) -> str:
    import selectors

    assert child.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(child.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        return "<timeout>"
    return child.stdout.readline().strip()


class _Filler:
    """Puts into the killed child's store; at ``max_store_size`` (msgcask's cap),
    consumes the oldest ``COUNT_EVERY`` messages to make room, so a capped store
    is killed full, not refused ``--crash-messages`` puts past its cap."""

    def __init__(self, subject: Subject) -> None:
        self.subject = subject
        self.held = 0  # messages put and not consumed: the store's size

    def put(self, body: bytes) -> int:
        """Put ``body``; return how many messages were consumed to make room."""
        from msgcask import StoreFullError

        consumed = 0
        while True:
            try:
                self.subject.put(body)
            except StoreFullError:
                done = self._consume(COUNT_EVERY)
                if not done:
                    raise  # nothing left to consume: the body alone does not fit
                consumed += done
                continue
            self.held += 1
            return consumed

    def _consume(self, n: int) -> int:
        done = 0
        while done < n and (d := self.subject.get(0.0)) is not None:
            self.subject.ack(d)
            done += 1
        self.held -= done
        return done


def _child(spec: dict[str, Any]) -> None:
    cfg = RunConfig(**spec["config"])
    subject = make_subject(spec["name"], spec["path"], cfg, spec["compaction"])
    subject.open()
    payloads = Payloads(cfg.size, cfg.size_mix, cfg.seed)
    filler = _Filler(subject)
    for i in range(cfg.crash_messages):
        filler.put(payloads.body(i))
    print(READY_LINE, filler.held, sep="\n", flush=True)
    i, deadline = cfg.crash_messages, time.monotonic() + CHILD_LIMIT
    while time.monotonic() < deadline:  # until the parent's SIGKILL; bounded if it died
        consumed = filler.put(payloads.body(i))
        i += 1
        # Said at once after consuming, so the last count is off by at most
        # COUNT_EVERY either way: puts since, or one batch consumed.
        if consumed or i % COUNT_EVERY == 0:
            print(filler.held, flush=True)


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
