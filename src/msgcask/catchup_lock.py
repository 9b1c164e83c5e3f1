"""The store's lock, which brings the index up to date whenever it is taken.

A put takes only the store's append lock (msgcask/db.py): it writes its record
to the journal and leaves its index entry in a list, so it never waits for a
compaction batch or a consumer that holds the store's lock. Whoever takes the
store's lock then writes those entries first (``catch_up``), so everything done
under it sees every put that has returned.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


class CatchUpLock:
    """A re-entrant lock that calls ``catch_up`` each time it is acquired.

    It also serves as the lock of a ``threading.Condition``: a wait releases
    every level of it and takes them back (catching up again) when it wakes.
    """

    def __init__(self, catch_up: Callable[[], None]) -> None:
        self._inner: Any = threading.RLock()
        self._catch_up = catch_up

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        # Only the outermost acquisition catches up: a nested one comes in the
        # middle of an operation, which must not see the index change under it.
        nested = self._inner._is_owned()
        got = bool(self._inner.acquire(blocking, timeout))
        if got and not nested:
            try:
                self._catch_up()
            except BaseException:
                self._inner.release()  # the caller's ``with`` never starts
                raise
        return got

    def release(self) -> None:
        self._inner.release()

    @contextlib.contextmanager
    def without_catch_up(self) -> Iterator[None]:
        """Hold the lock without catching up: for work that must not write to the
        index (waking waiters after it failed)."""
        with self._inner:
            yield

    __enter__ = acquire  # the same call, one frame less on every operation

    def __exit__(self, *exc: object) -> None:
        self._inner.release()

    # -- what threading.Condition uses ----------------------------------------------

    def _release_save(self) -> Any:
        return self._inner._release_save()

    def _acquire_restore(self, state: Any) -> None:
        self._inner._acquire_restore(state)
        self._catch_up()  # held now: an error propagates through the caller's ``with``

    def _is_owned(self) -> bool:
        return bool(self._inner._is_owned())
