"""A put torn by kill -9 whose body holds the bytes of a valid record.

A message body is the caller's bytes: it may hold an encoded ACK of another message
(a relayed data file, a crafted payload). When the put is cut short by a crash, the
write head ends in a prefix of that record. Recovery must cut the prefix off whole:
searching inside it for the next intact record finds the embedded ACK and applies it,
which consumes a message whose put returned and that nobody acked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import msgcask
from msgcask.check import scan_files
from msgcask.pipeline.files import list_data_files
from msgcask.pipeline.rows import AT, file_rows

CHILD = r"""
import os, signal, sys
import msgcask
from msgcask.check import scan_files
from msgcask.pipeline.files import list_data_files
from msgcask.pipeline.rows import AT, file_rows
from msgcask.store import codec
path, mode = sys.argv[1], sys.argv[2]
store = msgcask.open(path, compaction_interval=None)
q = store.queue("q")
victim = q.put(b"precious message")
size = {"pwrite": 3 * 2**20, "mapped-headerless": 1500}.get(mode, 64 * 1024)
body = b"x" * 100 + codec.encode_ack(victim) + b"y" * size
head = store._journal.head
start = head.size
if mode == "batch":
    with store.transaction() as tx:
        tx.put("q", b"first member")
        tx.put("q", body)
else:
    q.put(body)
print(victim, start, head.size, head.path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def tear(path: str, mode: str, start: int, end: int) -> None:
    """Leave on disk what a kill in the middle of that append leaves."""
    cut = start + (400 if mode == "mapped-headerless" else 4096)
    with open(path, "r+b") as f:
        if mode == "pwrite":  # pwrite stops between pages: the file ends in the record
            f.truncate(cut)
            return
        if mode == "mapped-headerless":  # memcpy stores a copy's first vector last
            f.seek(start)
            f.write(bytes(32))
        f.seek(cut)  # the rest of the record: the head's preallocated zeros
        f.write(bytes(end - cut))


@pytest.mark.parametrize("mode", ["mapped", "mapped-headerless", "pwrite", "batch"])
def test_torn_put_whose_body_holds_an_ack_consumes_nothing(store_path: Path, mode: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(store_path), mode],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    victim, start, end, head = out.stdout.split()
    tear(head, mode, int(start), int(end))
    # `msgcask check` and the pipeline's rows read the head as recovery will.
    assert scan_files(str(store_path)).live_ids == {int(victim)}
    rows = [r for info in list_data_files(str(store_path)) for r in file_rows(info, False)]
    assert [r[AT["msg_id"]] for r in rows if r[AT["type"]] == "ack"] == []
    with msgcask.open(store_path, compaction_interval=None) as store:
        ids = [m.id for m in store.queue("q").browse()]
        # Only the victim: not the ACK inside the torn body, nor half of a torn batch.
        assert ids == [int(victim)]
        [report] = store.recovery.corruptions
        assert report.action == "truncated" and report.offset == int(start)
        assert store.verify() == []
    assert os.path.getsize(head) == int(start)
