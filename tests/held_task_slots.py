"""Every task slot of a local Spark session held by a job that waits.

A job submitted meanwhile is planned (a data source's reader lists its files
then) but none of its tasks can run, so read, until the slots are released.
A test does its work between the two, where no timing could put it for sure.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# When the holding tasks, and the waits for them, give up: a failed test must
# not leave the session's slots taken.
GIVE_UP_SECONDS = 300.0


class HeldSlots:
    def __init__(self, spark: Any, released: Path) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._released = released

    def wait_for_a_job_of(self, group: str) -> None:
        """Until a job of ``group`` (``SparkContext.setJobGroup``) is submitted: the
        query it runs is planned by then. A job of the group, not any new one:
        a job of another query can be submitted first."""
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while not self._tracker.getJobIdsForGroup(group):
            if time.monotonic() > deadline:
                raise AssertionError(f"no Spark job of {group!r} was submitted")
            time.sleep(0.01)

    def release(self) -> None:
        self._released.touch()


@contextmanager
def held_task_slots(spark: Any, workdir: Path) -> Iterator[HeldSlots]:
    """Hold every task slot of ``spark`` until ``release()`` or the block ends
    (``workdir``: an empty directory for the holding tasks' signal files)."""
    sc = spark.sparkContext
    slots = sc.defaultParallelism
    started, released = workdir / "started", workdir / "released"
    started.mkdir()
    deadline = time.time() + GIVE_UP_SECONDS

    def hold(index: int) -> None:  # runs in a Python worker, pickled with its closure
        (started / str(index)).touch()
        while not released.exists() and time.time() < deadline:
            time.sleep(0.01)

    holding = threading.Thread(target=lambda: sc.parallelize(range(slots), slots).foreach(hold))
    holding.start()
    try:
        while len(os.listdir(started)) < slots:
            if not holding.is_alive() or time.time() > deadline:
                raise AssertionError("the tasks meant to hold every slot did not all start")
            time.sleep(0.01)
        yield HeldSlots(spark, released)
    finally:
        released.touch()
        holding.join()
