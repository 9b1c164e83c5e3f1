"""keep_data_files=True: a store that never deletes a data file, so its
journal stays a whole recording of its workload."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import msgcask
from msgcask.store.filenames import parse_data_file_name

SMALL = 2**16


def data_file_ids(path: Path) -> list[int]:
    return sorted(i for p in path.iterdir() if (i := parse_data_file_name(p.name)) is not None)


def drained_history(path: Path, **options: object) -> list[int]:
    """Files filled, then every message consumed: all but the head hold
    nothing needed. Returns the data-file ids left after a few background syncs."""
    with msgcask.open(path, max_file_size=SMALL, compaction_interval=None, **options) as store:
        queue = store.queue("q")
        for _ in range(600):
            queue.put(b"d" * 500)
        for _ in range(600):
            queue.ack(queue.get(block=False))
        time.sleep(10 * store.options.sync_interval)  # the background loop deletes dead files
        ids = data_file_ids(path)
    return ids


def test_with_it_no_data_file_is_deleted(tmp_path: Path) -> None:
    kept = drained_history(tmp_path / "kept", keep_data_files=True)
    assert kept == list(range(1, kept[-1] + 1)) and len(kept) >= 5
    # The same history without the option loses the drained files.
    assert len(drained_history(tmp_path / "plain")) < len(kept)


def test_compact_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    drained_history(tmp_path, keep_data_files=True)
    before = data_file_ids(tmp_path)
    with msgcask.open(
        tmp_path, max_file_size=SMALL, compaction_interval=None, keep_data_files=True
    ) as s:
        with pytest.raises(msgcask.Error, match=r"keep_data_files=True.*Reopen it without"):
            s.compact()
    assert data_file_ids(tmp_path) == before


@pytest.mark.parametrize(
    "options",
    [{}, {"compaction_interval": None, "max_store_size": 2**22}],
    ids=["with the schedule on", "with max_store_size"],
)
def test_it_is_refused_beside_what_compacts(tmp_path: Path, options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="compaction_interval=None and no max_store_size"):
        msgcask.open(tmp_path, keep_data_files=True, **options)
    assert not list(tmp_path.iterdir())


def test_it_must_be_a_bool(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="keep_data_files must be a bool, got int"):
        msgcask.open(tmp_path, keep_data_files=1, compaction_interval=None)
