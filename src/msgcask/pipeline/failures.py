"""A failed Spark job as one line that says what went wrong.

PySpark raises a worker's exception as a ``PythonException`` holding the whole
Python traceback, and a JVM failure as a ``Py4JJavaError`` (or one of PySpark's
captured exceptions) holding the Java stack: a hundred lines in which the cause,
often a msgcask error that says what to do, is one.
"""

from __future__ import annotations

import re

from msgcask.errors import Error

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.$]*(?:Error|Exception)): (.+)$")


def job_failure(e: BaseException) -> Error | None:
    """The msgcask ``Error`` to report for ``e``, or None if ``e`` is not Spark's."""
    if not type(e).__module__.startswith(("pyspark", "py4j")):
        return None
    # A Py4JJavaError's cause follows "An error occurred while calling ...", after ": ".
    lines = [line.strip().removeprefix(": ") for line in str(e).splitlines() if line.strip()]
    causes = [m for m in map(_EXCEPTION_LINE.match, lines) if m]
    if type(e).__name__ == "PythonException" and causes:
        name, message = causes[-1].groups()  # the worker's own, after the frames
        if name.startswith("msgcask.errors."):
            return Error(message)
        return Error(f"the Spark job failed in a worker: {name.rsplit('.', 1)[-1]}: {message}")
    cause = causes[0].group(0) if causes else (lines[0] if lines else type(e).__name__)
    return Error(f"the Spark job failed: {cause}")
