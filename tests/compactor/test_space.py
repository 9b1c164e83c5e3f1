"""Space (design brief, guarantee 5): disk tracks live data, whatever pins it.

* priority-pin under ``max_store_size`` with the background job off: space pressure
  alone keeps the store under its limit and never refuses a put while live data fits;
* ``StoreFullError`` only when live data really fills the store, saying how much is
  live, and changing nothing;
* dlq-heavy: data bytes stay within 2x live + a few files at every sample, with low
  write amplification, where the same run without compaction keeps growing;
* drain-history: after repeated fill/drain cycles, a compaction leaves about one file;
* random workloads: after ``compact(threshold=t)``, data <= (live + needed) / t + K files,
  where "needed" is the ACK/DELIVER records that must be kept (``stats().needed_bytes``).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import msgcask
from copy_watch import copies_held

KIB = 1024
MFS = 64 * KIB  # max_file_size everywhere: the smallest the store allows


def _open(path: Path, **options: object) -> msgcask.Store:
    options.setdefault("compaction_interval", None)
    return msgcask.open(path, max_file_size=MFS, **options)


def _files(store: msgcask.Store) -> list[tuple[int, str, int, str]]:
    return [(f.file_id, f.kind, f.size, f.kept_by) for f in store.stats().files]


# -- (a) priority-pin under a size limit -------------------------------------------------


def test_priority_pinned_messages_never_fill_a_limited_store(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    # Each round pins one low-priority message in a file of consumed high-priority ones:
    # without compaction the store would need one file per round, far over 8 files.
    limit = 8 * MFS
    rounds = scaled(64)
    # The pinned messages stay live, and each round adds a file of live high-priority
    # ones on top: at more rounds the low bodies shrink so that all of them together
    # stay within a quarter of the limit. (Near the limit, puts may rightly be refused:
    # a copy needs room before its victim goes; see tuning.md, max_store_size.)
    repeats = min(100, limit // (4 * rounds * len(b"low-000000|")))
    path = tmp_path / "store"
    lows: dict[int, bytes] = {}
    with _open(path, max_store_size=limit) as store:
        q = store.queue("pp")
        for r in range(rounds):
            body = (b"low-%06d|" % r) * repeats
            lows[q.put(body, priority=0)] = body
            for _ in range(60):  # about one data file of 1 KiB messages
                q.put(b"h" * 1000, priority=9)
                data = store.stats().data_bytes
                assert data <= limit, f"round {r}: {data} data bytes over {limit}"
            for _ in range(60):
                m = q.get(block=False)
                assert m.priority == 9
                q.ack(m)
        assert rounds * MFS > 4 * limit, "the run is too short to need compaction"
        assert store.stats().compaction.passes > 0
        assert store.verify() == []
    with _open(path, max_store_size=limit) as store:
        browsed = {m.id: m.body for m in store.queue("pp").browse()}
        assert browsed == lows, "low-priority messages lost or changed"
        assert store.verify() == []


# -- (b) StoreFullError ----------------------------------------------------------------------


def _fill_until_full(q: msgcask.Queue, body: bytes, cap: int = 10_000) -> msgcask.StoreFullError:
    for _ in range(cap):
        try:
            q.put(body)
        except msgcask.StoreFullError as e:
            return e
    raise AssertionError(f"{cap} puts of live data never filled the store")


def test_store_full_only_when_live_data_fills_it_and_changes_nothing(tmp_path: Path) -> None:
    limit = 4 * MFS
    with _open(tmp_path / "store", max_store_size=limit) as store:
        q = store.queue("full")
        error = _fill_until_full(q, b"x" * 1000)
        st = store.stats()
        # Refused only once live data is within a file of the limit (puts leave one
        # data file under it for compaction's copies).
        assert st.live_bytes >= limit - 2 * MFS, (
            f"refused at {st.live_bytes} live bytes of {limit}: {_files(store)}"
        )
        text = str(error)
        assert f"max_store_size={limit}" in text
        assert f"{st.live_bytes} bytes are live" in text, text
        assert "ack" in text  # what to do about it

        before = [m.id for m in q.browse()]
        size_before = len(q)
        with pytest.raises(msgcask.StoreFullError):
            q.put(b"y" * 1000)
        with pytest.raises(msgcask.StoreFullError):
            q.put_many([b"y" * 1000] * 3)
        assert len(q) == size_before
        assert [m.id for m in q.browse()] == before
        assert store.verify() == []

        # Consuming makes room again.
        for _ in range(size_before // 2):
            q.ack(q.get(block=False))
        for _ in range(size_before // 4):
            q.put(b"z" * 1000)
        assert store.verify() == []


@pytest.mark.parametrize("call", ["put", "put_many"])
def test_a_put_into_a_store_with_nothing_to_free_is_refused_after_one_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    # Live data fills the store and no pass runs: space pressure finds nothing to
    # free, and would find nothing again however often the put were tried.
    with _open(tmp_path / "store", max_store_size=4 * MFS) as store:
        q = store.queue("full")
        _fill_until_full(q, b"x" * 1000)
        tries: list[int] = []
        real_make_room = store._compactor.make_room

        def make_room(needed: int) -> None:
            tries.append(needed)
            real_make_room(needed)

        monkeypatch.setattr(store._compactor, "make_room", make_room)
        with pytest.raises(msgcask.StoreFullError):
            if call == "put":
                q.put(b"y" * 1000)
            else:
                q.put_many([b"y" * 1000] * 3)
        assert len(tries) == 1


def test_a_put_retried_between_acks_of_a_full_store_adds_no_files(tmp_path: Path) -> None:
    # A producer retries its refused put while a consumer acks one message at a
    # time: each try finds a few marks in the write head, which sealing would only
    # move to a new file of its own (one descriptor and one directory entry per try).
    with _open(tmp_path / "store", max_store_size=4 * MFS) as store:
        q = store.queue("q")
        _fill_until_full(q, b"x" * 1000)
        files_before = len(store.stats().files)
        refused = 0
        for _ in range(40):
            q.ack(q.get(block=False))
            try:
                q.put(b"y" * 3000)  # fits after every third ack or so
            except msgcask.StoreFullError:
                refused += 1
        assert refused >= 20  # the loop ran against a full store
        assert len(store.stats().files) <= files_before + 1, _files(store)
        assert store.verify() == []


def test_a_store_past_its_put_limit_with_little_live_data_takes_puts_again(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Consumers' ACK and DELIVER records go past the puts' limit, so a store filled
    # to it and then consumed is past it: a store holding a few live messages (2 % of
    # the cap) must still copy them out and take puts, without passing the cap.
    limit = 4 * MFS
    with _open(store_path, max_store_size=limit) as store:
        q = store.queue("q")
        _fill_until_full(q, b"x" * 1000)
        filled = store.stats().data_bytes
        delivered = [q.get(block=False) for _ in range(len(q))]
        kept = delivered[::60]  # a few stay delivered, unacked: one or two per file
        for m in delivered:
            if m not in kept:
                q.ack(m)
        st = store.stats()
        assert st.data_bytes > limit - MFS and st.live_bytes < limit // 40, _files(store)
        marks = st.data_bytes - filled  # the consumers' DELIVER and ACK records
        _, on_disk_after_copy = copies_held(monkeypatch, store_path)
        q.put(b"y")  # space pressure copies the sparse files, then deletes them
        st = store.stats()
        assert on_disk_after_copy, "no copy was written"
        # Copy included, past the cap by no more than the marks past the puts' limit.
        assert max(on_disk_after_copy) <= limit + marks, (on_disk_after_copy, marks)
        assert st.data_bytes <= limit, _files(store)
        assert st.live_messages == len(kept) + 1
        assert store.verify() == []
        for m in kept:
            q.ack(m)  # still delivered, and ackable, after their files were rewritten


def test_a_full_store_consumed_with_few_acks_takes_puts_again(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Filled, then consumed: all but one message of most files are acked, with few
    # ACK records. The copy of those few live messages must still find room, or
    # every put is refused while most of the store is dead (before, puts could fill
    # the cap to within less than any copy, until consumers' marks passed it).
    limit = 5 * MFS
    body = b"x" * 8000  # 7 to a data file
    with _open(store_path, max_store_size=limit) as store:
        q = store.queue("q")
        _fill_until_full(q, body)
        delivered = [q.get(block=False) for _ in range(len(q))]
        for m in delivered:
            if m.id % 7:  # one of every 7 stays live: about one to a file
                q.ack(m)
        st = store.stats()
        assert st.data_bytes <= limit and st.live_bytes < limit // 4, _files(store)
        _, on_disk_after_copy = copies_held(monkeypatch, store_path)
        q.put(body)
        st = store.stats()
        assert on_disk_after_copy, "no copy was written"
        assert max(on_disk_after_copy) <= limit  # never past the cap, copy included
        assert st.data_bytes <= limit, _files(store)
        assert st.live_messages == sum(1 for m in delivered if not m.id % 7) + 1
        assert store.verify() == []


def test_a_put_that_fits_once_a_dead_file_is_deleted_is_not_refused(store_path: Path) -> None:
    # Deleting the dead file (no copy needed) makes room for the put: the file must
    # be deleted, not the put refused.
    with _open(store_path, max_store_size=4 * MFS, sync_interval=3600) as store:
        q = store.queue("q")
        _fill_until_full(q, b"x" * 1000)  # 63 to a file: 3 files, all the puts' room
        for _ in range(63):
            q.ack(q.get(block=False))  # the first file now holds nothing needed
        first = store.stats().files[0]
        assert (first.file_id, first.live_messages) == (1, 0)
        q.put(b"y")
        assert 1 not in [f.file_id for f in store.stats().files]
        assert store.stats().data_bytes <= 4 * MFS


def test_a_put_whose_room_other_puts_took_compacts_again_before_it_is_refused(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The put's space check found room for it. Before it is written, another put
    # takes that room and a whole file's messages are acked: it fits once that file
    # is gone, so it must be stored, not refused.
    limit = 8 * MFS
    with _open(store_path, max_store_size=limit, sync_interval=3600) as store:
        consumed, live = store.queue("consumed"), store.queue("live")
        for _ in range(63):  # file 1, whole
            consumed.put(b"c" * 1000)
        while limit - MFS - store.stats().data_bytes > 41_000:  # puts leave MFS
            live.put(b"l" * 1000)
        delivered = [consumed.get(block=False) for _ in range(63)]
        real_ensure_room = store._ensure_room
        others_done = False

        def ensure_room(size: int) -> None:
            nonlocal others_done
            real_ensure_room(size)
            if not others_done:  # once, after the first put's check
                others_done = True
                store.queue("other").put(b"o" * 30_000)
                for message in delivered:
                    consumed.ack(message)

        monkeypatch.setattr(store, "_ensure_room", ensure_room)
        store.queue("mine").put(b"m" * 30_000)
        assert others_done
        assert 1 not in [f.file_id for f in store.stats().files]
        assert (len(store.queue("mine")), len(store.queue("other"))) == (1, 1)
        assert store.stats().data_bytes <= limit
        assert store.verify() == []


def test_dead_data_never_makes_a_limited_store_refuse_a_put(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    # 40 store sizes of traffic, all consumed: only dead bytes to reclaim.
    limit = 4 * MFS
    with _open(tmp_path / "store", max_store_size=limit) as store:
        q = store.queue("steady")
        for _ in range(scaled(10_000)):
            q.put(b"s" * 1000)
            q.ack(q.get(block=False))
        assert store.stats().data_bytes <= limit
        assert store.verify() == []


def test_a_bigger_cap_means_fewer_foreground_passes_and_a_later_store_full(
    tmp_path: Path,
) -> None:
    # tuning.md: raising max_store_size leaves more room before space pressure, so
    # fewer puts run a compaction pass, and StoreFullError comes later. Forty rounds
    # of one message pinned at priority 0 and sixty put and consumed, then pinned
    # messages until the store is full. No flush runs (it would delete emptied
    # files on its own clock): every pass is one a put ran for space.
    seen = {}
    for files in (4, 8, 16):
        path = tmp_path / str(files)
        with _open(path, max_store_size=files * MFS, sync_interval=3600) as store:
            pinned, q = store.queue("pinned"), store.queue("q")
            for _ in range(40):
                pinned.put(b"p" * 1100)
                for _ in range(60):
                    q.put(b"x" * 1000)
                for _ in range(60):
                    q.ack(q.get(block=False))
            passes = store.stats().compaction.passes
            taken = 0
            with pytest.raises(msgcask.StoreFullError):
                while True:
                    pinned.put(b"p" * 1000)
                    taken += 1
        seen[files] = (passes, taken)
    passes, taken = zip(*(seen[files] for files in (4, 8, 16)), strict=True)
    assert passes[0] > passes[1] > passes[2] > 0, seen
    assert taken[0] < taken[1] < taken[2], seen


def test_store_full_of_live_data_does_not_recopy_it_on_every_put(tmp_path: Path) -> None:
    # Near the limit with nothing dead, a space-pressure pass can free nothing: copying
    # whole live files again on every put is pure write amplification.
    limit = 4 * MFS
    with _open(tmp_path / "store", max_store_size=limit) as store:
        q = store.queue("full")
        _fill_until_full(q, b"x" * 1000)
        st = store.stats()
        assert st.compaction.bytes_copied <= limit, (
            f"{st.compaction.bytes_copied} bytes copied by {st.compaction.passes} passes "
            f"while filling {limit} bytes of live data (write amplification "
            f"{st.write_amplification:.1f})"
        )


# -- (c) dlq-heavy -----------------------------------------------------------------------


def _dlq_heavy(path: Path, n: int, compact_every: int | None) -> tuple[int, list[str], float]:
    """Run dlq-heavy; return (peak data bytes, bound violations, write amplification)."""
    violations: list[str] = []
    peak = 0
    compacted = False
    with _open(path) as store:
        q = store.queue("work", max_deliveries=1)
        body = b"d" * 1000
        for i in range(n):
            q.put(body)
            m = q.get(block=False)
            if i % 1000 == 999:
                q.nack(m)  # over max_deliveries: to DLQ.work, which nobody consumes
            else:
                q.ack(m)
            if compact_every and i % compact_every == compact_every - 1:
                store.compact()
                compacted = True
            if i % 10 == 0:
                st = store.stats()
                peak = max(peak, st.data_bytes)
                # Half-live files may stay (threshold 0.5); on top: the write head,
                # the sealed files since the last pass, the last pass's output.
                bound = 2 * st.live_bytes + 3 * MFS
                if compacted and st.data_bytes > bound:
                    violations.append(f"after {i + 1}: {st.data_bytes} > {bound}")
        assert len(store.queue("DLQ.work")) == n // 1000
        assert store.verify() == []
        st = store.stats()
        return peak, violations, st.bytes_written / st.bytes_put


def test_dlq_heavy_disk_tracks_live_data_not_history(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    n = scaled(20_000)
    peak, violations, write_amp = _dlq_heavy(tmp_path / "on", n, compact_every=100)
    assert not violations, f"{len(violations)} samples over the bound: {violations[:5]}"
    # Each DLQ message is copied about once; DELIVER/ACK records add ~4%.
    assert write_amp <= 1.1, f"write amplification {write_amp:.3f}"

    # Without compaction the pinned files (and the ACK chains between them) stay.
    peak_off, _, _ = _dlq_heavy(tmp_path / "off", n, compact_every=None)
    assert peak_off >= 5 * peak, f"without compaction {peak_off} bytes, with {peak}"


@pytest.mark.slow
def test_dlq_heavy_with_the_background_job_settles_to_live_data(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    # Same workload, no compact() call: the scheduled job alone (every 50 ms) must keep
    # up on average and bring the store within the bound once traffic stops.
    n = scaled(20_000)
    with _open(tmp_path / "store", compaction_interval=0.05) as store:
        q = store.queue("work", max_deliveries=1)
        peak = 0
        for i in range(n):
            q.put(b"d" * 1000)
            m = q.get(block=False)
            q.nack(m) if i % 1000 == 999 else q.ack(m)
            if i % 100 == 0:
                peak = max(peak, store.stats().data_bytes)
        written = n * 1000
        assert peak < written / 4, f"peak {peak} bytes: the job did not keep up at all"

        def settled() -> bool:
            st = store.stats()
            return st.data_bytes <= 2 * st.live_bytes + 3 * MFS

        deadline = time.monotonic() + 30
        while not settled():
            assert time.monotonic() < deadline, f"never settled: {_files(store)}"
            time.sleep(0.05)
        st = store.stats()
        assert st.compaction.passes > 0 and st.compaction.files_rewritten > 0
        assert st.bytes_written / st.bytes_put <= 1.1
        assert len(store.queue("DLQ.work")) == n // 1000
        store.pause_compaction()  # verify() below reads files the job would delete
        assert store.verify() == []


# -- (d) drain-history -----------------------------------------------------------------


def test_drained_store_returns_to_at_most_two_files(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    m = scaled(3000)  # ~50 data files per fill
    with _open(tmp_path / "store") as store:
        q = store.queue("dh")
        for _ in range(3):
            for i in range(m):
                q.put(b"%08d" % i * 125)
            for _ in range(m):
                q.ack(q.get(block=False))
        assert len(q) == 0
        store.compact()
        st = store.stats()
        assert st.data_files <= 2 and st.data_bytes <= 2 * MFS, _files(store)
        assert store.verify() == []


def test_a_quiet_store_settles_to_its_live_data_even_in_a_small_head(tmp_path: Path) -> None:
    # A head under half full is left alone while traffic goes on (it is where the
    # next puts go), but once nothing was written between two passes a mostly dead
    # head is sealed and rewritten: a quiet store ends at its live data.
    with _open(tmp_path / "store") as store:
        keep = store.queue("keep")
        kept = keep.put(b"k" * 500)
        q = store.queue("quiet")
        for _ in range(20):  # about a third of a data file, all consumed
            q.put(b"x" * 1000)
            q.ack(q.get(block=False))
        head = max(f.file_id for f in store.stats().files)
        store.compact()  # traffic since the store opened: the head stays
        assert max(f.file_id for f in store.stats().files) == head, _files(store)
        assert store.stats().data_bytes > 10 * KIB
        store.compact()  # nothing written since the last pass: seal and rewrite it
        st = store.stats()
        assert st.data_bytes <= st.live_bytes + 3 * KIB, _files(store)
        assert store.verify() == []
        m = keep.get(block=False)
        assert (m.id, m.body) == (kept, b"k" * 500)


def test_a_file_still_being_consumed_is_left_to_later_scheduled_passes(
    tmp_path: Path,
) -> None:
    # Copying the rest of a file a consumer is taking writes copies that are soon
    # dead: a scheduled pass leaves a file whose live messages fell since the
    # previous one began, and rewrites it once a pass finds it unchanged.
    # compact() takes it at once.
    with _open(tmp_path / "store") as store:
        q = store.queue("q")
        for _ in range(200):  # three sealed files and the head
            q.put(b"m" * 1000)
        sealed = sorted(f.file_id for f in store.stats().files if f.kind == "journal")[:3]

        def kept(file_id: int) -> bool:
            return any(f.file_id == file_id for f in store.stats().files)

        def consume(n: int) -> None:
            for _ in range(n):
                q.ack(q.get(block=False))

        store._compactor.run(background=True)  # the first look at every file
        consume(45)  # two thirds of the first file
        store._compactor.run(background=True)
        assert kept(sealed[0]), _files(store)
        store._compactor.run(background=True)  # unchanged since the last pass
        assert not kept(sealed[0]), _files(store)
        consume(18 + 45)  # the rest of the first file's messages, two thirds of the second
        store.compact()
        assert not kept(sealed[1]), _files(store)
        assert store.verify() == []
        assert len(q) == 200 - 45 - 18 - 45
        assert all(m.body == b"m" * 1000 for m in q.browse())


def test_near_the_space_bound_a_scheduled_pass_takes_files_still_being_consumed(
    tmp_path: Path,
) -> None:
    # Every file keeps one message in ten and has just been drained of the rest:
    # all are still being consumed, and disk use is far past the bound, where space
    # comes first.
    with _open(tmp_path / "store") as store:
        keep, q = store.queue("keep"), store.queue("q")
        for i in range(400):
            (keep if i % 10 == 0 else q).put(b"m" * 1000)
        store._compactor.run(background=True)  # the first look at every file
        for _ in range(360):
            q.ack(q.get(block=False))
        assert store._compactor.near_bound()
        report = store._compactor.run(background=True)
        assert report.files_rewritten >= 2, (report, _files(store))
        assert store.verify() == []
        assert len(keep) == 40 and len(q) == 0


def test_the_index_file_shrinks_back_after_a_backlog_drains(tmp_path: Path) -> None:
    with _open(tmp_path / "store") as store:
        q = store.queue("backlog")
        for _ in range(2000):
            q.put(b"b" * 100)
        for _ in range(1990):
            q.ack(q.get(block=False))
        store.compact()
        st = store.stats()
        # Ten live messages need a handful of 4 KiB pages; the backlog took dozens.
        assert st.index_bytes <= 16 * 4 * KIB, st.index_bytes
        assert len(q) == 10 and store.verify() == []


def test_an_idle_store_shrinks_its_index_sooner(tmp_path: Path) -> None:
    # A thousand drained messages leave the index file about 4 times its pages in
    # use: not enough for a shrink while traffic flows, enough once the store is idle.
    # No background flush commits the index meanwhile: each commit while the messages
    # drain grows the file (on a slow machine, enough for the busy pass to shrink it).
    with _open(tmp_path / "store", sync_interval=3600) as store:
        q = store.queue("backlog")
        for _ in range(1000):
            q.put(b"b" * 100)
        store.compact()
        for _ in range(990):
            q.ack(q.get(block=False))
        store.compact()  # traffic since the last pass
        busy = store.stats().index_bytes
        store.compact()  # idle
        idle = store.stats().index_bytes
        assert idle <= busy // 2, (busy, idle)
        assert len(q) == 10 and store.verify() == []


def test_a_drained_index_shrinks_without_waiting_for_the_next_scheduled_pass(
    tmp_path: Path,
) -> None:
    # Tiny messages in one big write head: the drain leaves no data file worth a
    # pass, only a sparse index, and the next scheduled pass is an hour away.
    with msgcask.open(
        tmp_path / "store", max_file_size=8 * 2**20, compaction_interval=3600
    ) as store:
        q = store.queue("backlog")
        for _ in range(5000):
            q.put(b"b" * 10)
        store.sync()
        full = store.stats().index_bytes
        for _ in range(5000):
            q.ack(q.get(block=False))
        store.sync()
        deadline = time.monotonic() + 30
        while store.stats().index_bytes > full // 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        drained = store.stats().index_bytes
        assert drained <= full // 4, (full, drained)
        assert store.stats().data_files == 1 and store.verify() == []


# -- (e) any workload: data <= (live + needed) / t + K files ----------------------------

# K, from compactor/policy.py, once passes at threshold t have nothing left to do (one
# pass writes at most one compacted file, so a big backlog takes several; see
# docs/design.md, "Budget"). A sealed file is then left only if
#   - its copy cost (live + needed records) is >= t * size: all of these together take
#     at most (live + needed) / t -- compacted outputs are among them, dense with copies;
#   - rewriting it would free less than the minimum gain (max(4 KiB, max_file_size/64)):
#     such a file is within that gain of its copy cost, dense by the first case at the
#     thresholds used here;
#   - it is a lone small dense file (merging needs two): counted by the first case.
# On top: the write head, which no pass touches (one file at most), and the last
# output's header, MANIFEST and the carried ACK/DELIVER records the same pass made dead
# (less than a file at these sizes). K = 1 (head) + 1 (output overhead and slack).
K = 2

SIZES = [10, 100, 1000, 5000, 20_000]


def _compact_until_done(store: msgcask.Store, t: float, max_passes: int = 500) -> int:
    """Run passes at threshold t until one rewrites and deletes nothing; return how many."""
    for n in range(1, max_passes + 1):
        r = store.compact(threshold=t)
        if not r.files_rewritten and not r.files_deleted:
            return n
    raise AssertionError(f"compaction at t={t} never settled in {max_passes} passes")


def _check_space_bound(store: msgcask.Store, t: float) -> None:
    s = store.stats()
    retained = s.live_bytes + s.needed_bytes
    assert s.data_bytes <= retained / t + K * MFS, (
        f"t={t}: {s.data_bytes} data bytes for {s.live_bytes} live + {s.needed_bytes} "
        f"needed: {_files(store)}"
    )


@st.composite
def workloads(draw: st.DrawFn) -> list[tuple[str, int, int, int]]:
    """(op, queue index, size/priority or held index, priority) tuples."""
    n = draw(st.integers(100, 1500))
    put_p = draw(st.sampled_from([0.45, 0.6, 0.75]))
    sizes = draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=3, unique=True))
    ops = []
    rnd = draw(st.randoms(use_true_random=False))
    for _ in range(n):
        x = rnd.random()
        q = rnd.randrange(3)
        if x < put_p:
            ops.append(("put", q, rnd.choice(sizes), rnd.randrange(10)))
        elif x < put_p + (1 - put_p) / 2:
            ops.append(("get", q, 0, 0))
        else:
            ops.append(("ack" if rnd.random() < 0.8 else "nack", 0, rnd.randrange(1 << 30), 0))
    return ops


def _run_workload(store: msgcask.Store, ops: list[tuple[str, int, int, int]]) -> None:
    queues = [
        store.queue("a", max_deliveries=2),
        store.queue("b", max_deliveries=1, dead_letter_queue="dlq"),
        store.queue("c"),
    ]
    held: list[tuple[msgcask.Queue, msgcask.Message]] = []
    for op, qi, arg, prio in ops:
        if op == "put":
            queues[qi].put(b"w" * arg, priority=prio)
        elif op == "get":
            with contextlib.suppress(msgcask.Empty):
                held.append((queues[qi], queues[qi].get(block=False)))
        elif held:
            q, m = held.pop(arg % len(held))
            q.ack(m) if op == "ack" else q.nack(m)


@pytest.mark.slow
def test_any_workload_compacts_to_live_over_threshold_plus_k_files(
    scaled: Callable[[int], int],
) -> None:
    @settings(
        max_examples=scaled(25),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(ops=workloads())
    def check(ops: list[tuple[str, int, int, int]]) -> None:
        path = Path(tempfile.mkdtemp(prefix="msgcask-space-"))
        try:
            with _open(path / "store") as store:
                _run_workload(store, ops)
                for t in (0.3, 0.5, 0.8):
                    _compact_until_done(store, t)
                    _check_space_bound(store, t)
                    assert store.verify() == []
        finally:
            shutil.rmtree(path, ignore_errors=True)

    check()


def test_big_sparse_backlog_compacts_to_the_bound_in_a_bounded_number_of_passes(
    tmp_path: Path,
) -> None:
    # ~48 files one third live: more than one pass's output. Passes must keep making
    # progress until the bound holds, and not take more passes than outputs needed.
    with _open(tmp_path / "store") as store:
        q = store.queue("q")
        ids = [q.put(b"b" * 1000) for _ in range(3000)]
        for i, m in enumerate([q.get(block=False) for _ in ids]):
            if i % 3:
                q.ack(m)
        live = store.stats().live_bytes
        passes = _compact_until_done(store, 0.5)
        assert passes <= 2 * (live // MFS + 1) + 2, f"{passes} passes for {live} live bytes"
        _check_space_bound(store, 0.5)
        assert len(q) == 1000
        assert store.verify() == []


def test_in_flight_window_of_tiny_messages_stays_within_the_space_bound(
    tmp_path: Path,
) -> None:
    # slow-consumer with 10-byte bodies: every delivered-unacked message has a needed
    # DELIVER record (~23 bytes) in a later file than its ~45-byte PUT record. Those
    # files are dense by copy cost, so no pass at t < 1 touches them: the bound holds
    # only because needed records count as retained data (stats().needed_bytes), and
    # needed_bytes must say so (it is not just bookkeeping).
    t = 0.8
    with _open(tmp_path / "store") as store:
        q = store.queue("slow")
        n = 20_000
        for _ in range(n):
            q.put(b"x" * 10)
        held = [q.get(block=False) for _ in range(n)]
        assert len(held) == n
        store.compact(threshold=t)
        s = store.stats()
        assert s.needed_bytes >= n * 21, "the DELIVER records are not counted as needed"
        retained = s.live_bytes + s.needed_bytes
        assert s.data_bytes <= retained / t + K * MFS, (
            f"{s.data_bytes} data bytes for {s.live_bytes} live + {s.needed_bytes} needed "
            f"at t={t}: {(s.data_bytes - retained / t) / MFS:.1f} files over the bound"
        )
        assert store.verify() == []
