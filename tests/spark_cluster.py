"""A Spark standalone cluster on loopback: one master and one worker JVM,
started from the pyspark package this interpreter imports.

Each daemon runs in a session of its own; whatever happens, the cluster
stops with every process it started (executor JVMs and their Python workers
included), and :func:`standalone_cluster` fails if one is left running.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

LOOPBACK = "127.0.0.1"
# The daemons log at INFO (Spark's default) to their stdout: the master says its
# port (it is given port 0, so no other process can take it first) and each
# worker it registers.
MASTER_STARTED = re.compile(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")
WORKER_REGISTERED = "Registering worker 127.0.0.1:"
# A JVM that compiles less and collects with one thread: about half the CPU on two cores.
LEAN_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# What every application of the cluster gets (spark-defaults.conf in SPARK_CONF_DIR,
# which the daemons read too): no REST server on the fixed port 6066 nor
# application web UI (other test runs may share the machine; the daemons' UIs
# take free ports), few shuffle partitions, lean JVMs.
SPARK_DEFAULTS = {
    "spark.master.rest.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": LEAN_JVM,
    "spark.executor.extraJavaOptions": LEAN_JVM,
}
STARTUP_SECONDS = 180
STOP_SECONDS = 20


@dataclass
class StandaloneCluster:
    master_url: str
    conf_dir: Path  # SPARK_CONF_DIR for the applications, with SPARK_DEFAULTS
    work_dir: Path  # the worker's: one directory per application that ran on it

    def application_dirs(self) -> list[Path]:
        return sorted(self.work_dir.glob("app-*"))


def write_spark_defaults(conf_dir: Path, settings: dict[str, str]) -> Path:
    """A SPARK_CONF_DIR whose spark-defaults.conf holds ``settings``."""
    conf_dir.mkdir(parents=True)
    lines = "".join(f"{key} {value}\n" for key, value in settings.items())
    (conf_dir / "spark-defaults.conf").write_text(lines)
    return conf_dir


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def daemon_env(conf_dir: Path) -> dict[str, str]:
    import pyspark

    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_DAEMON_JAVA_OPTS=LEAN_JVM,
    )
    return env


@contextlib.contextmanager
def standalone_cluster(root: Path) -> Iterator[StandaloneCluster]:
    """Start a master and a worker (one core, 1 GiB) under ``root`` and wait
    until the worker is registered; stop both, and all they started, after."""
    conf_dir, work_dir = root / "conf", root / "work"
    write_spark_defaults(conf_dir, SPARK_DEFAULTS)
    work_dir.mkdir()
    env = daemon_env(conf_dir)
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        master_log = root / "master.log"
        daemons.append(
            _start(
                [
                    "org.apache.spark.deploy.master.Master",
                    *("--host", LOOPBACK, "--port", "0", "--webui-port", "0"),
                ],
                master_log,
                env,
            )
        )
        master_url = _wait_for_log(daemons[0], master_log, MASTER_STARTED, "the master's port")
        worker_log = root / "worker.log"
        daemons.append(
            _start(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    *("--host", LOOPBACK, "--cores", "1", "--memory", "1g"),
                    *("--webui-port", "0", "--work-dir", str(work_dir)),
                ],
                worker_log,
                env,
            )
        )
        registered = re.compile(re.escape(WORKER_REGISTERED))
        _wait_for_log(daemons[1], master_log, registered, "the worker's registration")
        yield StandaloneCluster(master_url, conf_dir, work_dir)
    finally:
        left = stop_process_trees([d.pid for d in daemons])
        for daemon in daemons:
            daemon.poll()  # reaped already: records that, so Popen does not warn it still runs
        assert not left, f"processes of the Spark cluster still run after it stopped: {left}"


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(spark_class()), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: signals to the test are not its
        )


def _wait_for_log(
    daemon: subprocess.Popen[bytes], log: Path, pattern: re.Pattern[str], what: str
) -> str:
    """The first match of ``pattern`` in ``log`` (its group 1, if it has one)."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        found = pattern.search(log.read_text(errors="replace"))
        if found:
            return found.group(1) if pattern.groups else found.group(0)
        if daemon.poll() is not None:
            raise AssertionError(
                f"the Spark daemon exited ({daemon.returncode}) before {what}:\n"
                + (log.parent / "master.log").read_text(errors="replace")[-3000:]
                + log.read_text(errors="replace")[-3000:]
            )
        assert time.monotonic() < deadline, f"no {what} in {STARTUP_SECONDS} s: see {log}"
        time.sleep(0.2)


def stop_process_trees(pids: list[int]) -> list[str]:
    """SIGTERM each process and its descendants (a worker stops its executors
    on SIGTERM), SIGKILL what is left after STOP_SECONDS; return what still
    runs (pid and command line), which should be nothing."""
    procs: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            # Listed before any signal: a child whose parent is gone is no one's child.
            procs += [root, *root.children(recursive=True)]
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=STOP_SECONDS)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    _, alive = psutil.wait_procs(alive, timeout=STOP_SECONDS)
    return [f"{p.pid}: {' '.join(_cmdline(p))[:200]}" for p in alive]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return ["?"]
