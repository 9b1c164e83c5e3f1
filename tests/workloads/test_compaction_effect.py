"""What compaction buys on dlq-heavy: with it off, more data stays on disk."""

from __future__ import annotations

import pytest
from workload_sizes import Run

import msgcask

HAS_COMPACTION = hasattr(msgcask.Store, "compact")


@pytest.mark.xfail(not HAS_COMPACTION, reason="the core has no Store.compact() yet", strict=True)
def test_compaction_off_keeps_more_data_than_on(run_tiny: Run) -> None:
    # 1 in 50 dead-lettered: every 64 KiB file keeps a live message unless compacted.
    doc, _ = run_tiny(
        "dlq-heavy",
        peers=[],
        messages=6000,
        size=512,
        pin_every=50,
        compaction="both",
        compaction_interval=0.1,
    )
    runs = {r["compaction_on"]: r for r in doc["runs"]}
    on, off = runs[True], runs[False]
    assert on["status"] == off["status"] == "ok"
    assert on["counts"]["dead_lettered"] == off["counts"]["dead_lettered"] == 120
    assert off["compaction"]["passes"] == 0
    assert on["compaction"]["passes"] > 0
    assert off["final_stats"]["data_bytes"] > 2 * on["final_stats"]["data_bytes"]
    (ratio,) = doc["ratios"]
    assert ratio["other"] == "msgcask[compaction off]"
    assert ratio["final_disk"] < 1
