"""Percentiles, windows and throughput from known latencies."""

from __future__ import annotations

import math

import pytest

from msgcask.store import codec
from msgcask.store.format import FILE_HEADER_SIZE
from msgcask.workloads.batches import (
    RunCalls,
    largest_batch,
    put_calls,
    put_ranges,
    skip_headers,
)
from msgcask.workloads.config import BENCH_QUEUE, MiB, RunConfig
from msgcask.workloads.payload import Payloads, index_of
from msgcask.workloads.recorder import (
    GET_ACK,
    PUT,
    Recorder,
    percentile,
    phased_throughput,
    summarize,
)


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([], 0.5) is None
    s = summarize([3.0, 1.0, 2.0])
    assert (s["count"], s["p50"], s["max"], s["mean"]) == (3, 2.0, 3.0, 2.0)


def test_windows_split_by_end_time_and_throughput_spans_the_ops() -> None:
    rec = Recorder(t0=100.0)
    log = rec.log(PUT)
    # 10 puts in the first second (1 ms each), 10 in the third (5 ms each)
    for k in range(10):
        log.done(100.0 + k * 0.05, 100.0 + k * 0.05 + 0.001, 1, 10)
        log.done(102.0 + k * 0.05, 102.0 + k * 0.05 + 0.005, 1, 10)
    windows = rec.windows(1.0)
    assert [w["put"]["count"] for w in windows] == [10, 0, 10]
    assert windows[0]["put"]["p99"] == pytest.approx(0.001)
    assert windows[2]["put"]["p99"] == pytest.approx(0.005)
    assert windows[1]["put"]["p99"] is None
    assert rec.messages(PUT) == 20 and rec.bytes(PUT) == 200
    assert rec.throughput(PUT) == pytest.approx(20 / (102.455 - 100.0))
    assert rec.throughput(GET_ACK) is None


def test_windows_of_no_op_and_of_one_op_ending_at_the_start() -> None:
    assert Recorder(t0=0.0).windows(0.5) == []
    rec = Recorder(t0=5.0)
    rec.log(GET_ACK).done(5.0, 5.0, 1, 10)  # ended at t = 0 (a coarse clock)
    [window] = rec.windows(0.5)
    assert window["t"] == 0.5
    assert window["get_ack"] == {"count": 1, "p50": 0.0, "p99": 0.0, "max": 0.0}
    assert window["put"]["count"] == 0


def test_untimed_ops_count_for_throughput_only() -> None:
    rec = Recorder(t0=0.0)
    log = rec.log(GET_ACK)
    log.done(0.0, 1.0, 1, 5, timed=False)
    log.done(1.0, 1.5, 1, 5)
    assert rec.summary(GET_ACK)["count"] == 1
    assert rec.messages(GET_ACK) == 2


def test_bodies_carry_their_index_and_the_mix_has_three_sizes() -> None:
    fixed = Payloads(100, False, seed=1)
    assert len(fixed.body(7)) == 100 and index_of(fixed.body(7)) == 7
    mix = Payloads(100, True, seed=1)
    sizes = {mix.size_of(i) for i in range(5000)}
    assert sizes == {512, 4096, 65536}
    share_small = sum(mix.size_of(i) == 512 for i in range(10_007)) / 10_007
    assert 0.75 < share_small < 0.85
    assert index_of(mix.body(123456)) == 123456


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("interval", 1e-8, "interval must be 0.01 to 3600 seconds"),
        ("interval", math.nan, "interval must be 0.01 to 3600 seconds, not nan"),
        ("interval", math.inf, "interval must be 0.01 to 3600 seconds, not inf"),
        ("time_limit", math.nan, "time_limit must be more than 0"),
        ("time_limit", math.inf, "time_limit must be more than 0"),
        ("time_limit", 1e10, "time_limit must be more than 0 and at most 1e"),
        ("max_file_size", 0, "max_file_size must be 65536 .64 KiB. to 2147483648 .2 GiB. bytes"),
        ("max_file_size", 2**31 + 1, "the data file sizes msgcask takes; not 2147483649"),
        ("rounds", 0, "rounds must be at least 1"),
        ("rounds", -3, "rounds must be at least 1"),
        ("crash_messages", -1, "crash_messages must be 0 to 1000000, not -1"),
        ("crash_messages", 1_000_001, "crash_messages must be 0 to 1000000, not 1000001"),
        ("producers", 0, "producers must be 1 to 64, not 0"),
        ("producers", 65, "producers must be 1 to 64, not 65"),
        ("consumers", 10**6, "consumers must be 1 to 64, not 1000000"),
    ],
)
def test_config_refuses_numbers_out_of_range(name: str, value: float, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        RunConfig(workload="priority-pin", **{name: value})


@pytest.mark.parametrize("producers", [0, -1, 10**9])
def test_config_refuses_producers_out_of_range_before_slicing_batches(producers: int) -> None:
    # The batch check slices the run per producer: with none it found no put call,
    # and with a billion it would slice for minutes.
    with pytest.raises(ValueError, match=f"producers must be 1 to 64, not {producers}"):
        RunConfig(batch=10, messages=1000, producers=producers)


def test_config_refuses_a_batch_that_cannot_fit_in_a_data_file() -> None:
    # msgcask writes a batch as one record: 1,000 bodies of 1 KiB never fit in 1 MiB.
    with pytest.raises(ValueError, match=r"a batch of 1000 bodies of 1024 bytes .* is 990, or"):
        RunConfig(batch=1000, messages=2000)
    with pytest.raises(ValueError, match=r"a batch of 2000 bodies of the size mix"):
        RunConfig(workload="deep-queue", batch=2000, size_mix=True)  # even the smallest
    # What can fit is taken: a batch just under the limit, one larger than any call
    # of the run, the size mix's usual batch, and one per producer's share.
    for kw in (
        {"batch": 960},
        {"batch": 1000, "messages": 500},
        {"batch": 100, "size_mix": True},
        {"batch": 1000, "messages": 1800, "producers": 2},
    ):
        RunConfig(**kw)


def test_a_refused_batch_names_the_largest_smaller_batch_that_fits() -> None:
    # 3,000 messages of the size mix: batches of 175 to 199 make a record too big for
    # 1 MiB somewhere in the run, 174 does not; nor does 173 fit (its calls start
    # elsewhere in the mix), so no bisection would find 174.
    params = {"messages": 3000, "size_mix": True}
    with pytest.raises(ValueError, match=r"the largest --batch under 200 that fits is 174, or"):
        RunConfig(**params, batch=200)
    calls = RunCalls(RunConfig(**params, batch=174))
    room = MiB - FILE_HEADER_SIZE
    assert [b for b in range(173, 200) if calls.largest(b).record <= room] == [174]
    # Bodies of which no two fit in a data file: only single puts.
    with pytest.raises(ValueError, match=r"only single puts \(--batch 1\) fit"):
        RunConfig(size=600_000, batch=2, messages=10)
    RunConfig(size=600_000, batch=1, messages=10)


def test_priority_pin_puts_its_rounds_in_batches_of_at_most_batch() -> None:
    # A round's high-priority puts are sliced into calls of --batch (the last shorter),
    # so any --batch works where a round's bodies fit: 500 and more with 1 KiB bodies.
    for batch in (124, 500, 100_000):
        RunConfig(workload="priority-pin", batch=batch)
    payloads = Payloads(1024, False, 0)
    calls = [
        list(put_calls(r, 500))
        for r in put_ranges(RunConfig(batch=500, workload="priority-pin"), payloads)
    ]
    assert [len(c) for c in calls[1]] == [500, 450]  # a round of 950 high-priority messages


def test_priority_pin_says_when_a_larger_data_file_helps() -> None:
    # The size mix with seed 0: a batch of 150 bodies can pass 1 MiB, but fits in
    # 1.5 MiB files, whose rounds are larger; a batch of a whole round (up to 382
    # bodies, about a data file of them) may fit in no data file, so that is said instead.
    mix = {"workload": "priority-pin", "size_mix": True}
    with pytest.raises(ValueError, match=r"under 150 that fits is 138, or raise --max-file-size"):
        RunConfig(**mix, batch=150)
    RunConfig(**mix, batch=150, max_file_size=3 * MiB // 2)
    with pytest.raises(
        ValueError, match=r"under 500 that fits is 138 \(a round puts up to 382 .*fit in none"
    ):
        RunConfig(**mix, batch=500)
    RunConfig(**mix, batch=138)


@pytest.mark.parametrize(
    "workload",
    ["steady", "selector-skip", "priority-pin", "drain-history", "deep-queue"],
)
@pytest.mark.parametrize(("producers", "batch"), [(1, 7), (3, 40), (2, 10007), (1, 3)])
@pytest.mark.parametrize("size_mix", [True, False], ids=["mix", "fixed"])
def test_the_largest_batch_is_the_largest_of_the_runs_put_calls(
    workload: str, producers: int, batch: int, size_mix: bool
) -> None:
    # Against every put call of the run, message by message (a small run): exactly,
    # selector-skip's headers included, so a batch that fits is never refused.
    cfg = RunConfig(
        workload=workload,
        size_mix=size_mix,
        seed=3,
        batch=batch,
        producers=producers,
        messages=3001,
        depth=2500,
        fill=700,
        repeat=2,
        rounds=5,
        pin_every=7,
        max_file_size=64 * MiB,
    )
    payloads = Payloads(cfg.size, cfg.size_mix, cfg.seed)
    headers_for = skip_headers(cfg.pin_period)
    records = [
        codec.BATCH_RECORD_SIZE
        + sum(
            codec.put_record_size(
                BENCH_QUEUE.encode(),
                codec.encode_headers(headers_for(i) if workload == "selector-skip" else None),
                payloads.size_of(i),
            )
            for i in call
        )
        for indices in put_ranges(cfg, payloads)
        for call in put_calls(indices, cfg.batch)
    ]
    largest = largest_batch(cfg)
    assert largest is not None
    assert largest.record == max(records)


def test_config_takes_the_bounds_themselves() -> None:
    cfg = RunConfig(interval=0.01, time_limit=1e9, rounds=1, crash_messages=0)
    assert cfg.pin_rounds == 1
    RunConfig(producers=64, consumers=64, crash_messages=1_000_000)
    assert RunConfig(interval=3600).interval == 3600


def test_config_rejects_bad_values_and_resolves_defaults() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        RunConfig(workload="nope")
    with pytest.raises(ValueError, match="sync"):
        RunConfig(sync="sometimes")
    assert RunConfig(workload="selector-skip").pin_period == 500
    assert RunConfig(workload="dlq-heavy").pin_period == 1000
    pin = RunConfig(workload="priority-pin", max_file_size=2**20)
    assert pin.store_size_limit == 32 * 2**20
    assert pin.pin_rounds == 128


def test_run_throughput_leaves_out_the_time_between_phases() -> None:
    # drain-history: msgcask waits for compaction after each drain, peers do not; a
    # span from the first put to the last charged msgcask for the wait.
    fresh, later = Recorder(t0=0.0), Recorder(t0=0.0)
    fresh.log(PUT).done(0.0, 1.0, 100, 100)
    later.log(PUT).done(10.0, 11.0, 100, 100)  # 9 s of waiting in between
    assert phased_throughput([fresh, later], PUT) == pytest.approx(100.0)
    assert phased_throughput([fresh, later], GET_ACK) is None
    assert fresh.throughput(PUT) == pytest.approx(100.0)


def test_io_write_amplification_is_none_where_no_write_back_is_counted() -> None:
    # /proc/self/io write_bytes stays 0 on tmpfs: that is "not measured", not 0.0.
    from msgcask.workloads.result import derived_metrics

    run = {"samples": [], "final_stats": None, "bytes_put": 1000, "io_bytes_written": 0}
    assert derived_metrics(run)["io_write_amplification"] is None
    run["io_bytes_written"] = 2500
    assert derived_metrics(run)["io_write_amplification"] == 2.5
