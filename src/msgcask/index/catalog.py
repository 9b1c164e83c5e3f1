"""The message catalog: where each message is, in what order, and in what state.

Every change of a message's state goes through one method here, and each keeps
the per-file accounting in step. The foreground (put/get/ack), journal replay
and rebuild all call the same methods, so a replayed store ends in exactly the
state the live one had.
"""

from __future__ import annotations

from collections.abc import Iterator

from msgcask.index import keys
from msgcask.index.accounting import Accounting, FileAccount, IdRanges
from msgcask.index.env import IndexEnv
from msgcask.index.keys import STATE_LIVE, Acked, Live

# Entries from which one cursor's putmulti per table beats a put per entry:
# opening the two cursors costs about as much as two puts (a consumer that
# keeps up writes one entry at a time).
_PUTMULTI_FROM = 3


class Catalog:
    def __init__(self, env: IndexEnv, acct: Accounting):
        self.env = env
        self.acct = acct
        self.queue_ids: dict[str, int] = {}
        # Live messages per queue id, kept in memory and written at each commit,
        # so len(queue) costs nothing however deep the queue is.
        self.counts: dict[int, int] = {}
        self._dirty_counts: set[int] = set()
        # A queue was made or dropped since the store last committed the index
        # (which clears this). Queues are not journaled: only a commit keeps such a
        # change across a crash (Store.sync, Store._keep_queue_change).
        self.queues_changed = False
        for name, value in env.items(env.queues):
            qid, count = keys.QUEUE_VALUE.unpack(value)
            self.queue_ids[name.decode()] = qid
            self.counts[qid] = count

    # -- queues --------------------------------------------------------------------

    def queue_id(self, name: str) -> int:
        """Return the id of queue ``name``, creating it if needed."""
        qid = self.queue_ids.get(name)
        if qid is None:
            qid = self.env.get_u64(keys.META_NEXT_QUEUE, default=1)
            self.env.put_u64(keys.META_NEXT_QUEUE, qid + 1)
            self.env.txn.put(name.encode(), keys.QUEUE_VALUE.pack(qid, 0), db=self.env.queues)
            self.queue_ids[name] = qid
            self.counts[qid] = 0
            self.queues_changed = True
        return qid

    def drop_queue(self, name: str) -> None:
        self.env.txn.delete(name.encode(), db=self.env.queues)
        qid = self.queue_ids.pop(name)
        self.counts.pop(qid, None)
        self._dirty_counts.discard(qid)
        self.queues_changed = True

    def prune_empty_queues(self, only: set[int] | None = None) -> None:
        """Drop queues without messages (of ``only``, if given)."""
        for name, qid in list(self.queue_ids.items()):
            if not self.counts.get(qid) and (only is None or qid in only):
                self.drop_queue(name)

    def touched_queues(self) -> set[int]:
        """Queues whose count changed since the last ``flush_counts``."""
        return set(self._dirty_counts)

    def flush_counts(self) -> None:
        """Write the changed per-queue counts into the current transaction."""
        names = {qid: name for name, qid in self.queue_ids.items()}
        for qid in self._dirty_counts:
            if qid in names:
                self.env.txn.put(
                    names[qid].encode(),
                    keys.QUEUE_VALUE.pack(qid, self.counts[qid]),
                    db=self.env.queues,
                )
        self._dirty_counts.clear()

    def _count(self, qid: int, delta: int) -> None:
        self.counts[qid] = self.counts.get(qid, 0) + delta
        self._dirty_counts.add(qid)

    def queue_order(self, qid: int, start: bytes | None = None) -> Iterator[bytes]:
        """Yield the order keys of queue ``qid`` in delivery order from ``start``."""
        prefix = keys.ORDER_PREFIX.pack(qid)
        with self.env.txn.cursor(db=self.env.order) as cur:
            if not cur.set_range(start or prefix):
                return
            for key in cur.iternext(values=False):
                if not key.startswith(prefix):
                    return
                yield bytes(key)

    # -- lookups -------------------------------------------------------------------

    def lookup(self, msg_id: int) -> Live | Acked | None:
        value = self.env.txn.get(keys.msg_key(msg_id), db=self.env.msgs)
        return None if value is None else keys.unpack_msg(value)

    def _live(self, msg_id: int, entry: Live | None) -> Live | None:
        """``entry`` if the caller has it, else the message's live entry (or None)."""
        if entry is not None:
            return entry
        found = self.lookup(msg_id)
        return found if isinstance(found, Live) else None

    def _store(self, msg_id: int, entry: Live) -> None:
        self.env.txn.put(keys.msg_key(msg_id), keys.pack_live(entry), db=self.env.msgs)

    # -- transitions ---------------------------------------------------------------

    def add(
        self,
        msg_id: int,
        queue_id: int,
        priority: int,
        file_id: int,
        offset: int,
        size: int,
        deliveries: int,
        *,
        fresh: bool,
    ) -> bool:
        """Record a PUT record. ``fresh`` says the id is new (the foreground);
        otherwise (replay) an id seen before is left alone. Returns whether the
        message was added."""
        txn = self.env.txn
        mkey = keys.msg_key(msg_id)
        if not fresh and txn.get(mkey, db=self.env.msgs) is not None:
            return False
        txn.put(
            mkey,
            keys.pack_live(
                Live(STATE_LIVE, queue_id, priority, file_id, offset, size, deliveries, 0)
            ),
            db=self.env.msgs,
        )
        txn.put(keys.order_key(queue_id, priority, msg_id), b"", db=self.env.order)
        stats = self.acct[file_id]
        stats.live_bytes += size
        stats.live_messages += 1
        self._count(queue_id, 1)
        self.env.changes += 2
        return True

    def add_many(
        self, file_id: int, items: list[tuple[int, int, int, int, int, int]], *, fresh: bool
    ) -> None:
        """Record several PUT records of ``file_id`` at once: (msg_id, queue_id,
        priority, offset, size, deliveries) each, one C call per table. Without
        ``fresh`` (replay), ids already known are left alone, as in ``add``, and so
        is every PUT record of an id after its first one in ``items``."""
        txn = self.env.txn
        if not fresh:
            seen: set[int] = set()
            kept = []
            for i in items:
                if i[0] not in seen and txn.get(keys.msg_key(i[0]), db=self.env.msgs) is None:
                    kept.append(i)
                seen.add(i[0])
            items = kept
        live = [
            (keys.msg_key(m), keys.pack_live(Live(STATE_LIVE, q, p, file_id, o, n, d, 0)))
            for m, q, p, o, n, d in items
        ]
        order = [(keys.order_key(q, p, m), b"") for m, q, p, _, _, _ in items]
        if len(items) < _PUTMULTI_FROM:
            for (mkey, value), (okey, _) in zip(live, order, strict=True):
                txn.put(mkey, value, db=self.env.msgs)
                txn.put(okey, b"", db=self.env.order)
        else:
            with txn.cursor(db=self.env.msgs) as cur:
                cur.putmulti(live)
            with txn.cursor(db=self.env.order) as cur:
                cur.putmulti(order)
        stats = self.acct[file_id]
        for _, qid, _, _, size, _ in items:
            stats.live_bytes += size
            self._count(qid, 1)
        stats.live_messages += len(items)
        self.env.changes += 2 * len(items)

    def ack(self, msg_id: int, ack_file: int, entry: Live | None = None) -> Live | None:
        """Record an ACK record in ``ack_file``; return the live entry it ended,
        or None if the message was not live (replay of an old or repeated ACK)."""
        txn = self.env.txn
        entry = self._live(msg_id, entry)
        if entry is None:
            return None
        stats = self._end_live(msg_id, entry)
        mkey = keys.msg_key(msg_id)
        if entry.file_id == ack_file:
            txn.delete(mkey, db=self.env.msgs)
        elif stats.in_id_range(msg_id) and entry.file_id not in self.acct.rewriting:
            # The ACK must outlive the PUT record: counted per pair of files.
            txn.delete(mkey, db=self.env.msgs)
            stats.acked_in[ack_file] = stats.acked_in.get(ack_file, 0) + 1
            self.acct[ack_file].needed_marks += 1
        else:
            # The same, where only an entry can say which record it is.
            txn.put(mkey, keys.pack_acked(entry.file_id, ack_file), db=self.env.msgs)
            stats.dead_puts += 1
            self.acct[ack_file].needed_marks += 1
        self.acct.note(stats)
        self.env.changes += 2
        return entry

    def deliver(
        self, msg_id: int, deliveries: int, file_id: int, entry: Live | None = None
    ) -> Live | None:
        """Record a DELIVER record in ``file_id`` carrying count ``deliveries``;
        return the updated entry (None if the message is not live or the record
        is older than what the index knows)."""
        entry = self._live(msg_id, entry)
        if entry is None or deliveries <= entry.deliveries:
            return None
        if entry.deliver_file:
            self.acct.drop_mark(entry.deliver_file)
        self.acct[file_id].needed_marks += 1
        # Built directly: NamedTuple._replace costs more than the index write.
        entry = Live(
            entry.state,
            entry.queue_id,
            entry.priority,
            entry.file_id,
            entry.offset,
            entry.size,
            deliveries,
            file_id,
        )
        self._store(msg_id, entry)
        self.env.changes += 1
        return entry

    def quarantine(self, msg_id: int, entry: Live) -> None:
        """Drop a message whose record is damaged from its queue and the index.

        There is nothing intact to deliver or to copy, so it stops counting as
        live and no longer pins its file; the damage is reported by the caller.
        A rebuild would find the record damaged and skip it too (or, if the
        damage was only in the read, bring the never-acked message back).
        """
        self.env.txn.delete(keys.msg_key(msg_id), db=self.env.msgs)
        self.acct.note(self._end_live(msg_id, entry))

    def _end_live(self, msg_id: int, entry: Live) -> FileAccount:
        """Take a live message out of its queue and its file's live count (and
        release the DELIVER record that held its count); return that file's account."""
        self.env.txn.delete(
            keys.order_key(entry.queue_id, entry.priority, msg_id), db=self.env.order
        )
        self._count(entry.queue_id, -1)
        stats = self.acct[entry.file_id]
        stats.live_bytes -= entry.size
        stats.live_messages -= 1
        if entry.deliver_file:
            self.acct.drop_mark(entry.deliver_file)
        return stats

    # -- compaction ----------------------------------------------------------------

    def relocate(
        self, msg_id: int, victim: int, file_id: int, offset: int, size: int, deliveries: int
    ) -> bool:
        """Point a message copied out of ``victim`` at its copy (compare-and-swap:
        only if the index still has it in ``victim``). A message acked while its
        copy was written keeps its ACK, which must now outlive the copy too.
        Returns True if the copy became the live record."""
        entry = self.lookup(msg_id)
        if entry is None:
            return False
        if isinstance(entry, Acked):
            if entry.put_file == victim:
                self.env.txn.put(
                    keys.msg_key(msg_id),
                    keys.pack_acked(file_id, entry.ack_file),
                    db=self.env.msgs,
                )
                self.acct[victim].dead_puts -= 1
                self.acct[file_id].dead_puts += 1
            return False
        if entry.file_id != victim:
            return False
        old = self.acct[victim]
        old.live_bytes -= entry.size
        old.live_messages -= 1
        new = self.acct[file_id]
        new.live_bytes += size
        new.live_messages += 1
        deliver_file = entry.deliver_file
        if deliver_file and entry.deliveries <= deliveries:
            self.acct.drop_mark(deliver_file)  # the copy carries the count now
            deliver_file = 0
        self._store(
            msg_id,
            entry._replace(file_id=file_id, offset=offset, size=size, deliver_file=deliver_file),
        )
        return True

    def carry_ack(self, msg_id: int, victim: int, file_id: int, put_file: int) -> bool:
        """Move the needed ACK of ``msg_id`` from ``victim`` to its copy in
        ``file_id``; ``put_file`` is where the classification found its PUT
        record (for an ACK counted in that file's ``acked_in``)."""
        entry = self.lookup(msg_id)
        if entry is None:
            return self._carry_counted(put_file, victim, file_id)
        if not isinstance(entry, Acked) or entry.ack_file != victim:
            return False
        self.env.txn.put(
            keys.msg_key(msg_id), keys.pack_acked(entry.put_file, file_id), db=self.env.msgs
        )
        self.acct[victim].needed_marks -= 1
        self.acct[file_id].needed_marks += 1
        return True

    def _carry_counted(self, put_file: int, victim: int, file_id: int) -> bool:
        puts = self.acct.files.get(put_file)
        if puts is None or puts.retired or not puts.acked_in.get(victim):
            return False  # released meanwhile (or not a needed ACK): the copy is dead
        _move_count(puts.acked_in, victim, file_id)
        self.acct[victim].needed_marks -= 1
        self.acct[file_id].needed_marks += 1
        return True

    def carry_deliver(self, msg_id: int, deliveries: int, victim: int, file_id: int) -> bool:
        """Move the needed DELIVER of ``msg_id`` from ``victim`` to its copy."""
        entry = self.lookup(msg_id)
        if (
            not isinstance(entry, Live)
            or entry.deliver_file != victim
            or entry.deliveries != deliveries
        ):
            return False
        self._store(msg_id, entry._replace(deliver_file=file_id))
        self.acct[victim].needed_marks -= 1
        self.acct[file_id].needed_marks += 1
        return True

    def release_acked(self, file_id: int, pairs: list[tuple[int, int]]) -> None:
        """``file_id`` is being deleted: the ACKs that only had to outlive its
        PUT records are no longer needed. ``pairs``: (id, ACK file) of the
        ACKED entries whose PUT file is ``file_id``, as the caller found them."""
        for msg_id, ack_file in pairs:
            self.env.txn.delete(keys.msg_key(msg_id), db=self.env.msgs)
            self.acct.drop_mark(ack_file)
            self.acct[file_id].dead_puts -= 1

    def release_counted(self, file_id: int) -> None:
        """``file_id`` is being deleted: the ACKs counted in its ``acked_in`` are
        no longer needed."""
        stats = self.acct[file_id]
        for ack_file, count in stats.acked_in.items():
            acks = self.acct.files.get(ack_file)
            if acks is not None:
                acks.needed_marks -= count
                self.acct.note(acks)
        stats.acked_in.clear()

    def entries_between(
        self,
        file_id: int,
        first: int,
        end: int,
        most: int,
        live: list[tuple[int, Live]],
        dead: list[tuple[int, int]],
    ) -> int:
        """Scan the entries of ids ``first`` up to ``end`` (at most ``most`` of
        them) for the PUT records in ``file_id``: append (id, entry) of the live
        ones to ``live`` and (id, ACK file) of the consumed ones to ``dead``.
        Return the id to go on from (``end`` once done)."""
        with self.env.txn.cursor(db=self.env.msgs) as cur:
            if not cur.set_range(keys.msg_key(first)):
                return end
            for _ in range(most):
                msg_id = keys.MSG_KEY.unpack(cur.key())[0]
                if msg_id >= end:
                    return end
                entry = keys.unpack_msg(cur.value())
                if isinstance(entry, Acked):
                    if entry.put_file == file_id:
                        dead.append((msg_id, entry.ack_file))
                elif entry.file_id == file_id and entry.state == STATE_LIVE:
                    live.append((msg_id, entry))
                if not cur.next():
                    return end
            return int(keys.MSG_KEY.unpack(cur.key())[0])

    def needed_ack(self, msg_id: int, file_id: int, ranges: IdRanges) -> tuple[int, bool] | None:
        """If the ACK record of ``msg_id`` in ``file_id`` is needed, the file
        holding the PUT record it cancels (or, for a counted ACK, the file
        whose range holds the id), and whether it is a counted one; else None."""
        entry = self.lookup(msg_id)
        if isinstance(entry, Acked):
            return (entry.put_file, False) if entry.ack_file == file_id else None
        if entry is not None:
            return None
        holder = ranges.holder(msg_id)
        if holder is None or holder == file_id or not self.acct[holder].acked_in.get(file_id):
            return None
        return holder, True


def _move_count(counts: dict[int, int], old: int, new: int) -> None:
    counts[new] = counts.get(new, 0) + 1
    if counts[old] == 1:
        del counts[old]
    else:
        counts[old] -= 1
