"""Damage inside the LMDB index (not its meta pages) must lead to a rebuild, not to a raw
LMDB error or a wrong answer (design brief, guarantee 4: a corrupt index is rebuilt).

The store is opened in a child process: a damaged B-tree page can crash the LMDB
library itself, and that must fail this test, not the whole pytest run.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import msgcask

PAGE = 4096
CHILD = """
import json, sys
import msgcask
try:
    with msgcask.open(sys.argv[1], compaction_interval=None) as store:
        state = {
            name: [[m.id, m.body.hex(), m.priority] for m in store.queue(name).browse()]
            for name in store.queues()
        }
        print(json.dumps({"state": state, "problems": store.verify()}))
except msgcask.Error as e:
    print(json.dumps({"msgcask_error": type(e).__name__ + ": " + str(e)}))
"""


@pytest.mark.parametrize("queues", [1, 2])
@pytest.mark.parametrize("seed", range(4))
def test_damaged_index_pages_are_rebuilt_from_the_journal(
    store_path: Path, seed: int, queues: int
) -> None:
    with msgcask.open(store_path, max_file_size=64 * 1024, compaction_interval=None) as store:
        q = store.queue("q")
        for i in range(500):
            q.put(b"%05d" % i * 100, priority=i % 10)
        for _ in range(100):
            q.ack(q.get(block=False))
        if queues == 2:
            store.queue("other").put(b"x")
        before = {
            name: [[m.id, bytes(m.body).hex(), m.priority] for m in store.queue(name).browse()]
            for name in store.queues()
        }
    mdb = store_path / "index" / "data.mdb"
    size = mdb.stat().st_size
    assert size > 4 * PAGE, "test setup: the index has pages past the two meta pages"
    # Garbage over the pages after the meta pages (branch and leaf pages of the trees).
    with open(mdb, "r+b") as f:
        f.seek(2 * PAGE)
        f.write(random.Random(seed).randbytes(min(size - 2 * PAGE, 6 * PAGE)))

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(store_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, f"open crashed (rc {child.returncode}): {child.stderr[-2000:]}"
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert "msgcask_error" not in result, result
    assert result["state"] == before
    assert result["problems"] == []
