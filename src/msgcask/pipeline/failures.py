"""A failed Spark job as one line that says what went wrong.

PySpark raises a worker's exception as a ``PythonException`` holding the whole
Python traceback, and a JVM failure as a ``Py4JJavaError`` (or one of PySpark's
captured exceptions) holding the Java stack, which may itself quote a worker's
Python traceback: a hundred lines in which the cause, often a msgcask error that
says what to do, is one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from msgcask.errors import Error

_TRACEBACK = "Traceback (most recent call last):"
_JAVA_EXCEPTION = re.compile(r"^[\w.$]+(?:Exception|Error)(?:: .*)?$")


def job_failure(e: BaseException) -> Error | None:
    """The msgcask ``Error`` to report for ``e``, or None if ``e`` is not Spark's."""
    if not _spark_failure(e):
        return None
    raised = _raised_in_worker(e)
    if raised is not None:
        return _msgcask_error(raised) or Error(f"the Spark job failed in a worker: {raised}")
    return Error(f"the Spark job failed: {spark_cause(e)}")


@contextmanager
def task_errors() -> Iterator[None]:
    """A Spark job run in the block that a msgcask error in a task stopped raises
    that error (as ``msgcask.Error``, with its message), not Spark's exception
    quoting the worker's traceback. Spark's other failures pass unchanged."""
    try:
        yield
    except Exception as e:
        raised = _raised_in_worker(e) if _spark_failure(e) else None
        failure = None if raised is None else _msgcask_error(raised)
        if failure is None:
            raise
        raise failure from e


def write_failure(e: BaseException) -> str | None:
    """What stopped Spark writing an output's files, if ``e`` is Spark's failure of
    a task that was writing them (``TASK_WRITE_FAILED``): the Java exception at the
    root of its causes (``java.io.IOException: No space left on device``), else
    the one line ``spark_cause`` finds. None for any other exception."""
    if not _spark_failure(e):
        return None
    lines = str(e).splitlines()
    if not any(_TASK_WRITE_FAILED in line for line in lines):
        return None
    # The causes of the failure itself, not those of the exceptions it suppressed
    # (indented): the last is the root.
    causes = [line.removeprefix(_CAUSED_BY) for line in lines if line.startswith(_CAUSED_BY)]
    return causes[-1].strip() if causes else spark_cause(e)


_TASK_WRITE_FAILED = "[TASK_WRITE_FAILED]"
_CAUSED_BY = "Caused by: "


def _spark_failure(e: BaseException) -> bool:
    return type(e).__module__.startswith(("pyspark", "py4j"))


def _raised_in_worker(e: BaseException) -> str | None:
    """The exception line of the Python worker's traceback that Spark's ``e``
    quotes, or None."""
    return _python_exception([line for line in str(e).splitlines() if line.strip()])


def _msgcask_error(raised: str) -> Error | None:
    """``raised``, a worker's exception line, as an ``Error`` if it is msgcask's."""
    name, _, message = raised.partition(": ")
    if name.startswith("msgcask.errors."):
        return Error(message or name.rsplit(".", 1)[-1])
    return None


def spark_cause(e: BaseException) -> str:
    """The one line of ``e`` (PySpark's, Py4J's, or any) that says what went
    wrong: the JVM's exception when it holds one, without the Java stack."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    # A Py4JJavaError's cause follows "An error occurred while calling ...", after ": ".
    stripped = [line.strip().removeprefix(": ") for line in lines]
    cause = next((line for line in stripped if _JAVA_EXCEPTION.match(line)), None)
    return cause or (stripped[0] if stripped else type(e).__name__)


def _python_exception(lines: list[str]) -> str | None:
    """The exception line of the last Python traceback quoted in ``lines``: the
    first line after it that is not indented (its frames are)."""
    starts = [i for i, line in enumerate(lines) if line.strip().endswith(_TRACEBACK)]
    if not starts:
        return None
    for line in lines[starts[-1] + 1 :]:
        if not line[:1].isspace():
            return line.strip()
    return None
