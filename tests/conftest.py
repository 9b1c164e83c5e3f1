"""Shared fixtures for the msgcask test suites.

* ``store_path``: where a test's store lives (``tmp_path / "store"``, not created).
* ``store``: a store opened at ``store_path``; checked with :func:`verify` and closed
  after the test if the test left it open.
* ``scale`` / ``scaled``: the size factor for slow suites (crash loops, long model runs).
  ``--big`` sets it to at least 10; ``MSGCASK_TEST_SCALE=<number>`` sets it directly.
  Slow suites always run, at small sizes by default.
* ``verify``: the store's own consistency, checked through the public API only.
* ``make_sparse``: sparse data files with a tenth of their messages left live.
* ``spark``: one Spark session for every Spark test (starting one takes seconds),
  started with a JVM option of the user's own (``user_java_option``);
  ``spark_runtime`` for those that start Spark processes of their own.
  Spark tests are marked ``spark`` and always run: without PySpark or Java they
  fail, saying what to install (``make test`` installs both).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import msgcask
from disk_files import written_size

BIG_SCALE = 10.0
DATA_FILE_RE = re.compile(r"^\d{10}\.log$")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--big",
        action="store_true",
        default=False,
        help="run slow suites (crash loops, model runs) at larger sizes",
    )


def pytest_configure(config: pytest.Config) -> None:
    _scale_from(config)  # a bad MSGCASK_TEST_SCALE stops the run before any test


def _scale_from(config: pytest.Config) -> float:
    raw = os.environ.get("MSGCASK_TEST_SCALE", "1")
    try:
        value = float(raw)
    except ValueError as e:
        raise pytest.UsageError(f"MSGCASK_TEST_SCALE must be a number, got {raw!r}") from e
    if value <= 0:
        raise pytest.UsageError(f"MSGCASK_TEST_SCALE must be > 0, got {raw!r}")
    if config.getoption("--big"):
        value = max(value, BIG_SCALE)
    return value


@pytest.fixture(scope="session")
def scale(pytestconfig: pytest.Config) -> float:
    """The size factor for slow suites (1 by default)."""
    return _scale_from(pytestconfig)


@pytest.fixture(scope="session")
def scaled(scale: float) -> Callable[[int], int]:
    """``scaled(n)``: ``n`` multiplied by the scale factor, at least 1."""

    def _scaled(n: int) -> int:
        return max(1, round(n * scale))

    return _scaled


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store"


def _check_result_ok(result: Any) -> list[str]:
    """Interpret whatever a store's check()/verify() returns as a list of problems."""
    if result is None or result is True:
        return []
    if result is False:
        return ["check() returned False"]
    for attr in ("problems", "errors", "corruptions", "issues"):
        value = getattr(result, attr, None)
        if value is not None and not callable(value):
            return [repr(p) for p in value]
    ok = getattr(result, "ok", None)
    if ok is not None:
        return [] if ok else [repr(result)]
    if isinstance(result, (list, tuple, set)):
        return [repr(p) for p in result]
    return []


def verify(store: msgcask.Store) -> None:
    """Check the store's own consistency through its public API.

    * every queue's ``len`` equals the number of messages ``browse()`` yields;
    * browse order is delivery order: priority (9 first), then id;
    * ids are unique across queues;
    * ``stats().live_messages`` equals the sum over queues, and the per-file
      accounting adds up to the store totals;
    * the store's own checker (``check()`` or ``verify()``, when it has one) reports
      no problem.
    """
    total = 0
    seen: dict[int, str] = {}
    for name in store.queues():
        q = store.queue(name)
        browsed = list(q.browse())
        assert len(q) == len(browsed), f"queue {name!r}: len {len(q)} != browse {len(browsed)}"
        keys = [(-m.priority, m.id) for m in browsed]
        assert keys == sorted(keys), f"queue {name!r}: browse is not in delivery order"
        for m in browsed:
            assert m.queue == name, f"message {m.id} browsed in {name!r} says queue {m.queue!r}"
            assert m.id not in seen, f"id {m.id} is in both {seen[m.id]!r} and {name!r}"
            seen[m.id] = name
        total += len(browsed)
    st = store.stats()
    assert st.live_messages == total, f"stats().live_messages {st.live_messages} != {total}"
    assert st.data_files == len(st.files), "stats().data_files disagrees with stats().files"
    assert sum(f.live_messages for f in st.files) == st.live_messages, (
        "per-file live_messages do not add up to stats().live_messages"
    )
    assert sum(f.live_bytes for f in st.files) == st.live_bytes, (
        "per-file live_bytes do not add up to stats().live_bytes"
    )
    assert sum(1 for f in st.files if f.active) <= 1, "more than one active write head"
    for name in ("check", "verify"):
        checker = getattr(store, name, None)
        if callable(checker):
            problems = _check_result_ok(checker())
            assert not problems, f"store.{name}() reported: {problems}"
            break


@pytest.fixture(name="verify")
def verify_fixture() -> Callable[[msgcask.Store], None]:
    return verify


@pytest.fixture
def store(store_path: Path) -> Iterator[msgcask.Store]:
    """A fresh store with the background compaction schedule off (deterministic files)."""
    s = msgcask.open(store_path, compaction_interval=None)
    yield s
    if not _is_closed(s):
        verify(s)
        s.close()


def _is_closed(s: msgcask.Store) -> bool:
    closed = getattr(s, "closed", None)
    if isinstance(closed, bool):
        return closed
    try:
        s.queues()
    except msgcask.ClosedError:
        return True
    return False


def data_files(path: Path) -> list[Path]:
    """The store's data files in file-id order (zero-padded names sort numerically)."""
    return sorted(p for p in path.iterdir() if DATA_FILE_RE.match(p.name))


def unexpected_entries(path: Path) -> list[str]:
    """Names in a store directory other than data files, ``index/`` and ``LOCK``."""
    bad = []
    for p in path.iterdir():
        if DATA_FILE_RE.match(p.name) and p.is_file():
            continue
        if p.name == "index" and p.is_dir():
            continue
        if p.name == "LOCK" and p.is_file():
            continue
        bad.append(p.name)
    return sorted(bad)


def make_sparse(queue: msgcask.Queue, messages: int = 600, keep_every: int = 10) -> list[int]:
    """Put ``messages`` of 500 bytes, then get them all and ack all but every
    ``keep_every``-th: with 64 KiB data files, sealed files about a tenth live.
    Returns the ids left delivered and unacked."""
    for _ in range(messages):
        queue.put(b"p" * 500)
    kept = []
    for i in range(messages):
        message = queue.get(block=False)
        if i % keep_every:
            queue.ack(message)
        else:
            kept.append(message.id)
    return kept


@pytest.fixture(name="make_sparse")
def make_sparse_fixture() -> Callable[..., list[int]]:
    return make_sparse


@pytest.fixture(name="data_files")
def data_files_fixture() -> Callable[[Path], list[Path]]:
    return data_files


@pytest.fixture(name="unexpected_entries")
def unexpected_entries_fixture() -> Callable[[Path], list[str]]:
    return unexpected_entries


def snapshot(store: msgcask.Store, path: Path | None = None) -> dict[str, Any]:
    """Everything a bad call must leave unchanged: queues, messages, and data file sizes."""
    messages = {
        name: [
            (m.id, bytes(m.body), dict(m.headers or {}), m.priority)
            for m in store.queue(name).browse()
        ]
        for name in store.queues()
    }
    state: dict[str, Any] = {
        "queues": list(store.queues()),
        "messages": messages,
        "live_messages": store.stats().live_messages,
    }
    if path is not None:
        state["files"] = {p.name: written_size(p) for p in data_files(path)}
    return state


@pytest.fixture(name="snapshot")
def snapshot_fixture() -> Callable[..., dict[str, Any]]:
    return snapshot


@pytest.fixture(scope="session")
def spark_runtime() -> None:
    """PySpark and Java, or the test fails saying which to install (never a skip)."""
    from msgcask.pipeline.session import require_spark

    try:
        require_spark()
    except msgcask.Error as e:
        pytest.fail(f"Spark tests cannot run: {e}", pytrace=False)


@pytest.fixture(scope="session")
def user_java_option(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    """A user's own JVM option, set the way Spark reads settings before its JVM
    starts: ``spark.driver.extraJavaOptions`` in the ``spark-defaults.conf`` of a
    ``SPARK_CONF_DIR``. The system property it sets, its value, and that directory."""
    from spark_cluster import write_spark_defaults

    name, value = "msgcask.tests.user-option", "kept"
    conf_dir = write_spark_defaults(
        tmp_path_factory.mktemp("user") / "spark-conf",
        {"spark.driver.extraJavaOptions": f"-D{name}={value}"},
    )
    return name, value, conf_dir


@pytest.fixture(scope="session")
def spark(spark_runtime: None, user_java_option: tuple[str, str, Path]) -> Iterator[Any]:
    """The session every Spark test shares, started as a user with JVM options of
    their own starts it (``user_java_option``)."""
    from msgcask.pipeline.session import QUIET_CONF, spark_session

    before = os.environ.get("SPARK_CONF_DIR")
    os.environ["SPARK_CONF_DIR"] = str(user_java_option[2])
    try:
        session = spark_session(conf=QUIET_CONF)
    finally:  # read once, as the JVM starts: the tests' own processes do not see it
        if before is None:
            del os.environ["SPARK_CONF_DIR"]
        else:
            os.environ["SPARK_CONF_DIR"] = before
    yield session
    session.stop()
