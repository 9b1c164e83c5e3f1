"""SIGTERM ends a workload run the way Ctrl-C does.

``kill PID`` and a CI job's timeout send SIGTERM, whose default action ends the
process where it stands: the run's stores stay in --workdir and its threads die
mid-put. Raised as an exception in the main thread instead, it unwinds the run
as KeyboardInterrupt does (the workers are stopped, then the stores removed).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

# The exit status of a run ended by SIGTERM: 128 + 15, what a shell reports for a
# process the signal killed, so a CI job's log reads the same either way.
TERMINATED_STATUS = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived during a run (a BaseException, as KeyboardInterrupt, so that
    no ``except Exception`` of the run records it as the run's failure)."""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, the first SIGTERM raises ``Terminated`` in the main thread;
    later ones are ignored, so they cannot cut short the cleanup the first started.
    The handler found is put back after. Outside the main thread, where no handler
    can be set, SIGTERM keeps its handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if not received:
            received.append(signum)
            raise Terminated

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
