"""What the index says of each data file after compaction is what a rebuild
from the files themselves says: the two must never drift apart."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import msgcask


def _accounts(store: msgcask.Store) -> dict[int, tuple[int, int]]:
    return {
        file_id: (account.kind, account.id_floor)
        for file_id, account in store._acct.files.items()
        if not account.retired
    }


def test_file_accounts_after_compaction_match_a_rebuild(
    store_path: Path, make_sparse: Callable[[msgcask.Queue], list[int]]
) -> None:
    options = {"max_file_size": 64 * 1024, "compaction_interval": None}
    with msgcask.open(store_path, **options) as store:  # type: ignore[arg-type]
        make_sparse(store.queue("q"))
        assert store.compact(threshold=0.9).files_rewritten
        kept = _accounts(store)
    assert any(kind == msgcask.store.format.KIND_COMPACTED for kind, _ in kept.values())
    shutil.rmtree(store_path / "index")
    with msgcask.open(store_path, **options) as store:  # type: ignore[arg-type]
        assert store.recovery.mode == "rebuild"
        rebuilt = _accounts(store)
    # The rebuild starts one more journal file (an unclean open); the rest agree.
    assert {f: rebuilt[f] for f in kept} == kept
