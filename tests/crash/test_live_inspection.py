"""Read-only inspection of a live store (design brief, guarantee 8).

While a writer process works on a store, ``msgcask check`` reads its files and the
writer-only commands are refused naming the holder. Afterwards the writer is killed and
the store must pass the same checks as any crashed store: inspection corrupted nothing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_kill9 import WRITER, check_after_crash, drain_and_check_redelivery, parse

import msgcask
from child_process import child_process
from msgcask.store import codec

CLI = "import sys; from msgcask.cli.main import main; sys.exit(main())"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.crash
def test_check_on_a_live_store_corrupts_nothing(
    store_path: Path,
    tmp_path: Path,
    verify: Callable[[msgcask.Store], None],
    unexpected_entries: Callable[[Path], list[str]],
    data_files: Callable[[Path], list[Path]],
) -> None:
    out_path = tmp_path / "writer.out"
    cmd = [sys.executable, str(WRITER), str(store_path), "periodic", "11", "65536", "mixed"]
    with child_process(cmd, out_path) as writer:
        writer.wait_for(lambda out: out.startswith(b"R\n"), "its start")
        for _ in range(3):
            checked = cli("check", str(store_path))
            assert "Traceback" not in checked.stderr, checked.stderr
            # A healthy store being written to is not reported as damaged.
            assert checked.returncode == 0, checked.stdout + checked.stderr
            for command in ("stats", "compact"):
                refused = cli(command, str(store_path))
                assert refused.returncode != 0, f"{command} ran against a live store"
                assert "Traceback" not in refused.stderr, refused.stderr
                assert str(writer.proc.pid) in refused.stdout + refused.stderr
        writer.assert_running("while it was inspected")
        assert writer.kill9()
    report = parse(out_path.read_text())
    assert report.lines > 10
    with msgcask.open(store_path, max_file_size=65536, compaction_interval=None) as store:
        check_after_crash(store, store_path, report, unexpected_entries, data_files)
        drain_and_check_redelivery(store, report)
        verify(store)


def _half_a_record_at_the_head(path: Path) -> tuple[Path, int]:
    """Write the first half of a PUT record after the head's end, as an append
    caught half-way by a reader would look; return the head's path and size."""
    head = max(path.glob("*.log"))
    size = head.stat().st_size
    record = codec.encode_put(10**9, b"q", 4, 0, b"", b"h" * 1000)
    with open(head, "r+b") as f:
        f.seek(size)
        f.write(record[: len(record) // 2])
    return head, size


def test_check_takes_a_live_heads_torn_tail_for_an_append_in_progress(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with msgcask.open(path, max_file_size=65536, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(100):  # some sealed files and a head
            q.put(b"x" * 1000)
        store.sync()
        head, size = _half_a_record_at_the_head(path)
        checked = cli("check", str(path))  # this process holds the store
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "an append in progress" in checked.stdout
        with open(head, "r+b") as f:
            f.truncate(size)
    _half_a_record_at_the_head(path)
    # Closed, the same tail is what a crash leaves: a problem to report.
    checked = cli("check", str(path))
    assert checked.returncode == 1
    assert "torn tail" in checked.stderr
