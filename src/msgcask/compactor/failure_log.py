"""Logging a failure that lasts without logging it on every retry.

A full disk or a data file that cannot be deleted fails every pass and every
background deletion until someone acts: the log says so once, and again
when the failure changes or after a success. The same holds for a condition
of one data file that every pass finds again (``SaidOnce``).
"""

from __future__ import annotations

import logging

log = logging.getLogger("msgcask")


class RepeatedFailureLog:
    def __init__(self, what: str) -> None:
        self._what = what
        self._last = ""

    def failed(self, error: Exception, *, traceback: bool = False) -> None:
        """Log ``error`` unless it repeats the last failure logged; ``traceback``:
        with its traceback (an error msgcask does not raise itself: a bug)."""
        said = f"{type(error).__name__}: {error}" if traceback else str(error)
        if said != self._last:
            self._last = said
            log.error(
                "msgcask: %s failed: %s", self._what, error, exc_info=error if traceback else None
            )

    def succeeded(self) -> None:
        self._last = ""


class SaidOnce:
    """What was last logged of each of several things (data files, by id): a
    condition every pass finds again is news only when it starts or changes."""

    def __init__(self) -> None:
        self._said: dict[int, object] = {}

    def news(self, key: int, said: object) -> bool:
        """Whether ``said`` differs from what was last said of ``key`` (and is
        now what was said)."""
        if key in self._said and self._said[key] == said:
            return False
        self._said[key] = said
        return True

    def said(self, key: int) -> object | None:
        """What was last said of ``key`` (None if nothing, or forgotten)."""
        return self._said.get(key)

    def forget(self, key: int) -> None:
        """The condition of ``key`` ended: said again if it comes back."""
        self._said.pop(key, None)
