"""priority-pin's rounds each write about one data file, whatever the bodies' sizes."""

from __future__ import annotations

from pathlib import Path

from workload_sizes import Run

import msgcask
from msgcask.store import codec
from msgcask.store.format import FILE_HEADER_SIZE
from msgcask.workloads.batches import put_ranges
from msgcask.workloads.config import BENCH_QUEUE, RunConfig
from msgcask.workloads.payload import SIZE_MIX, Payloads
from msgcask.workloads.report import summary
from msgcask.workloads.result import validate
from msgcask.workloads.rounds import PinRounds

KiB = 1024
FILE = 256 * KiB  # a tiny data file: the size mix's 64 KiB bodies are a quarter of it
ROOM = FILE - FILE_HEADER_SIZE  # the record bytes one data file holds
# What the consumer writes for each high-priority message it takes: DELIVER and ACK.
TAKEN = len(codec.encode_deliver(0, 1)) + codec.ACK_RECORD_SIZE
LARGEST = codec.put_record_size(BENCH_QUEUE.encode(), b"", max(s for s, _ in SIZE_MIX)) + TAKEN
# A round stops at the message that would take it farther from one data file than
# stopping does: it lands within half of the largest message's records of it.
TOLERANCE = LARGEST // 2


def test_each_round_of_the_size_mix_writes_about_one_data_file(tmp_path: Path) -> None:
    # Measured on a store: each round's puts, then the consumer's get and ack of its
    # high-priority messages. Rounds counted from the mean body size wrote 0.22 to 2.03
    # data files each at this size (0.51 to 1.68 at 1 MiB).
    cfg = RunConfig(workload="priority-pin", size_mix=True, max_file_size=FILE, rounds=60)
    payloads = Payloads(cfg.size, cfg.size_mix, cfg.seed)
    ranges = list(put_ranges(cfg, payloads))
    rounds = list(zip(ranges[::2], ranges[1::2], strict=True))
    assert len(rounds) == 60
    written = []
    with msgcask.open(tmp_path / "s", max_file_size=FILE, compaction_interval=None) as store:
        q = store.queue(BENCH_QUEUE)
        for low, high in rounds:
            before = store.stats().bytes_written
            q.put(payloads.body(low.start), priority=0)
            for i in high:
                q.put(payloads.body(i), priority=9)
            for _ in high:
                q.ack(q.get(block=False))
            written.append(store.stats().bytes_written - before)
    far = [(r, w) for r, w in enumerate(written) if abs(w - ROOM) > TOLERANCE]
    assert not far, f"rounds (index, bytes) farther than {TOLERANCE} from {ROOM}: {far}"
    assert len({len(high) for _, high in rounds}) > 1  # sized by their bodies, not one count


def test_the_result_gives_each_rounds_messages_and_bytes(run_tiny: Run) -> None:
    doc, _ = run_tiny("priority-pin", size_mix=True, max_file_size=FILE, rounds=6, peers=[])
    validate(doc)
    pin = doc["runs"][0]["phases"]["priority_pin"]
    assert pin["rounds_completed"] == 6
    high, written = pin["high_messages_per_round"], pin["round_bytes"]
    assert 1 <= high["min"] <= high["mean"] <= high["max"]
    assert ROOM - TOLERANCE <= written["min"] <= written["max"] <= ROOM + TOLERANCE
    line = f"6 of 6 rounds ({high['min']} to {high['max']} high-priority messages each; "
    assert line in summary(doc), summary(doc)


def test_the_high_messages_of_all_rounds_are_counted_past_where_rounds_repeat() -> None:
    # Rounds of fixed-size bodies are all alike: the count goes round that cycle of one.
    for kw in ({"rounds": 7}, {"rounds": 300, "size_mix": True, "max_file_size": FILE}):
        rounds = PinRounds(RunConfig(workload="priority-pin", **kw))
        assert rounds.high_messages() == sum(len(r.high) for r in rounds)
    assert len(PinRounds(RunConfig(workload="priority-pin", rounds=7)).distinct()) == 1


def test_a_run_of_one_round_is_summarised_as_one_round(run_tiny: Run) -> None:
    doc, _ = run_tiny("priority-pin", rounds=1, peers=[])
    pin = doc["runs"][0]["phases"]["priority_pin"]
    assert (pin["rounds"], pin["rounds_completed"]) == (1, 1)
    high = pin["high_messages_per_round"]
    assert high["min"] == high["max"] >= 1
    line = f"msgcask[compaction on]: 1 of 1 round ({high['min']} to {high['max']} high-priority "
    assert [s for s in summary(doc).splitlines() if s.startswith(line)], summary(doc)
