"""A Spark session for the pipeline, with the ``msgcask`` data source registered.

Local mode (``local[2]``) by default; any master URL Spark accepts for a
cluster. One session runs per process: asking for another master while it
runs is an error that says to stop it. What a first run commonly lacks (the ``spark`` extra, a Java
runtime) is said as a ``msgcask.Error`` with what to install, not left to
surface as a gateway error from the JVM.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from msgcask.errors import Error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
# The masters spark-submit takes (SparkSubmit's own rule); any other ends the JVM
# with a Java stack on stderr before PySpark can say why.
MASTER_PREFIXES = ("local", "spark", "k8s")
STANDALONE_PORT = 7077  # a spark:// master's port when its URL names none
# How long to try each master of a spark:// URL before saying none answers:
# Spark itself retries an unreachable master for about a minute, then fails
# with "Cannot call methods on a stopped SparkContext".
MASTER_CONNECT_SECONDS = 5.0
_LOG_CONFIG = os.path.join(os.path.dirname(__file__), "log4j2.properties")
_LOG_OPTION = f"-Dlog4j2.configurationFile={_LOG_CONFIG}"
# msgcask's JVM options for the driver go in spark.driver.defaultJavaOptions,
# never in spark.driver.extraJavaOptions: Spark starts the JVM with the default
# options and then the extra ones, so the extra options a user sets (in
# spark-defaults.conf, with --conf or --driver-java-options in
# PYSPARK_SUBMIT_ARGS, or in a conf of their own) are kept, and come after
# msgcask's (the last of two settings of one option is the one the JVM takes).
#
# On any master, a cluster's too: the driver runs in this process's JVM, whose
# log (errors only) and progress bars would fill the command's terminal.
TERMINAL_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.defaultJavaOptions": _LOG_OPTION,
}
# Local jobs and tests: a JVM that spends less CPU compiling (about half the
# JVM's CPU on two cores; its code cache is made larger, as that compiler fills
# the default in a session of a few dozen jobs, and then stops compiling).
QUIET_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=512m"
# Local jobs and tests, also: no web UI, few shuffle partitions.
QUIET_CONF = {
    **TERMINAL_CONF,
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.defaultJavaOptions": f"{_LOG_OPTION} {QUIET_JAVA_OPTIONS}",
}


LEAST_JAVA = 17  # the oldest Java PySpark 4 runs on


def require_spark() -> None:
    """Raise ``msgcask.Error`` saying what to install if PySpark or Java is missing,
    or the Java is older than ``LEAST_JAVA``."""
    try:
        import pyspark  # noqa: F401
    except ImportError as e:
        raise Error(
            "the Spark pipeline needs PySpark: pip install 'msgcask[spark]' "
            "(`make test` and `make demo` install it)"
        ) from e
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise Error(
            "the Spark pipeline needs a Java 17+ runtime and none was found "
            f"({'JAVA_HOME=' + java_home if java_home else 'no java on PATH'}): install one "
            "(Debian: apt-get install openjdk-17-jre-headless; scripts/bootstrap.sh does)"
        )
    major = java_major_version(java)
    if major is not None and major < LEAST_JAVA:
        # Else Spark's launcher fails with lines of its own that do not say why.
        raise Error(
            f"the Spark pipeline needs a Java {LEAST_JAVA}+ runtime, and {java} is Java "
            f"{major}: install one (Debian: apt-get install openjdk-17-jre-headless) and "
            "set JAVA_HOME to it or put it first on PATH"
        )


@functools.lru_cache(maxsize=8)
def java_major_version(java: str) -> int | None:
    """The major version ``java -version`` reports (8 for Java 8's "1.8.0_x"), or
    None if it cannot be run or read: Spark then says what is wrong itself."""
    try:
        said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', said.stderr + said.stdout)
    if found is None:
        return None
    major = int(found[1])
    return int(found[2] or 0) if major == 1 else major


def check_master(master: object) -> None:
    """A TypeError if ``master`` is no str; a ValueError saying what Spark takes if
    it is none Spark could start with (not yarn, nor a URL starting with one of
    ``MASTER_PREFIXES``, or a ``spark://`` URL whose masters are not host:port).
    Spark still refuses a bad URL of those, such as ``local[0]``."""
    if not isinstance(master, str):
        raise TypeError(f"the Spark master is a URL (a str), not {master!r}")
    if master != "yarn" and not master.startswith(MASTER_PREFIXES):
        raise ValueError(
            "Spark takes yarn or a URL that starts with local, spark or k8s "
            "(local[2], spark://host:7077, k8s://https://host:6443)"
        )
    if master.startswith("spark://"):
        standalone_masters(master)  # each host:port well formed


def check_conf(conf: object) -> None:
    """A TypeError unless ``conf`` is None or a dict of Spark setting names (str)
    to values (str, or a number or bool, which the builder writes as one): a list
    of pairs, say, would fail inside the session's builder, and a None value in
    the JVM."""
    if conf is None:
        return
    example = "conf is a dict of Spark settings ({'spark.sql.shuffle.partitions': '4'})"
    if not isinstance(conf, Mapping) or not all(isinstance(k, str) for k in conf):
        raise TypeError(f"{example}, not {conf!r}")
    for key, value in conf.items():
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise TypeError(f"{example}: the value of {key!r} is {value!r}, not a str or number")


def standalone_masters(master: str) -> list[tuple[str, int]]:
    """The (host, port) of each master a ``spark://h1:p1,h2:p2`` URL names."""
    masters = []
    for entry in master.removeprefix("spark://").split(","):
        try:
            where = urlsplit(f"//{entry}")
            host, port = where.hostname, where.port
        except ValueError as e:  # a port that is no number, or out of range
            raise ValueError(f"{entry!r} in {master!r} is not host:port ({e})") from None
        if not host:
            raise ValueError(f"{master!r} names no host: spark://host:7077 or spark://h1:p1,h2:p2")
        masters.append((host, STANDALONE_PORT if port is None else port))
    return masters


def check_master_answers(master: str, timeout: float = MASTER_CONNECT_SECONDS) -> None:
    """For a standalone cluster's ``spark://`` URL, ``msgcask.Error`` at once if
    none of its masters accepts a connection, instead of Spark's minute of
    retries. Any other master is left to Spark."""
    if not master.startswith("spark://"):
        return
    refusals = []
    for host, port in standalone_masters(master):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as e:
            refusals.append(f"{host}:{port} ({e.strerror or e})")
        else:
            return
    raise Error(
        f"no Spark master answers at {', '.join(refusals)}: start the master, "
        f"or check the URL {master!r}"
    )


def running_master() -> str | None:
    """The master of the Spark session running in this process, or None.
    (Spark runs one per process: its builder hands back that one, whatever
    master it is asked for.)"""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    return None if running is None else str(running.master)


def spark_session(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or start the Spark session, with the data source registered.

    ``master`` None takes the session running in this process, or starts one
    on ``DEFAULT_MASTER``; a master other than the running session's is a
    msgcask.Error (Spark would hand back the running one). Python workers run
    this interpreter (so they import this msgcask), and a local session binds
    to the loopback interface only. A ``master`` Spark would refuse is a
    ValueError, and a ``spark://`` master that does not answer a msgcask.Error,
    before the JVM starts. A ``conf`` setting the running session lacks and
    Spark cannot change at runtime is a msgcask.Error (``check_static_conf``);
    those it can change are applied to the running session."""
    if master is not None:
        check_master(master)
    check_conf(conf)
    require_spark()
    running = running_master()
    if running is not None and master not in (None, running):
        raise Error(
            f"a Spark session on master {running!r} is running in this process, and "
            f"Spark runs one per process: stop it (spark.stop()) to start one on "
            f"{master!r}, or pass master={running!r} (or no master) to use it"
        )
    if running is not None and conf:
        check_static_conf(conf)
    if master is None:
        master = running or DEFAULT_MASTER
    if running is None:
        check_master_answers(master)
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName("msgcask")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return with_source(builder.getOrCreate())


def check_static_conf(conf: Mapping[str, object]) -> None:
    """``msgcask.Error`` if the session running in this process lacks a setting of
    ``conf`` that is one of Spark's own settings and cannot change while it runs
    (``spark.conf.isModifiable`` says no: ``spark.driver.memory``,
    ``spark.serializer``, ``spark.sql.extensions``): Spark's builder would hand
    back the running session without it, saying so only in its log. Settings
    it already has with the same value, those Spark can change at runtime, and
    keys Spark does not define (``spark.hadoop.*``, an application's own), pass:
    the builder sets the latter two in the running session's conf."""
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import to_str

    session = SparkSession._instantiatedSession
    if session is None or session._sc._jsc is None:
        return  # no session yet: the builder starts one with the settings
    jvm = session._sc._jvm  # set while the context runs (checked above)
    assert jvm is not None
    defined = jvm.org.apache.spark.internal.config.ConfigEntry.findEntry
    lacking = []
    for key, value in conf.items():
        wanted, has = to_str(value), session.conf.get(key, None)
        if wanted != has and not session.conf.isModifiable(key) and defined(key) is not None:
            lacking.append(
                f"{key}={wanted!r} (it runs with {'none' if has is None else repr(has)})"
            )
    if lacking:
        them = "them" if len(lacking) > 1 else "it"
        raise Error(
            f"a Spark session is running in this process, and Spark cannot change "
            f"{', '.join(lacking)} while it runs: stop it (spark.stop()) to start one "
            f"with {them}, or leave {them} out of conf to use the running session"
        )


def check_session(spark: object) -> SparkSession:
    """``spark``, or a TypeError saying how to get one unless it is a SparkSession."""
    from pyspark.sql import SparkSession

    kind = type(spark)
    # A Spark Connect session is a class of its own (importing it needs grpc).
    connect = kind.__module__.startswith("pyspark.sql.connect") and kind.__name__ == "SparkSession"
    if not (isinstance(spark, SparkSession) or connect):
        raise TypeError(
            "spark is a SparkSession (msgcask.pipeline.session.spark_session() starts one), "
            f"not {kind.__name__}: {spark!r}"
        )
    return cast("SparkSession", spark)


def with_source(spark: object) -> SparkSession:
    """``spark``, checked (``check_session``), with the ``msgcask`` data source
    registered: a session made another way (by its own builder)
    does not have it, and Spark would say so with a Java stack."""
    from pyspark.errors import AnalysisException

    from msgcask.pipeline.source import MsgcaskDataSource

    session = check_session(spark)
    try:
        session.dataSource.register(MsgcaskDataSource)
    except AnalysisException as e:  # Spark keeps the first registration of a name
        if e.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
    return session
