"""Ack chains: files kept only because later files hold ACKs of their messages.

The KahaDB pathology: one pinned message in file A keeps A; the ACKs in B of A's other
messages must outlive A's PUT records, so B is kept; C holds ACKs of B's messages, so C
is kept, and so on, however empty the files are. msgcask breaks the chain by carrying
needed ACKs forward when it rewrites a file: after a compaction only A's live message
(in a compacted file) and the write head are left. ``why_kept`` must name each link.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import msgcask
from draining import churn, each_available
from msgcask.store import codec

MAX_FILE_SIZE = 64 * 1024
BODY = b"c" * 1000
PER_ROUND = 50  # ~52 KB of PUT records: about one data file per round
ONE_PASS_ROUNDS = 10  # links whose needed ACKs (~1 KiB each) fit one compacted file


@dataclass
class Chain:
    pin: int
    pins: list[int]  # one per round with pin_every_round, else [pin]
    acked: list[int]
    files: list[int]  # sealed journal files, oldest first (A, B, C, ...)
    head: int


def _open(path: Path, **options: object) -> msgcask.Store:
    return msgcask.open(path, max_file_size=MAX_FILE_SIZE, compaction_interval=None, **options)


def _build_chain(store: msgcask.Store, rounds: int, *, pin_every_round: bool = False) -> Chain:
    """Round k puts PER_ROUND messages and acks round k-1's, so the ACKs of a file's
    messages land in the next file. One message of round 0 (of every round with
    ``pin_every_round``) is never consumed."""
    q = store.queue("chain")
    pins: list[int] = []
    acked: list[int] = []
    previous: list[int] = []
    for k in range(rounds + 1):
        n = PER_ROUND if k < rounds else 0
        # The pin's own tag keeps it out of the consumer's selector.
        pinned = (k == 0 or pin_every_round) and n > 0
        ids = [q.put(BODY, headers={"k": "pin" if pinned and i == 7 else str(k)}) for i in range(n)]
        if pinned:
            pins.append(ids[7])
        tag = str(k - 1)

        def of_previous_round(h: dict[str, str], tag: str = tag) -> bool:
            return h.get("k") == tag

        for _ in previous:
            m = q.get(block=False, selector=of_previous_round)
            q.ack(m)
            acked.append(m.id)
        previous = [i for i in ids if i not in pins]
    st = store.stats()
    head = next(f.file_id for f in st.files if f.active)
    files = [f.file_id for f in st.files if not f.active]
    return Chain(pins[0], pins, acked, files, head)


def _live(store: msgcask.Store) -> set[int]:
    return {m.id for name in store.queues() for m in store.queue(name).browse()}


def _check_is_a_chain(store: msgcask.Store, chain: Chain) -> None:
    """The precondition: every sealed file is kept, A by the pin, the others by ACKs
    of the file before them (so none could be deleted whole)."""
    assert len(chain.files) >= 4, f"too short a chain: {chain.files}"
    first = store.why_kept(chain.files[0])
    assert first.live_messages == [("chain", chain.pin)]
    for before, file_id in zip(chain.files, chain.files[1:], strict=False):
        kept = store.why_kept(file_id)
        assert kept.live_messages == [], f"file {file_id} has live messages"
        put_files = {put_file for _, put_file in kept.needed_acks}
        assert before in put_files, f"file {file_id} holds no ACK of file {before}"
        assert all(p < file_id for p in put_files)
        assert not kept.reclaimable


def _check_history_gone(store: msgcask.Store) -> None:
    """One more pass leaves nothing of the chain's history to hold the disk."""
    store.compact()
    assert store.stats().data_bytes <= 2 * MAX_FILE_SIZE
    assert store.verify() == []


def test_why_kept_names_the_pin_and_each_link_of_the_chain(tmp_path: Path) -> None:
    with _open(tmp_path / "store") as store:
        chain = _build_chain(store, rounds=6)
        _check_is_a_chain(store, chain)
        acked = set(chain.acked)
        by_id = {f.file_id: f for f in store.stats().files}
        # A: the pin, and nothing else needed (ACKs of A's messages are elsewhere).
        a = store.why_kept(chain.files[0])
        assert a.live_messages == [("chain", chain.pin)] and not a.active
        assert by_id[chain.files[0]].kept_by.startswith("1 live message")
        for file_id in chain.files[1:]:
            kept = store.why_kept(file_id)
            # Every needed ACK is of an acked message whose PUT record is in an older file.
            assert kept.needed_acks
            assert {i for i, _ in kept.needed_acks} <= acked
            n = len(kept.needed_acks) + len(kept.needed_deliveries)
            assert by_id[file_id].needed_acks == n
            assert by_id[file_id].kept_by == (
                f"{n} needed acks or delivery counts" if n > 1 else "1 needed ack or delivery count"
            )
        head = store.why_kept(chain.head)
        assert head.active and not head.reclaimable
        assert by_id[chain.head].kept_by == "write head"


def test_why_kept_rejects_unknown_and_non_int_files(tmp_path: Path) -> None:
    with _open(tmp_path / "store") as store:
        store.queue("q").put(b"x")
        with pytest.raises(ValueError, match="no data file 99"):
            store.why_kept(99)
        with pytest.raises(TypeError):
            store.why_kept(True)
        with pytest.raises(TypeError):
            store.why_kept("1")  # type: ignore[arg-type]


def test_ack_chain_is_deleted_in_one_pass_keeping_only_the_pin(tmp_path: Path) -> None:
    # Ten links carry about 10 KiB of needed ACKs: one compacted file holds them all,
    # so one pass takes the whole chain (longer chains: the next test).
    path = tmp_path / "store"
    with _open(path) as store:
        chain = _build_chain(store, rounds=ONE_PASS_ROUNDS)
        _check_is_a_chain(store, chain)
        report = store.compact()
        st = store.stats()
        remaining = {f.file_id for f in st.files}
        assert not remaining & set(chain.files), (
            f"chain files left after one pass: {[(f.file_id, f.kept_by) for f in st.files]}"
        )
        assert report.files_rewritten + report.files_deleted == len(chain.files)
        compacted = [f for f in st.files if f.kind == "compacted"]
        assert len(compacted) == 1
        assert store.why_kept(compacted[0].file_id).live_messages == [("chain", chain.pin)]
        assert _live(store) == {chain.pin}
        assert store.verify() == []
        _check_history_gone(store)
    _check_reopened(path, tmp_path, {chain.pin})


def test_long_ack_chain_is_deleted_in_passes_that_each_shorten_it(
    tmp_path: Path, scaled: Callable[[int], int]
) -> None:
    # A pass copies at most one compacted file's worth, so a chain whose ACKs would
    # fill more than that may take several passes. Each pass must shorten it, and the
    # chain must be gone within as many passes as its ACKs fill half files (half: room
    # for framing and the MANIFEST), plus one.
    path = tmp_path / "store"
    with _open(path) as store:
        chain = _build_chain(store, rounds=scaled(200))
        _check_is_a_chain(store, chain)
        ack_bytes = len(chain.acked) * len(codec.encode_ack(chain.head))
        assert ack_bytes > MAX_FILE_SIZE, "the chain's ACKs fit one compacted file"
        most = -(-ack_bytes // (MAX_FILE_SIZE // 2)) + 1
        left = set(chain.files)
        passes = 0
        while left:
            passes += 1
            assert passes <= most, f"{len(left)} chain files left after {most} passes"
            report = store.compact()
            now = left & {f.file_id for f in store.stats().files}
            assert len(now) < len(left), f"pass {passes} did not shorten the chain: {report}"
            left = now
            assert _live(store) == {chain.pin}
            assert store.verify() == []
        _check_history_gone(store)
    _check_reopened(path, tmp_path, {chain.pin})


def test_pinned_chain_with_a_tight_budget_is_broken_in_a_few_passes(tmp_path: Path) -> None:
    # Every link holds a pin too, so each must be rewritten (not just deleted once the
    # file before it goes), and the budget (less than one link's pin plus ACKs) allows
    # one victim per pass: the chain goes in several passes, consistent after each one.
    path = tmp_path / "store"
    with _open(path, compaction_budget=2048) as store:
        chain = _build_chain(store, rounds=8, pin_every_round=True)
        assert len(chain.files) >= 6
        passes = 0
        while set(chain.files) & {f.file_id for f in store.stats().files}:
            passes += 1
            assert passes <= 2 * len(chain.files), "the chain is never broken"
            report = store.compact()
            assert report.bytes_copied <= 2 * 2048 + MAX_FILE_SIZE // 8
            assert store.verify() == []
            assert _live(store) == set(chain.pins)
        assert passes > 2, "the budget did not limit the passes"
    _check_reopened(path, tmp_path, set(chain.pins))


def test_acks_of_a_kept_file_are_carried_forward_when_their_file_is_rewritten(
    tmp_path: Path,
) -> None:
    # A stays (half live, above the 0.3 threshold); B holds the ACKs of A's other half
    # and is otherwise empty. Rewriting B must copy those ACKs, or deleting B would
    # resurrect half of A on the next rebuild.
    path = tmp_path / "store"
    with _open(path, compaction_threshold=0.3) as store:
        q = store.queue("q")
        a_ids = [q.put(BODY, headers={"half": str(i % 2)}) for i in range(PER_ROUND)]
        filler = store.queue("filler")
        b_ids = [filler.put(BODY) for _ in range(PER_ROUND)]
        for _ in range(PER_ROUND // 2):
            q.ack(q.get(block=False, selector=lambda h: h["half"] == "0"))
        for _ in b_ids:
            filler.ack(filler.get(block=False))
        for _ in range(PER_ROUND):  # seal B
            filler.put(BODY)
            filler.ack(filler.get(block=False))
        st = store.stats()
        files = [f for f in st.files if not f.active]
        assert len(files) >= 2
        a, b = files[0].file_id, files[1].file_id
        acked_in_a = {i for i, p in store.why_kept(b).needed_acks if p == a}
        assert acked_in_a, "B holds no ACK of A: the layout is not the one intended"
        kept_alive = {i for i in a_ids if i not in acked_in_a}

        store.compact()
        st = store.stats()
        ids = {f.file_id for f in st.files}
        assert a in ids, "A (half live, above the threshold) was rewritten"
        assert b not in ids, f"B was kept: {[(f.file_id, f.kept_by) for f in st.files]}"
        carried = {
            i
            for f in st.files
            if f.file_id != a
            for i, p in store.why_kept(f.file_id).needed_acks
            if p == a
        }
        assert acked_in_a <= carried, f"ACKs not carried forward: {acked_in_a - carried}"
        assert store.verify() == []
        assert _live(store) == kept_alive
    _check_reopened(path, tmp_path, kept_alive)


def _check_reopened(path: Path, tmp_path: Path, expected: set[int]) -> None:
    """Same live set after a plain reopen and after a rebuild without the index."""
    copy = tmp_path / "rebuilt"
    shutil.copytree(path, copy)
    shutil.rmtree(copy / "index")
    for p in (path, copy):
        with _open(p) as store:
            assert _live(store) == expected, f"{store.recovery.mode}: live set differs"
            assert store.verify() == []


def test_why_kept_names_delivery_counts_that_must_outlive_their_file(tmp_path: Path) -> None:
    # A message delivered (not acked) while its PUT record sits in an older file: the
    # DELIVER record in the newer file holds its delivery count, so that file is kept
    # for it; compaction folds the count into the copy and lets the file go.
    path = tmp_path / "store"
    with _open(path) as store:
        q = store.queue("q")
        first = [q.put(BODY) for _ in range(PER_ROUND)]
        filler = store.queue("filler")
        for _ in range(PER_ROUND):  # roll over: the DELIVER below lands in a later file
            filler.put(BODY)
            filler.ack(filler.get(block=False))
        m = q.get(block=False)
        assert m.id == first[0] and m.deliveries == 1
        st = store.stats()
        put_file = next(f.file_id for f in st.files if store.why_kept(f.file_id).live_messages)
        deliver_files = [
            f.file_id for f in st.files if m.id in store.why_kept(f.file_id).needed_deliveries
        ]
        assert len(deliver_files) == 1 and deliver_files[0] != put_file
        assert not store.why_kept(deliver_files[0]).reclaimable

        for _ in range(PER_ROUND):  # seal the file with the DELIVER record too
            filler.put(BODY)
            filler.ack(filler.get(block=False))
        # Kept for a delivery count alone: the words do not call it an ack.
        [sealed] = [f for f in store.stats().files if f.file_id == deliver_files[0]]
        assert (sealed.needed_acks, sealed.kept_by) == (1, "1 needed ack or delivery count")
        for _ in first[1:]:
            q.ack(q.get(block=False))  # the PUT file is now sparse: one live message
        store.compact()
        store.compact()
        st = store.stats()
        assert deliver_files[0] not in {f.file_id for f in st.files}, [
            (f.file_id, f.kept_by) for f in st.files
        ]
        held = [b for b in q.browse() if b.id == m.id]
        assert held and held[0].deliveries == 1
        assert store.verify() == []
    with _open(path) as store:
        # Delivered and unacked at close: back, redelivered, count kept.
        again = store.queue("q").get(block=False)
        assert again.id == m.id and again.deliveries == 2 and again.redelivered


def test_a_copy_made_while_the_delivery_count_sits_in_the_head_carries_the_count(
    tmp_path: Path,
) -> None:
    # The DELIVER record is in the write head, which a pass never rewrites: the copy
    # of the PUT record must carry the count itself, since the head, sealed and
    # emptied later, is deleted without it. A rebuild then reads the count there.
    path = tmp_path / "store"
    with _open(path) as store:
        q, filler = store.queue("q"), store.queue("filler")
        first = [q.put(BODY) for _ in range(PER_ROUND)]
        for _ in range(PER_ROUND):
            filler.put(BODY)  # seals the file of ``first``
        m = q.get(block=False)
        [deliver_file] = [
            f.file_id
            for f in store.stats().files
            if m.id in store.why_kept(f.file_id).needed_deliveries
        ]
        for _ in first[1:]:
            q.ack(q.get(block=False))
        store.compact()  # copies m while the head holds its DELIVER record
        for message in each_available(filler):
            filler.ack(message)
        churn(filler, 2 * PER_ROUND, BODY)  # seals the head and empties it
        store.compact()
        store.compact()
        files = {f.file_id for f in store.stats().files}
        assert deliver_file not in files, "test setup: the DELIVER record's file is deleted"
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(path, rebuilt)
    shutil.rmtree(rebuilt / "index")
    for p in (path, rebuilt):
        with _open(p) as store:
            again = store.queue("q").get(block=False)
            assert again.id == m.id
            assert again.deliveries == 2, f"{store.recovery.mode}: count {again.deliveries}"
