"""The background compaction schedule: an APScheduler job, and nothing else.

One job runs ``Store._compact_in_background`` every ``compaction_interval``
seconds; ``max_instances=1`` and ``coalesce=True`` keep passes from piling up
when one takes longer than the interval. ``pause``/``resume`` hold the job
without forgetting it; ``shutdown`` waits for a running pass to finish.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import lmdb

from msgcask.compactor.failure_log import RepeatedFailureLog
from msgcask.cpu import run_this_thread_on
from msgcask.errors import Error, IndexFailedError

if TYPE_CHECKING:
    from msgcask.db import Store

log = logging.getLogger("msgcask")


class _DropSkippedRuns(logging.Filter):
    """A run skipped because a pass is still going is what ``max_instances=1``
    is for, not something to warn about on every tick of a long pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances reached" not in record.getMessage()


# APScheduler logs through this logger (given to it below), not its own.
_scheduler_log = logging.getLogger("msgcask.scheduler")
_scheduler_log.addFilter(_DropSkippedRuns())


class CompactionScheduler:
    def __init__(self, store: Store):
        self._store = store
        self._scheduler = None
        self.paused = False
        self._halted = False  # by a failure that every later pass would meet too
        self._failures = RepeatedFailureLog("background compaction pass")
        self._placed_threads: set[int] = set()  # kept on background_cpus already

    def start(self) -> None:
        interval = self._store.options.compaction_interval
        if interval is None:
            return
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler(daemon=True, logger=_scheduler_log)
        scheduler.add_job(
            self._run,
            "interval",
            seconds=interval,
            id="compaction",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )
        scheduler.start()
        self._scheduler = scheduler

    def _run(self) -> None:
        if self._halted:
            return
        # Once per thread (a failure is logged once): the pool may hand the job to
        # a thread it has not run before.
        if threading.get_ident() not in self._placed_threads:
            self._placed_threads.add(threading.get_ident())
            run_this_thread_on(self._store.options.background_cpus, "background compaction")
        try:
            self._store._compact_in_background()
        except lmdb.Error as e:
            self._store._index_failed(e)  # logged; the store now refuses calls
            self.halt()
        except IndexFailedError:
            self.halt()  # logged where it was met; every later pass would fail too
        except Error as e:
            self._failures.failed(e)
        except Exception as e:  # noqa: BLE001 - logged with its traceback
            self._failures.failed(e, traceback=True)

    def pass_succeeded(self) -> None:
        """A background pass ended well: a failure after it, even the one logged
        last, is news (one run may chain passes, see Store._compact_in_background)."""
        self._failures.succeeded()

    def run_soon(self) -> None:
        """Start the next pass now instead of at the next interval (no-op when
        the schedule is off or paused; ignored while a pass runs)."""
        if self._scheduler is None or self.paused:
            return
        from datetime import datetime

        job = self._scheduler.get_job("compaction")
        if job is not None:
            job.modify(next_run_time=datetime.now(self._scheduler.timezone))

    def halt(self) -> None:
        """Stop running passes for good, from any thread. Unlike ``pause`` it does
        not call into APScheduler: from the job's own thread that could wait for
        ever on the lock a ``shutdown`` holds while it waits for the job."""
        self._halted = True
        self.paused = True

    def pause(self) -> None:
        self.paused = True
        if self._scheduler is not None:
            self._scheduler.pause_job("compaction")

    def resume(self) -> None:
        self.paused = False
        if self._scheduler is not None:
            self._scheduler.resume_job("compaction")

    def shutdown(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=True)
