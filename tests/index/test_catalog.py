"""index/catalog.py: every state transition keeps the per-file counters exact.

Each test drives a Catalog over a real IndexEnv in a temp dir and, after every call,
checks every counter of every file twice: against the numbers the test expects, and
against the numbers recomputed from the index entries themselves (``derived``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from msgcask.index import keys
from msgcask.index.accounting import Accounting, FileAccount
from msgcask.index.catalog import Catalog
from msgcask.index.env import IndexEnv
from msgcask.index.keys import STATE_LIVE, Acked, Live
from msgcask.store import format as fmt

FILES = (1, 2, 3, 4, 5)
Counters = dict[int, tuple[int, int, int, int]]  # file -> live_bytes, live_msgs, marks, dead


def new_catalog(path: Path, journal: dict[int, int] | None = None) -> Catalog:
    """A catalog over FILES: compacted files (where an ACK of a message in another
    file needs an ACKED entry) but those ``journal`` maps to their id floors."""
    env = IndexEnv(str(path))
    acct = Accounting()
    journal = journal or {}
    for f in FILES:
        kind = fmt.KIND_JOURNAL if f in journal else fmt.KIND_COMPACTED
        acct.add(FileAccount(f, kind, size=fmt.FILE_HEADER_SIZE, id_floor=journal.get(f, 0)))
    return Catalog(env, acct)


@pytest.fixture
def cat(tmp_path: Path) -> Iterator[Catalog]:
    catalog = new_catalog(tmp_path / "index")
    yield catalog
    catalog.env.close()


# Journal files 1 and 2: ids from 10 in file 1, from 20 in file 2.
FLOORS = {1: 10, 2: 20}


@pytest.fixture
def jcat(tmp_path: Path) -> Iterator[Catalog]:
    catalog = new_catalog(tmp_path / "index", FLOORS)
    yield catalog
    catalog.env.close()


def counters(cat: Catalog) -> Counters:
    """Every file's counters, omitting all-zero files."""
    out = {}
    for f, a in cat.acct.files.items():
        c = (a.live_bytes, a.live_messages, a.needed_marks, a.dead_puts)
        if any(c):
            out[f] = c
    return out


def derived(cat: Catalog) -> Counters:
    """The counters the index entries (and the files' counted ACKs) imply: what
    check.verify recomputes."""
    totals: dict[int, list[int]] = {}

    def add(f: int, slot: int, n: int) -> None:
        totals.setdefault(f, [0, 0, 0, 0])[slot] += n

    for account in cat.acct.files.values():
        for ack_file, n in account.acked_in.items():
            add(ack_file, 2, n)

    for _, value in cat.env.items(cat.env.msgs):
        e = keys.unpack_msg(value)
        if isinstance(e, Acked):
            add(e.put_file, 3, 1)
            add(e.ack_file, 2, 1)
        else:
            add(e.file_id, 0, e.size)
            add(e.file_id, 1, 1)
            if e.deliver_file:
                add(e.deliver_file, 2, 1)
    return {f: (t[0], t[1], t[2], t[3]) for f, t in totals.items() if any(t)}


def check(cat: Catalog, expected: Counters) -> None:
    assert counters(cat) == expected
    assert derived(cat) == expected


def order(cat: Catalog) -> list[int]:
    return [keys.order_key_id(k) for k, _ in cat.env.items(cat.env.order)]


def release_dead_puts(cat: Catalog, file_id: int, first: int, end: int) -> None:
    """What a deletion of ``file_id`` does to the index (compactor/reclaim.py): find
    its consumed PUT records among ids [first, end), then release their ACKs."""
    live: list[tuple[int, Live]] = []
    dead: list[tuple[int, int]] = []
    while first < end:
        first = cat.entries_between(file_id, first, end, 3, live, dead)
    cat.release_acked(file_id, dead)


def add(cat: Catalog, msg_id: int, file_id: int, size: int = 100, priority: int = 4) -> None:
    assert cat.add(msg_id, cat.queue_id("q"), priority, file_id, 32, size, 0, fresh=True)


class TestAdd:
    def test_add_counts_the_put_in_its_file(self, cat: Catalog) -> None:
        qid = cat.queue_id("q")
        assert cat.add(10, qid, 7, 1, 32, 100, 0, fresh=True)
        check(cat, {1: (100, 1, 0, 0)})
        assert cat.lookup(10) == Live(STATE_LIVE, qid, 7, 1, 32, 100, 0, 0)
        assert order(cat) == [10] and cat.counts[qid] == 1

    def test_replayed_put_of_a_known_id_changes_nothing(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        assert not cat.add(10, cat.queue_id("q"), 4, 2, 32, 100, 0, fresh=False)
        check(cat, {1: (100, 1, 0, 0)})
        assert cat.counts[cat.queue_id("q")] == 1

    def test_add_many_counts_every_member(self, cat: Catalog) -> None:
        qa, qb = cat.queue_id("a"), cat.queue_id("b")
        items = [(1, qa, 4, 32, 50, 0), (2, qb, 9, 82, 60, 0), (3, qa, 0, 142, 70, 2)]
        cat.add_many(2, items, fresh=True)
        check(cat, {2: (180, 3, 0, 0)})
        assert (cat.counts[qa], cat.counts[qb]) == (2, 1)
        assert order(cat) == [1, 3, 2]  # queue a (prio 4, then 0), then queue b
        assert cat.lookup(2) == Live(STATE_LIVE, qb, 9, 2, 82, 60, 0, 0)
        assert cat.lookup(3) == Live(STATE_LIVE, qa, 0, 2, 142, 70, 2, 0)

    @pytest.mark.parametrize("n", [1, 2, 3, 5])
    def test_add_many_writes_what_add_writes_whatever_the_batch_size(
        self, cat: Catalog, n: int
    ) -> None:
        # Small batches take one put per entry, bigger ones a putmulti per table.
        qa, qb = cat.queue_id("a"), cat.queue_id("b")
        items = [(i, (qa, qb)[i % 2], i % 10, 32 + 100 * i, 50 + i, i % 3) for i in range(1, n + 1)]
        cat.add_many(2, items, fresh=True)
        for msg_id, qid, prio, offset, size, deliveries in items:
            assert cat.lookup(msg_id) == Live(STATE_LIVE, qid, prio, 2, offset, size, deliveries, 0)
        expected = sorted(items, key=lambda i: keys.order_key(i[1], i[2], i[0]))
        assert order(cat) == [i[0] for i in expected]
        check(cat, {2: (sum(i[4] for i in items), n, 0, 0)})

    def test_replayed_add_many_skips_known_ids(self, cat: Catalog) -> None:
        qa = cat.queue_id("a")
        cat.add_many(2, [(1, qa, 4, 32, 50, 0)], fresh=True)
        cat.ack(1, 3)
        cat.add_many(2, [(1, qa, 4, 32, 50, 0), (2, qa, 4, 82, 60, 0)], fresh=False)
        check(cat, {2: (60, 1, 0, 1), 3: (0, 0, 1, 0)})
        assert cat.counts[qa] == 1 and order(cat) == [2]


class TestDeliver:
    def test_deliver_marks_the_file_holding_the_count(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        entry = cat.deliver(10, 1, 2)
        assert entry is not None and (entry.deliveries, entry.deliver_file) == (1, 2)
        check(cat, {1: (100, 1, 0, 0), 2: (0, 0, 1, 0)})

    def test_newer_deliver_moves_the_mark(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.deliver(10, 1, 2)
        cat.deliver(10, 2, 3)
        check(cat, {1: (100, 1, 0, 0), 3: (0, 0, 1, 0)})

    @pytest.mark.parametrize("count", [1, 2])
    def test_older_or_repeated_deliver_changes_nothing(self, cat: Catalog, count: int) -> None:
        add(cat, 10, 1)
        cat.deliver(10, 2, 3)
        assert cat.deliver(10, count, 4) is None
        check(cat, {1: (100, 1, 0, 0), 3: (0, 0, 1, 0)})
        assert cat.lookup(10) == Live(STATE_LIVE, cat.queue_id("q"), 4, 1, 32, 100, 2, 3)

    def test_deliver_in_the_put_file(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.deliver(10, 1, 1)
        check(cat, {1: (100, 1, 1, 0)})

    def test_deliver_of_unknown_or_acked_message_changes_nothing(self, cat: Catalog) -> None:
        assert cat.deliver(99, 1, 2) is None
        add(cat, 10, 1)
        cat.ack(10, 2)
        assert cat.deliver(10, 1, 3) is None
        check(cat, {1: (0, 0, 0, 1), 2: (0, 0, 1, 0)})


class TestAck:
    def test_ack_in_another_file_must_outlive_the_put(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.deliver(10, 1, 2)
        ended = cat.ack(10, 3)
        assert ended is not None and ended.file_id == 1
        check(cat, {1: (0, 0, 0, 1), 3: (0, 0, 1, 0)})
        assert cat.lookup(10) == Acked(keys.STATE_ACKED, 1, 3)
        assert order(cat) == [] and cat.counts[cat.queue_id("q")] == 0

    def test_ack_in_the_put_file_forgets_the_message(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.ack(10, 1)
        check(cat, {})
        assert cat.lookup(10) is None

    def test_ack_in_the_deliver_file(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.deliver(10, 1, 2)
        cat.ack(10, 2)
        # The DELIVER's mark is gone and the ACK's mark takes its place.
        check(cat, {1: (0, 0, 0, 1), 2: (0, 0, 1, 0)})

    def test_repeated_ack_changes_nothing(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.ack(10, 2)
        assert cat.ack(10, 3) is None
        assert cat.ack(10, 2) is None
        check(cat, {1: (0, 0, 0, 1), 2: (0, 0, 1, 0)})
        assert cat.counts[cat.queue_id("q")] == 0

    def test_ack_of_unknown_message_changes_nothing(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        assert cat.ack(11, 2) is None
        check(cat, {1: (100, 1, 0, 0)})


class TestQuarantine:
    def test_quarantine_drops_the_message_and_stops_pinning_its_file(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        add(cat, 11, 1, size=60)
        cat.deliver(10, 1, 2)
        entry = cat.lookup(10)
        assert isinstance(entry, Live)
        cat.quarantine(10, entry)
        # Nothing intact is left to deliver or copy: it no longer counts anywhere,
        # and the DELIVER record that held its count is not needed either.
        check(cat, {1: (60, 1, 0, 0)})
        assert order(cat) == [11]
        assert cat.counts[cat.queue_id("q")] == 1
        assert cat.lookup(10) is None


class TestCompactionTransitions:
    def test_relocate_moves_the_live_bytes_to_the_copy(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        assert cat.relocate(10, 1, 3, 64, 90, 0)
        check(cat, {3: (90, 1, 0, 0)})
        assert cat.lookup(10) == Live(STATE_LIVE, cat.queue_id("q"), 4, 3, 64, 90, 0, 0)
        assert order(cat) == [10]

    def test_relocate_from_the_wrong_victim_changes_nothing(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        assert not cat.relocate(10, 2, 3, 64, 100, 0)
        assert not cat.relocate(99, 1, 3, 64, 100, 0)
        check(cat, {1: (100, 1, 0, 0)})

    def test_relocated_copy_carrying_the_count_releases_the_deliver(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.deliver(10, 2, 2)
        assert cat.relocate(10, 1, 3, 64, 100, 2)
        check(cat, {3: (100, 1, 0, 0)})
        entry = cat.lookup(10)
        assert isinstance(entry, Live) and (entry.deliveries, entry.deliver_file) == (2, 0)

    def test_relocated_copy_older_than_the_count_keeps_the_deliver(self, cat: Catalog) -> None:
        # Delivered again while the copy (count 1) was being written.
        add(cat, 10, 1)
        cat.deliver(10, 2, 2)
        assert cat.relocate(10, 1, 3, 64, 100, 1)
        check(cat, {2: (0, 0, 1, 0), 3: (100, 1, 0, 0)})

    def test_relocate_of_a_message_acked_meanwhile_moves_the_dead_put(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.ack(10, 2)
        assert not cat.relocate(10, 1, 3, 64, 100, 0)
        # The copy is dead, and the ACK must now outlive the copy instead of the victim.
        check(cat, {2: (0, 0, 1, 0), 3: (0, 0, 0, 1)})
        assert cat.lookup(10) == Acked(keys.STATE_ACKED, 3, 2)

    def test_carry_ack_moves_the_needed_mark(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.ack(10, 2)
        assert cat.carry_ack(10, 2, 4, put_file=1)
        check(cat, {1: (0, 0, 0, 1), 4: (0, 0, 1, 0)})
        assert cat.lookup(10) == Acked(keys.STATE_ACKED, 1, 4)
        assert not cat.carry_ack(10, 2, 5, put_file=1)  # no longer in 2
        assert not cat.carry_ack(99, 2, 5, put_file=1)
        check(cat, {1: (0, 0, 0, 1), 4: (0, 0, 1, 0)})

    def test_carry_deliver_moves_the_needed_mark(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        cat.deliver(10, 3, 2)
        assert not cat.carry_deliver(10, 2, 2, 4)  # stale count
        check(cat, {1: (100, 1, 0, 0), 2: (0, 0, 1, 0)})
        assert cat.carry_deliver(10, 3, 2, 4)
        check(cat, {1: (100, 1, 0, 0), 4: (0, 0, 1, 0)})
        assert not cat.carry_deliver(10, 3, 2, 5)  # no longer in 2
        check(cat, {1: (100, 1, 0, 0), 4: (0, 0, 1, 0)})

    def test_release_dead_puts_frees_the_acks_that_outlived_them(self, cat: Catalog) -> None:
        add(cat, 10, 1)
        add(cat, 11, 1)
        add(cat, 12, 1, size=50)
        cat.ack(10, 2)
        cat.ack(11, 3)
        check(cat, {1: (50, 1, 0, 2), 2: (0, 0, 1, 0), 3: (0, 0, 1, 0)})
        release_dead_puts(cat, 1, 10, 100)
        check(cat, {1: (50, 1, 0, 0)})
        assert cat.lookup(10) is None and cat.lookup(11) is None
        assert isinstance(cat.lookup(12), Live)
        release_dead_puts(cat, 1, 10, 12)  # twice: nothing more
        check(cat, {1: (50, 1, 0, 0)})

    def test_release_dead_puts_ignores_acks_of_other_files(self, cat: Catalog) -> None:
        add(cat, 10, 2)
        cat.ack(10, 3)
        release_dead_puts(cat, 1, 10, 11)
        check(cat, {2: (0, 0, 0, 1), 3: (0, 0, 1, 0)})


class TestCountedAcks:
    """In a journal file's range of ids, an ACK elsewhere is counted per file pair."""

    def test_ack_in_another_file_is_counted_without_an_entry(self, jcat: Catalog) -> None:
        add(jcat, 10, 1)
        add(jcat, 11, 1, size=50)
        jcat.ack(10, 3)
        jcat.ack(11, 3)
        check(jcat, {3: (0, 0, 2, 0)})
        assert jcat.lookup(10) is None and jcat.acct[1].acked_in == {3: 2}

    def test_a_transaction_id_below_the_floor_keeps_an_entry(self, jcat: Catalog) -> None:
        add(jcat, 15, 2)  # reserved before file 2 was started
        jcat.ack(15, 3)
        check(jcat, {2: (0, 0, 0, 1), 3: (0, 0, 1, 0)})
        assert jcat.lookup(15) == Acked(keys.STATE_ACKED, 2, 3)

    def test_an_ack_while_the_file_is_rewritten_keeps_an_entry(self, jcat: Catalog) -> None:
        add(jcat, 10, 1)
        jcat.acct.rewriting.add(1)
        jcat.ack(10, 3)
        assert jcat.lookup(10) == Acked(keys.STATE_ACKED, 1, 3)
        # ... which the swap then moves to the copy, as for any ACKED entry.
        assert not jcat.relocate(10, 1, 4, 64, 100, 0)
        check(jcat, {3: (0, 0, 1, 0), 4: (0, 0, 0, 1)})

    def test_release_counted_frees_every_counted_ack_at_once(self, jcat: Catalog) -> None:
        for i, ack_file in enumerate([3, 3, 4, 2]):
            add(jcat, 10 + i, 1)
            jcat.ack(10 + i, ack_file)
        check(jcat, {2: (0, 0, 1, 0), 3: (0, 0, 2, 0), 4: (0, 0, 1, 0)})
        jcat.acct.emptied.clear()
        jcat.release_counted(1)
        check(jcat, {})
        assert jcat.acct[1].acked_in == {} and jcat.acct.emptied == {2, 3, 4}

    def test_carry_of_a_counted_ack_moves_one_count(self, jcat: Catalog) -> None:
        add(jcat, 10, 1)
        add(jcat, 11, 1)
        jcat.ack(10, 3)
        jcat.ack(11, 3)
        assert jcat.carry_ack(10, 3, 5, put_file=1)
        check(jcat, {3: (0, 0, 1, 0), 5: (0, 0, 1, 0)})
        assert jcat.acct[1].acked_in == {3: 1, 5: 1}
        assert jcat.carry_ack(11, 3, 5, put_file=1)
        assert jcat.acct[1].acked_in == {5: 2}
        # Nothing counted in 3 any more; a file that counts nothing carries nothing.
        assert not jcat.carry_ack(10, 3, 4, put_file=1)
        assert not jcat.carry_ack(10, 5, 4, put_file=2)
        check(jcat, {5: (0, 0, 2, 0)})

    def test_needed_ack_names_the_file_whose_range_holds_the_id(self, jcat: Catalog) -> None:
        add(jcat, 12, 1)
        add(jcat, 21, 2)
        add(jcat, 22, 2)
        jcat.ack(12, 3)
        jcat.ack(21, 3)
        jcat.ack(22, 2)  # in its own file: not needed
        ranges = jcat.acct.id_ranges()
        assert [jcat.needed_ack(i, 3, ranges) for i in (12, 21)] == [(1, True), (2, True)]
        assert jcat.needed_ack(22, 2, ranges) is None
        assert jcat.needed_ack(12, 4, ranges) is None  # file 1 counts nothing in 4
        assert jcat.needed_ack(5, 3, ranges) is None  # below every range
        jcat.release_counted(1)
        assert jcat.needed_ack(12, 3, jcat.acct.id_ranges()) is None


# -- replay idempotence --------------------------------------------------------------

# A journal record as replay sees it: (type, msg_id, file, deliveries)
Rec = tuple[int, int, int, int]


def replay(cat: Catalog, records: list[Rec]) -> None:
    """Apply records the way recovery does (non-fresh adds)."""
    qid = cat.queue_id("q")
    for rtype, msg_id, file_id, n in records:
        if rtype == fmt.TYPE_PUT:
            cat.add(msg_id, qid, msg_id % 10, file_id, msg_id * 100, 80 + msg_id, 0, fresh=False)
        elif rtype == fmt.TYPE_DELIVER:
            cat.deliver(msg_id, n, file_id)
        else:
            cat.ack(msg_id, file_id)


def state(cat: Catalog) -> tuple[object, ...]:
    return (
        counters(cat),
        sorted(cat.env.items(cat.env.msgs)),
        sorted(cat.env.items(cat.env.order)),
        dict(cat.counts),
    )


@st.composite
def journals(draw: st.DrawFn) -> list[Rec]:
    """A journal in file order: each message's PUT, then rising DELIVERs, then maybe an ACK,
    each in the same or a later file."""
    per_file: dict[int, list[Rec]] = {f: [] for f in FILES}
    for msg_id in range(1, draw(st.integers(1, 12)) + 1):
        f = draw(st.sampled_from(FILES))
        per_file[f].append((fmt.TYPE_PUT, msg_id, f, 0))
        for count in range(1, draw(st.integers(0, 3)) + 1):
            f = draw(st.integers(f, FILES[-1]))
            per_file[f].append((fmt.TYPE_DELIVER, msg_id, f, count))
        if draw(st.booleans()):
            f = draw(st.integers(f, FILES[-1]))
            per_file[f].append((fmt.TYPE_ACK, msg_id, f, 0))
    return [r for f in FILES for r in per_file[f]]


@settings(max_examples=60, deadline=None)
@given(journals())
def test_counted_acks_leave_the_same_state_as_acked_entries(records: list[Rec]) -> None:
    """Journal files count their ACKs elsewhere per file instead of keeping ACKED
    entries: the same messages stay live, every file needs the same marks, and
    each file counts as many ACKs as it had consumed PUT records with entries."""
    tmp = tempfile.mkdtemp()
    try:
        entries = new_catalog(Path(tmp) / "a")
        counted = new_catalog(Path(tmp) / "b", {f: 0 for f in FILES})
        replay(entries, records)
        replay(counted, records)
        assert derived(counted) == counters(counted)
        assert [(k, v) for k, v in entries.env.items(entries.env.msgs) if v[0] == STATE_LIVE] == [
            (k, v) for k, v in counted.env.items(counted.env.msgs)
        ]
        for f in FILES:
            a, b = entries.acct[f], counted.acct[f]
            assert (a.live_bytes, a.live_messages, a.needed_marks) == (
                b.live_bytes,
                b.live_messages,
                b.needed_marks,
            )
            assert a.dead_puts == sum(b.acked_in.values()) and b.dead_puts == 0
        entries.env.close()
        counted.env.close()
    finally:
        shutil.rmtree(tmp)


@settings(max_examples=60, deadline=None)
@given(journals())
def test_replaying_the_journal_twice_changes_nothing(records: list[Rec]) -> None:
    # With ACKED entries, a second replay meets every consumed id it knows. (A
    # journal file's counted ACKs leave no entry, so its PUT records must not be
    # replayed twice, and are not: recovery replays from the checkpoint, once.)
    tmp = tempfile.mkdtemp()
    try:
        cat = new_catalog(Path(tmp) / "index")
        replay(cat, records)
        once = state(cat)
        assert derived(cat) == counters(cat)
        replay(cat, records)
        assert state(cat) == once
        cat.env.close()
    finally:
        shutil.rmtree(tmp)


@settings(max_examples=60, deadline=None)
@given(journals())
def test_every_record_applied_twice_in_a_row_is_applied_once(records: list[Rec]) -> None:
    tmp = tempfile.mkdtemp()
    try:
        a = new_catalog(Path(tmp) / "a")
        b = new_catalog(Path(tmp) / "b")
        replay(a, records)
        replay(b, [r for r in records for _ in (0, 1)])
        assert state(a) == state(b)
        a.env.close()
        b.env.close()
    finally:
        shutil.rmtree(tmp)


# -- queues --------------------------------------------------------------------------


class TestQueues:
    def test_queue_ids_are_stable_and_new_names_get_new_ids(self, cat: Catalog) -> None:
        a = cat.queue_id("a")
        b = cat.queue_id("b")
        assert a != b and cat.queue_id("a") == a
        assert cat.env.get_u64(keys.META_NEXT_QUEUE) == max(a, b) + 1

    def test_counts_follow_adds_and_acks(self, cat: Catalog) -> None:
        qa, qb = cat.queue_id("a"), cat.queue_id("b")
        cat.add(1, qa, 4, 1, 32, 10, 0, fresh=True)
        cat.add(2, qa, 4, 1, 42, 10, 0, fresh=True)
        cat.add(3, qb, 4, 1, 52, 10, 0, fresh=True)
        cat.ack(1, 2)
        assert (cat.counts[qa], cat.counts[qb]) == (1, 1)

    def test_counts_persist_through_flush_and_reload(self, tmp_path: Path) -> None:
        cat = new_catalog(tmp_path / "index")
        qa, qb = cat.queue_id("a"), cat.queue_id("b")
        for i in range(1, 4):
            cat.add(i, qa, 4, 1, 32 * i, 10, 0, fresh=True)
        cat.add(9, qb, 4, 1, 500, 10, 0, fresh=True)
        cat.ack(2, 2)
        cat.flush_counts()
        cat.env.commit()
        reloaded = Catalog(cat.env, cat.acct)
        assert reloaded.queue_ids == {"a": qa, "b": qb}
        assert reloaded.counts == {qa: 2, qb: 1}
        cat.env.close()

    def test_prune_empty_queues_drops_only_empty_ones(self, cat: Catalog) -> None:
        full, drained, never = cat.queue_id("full"), cat.queue_id("drained"), cat.queue_id("never")
        cat.add(1, full, 4, 1, 32, 10, 0, fresh=True)
        cat.add(2, drained, 4, 1, 42, 10, 0, fresh=True)
        cat.ack(2, 1)
        cat.prune_empty_queues()
        assert cat.queue_ids == {"full": full}
        assert never not in cat.counts and drained not in cat.counts
        names = [k for k, _ in cat.env.items(cat.env.queues)]
        assert names == [b"full"]
        cat.flush_counts()  # a dropped queue's pending count is not written back
        assert [k for k, _ in cat.env.items(cat.env.queues)] == [b"full"]

    def test_queue_order_walks_one_queue_in_delivery_order(self, cat: Catalog) -> None:
        qa, qb = cat.queue_id("a"), cat.queue_id("b")
        for msg_id, qid, prio in [(1, qa, 0), (2, qb, 9), (3, qa, 9), (4, qa, 0), (5, qa, 5)]:
            cat.add(msg_id, qid, prio, 1, 32 * msg_id, 10, 0, fresh=True)
        assert [keys.order_key_id(k) for k in cat.queue_order(qa)] == [3, 5, 1, 4]
        start = keys.order_key(qa, 5, 5)
        assert [keys.order_key_id(k) for k in cat.queue_order(qa, start)] == [5, 1, 4]
        assert [keys.order_key_id(k) for k in cat.queue_order(qb)] == [2]


# -- random transitions ------------------------------------------------------------------

IDS = st.integers(1, 8)
FILE_IDS = st.sampled_from(FILES)


class CatalogMachine(RuleBasedStateMachine):
    """Any sequence of transitions, foreground and compaction alike, keeps every file's
    counters equal to what the index entries add up to, and never negative."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.cat = new_catalog(Path(self.tmp) / "index", {1: 1, 2: 5})
        self.qid = self.cat.queue_id("q")
        self.deliveries: dict[int, int] = {}

    @rule(msg_id=IDS, file_id=FILE_IDS, size=st.integers(1, 500))
    def add(self, msg_id: int, file_id: int, size: int) -> None:
        self.cat.add(msg_id, self.qid, msg_id % 10, file_id, 32, size, 0, fresh=False)

    @rule(msg_id=IDS, file_id=FILE_IDS)
    def deliver(self, msg_id: int, file_id: int) -> None:
        count = self.deliveries.get(msg_id, 0) + 1
        if self.cat.deliver(msg_id, count, file_id) is not None:
            self.deliveries[msg_id] = count

    @rule(msg_id=IDS, file_id=FILE_IDS)
    def ack(self, msg_id: int, file_id: int) -> None:
        self.cat.ack(msg_id, file_id)

    @rule(msg_id=IDS)
    def quarantine(self, msg_id: int) -> None:
        entry = self.cat.lookup(msg_id)
        if isinstance(entry, Live) and entry.state == STATE_LIVE:
            self.cat.quarantine(msg_id, entry)

    @rule(msg_id=IDS, victim=FILE_IDS, to=FILE_IDS, stale=st.booleans())
    def relocate(self, msg_id: int, victim: int, to: int, stale: bool) -> None:
        count = max(0, self.deliveries.get(msg_id, 0) - stale)
        self.cat.relocate(msg_id, victim, to, 64, 77, count)

    @rule(msg_id=IDS, victim=FILE_IDS, to=FILE_IDS, put_file=FILE_IDS)
    def carry_ack(self, msg_id: int, victim: int, to: int, put_file: int) -> None:
        self.cat.carry_ack(msg_id, victim, to, put_file)

    @rule(file_id=FILE_IDS)
    def release_counted(self, file_id: int) -> None:
        self.cat.release_counted(file_id)

    @rule(file_id=FILE_IDS)
    def rewrite(self, file_id: int) -> None:
        self.cat.acct.rewriting ^= {file_id}

    @rule(msg_id=IDS, victim=FILE_IDS, to=FILE_IDS)
    def carry_deliver(self, msg_id: int, victim: int, to: int) -> None:
        self.cat.carry_deliver(msg_id, self.deliveries.get(msg_id, 0), victim, to)

    @rule(file_id=FILE_IDS)
    def release_dead_puts(self, file_id: int) -> None:
        release_dead_puts(self.cat, file_id, 1, 9)

    @invariant()
    def counters_are_exact(self) -> None:
        got = counters(self.cat)
        assert got == derived(self.cat)
        assert all(v >= 0 for c in got.values() for v in c)
        assert all(n > 0 for a in self.cat.acct.files.values() for n in a.acked_in.values())
        live = sum(1 for k, v in self.cat.env.items(self.cat.env.msgs) if v[0] == STATE_LIVE)
        assert self.cat.counts.get(self.qid, 0) == live == len(order(self.cat))

    def teardown(self) -> None:
        self.cat.env.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


TestCatalogTransitions = CatalogMachine.TestCase
TestCatalogTransitions.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, derandomize=True, database=None
)
