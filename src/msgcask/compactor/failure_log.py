"""Logging a failure that lasts without logging it on every retry.

A full disk or a data file that cannot be deleted fails every pass and every
background deletion until someone acts: the log says so once, and again
when the failure changes or after a success.
"""

from __future__ import annotations

import logging

log = logging.getLogger("msgcask")


class RepeatedFailureLog:
    def __init__(self, what: str) -> None:
        self._what = what
        self._last = ""

    def failed(self, error: Exception) -> None:
        if str(error) != self._last:
            self._last = str(error)
            log.error("msgcask: %s failed: %s", self._what, error)

    def succeeded(self) -> None:
        self._last = ""
