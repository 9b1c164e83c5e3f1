"""The compaction policy (compactor/policy.py), on its own: pure input, pure output.

The policy decides which files a pass deletes whole and which it rewrites. The space
guarantee rests on it (every sparse file is eventually rewritten, nothing live is ever
chosen for deletion, the write head is never touched) and so does the latency one (the
byte budget), so each rule is pinned here with hand-made files and then checked over
random file sets with hypothesis.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import msgcask
from msgcask.compactor.policy import (
    MARK_COST,
    NEAR_BOUND_FILES,
    FileView,
    Plan,
    behind,
    benefit_cost,
    manifest_size,
    min_gain_for,
    near_bound,
    plan,
    reclaimable_bytes,
)
from msgcask.store import codec, manifest_rule
from msgcask.store.manifest_rule import MAX_MANIFEST_BYTES, MAX_MANIFEST_VICTIMS

KIB = 1024
SIZE = 64 * KIB
SMALL = SIZE // 8  # what the runner passes: max_file_size // 8
BIG_BUDGET = 2**40


def view(
    file_id: int,
    *,
    live: int = 0,
    messages: int | None = None,
    marks: int = 0,
    size: int = SIZE,
    age: float = 100.0,
    active: bool = False,
) -> FileView:
    if messages is None:
        messages = 1 if live else 0
    return FileView(file_id, size, live, messages, marks, age, active)


def run(
    files: list[FileView],
    *,
    threshold: float = 0.5,
    budget: int = BIG_BUDGET,
    small_file: int = SMALL,
    min_gain: int = 0,
) -> Plan:
    return plan(files, threshold=threshold, budget=budget, small_file=small_file, min_gain=min_gain)


# -- deletion ------------------------------------------------------------------------------


def test_file_with_nothing_needed_is_deleted_whole_not_copied() -> None:
    p = run([view(1), view(2, live=SIZE // 10), view(3, active=True)])
    assert p.reclaim == [1]
    assert 1 not in p.rewrite


def test_empty_write_head_is_never_deleted() -> None:
    # The head holds nothing live but the journal is still appending to it.
    p = run([view(1, active=True), view(2)])
    assert p.reclaim == [2]
    assert 1 not in p.rewrite


def test_file_holding_only_needed_acks_is_not_deleted() -> None:
    # An ACK whose PUT record still exists elsewhere must outlive it: deleting this
    # file would resurrect the message on the next rebuild.
    p = run([view(1, marks=3)])
    assert p.reclaim == []
    assert p.rewrite == [1]  # 3 marks in 64 KiB: sparse, carried forward instead


def test_file_with_a_live_message_is_not_deleted() -> None:
    p = run([view(1, live=100, messages=1)], threshold=0.0)
    assert p.reclaim == []
    assert p.rewrite == []


def test_reclaim_list_is_sorted_by_file_id() -> None:
    p = run([view(9), view(3), view(5)])
    assert p.reclaim == [3, 5, 9]


def test_nothing_to_do_is_a_false_plan() -> None:
    p = run([view(1, live=SIZE - 100, active=False), view(2, active=True)])
    assert not p
    assert run([view(1)])


# -- threshold -----------------------------------------------------------------------------


def test_file_under_threshold_is_rewritten() -> None:
    p = run([view(1, live=SIZE // 4)], threshold=0.5)
    assert p.rewrite == [1]


def test_file_over_threshold_is_left_alone() -> None:
    p = run([view(1, live=3 * SIZE // 4)], threshold=0.5)
    assert p.rewrite == []


def test_file_exactly_at_threshold_is_left_alone() -> None:
    # "below the threshold" is strict: a half-live file at t=0.5 is not copied.
    p = run([view(1, live=SIZE // 2)], threshold=0.5)
    assert p.rewrite == []


def test_threshold_one_rewrites_every_file_with_any_dead_byte() -> None:
    files = [view(1, live=SIZE - 1), view(2, live=SIZE, messages=9), view(3, active=True)]
    p = run(files, threshold=1.0)
    assert p.rewrite == [1]


def test_deferred_files_are_not_rewritten_but_still_deleted_whole() -> None:
    # Deferred: still being consumed (the runner's ``_draining``).
    files = [view(1, live=SIZE // 4), view(2, live=SIZE // 4), view(3)]
    p = plan(files, threshold=0.5, budget=BIG_BUDGET, small_file=SMALL, defer=frozenset({1, 3}))
    assert (p.reclaim, p.rewrite) == ([3], [2])
    assert sorted(run(files).rewrite) == [1, 2]


def test_active_head_is_never_rewritten_however_empty() -> None:
    p = run([view(1, live=10, active=True, age=1e6)], threshold=1.0)
    assert p.rewrite == []
    assert p.reclaim == []


def test_needed_acks_count_as_live_bytes_for_the_threshold() -> None:
    # 1000 carried marks cost 1000 * MARK_COST bytes to copy: above a low threshold.
    marks = 1000
    ratio = marks * MARK_COST / SIZE
    assert 0.2 < ratio < 0.5
    assert run([view(1, marks=marks)], threshold=0.2).rewrite == []
    assert run([view(1, marks=marks)], threshold=0.5).rewrite == [1]


# -- minimum gain ----------------------------------------------------------------------------


def test_nearly_full_file_is_not_copied_to_save_its_header() -> None:
    # At threshold 1.0 (space pressure) every file is "below the threshold" by its
    # header bytes; copying it frees nothing and costs a whole file.
    gain = min_gain_for(SIZE)
    f = view(1, live=SIZE - 32, messages=60)
    assert run([f], threshold=1.0, min_gain=gain).rewrite == []


def test_file_freeing_at_least_the_minimum_gain_is_rewritten() -> None:
    gain = min_gain_for(SIZE)
    f = view(1, live=SIZE - gain, messages=50)
    assert run([f], threshold=1.0, min_gain=gain).rewrite == [1]
    g = view(2, live=SIZE - gain + 1, messages=50)
    assert run([g], threshold=1.0, min_gain=gain).rewrite == []


def test_minimum_gain_is_a_64th_of_a_file_and_at_least_4_kib() -> None:
    assert min_gain_for(64 * KIB) == 4096
    assert min_gain_for(32 * 2**20) == 32 * 2**20 // 64


def test_reclaimable_bytes_counts_whole_files_worthwhile_dead_bytes_and_the_head() -> None:
    files = [
        view(1),  # deletable whole
        view(2, live=SIZE - 10_000),  # 10,000 dead bytes, worth a rewrite
        view(3, live=SIZE - 100),  # 100 dead bytes: not worth it
        view(4, live=1000, size=20_000, active=True),  # head: freed once sealed
    ]
    assert reclaimable_bytes(files, min_gain=4096) == SIZE + 10_000 + 19_000
    # The head's dead bytes count however few: they are freed when it is sealed.
    nearly_full_head = view(4, live=19_000, size=20_000, active=True)
    assert reclaimable_bytes([nearly_full_head], min_gain=4096) == 1000
    # Needed ACKs (21 bytes) are costed as DELIVERs (23): a head of them frees
    # nothing, and takes nothing off what the other files free.
    acks = 1000
    head_of_acks = view(5, marks=acks, size=32 + acks * 21, active=True)
    assert reclaimable_bytes([view(1), head_of_acks], min_gain=4096) == SIZE


# -- order: benefit / cost -----------------------------------------------------------------


def test_benefit_cost_prefers_emptier_files() -> None:
    assert benefit_cost(view(1, live=SIZE // 10)) > benefit_cost(view(2, live=SIZE // 3))


def test_benefit_cost_prefers_older_files() -> None:
    young = view(1, live=SIZE // 4, age=1.0)
    old = view(2, live=SIZE // 4, age=1000.0)
    assert benefit_cost(old) > benefit_cost(young)


def test_benefit_cost_of_a_full_file_is_zero() -> None:
    assert benefit_cost(view(1, live=SIZE)) == 0.0


def test_benefit_cost_of_a_brand_new_file_is_still_positive() -> None:
    # age 0 must not make every fresh sparse file worthless forever.
    assert benefit_cost(view(1, live=SIZE // 4, age=0.0)) > 0.0


def test_tight_budget_takes_the_older_file_first() -> None:
    young = view(1, live=SIZE // 4, age=1.0)
    old = view(2, live=SIZE // 4, age=1000.0)
    p = run([young, old], budget=SIZE // 4)
    assert p.rewrite == [2]


def test_tight_budget_takes_the_emptier_file_first() -> None:
    fuller = view(1, live=SIZE // 3)
    emptier = view(2, live=SIZE // 3 - 1000)
    p = run([fuller, emptier], budget=SIZE // 3)
    assert p.rewrite == [2]


def test_rewrite_order_is_by_benefit_cost() -> None:
    files = [
        view(1, live=SIZE // 3, age=10.0),
        view(2, live=SIZE // 10, age=10.0),
        view(3, live=SIZE // 10, age=500.0),
        view(4, live=SIZE // 5, age=50.0),
    ]
    p = run(files)
    assert p.rewrite == sorted([1, 2, 3, 4], key=lambda i: -benefit_cost(files[i - 1]))
    assert p.rewrite[0] == 3


# -- budget --------------------------------------------------------------------------------


def test_victims_stop_where_a_manifest_recovery_can_read_would_end() -> None:
    # Tiny sealed files (a store reopened again and again leaves one each) all fit the
    # budgets; a MANIFEST naming more of them than recovery reads would be taken for
    # damage, and its victims kept beside their copies.
    many = [view(i, live=100, size=200) for i in range(1, MAX_MANIFEST_VICTIMS + 100)]
    p = run(many, budget=2**40)
    assert len(p.rewrite) == MAX_MANIFEST_VICTIMS
    record = codec.encode_manifest(p.rewrite)
    assert len(record) <= MAX_MANIFEST_BYTES
    assert manifest_rule.parse_manifest(record) == p.rewrite
    one_more = codec.encode_manifest([*p.rewrite, MAX_MANIFEST_VICTIMS + 1])
    assert manifest_rule.parse_manifest(one_more[:MAX_MANIFEST_BYTES]) is None


def test_first_victim_is_taken_even_when_it_alone_exceeds_the_budget() -> None:
    # Otherwise a pass with a small budget could never make progress.
    p = run([view(1, live=SIZE // 4)], budget=1)
    assert p.rewrite == [1]


def test_second_victim_that_does_not_fit_the_budget_is_left_for_later() -> None:
    a = view(1, live=SIZE // 10, age=1000.0)
    b = view(2, live=SIZE // 4, age=10.0)
    p = run([a, b], budget=SIZE // 10 + SIZE // 8)
    assert p.rewrite == [1]


def test_smaller_victim_after_a_skipped_one_still_fits_the_budget() -> None:
    # A victim too big for what is left must not stop smaller ones behind it.
    first = view(1, live=1000, age=1000.0)
    big = view(2, live=SIZE // 4, age=900.0)
    small = view(3, live=2000, age=1.0)
    assert benefit_cost(first) > benefit_cost(big) > benefit_cost(small)
    p = run([first, big, small], budget=4000)
    assert p.rewrite == [1, 3]


def test_read_budget_caps_the_victims_one_pass_reads() -> None:
    # Ten sparse files that each copy almost nothing: the copy budget would take them
    # all, but victims are deleted only when their pass ends, so a pass reads at most
    # the read budget's worth (the first victim always).
    files = [view(i, live=100, age=100.0 - i) for i in range(1, 11)]
    p = plan(files, threshold=0.5, budget=BIG_BUDGET, small_file=SMALL, read_budget=3 * SIZE)
    assert p.rewrite == [1, 2, 3]
    one = plan(files, threshold=0.5, budget=BIG_BUDGET, small_file=SMALL, read_budget=SIZE // 2)
    assert one.rewrite == [1]
    unlimited = plan(files, threshold=0.5, budget=BIG_BUDGET, small_file=SMALL)
    assert len(unlimited.rewrite) == 10


def test_victims_fill_a_compacted_file_to_its_last_byte_and_no_further() -> None:
    # The room is for the MANIFEST (its count, then 4 bytes a victim) and the copies.
    files = [view(i, live=1000, age=100.0 - i) for i in range(1, 4)]
    exact = len(codec.encode_manifest([1, 2])) + 2000
    for room, victims in [(exact, [1, 2]), (exact - 1, [1])]:
        p = plan(files, threshold=0.5, budget=BIG_BUDGET, small_file=SMALL, file_room=room)
        assert p.rewrite == victims, room


def test_behind_means_two_files_of_work_pending() -> None:
    def is_behind(files: list[FileView]) -> bool:
        return behind(files, 0.5, min_gain_for(SIZE), SIZE)

    sparse = view(1, live=SIZE // 4)  # 3/4 of a file to free by a rewrite
    deletable = view(2)  # a whole file to free
    dense = view(3, live=SIZE * 3 // 4)  # over the threshold: nothing to do
    head = view(4, active=True)  # never touched, however empty
    assert not is_behind([sparse, dense, head])
    assert not is_behind([deletable, dense, head])
    assert not is_behind([sparse, deletable])  # 1.75 files
    assert is_behind([sparse, deletable, view(5, live=SIZE // 4)])  # 2.5 files
    assert is_behind([deletable, view(6)])


def test_near_bound_means_over_two_files_beyond_what_the_needed_bytes_allow() -> None:
    needed = 10 * KIB  # at threshold 0.5 the bound allows 20 KiB plus a few files
    line = 2 * needed + NEAR_BOUND_FILES * SIZE
    assert not near_bound(line, needed, 0.5, SIZE)
    assert near_bound(line + 1, needed, 0.5, SIZE)
    # A higher threshold allows less disk for the same needed bytes.
    assert near_bound(line, needed, 1.0, SIZE)
    assert not near_bound(needed + NEAR_BOUND_FILES * SIZE, needed, 1.0, SIZE)


def test_budget_counts_carried_marks() -> None:
    a = view(1, live=1000, age=1000.0)
    b = view(2, marks=100, age=10.0)  # 2400 bytes of carried ACKs
    assert run([a, b], budget=1000 + 100 * MARK_COST).rewrite == [1, 2]
    assert run([a, b], budget=1000 + 100 * MARK_COST - 1).rewrite == [1]


# -- small files ---------------------------------------------------------------------------


def test_two_small_dense_files_are_merged() -> None:
    files = [view(1, live=1000, size=1100), view(2, live=2000, size=2100)]
    p = run(files, threshold=0.5)
    assert sorted(p.rewrite) == [1, 2]


def test_one_small_dense_file_alone_is_not_moved() -> None:
    # Copying it would only produce another small file.
    p = run([view(1, live=1000, size=1100), view(2, live=SIZE - 10)], threshold=0.5)
    assert p.rewrite == []


def test_a_file_of_exactly_the_small_size_is_not_small() -> None:
    files = [view(1, live=1000, size=1100), view(2, live=SMALL - 100, size=SMALL)]
    assert run(files, threshold=0.5).rewrite == []


def test_a_lone_small_file_does_not_join_a_sparse_victim() -> None:
    # Merging needs two small files; one would only move into the copy.
    files = [view(1, live=SIZE // 10), view(2, live=1000, size=1100)]
    assert run(files).rewrite == [1]


def test_small_files_merge_smallest_first_within_the_budget() -> None:
    files = [
        view(1, live=3000, size=3100),
        view(2, live=1000, size=1100),
        view(3, live=2000, size=2100),
    ]
    p = run(files, budget=3000)
    assert p.rewrite == [2, 3]


def test_budget_for_only_one_small_file_merges_nothing() -> None:
    files = [view(1, live=1000, size=1100), view(2, live=2000, size=2100)]
    p = run(files, budget=1500)
    assert p.rewrite == []


def test_sparse_small_file_counts_as_sparse_not_as_small() -> None:
    # A lone small file that is mostly dead is still worth rewriting.
    p = run([view(1, live=100, size=4000)], threshold=0.5)
    assert p.rewrite == [1]


def test_small_file_joins_a_sparse_victim() -> None:
    files = [
        view(1, live=SIZE // 10),
        view(2, live=1000, size=1100),
        view(3, live=1000, size=1200),
    ]
    p = run(files)
    assert p.rewrite[0] == 1
    assert sorted(p.rewrite) == [1, 2, 3]


def test_active_small_file_is_never_merged() -> None:
    files = [view(1, live=1000, size=1100), view(2, live=1000, size=1100, active=True)]
    assert run(files).rewrite == []


# -- properties ----------------------------------------------------------------------------


@st.composite
def file_sets(draw: st.DrawFn) -> list[FileView]:
    n = draw(st.integers(min_value=0, max_value=25))
    ids = draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n, unique=True))
    active = draw(st.sampled_from([None, *ids])) if ids else None
    files = []
    for file_id in ids:
        size = draw(st.integers(32, 4 * SIZE))
        messages = draw(st.integers(0, 50))
        live = draw(st.integers(1, size)) if messages else 0
        marks = draw(st.integers(0, 40) | st.just(0))
        age = draw(st.floats(0.0, 1e6, allow_nan=False))
        files.append(FileView(file_id, size, live, messages, marks, age, file_id == active))
    return files


@settings(max_examples=400, deadline=None)
@given(
    files=file_sets(),
    threshold=st.floats(0.0, 1.0),
    budget=st.integers(0, 8 * SIZE),
    small_file=st.integers(0, SIZE),
    min_gain=st.sampled_from([0, 1, 4096, SIZE // 4]),
    file_room=st.integers(0, 8 * SIZE),
)
def test_plan_invariants_hold_for_any_file_set(
    files: list[FileView],
    threshold: float,
    budget: int,
    small_file: int,
    min_gain: int,
    file_room: int,
) -> None:
    p = plan(
        files,
        threshold=threshold,
        budget=budget,
        small_file=small_file,
        min_gain=min_gain,
        file_room=file_room,
    )
    by_id = {f.file_id: f for f in files}

    # Never the write head; never a file twice; never deleted and copied at once.
    assert all(not by_id[i].active for i in p.reclaim + p.rewrite)
    assert len(set(p.rewrite)) == len(p.rewrite)
    assert not set(p.reclaim) & set(p.rewrite)

    # Deletion only of files holding nothing needed, and all of those.
    assert set(p.reclaim) == {f.file_id for f in files if f.reclaimable}

    # A rewrite victim is sealed, holds something, and is sparse (freeing at least
    # min_gain) or small.
    for i in p.rewrite:
        f = by_id[i]
        assert not f.reclaimable
        assert (f.live_ratio < threshold and f.dead_bytes >= min_gain) or f.size < small_file

    # The budget: only a lone victim may exceed it.
    spent = sum(by_id[i].copy_cost for i in p.rewrite)
    assert spent <= budget or len(p.rewrite) == 1
    # One compacted file holds the copies and the MANIFEST naming every victim.
    assert manifest_size(len(p.rewrite)) + spent <= file_room or len(p.rewrite) <= 1

    sealed = [f for f in files if not f.active and not f.reclaimable]
    sparse = [f for f in sealed if f.live_ratio < threshold and f.dead_bytes >= min_gain]
    # Progress: if any file is sparse, the best one is in the pass.
    if sparse:
        best = max(benefit_cost(f) for f in sparse)
        assert p.rewrite, "a pass with sparse files rewrote nothing"
        assert benefit_cost(by_id[p.rewrite[0]]) == best
    # Greedy completeness: a sparse file left out did not fit what the pass spent.
    for f in sparse:
        if f.file_id not in p.rewrite:
            room_after = file_room - manifest_size(len(p.rewrite) + 1)
            assert spent + f.copy_cost > min(budget, room_after)

    # Sparse victims come first, in benefit/cost order.
    sparse_ids = {f.file_id for f in sparse}
    chosen_sparse = [i for i in p.rewrite if i in sparse_ids]
    assert p.rewrite[: len(chosen_sparse)] == chosen_sparse
    keys = [benefit_cost(by_id[i]) for i in chosen_sparse]
    assert keys == sorted(keys, reverse=True)

    # Merging: small files are only moved together with something else.
    if p.rewrite and not chosen_sparse:
        assert len(p.rewrite) >= 2


# -- the threshold as compact() takes it -----------------------------------------------------


def test_compact_rejects_a_bad_threshold_and_changes_nothing(tmp_path: Path) -> None:
    with msgcask.open(tmp_path / "s", max_file_size=SIZE, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(120):
            q.put(b"x" * 1000)
        for i, m in enumerate([q.get(block=False) for _ in range(120)]):
            if i % 10:
                q.ack(m)  # every 10th stays delivered: sparse files, not empty ones
        before = [(f.file_id, f.size) for f in store.stats().files]
        for bad in (-0.1, 1.5, float("nan")):
            with pytest.raises(ValueError):
                store.compact(threshold=bad)
        for wrong in ("0.5", True):
            with pytest.raises(TypeError):
                store.compact(threshold=wrong)  # type: ignore[arg-type]
        assert [(f.file_id, f.size) for f in store.stats().files] == before
        assert store.stats().compaction.passes == 0
        assert store.compact(threshold=0.5).files_rewritten > 0


# -- the compacted file a pass writes --------------------------------------------------------


def test_a_pass_merging_many_small_files_writes_no_file_past_max_file_size(
    tmp_path: Path,
) -> None:
    # Sixteen small compacted files of one message each, whose records add up to the
    # whole budget a pass may copy (max_file_size - 64). The copy's MANIFEST grows by
    # 4 bytes a victim: with all sixteen in one file it would not fit in a data file.
    path = tmp_path / "s"
    record = (SIZE - 64) // 16
    body = b"k" * (record - len(codec.encode_put(1, b"keep", 0, 0, b"", b"")))
    with msgcask.open(path, max_file_size=SIZE, compaction_interval=None) as store:
        keep, filler = store.queue("keep"), store.queue("filler")
        for _ in range(16):  # one message to keep per journal file, the rest consumed
            head = store._journal.head_id
            keep.put(body)
            while store._journal.head_id == head:
                filler.put(b"f" * 1000)
        for m in [filler.get(block=False) for _ in range(len(filler))]:
            filler.ack(m)
    # A budget of one byte: each pass copies one sparse file into a compacted file.
    with msgcask.open(
        path, max_file_size=SIZE, compaction_interval=None, compaction_budget=1
    ) as store:
        while store.compact().files_rewritten:
            pass
        small = [f for f in store.stats().files if f.kind == "compacted"]
        assert len(small) == 16 and all(f.size < SMALL for f in small)
        assert {f.live_bytes for f in small} == {record}
    with msgcask.open(path, max_file_size=SIZE, compaction_interval=None) as store:
        assert store.compact().files_rewritten >= 2  # the small files are merged
        assert max(f.size for f in store.stats().files) <= SIZE, store.stats().files
        keep = store.queue("keep")
        assert len(keep) == 16 and keep.get(block=False).body == body
    assert max(p.stat().st_size for p in path.glob("*.log")) <= SIZE


def test_a_bigger_budget_rewrites_more_files_in_a_pass_up_to_a_data_files_worth(
    tmp_path: Path,
) -> None:
    # tuning.md: raising compaction_budget lets one pass rewrite more files, up to
    # max_file_size; beyond it nothing changes. Six sparse files of up to 13 KB of
    # live messages each: one data file cannot hold the copies of all six.
    first = tmp_path / "first"
    with msgcask.open(first, max_file_size=SIZE, compaction_interval=None) as store:
        q = store.queue("q")
        for _ in range(7 * 60):
            q.put(b"x" * 1000)
        for i, m in enumerate([q.get(block=False) for _ in range(7 * 60)]):
            if i % 5:
                q.ack(m)  # every 5th stays delivered: a fifth of each file is live
    passes = {}
    for budget in (16 * KIB, 32 * KIB, SIZE, 4 * SIZE):
        path = tmp_path / str(budget)
        shutil.copytree(first, path)
        settings = {"max_file_size": SIZE, "compaction_interval": None}
        with msgcask.open(path, **settings, compaction_budget=budget) as store:
            sparse = [f for f in store.stats().files if f.live_bytes < f.size / 4 and not f.active]
            assert len(sparse) == 6
            report = store.compact()
        passes[budget] = (report.files_rewritten, report.bytes_copied)
    rewritten = [passes[b][0] for b in (16 * KIB, 32 * KIB, SIZE)]
    assert rewritten == sorted(rewritten) and rewritten[0] < rewritten[-1] < 6, passes
    assert passes[4 * SIZE] == passes[SIZE]  # past max_file_size the cap binds
    assert max(copied for _, copied in passes.values()) <= SIZE


def test_a_higher_threshold_leaves_less_disk_and_copies_more(tmp_path: Path) -> None:
    # tuning.md: raising compaction_threshold lowers disk use for the same live data
    # and copies more. Eight sealed files a tenth to a half live, each
    # store compacted until a pass does nothing.
    first = tmp_path / "first"
    with msgcask.open(first, max_file_size=SIZE, compaction_interval=None) as store:
        q = store.queue("q")
        for keep_every in (10, 3, 2, 10, 3, 2, 4, 5):
            head = store._journal.head_id
            n = 0
            while store._journal.head_id == head:
                q.put(b"x" * 1000)
                n += 1
            for i, m in enumerate([q.get(block=False) for _ in range(n)]):
                if i % keep_every:
                    q.ack(m)  # every keep_every-th stays delivered and unacked
    seen = {}
    for threshold in (0.2, 0.4, 0.7):
        path = tmp_path / str(threshold)
        shutil.copytree(first, path)
        settings = {"max_file_size": SIZE, "compaction_interval": None}
        with msgcask.open(path, **settings, compaction_threshold=threshold) as store:
            live = store.stats().live_bytes
            while store.compact().files_rewritten:
                pass
            st = store.stats()
            assert st.live_bytes == live
            seen[threshold] = (st.data_bytes, st.compaction.bytes_copied)
    disk, copied = zip(*seen.values(), strict=True)
    assert disk[0] > disk[1] > disk[2], seen
    assert copied[0] < copied[1] < copied[2], seen
