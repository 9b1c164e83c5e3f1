"""Files drained while a pass reads its victims are deleted at once.

Under a fast drain a pass that rewrites several victims can take a second or
more; files whose last message is consumed meanwhile must not wait for the
pass to end (the space bound is checked while the drain goes on). The pass
deletes them after each victim it reads, leaving its own victims alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import msgcask
from msgcask.compactor import needed, rewrite

MAX_FILE_SIZE = 64 * 1024
BODY = b"d" * 1000


def _files(store: msgcask.Store) -> set[int]:
    return {f.file_id for f in store.stats().files}


def test_a_file_drained_during_the_rewrite_is_gone_before_the_copy_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with msgcask.open(
        tmp_path / "s", max_file_size=MAX_FILE_SIZE, compaction_interval=None
    ) as store:
        full = store.queue("full")
        for _ in range(64):  # file 1 (and a little of file 2): live, never a victim
            full.put(BODY)
        live, work = store.queue("live"), store.queue("work")
        for i in range(4 * 60):  # sparse files after it: the victims
            if i % 20 == 0:
                live.put(BODY)
            else:
                work.put(BODY)
                work.ack(work.get(block=False))
        (drained,) = [f.file_id for f in store.stats().files if f.live_messages >= 55]

        def drain_once(real: object) -> object:
            def first_victim_read(s: msgcask.Store, file_id: int) -> object:
                while len(full):  # the consumer empties file 1 meanwhile
                    full.ack(full.get(block=False))
                return real(s, file_id)  # type: ignore[operator]

            return first_victim_read

        monkeypatch.setattr(needed, "find_by_id", drain_once(needed.find_by_id))
        on_disk_when_written: list[bool] = []
        real_write = rewrite._write_output

        def write_output(s: msgcask.Store, victims: list[int], copies: list[object]) -> object:
            on_disk_when_written.append(drained in _files(s))
            return real_write(s, victims, copies)  # type: ignore[arg-type]

        monkeypatch.setattr(rewrite, "_write_output", write_output)
        report = store.compact(threshold=0.5)
        assert report.files_rewritten >= 2
        assert drained not in _files(store)
        assert on_disk_when_written == [False]
        assert store.verify() == []
