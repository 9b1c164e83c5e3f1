"""One compaction pass, end to end, and space-pressure reclaim.

A pass: delete whole files that hold nothing needed (repeating while
deletions free further files: an ACK stops being needed once the PUT record
it cancels is gone), then rewrite the victims the policy picks within the byte
budget, then delete again. One pass runs at a time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from msgcask.compactor import policy
from msgcask.compactor.failure_log import RepeatedFailureLog, SaidOnce
from msgcask.compactor.reclaim import DeletionFailed, finish_deletions, reclaim
from msgcask.compactor.rewrite import rewrite
from msgcask.errors import ClosedError, Error, IndexFailedError
from msgcask.index.accounting import FileAccount
from msgcask.stats import CompactionReport, CompactionStats, hidden_puts, unreadable
from msgcask.store import format as fmt
from msgcask.store.filenames import data_file_name
from msgcask.store.recovery import CorruptionReport

if TYPE_CHECKING:
    from msgcask.db import Store

log = logging.getLogger("msgcask")

_MAX_RECLAIM_ROUNDS = 64
_READ_BUDGET_FILES = 8  # data files' worth of victims one pass may read
# The same for a scheduled pass. Victims go only when their pass ends, so while
# a backlog drains (every drained file a victim, as under dlq-heavy) short
# passes keep disk close behind the falling live bytes.
_BACKGROUND_READ_BUDGET_FILES = 2


class Compactor:
    def __init__(self, store: Store):
        self._store = store
        self._mutex = threading.Lock()
        self.totals = CompactionStats()
        # Bytes of every copy written since open, also those removed again
        # (not totals.bytes_copied): they are part of stats().bytes_written.
        self.copy_bytes_written = 0
        self.last: CompactionReport | None = None
        self._written_at_last_start = 0
        self._written_at_last_run = -1  # journal bytes when the last run began
        self._written_at_last_urgent = 0  # the same when ``urgent`` last said yes
        self._written_at_last_shrink_check = -1  # the same when the index was last looked at
        # Live messages per file when the last scheduled pass began (``_draining``).
        self._live_at_last_run: dict[int, int] = {}
        # Files found with damaged records: never rewrite victims again (they are
        # still deleted whole once nothing in them is needed).
        self._damaged: set[int] = set()
        # Files kept because damage hides some of their consumed PUT records
        # (``reclaim._release``), and files that cannot be read (``needed.find_any``):
        # every pass finds them again, the log says so once.
        self.unreleasable = SaidOnce()
        self.unreadable = SaidOnce()
        # Sealed journal files' highest PUT id, read once (needed.highest_put_id).
        self.highest_put_ids: dict[int, int | None] = {}
        self._deletion_failures = RepeatedFailureLog("deleting emptied data files")

    def damage(self, file_id: int) -> str:
        """Why a pass keeps data file ``file_id`` whatever its counts say, in
        words (``FileStats.damage``; "" if it does not): what was last logged of
        it, until a pass releases it."""
        counts = self.unreleasable.said(file_id)
        if counts is None:
            return ""
        reason = self.unreadable.said(file_id)  # a read error hides every record
        if reason is not None:
            return unreadable(str(reason))
        found, expected = cast("tuple[int, int]", counts)  # as reclaim._release says it
        return hidden_puts(found, expected)

    def found_damage(self, file_id: int, stretches: list[tuple[int, int, str]]) -> None:
        """Report the damaged stretches (offset, length, reason) a pass found in
        data file ``file_id`` in ``stats().corruptions``: each once, as every
        pass that reads the file finds them again, and none that an open or a
        read reported already at the same place."""
        store = self._store
        with store._lock:
            path = os.path.join(store.path, data_file_name(file_id))
            known = {(c.file_id, c.offset) for c in store._corruptions}
            for offset, length, reason in stretches:
                if (file_id, offset) not in known:
                    report = CorruptionReport(file_id, path, offset, length, reason, "kept")
                    store._corruptions.append(report)

    def _views(self) -> list[policy.FileView]:
        store = self._store
        now = store._clock()
        head = store._journal.head_id
        return [
            _view(a, max(now - a.created, 0.0), a.file_id == head)
            for a in store._acct.files.values()
            if not a.retired
        ]

    def _rewritable(self, views: list[policy.FileView]) -> list[policy.FileView]:
        return [v for v in views if v.file_id not in self._damaged or v.reclaimable]

    def _plan(
        self,
        threshold: float,
        budget: int,
        *,
        read_files: int = _READ_BUDGET_FILES,
        defer: frozenset[int] = frozenset(),
    ) -> policy.Plan:
        with self._store._lock:
            views = self._views()
        max_file_size = self._store.options.max_file_size
        return policy.plan(
            self._rewritable(views),
            threshold=threshold,
            budget=budget,
            small_file=max_file_size // 8,
            min_gain=policy.min_gain_for(max_file_size),
            read_budget=read_files * max_file_size,
            file_room=max_file_size - fmt.FILE_HEADER_SIZE,
            defer=defer,
        )

    def _draining(self) -> frozenset[int]:
        """Files with fewer live messages than when the last scheduled pass began:
        consumers are taking them now, so what a rewrite would copy out of them is
        likely consumed before long (a dead copy in a compacted file). A file
        stops counting once a pass finds it unchanged."""
        with self._store._lock:
            now = {a.file_id: a.live_messages for a in self._store._acct.files.values()}
        before, self._live_at_last_run = self._live_at_last_run, now
        return frozenset(f for f, n in now.items() if n < before.get(f, n))

    def _reclaim_all(self, threshold: float, budget: int, done: _Done) -> None:
        """Delete the files a plan finds reclaimable, in rounds; adds what it
        deletes to ``done`` as it goes."""
        for _ in range(_MAX_RECLAIM_ROUNDS):
            plan = self._plan(threshold, budget)
            if not plan.reclaim:
                break
            deleted = reclaim(self._store, plan.reclaim)
            done.add(deleted)
            if not deleted.files_deleted:
                break

    def run(
        self,
        threshold: float | None = None,
        budget: int | None = None,
        *,
        background: bool = False,
    ) -> CompactionReport:
        """Run one pass now (waiting for a running one to finish first);
        ``background`` for a scheduled one, which reads fewer victims."""
        read_files = _BACKGROUND_READ_BUDGET_FILES if background else _READ_BUDGET_FILES
        with self._mutex:
            self._store._check_open()  # close() may have run while this waited
            idle = self._idle_since_last_run()
            # Only scheduled passes leave draining files for later, and not near
            # the space bound (space first): compact() and space pressure want all
            # they can get now.
            defer: frozenset[int] = frozenset()
            if background:
                draining = self._draining()  # looked at every time: it keeps the counts
                if not self.near_bound():
                    defer = draining
            report = self._pass(threshold, budget, idle=idle, read_files=read_files, defer=defer)
            self._store._shrink_index_if_sparse(idle=idle)
            return report

    def shrink_index_between_passes(self) -> None:
        """Shrink the index file now if it is sparse, unless a pass is running
        (it shrinks the index when it ends). The pass that deletes a drained
        backlog's files usually runs before the drain ends, while the index
        still holds its last entries; without this the index would keep its
        size until the next scheduled pass. Looks only if the journal was written
        since it last looked: an idle store's index does not change."""
        written = self._store._journal.bytes_written
        if written == self._written_at_last_shrink_check:
            return
        if not self._mutex.acquire(blocking=False):
            return
        try:
            self._store._shrink_index_if_sparse()
            self._written_at_last_shrink_check = written
        finally:
            self._mutex.release()

    def wait_for_pass(self) -> None:
        """Wait for the running pass to end, as a put does: the pass, scheduled
        or not, runs forced meanwhile (``Pacer.forced``)."""
        with self._store._pacer.forcing(), self._mutex:
            pass

    def pass_lock(self) -> threading.Lock:
        """The lock a pass holds from start to end: holding it waits for a
        running pass and keeps new ones from starting."""
        return self._mutex

    def forget_pass_after_fork(self) -> None:
        """In a forked child: a pass that held the lock at the fork runs only in
        the parent, so the child's copy of the lock would never be released."""
        self._mutex = threading.Lock()

    def _idle_since_last_run(self) -> bool:
        """Whether nothing was appended to the journal since the last run began:
        a quiet store, where settling to the live data costs no foreground call."""
        with self._store._lock:
            written = self._store._journal.bytes_written
        idle = written == self._written_at_last_run
        self._written_at_last_run = written
        return idle

    def _seal_sparse_head(self, threshold: float, idle: bool) -> None:
        """Seal a mostly dead write head, so this pass can reclaim it: one at
        least half full, or any size in an idle store (otherwise a store that
        went quiet would keep up to a data file of dead bytes in its head for as
        long as it stays quiet)."""
        store = self._store
        size = store.options.max_file_size
        with store._lock:
            head = store._acct.peek(store._journal.head_id)
            view = _view(head, 0.0, False)  # as the sealed file it would become
            if (
                (idle or head.size >= size // 2)
                and view.live_ratio < threshold
                and (view.dead_bytes >= policy.min_gain_for(size))
            ):
                store._roll_over()

    def _give_back_head_space(self) -> None:
        """In a quiet store, free the write head's space allocated ahead of
        writes: disk use then follows the live data there too."""
        try:
            self._store._journal.give_back_allocated()
        except OSError as e:
            log.warning(
                "msgcask: could not free the write head's preallocated space in %s (%s); "
                "it is freed when the store is closed",
                self._store.path,
                e.strerror or e,
            )

    def behind(self) -> bool:
        """Whether compaction is behind: disk use is near the space bound, or
        passes have a backlog of work (background work then does not step aside
        for foreground calls, and background runs chain passes)."""
        if self.near_bound():
            return True
        store = self._store
        with store._lock:
            views = self._rewritable(self._views())
        size = store.options.max_file_size
        return policy.behind(
            views, store.options.compaction_threshold, policy.min_gain_for(size), size
        )

    def near_bound(self) -> bool:
        """Whether disk use is near the space bound (``policy.near_bound``).
        Reads the accounts without the store's lock, so it can run often: a
        count changed meanwhile only moves the answer by one message."""
        store = self._store
        accounts = list(store._acct.files.values())  # one C-level copy: no lock needed
        needed = sum(policy.copy_cost(a.live_bytes, a.needed_marks) for a in accounts)
        options = store.options
        return policy.near_bound(
            store._data_bytes, needed, options.compaction_threshold, options.max_file_size
        )

    def urgent(self) -> bool:
        """Whether a pass should start now, not at the next check: disk use is
        near the space bound, and a pass may bring it down (the last one freed
        something, or a data file has been written since the last urgent start;
        so a store whose files cannot be compacted does not start pass after pass)."""
        written = self._store._journal.bytes_written
        if not self._may_progress(written - self._written_at_last_urgent) or not self.near_bound():
            return False
        self._written_at_last_urgent = written
        return True

    def _may_progress(self, written_since: int) -> bool:
        """Whether a pass started now may free something: the last one did, or
        ``written_since`` (journal bytes since the last such start) reaches a
        data file. So what a pass cannot take does not start pass after pass."""
        progressed = self.last is not None and (
            self.last.files_rewritten or self.last.files_deleted
        )
        return bool(progressed) or written_since >= self._store.options.max_file_size

    def _budget(self, budget: int | None) -> int:
        """The bytes this pass may copy. With ``max_store_size`` set, the copy
        fits in the data file's worth that puts leave under the cap
        (``Store._put_limit``): no other limit is needed."""
        options = self._store.options
        budget = options.compaction_budget if budget is None else budget
        # One pass writes one compacted file: keep it within max_file_size.
        return min(budget, options.max_file_size - 2 * fmt.FILE_HEADER_SIZE)

    def _pass(
        self,
        threshold: float | None,
        budget: int | None,
        *,
        idle: bool = False,
        read_files: int = _READ_BUDGET_FILES,
        defer: frozenset[int] = frozenset(),
    ) -> CompactionReport:
        store = self._store
        threshold = store.options.compaction_threshold if threshold is None else threshold
        started = time.monotonic()
        done = _Done()
        try:
            done.add(finish_deletions(store))
            self._seal_sparse_head(threshold, idle)
            limit = self._budget(budget)
            self._reclaim_all(threshold, limit, done)
            plan = self._plan(threshold, limit, read_files=read_files, defer=defer)
            if plan.rewrite:
                # Files drained while the victims are read go at once, not after
                # the pass (under a fast drain, a pass that takes a second would
                # otherwise leave a second's worth of drained files on disk). They
                # are this pass's deletions: its report counts them.
                victims = set(plan.rewrite)
                result = rewrite(
                    store,
                    plan.rewrite,
                    between=lambda: self._reclaim_emptied(victims, done),
                    wrote=self._wrote_copy,
                    copied=done.add,  # counted even if the swap fails after
                )
                self._damaged.update(result.skipped)
                done.add(result.done)
            self._reclaim_all(threshold, limit, done)
        except BaseException as e:
            # What the pass did so far is done all the same: the totals count
            # it, and the files a failed deletion removed before it failed.
            done.add_failure(e)
            if isinstance(e, ClosedError) or not isinstance(e, Exception):
                self.totals = self.totals.plus(done.report)  # cut short by Ctrl-C or close()
            else:
                self.totals = self.totals.failed(done.report, e)
            raise
        if idle:
            self._give_back_head_space()
        report = replace(done.report, seconds=time.monotonic() - started)
        self.totals = self.totals.plus(report, passes=1)
        self.last = report
        return report

    def _wrote_copy(self, size: int) -> None:
        self.copy_bytes_written += size

    def reclaim_emptied(self) -> int:
        """Delete the files that became reclaimable since the last call (they are
        noted as counters drop to zero). Skips, returning 0, if a pass is running:
        that pass deletes them. Returns the number of files deleted, also those
        deleted before a failure (which is logged, and retried by the next call)."""
        if not self._mutex.acquire(blocking=False):
            return 0
        done = _Done()
        try:
            self._reclaim_emptied(set(), done)
        except (ClosedError, IndexFailedError):
            raise  # the caller stops background work
        except Error as e:
            done.add_failure(e)
            self._deletion_failures.failed(e)  # the files stay retired; retried later
        else:
            self._deletion_failures.succeeded()
        finally:
            self.totals = self.totals.plus(done.report)  # also what went before a failure
            self._mutex.release()
        return done.files

    def _reclaim_emptied(self, keep: set[int], done: _Done) -> None:
        """``reclaim_emptied`` with the mutex held, leaving ``keep`` (a running
        rewrite's victims, whose classification must stay theirs) alone. Adds
        what it deletes to ``done`` as it goes. Raises Error if the retired
        files a failed deletion left cannot be deleted first (no other file
        may go before them): a failed deletion like any other."""
        store = self._store
        done.add(finish_deletions(store))
        for _ in range(_MAX_RECLAIM_ROUNDS):
            with store._lock:
                head = store._journal.head_id
                emptied = store._acct.emptied
                ready = [
                    f
                    for f in emptied
                    if f != head
                    and f not in keep
                    and f in store._acct.files
                    and store._acct.files[f].reclaimable
                    and not store._acct.files[f].retired
                ]
                # The head stays noted: it becomes deletable once sealed. A kept
                # victim is deleted by its rewrite or found by the next plan.
                emptied.intersection_update({head} if head in emptied else set())
            if not ready:
                break
            done.add(reclaim(store, sorted(ready)))

    def due(self) -> bool:
        """Whether a pass should start before the next interval: the files a
        pass could rewrite hold at least one data file's worth of dead bytes,
        and either the last pass made progress or a data file has been written
        since the last early start (so what a pass cannot take does not start
        pass after pass)."""
        store = self._store
        size = store.options.max_file_size
        written = store._journal.bytes_written
        if not self._may_progress(written - self._written_at_last_start):
            return False
        with store._lock:
            views = self._rewritable(self._views())
        threshold = store.options.compaction_threshold
        if policy.sparse_dead_bytes(views, threshold, policy.min_gain_for(size)) < size:
            return False
        self._written_at_last_start = written
        return True

    def make_room(self, needed: int) -> None:
        """Space pressure: compact every file with any dead bytes, sealing the
        write head first if it is what holds them, until ``needed`` more bytes
        fit under the puts' limit (``Store._put_limit``), or nothing more can be
        freed. Waits for a running pass first: the files it is deleting are
        about to be free. A pass that fails raises: it says why the put cannot
        be stored."""
        store = self._store
        # A put waits for the running pass, and for the ones run here: they
        # run forced (``Pacer.forced``).
        with store._pacer.forcing(), self._mutex:
            store._check_open()  # close() may have run while this waited
            for _ in range(3):
                if store._fits(needed) or not self._may_fit(needed):
                    return  # else a pass copies in vain (a file that is all dead needs no copy)
                self._pass(1.0, store.options.max_file_size)  # all one copy holds
                if store._fits(needed):
                    return
                # The dead bytes may be in the write head, which a pass never
                # touches: seal it so the next pass can, if that pass would take
                # it. A head of a few marks is not worth a new file: a caller
                # retrying a refused put between acks would get one per try.
                gain = policy.min_gain_for(store.options.max_file_size)
                with store._lock:
                    head = _view(store._acct.peek(store._journal.head_id), 0.0, False)
                    if (head.reclaimable and head.size > 2 * fmt.FILE_HEADER_SIZE) or (
                        head.dead_bytes >= gain
                    ):
                        store._roll_over()

    def _floor(self) -> int:
        """The data files' bytes once a pass has freed all it can: retired files
        (a failed deletion left them) and the reclaimable bytes of the rest."""
        store = self._store
        with store._lock:
            views = self._views()
            retired = sum(a.size for a in store._acct.files.values() if a.retired)
        gain = policy.min_gain_for(store.options.max_file_size)
        return store._data_bytes - retired - policy.reclaimable_bytes(views, gain)

    def may_make_room(self, needed: int) -> bool:
        """Whether space pressure run again may make room for ``needed`` bytes
        refused under the puts' limit: a pass is running (what it frees was not
        there to find), or freeing all a pass can would leave room (acks may
        have emptied files since, or other puts taken the room found)."""
        return self._mutex.locked() or self._may_fit(needed)

    def _may_fit(self, needed: int) -> bool:
        """Whether ``needed`` bytes would fit under the puts' limit once a pass
        has freed all it can."""
        limit = self._store._put_limit
        return limit is None or self._floor() + needed + fmt.FILE_HEADER_SIZE <= limit


def _view(account: FileAccount, age: float, active: bool) -> policy.FileView:
    """What the policy sees of a file's account."""
    return policy.FileView(
        account.file_id,
        account.size,
        account.live_bytes,
        account.live_messages,
        account.needed_marks,
        age,
        active,
    )


class _Done:
    """What a pass (or a deletion between passes) has done so far, added to as
    it goes, so that a failure partway still counts what went before it."""

    def __init__(self) -> None:
        self.report = CompactionReport()

    def add(self, done: CompactionReport) -> None:
        self.report = self.report.plus(done)

    def add_failure(self, error: BaseException) -> None:
        """Add the files a failed deletion removed before it failed (``error``
        is a DeletionFailed): they are gone all the same."""
        if isinstance(error, DeletionFailed):
            self.add(error.done)

    @property
    def files(self) -> int:
        """Data files deleted, of either kind."""
        return self.report.files_deleted + self.report.files_rewritten
