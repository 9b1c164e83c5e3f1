"""The pipeline's commands on a Spark standalone cluster (a master and a worker
on loopback), as a user runs them: ``msgcask pipeline ... --master spark://...``
in a process of its own. There, unlike in local mode, the reader is pickled to
an executor JVM's Python workers, which must find this msgcask though the
command's environment names no Python (no PYSPARK_PYTHON, no venv on PATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_spark_jobs import JVM_STARTUP_LINES, index_view, pinned_store

import msgcask
from msgcask.cli.main import main
from spark_cluster import (
    LOOPBACK,
    SPARK_DEFAULTS,
    StandaloneCluster,
    standalone_cluster,
    stop_process_trees,
    write_spark_defaults,
)

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
COMMAND_SECONDS = 300
# A job the cluster cannot place waits without end: this long for Spark to say so.
STARVED_SECONDS = 120


@pytest.fixture(scope="module")
def cluster(
    spark_runtime: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandaloneCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few data files, some of their messages dead letters."""
    path = tmp_path_factory.mktemp("cluster_store") / "store"
    pinned_store(path, lambda n: 600)
    return path


def as_a_user(
    cluster: StandaloneCluster, args: list[str], conf_dir: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``msgcask pipeline ARGS --master URL``
    as a user runs it: the venv's command, with no Spark or PySpark variable
    (nor the venv on PATH) but the loopback address and the cluster's
    settings (``conf_dir``'s, if given)."""
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    env.update(SPARK_LOCAL_IP=LOOPBACK, SPARK_CONF_DIR=str(conf_dir or cluster.conf_dir))
    command = [os.path.join(bin_dir, "msgcask"), "pipeline", *args, "--master", cluster.master_url]
    return command, env


def on_the_cluster(cluster: StandaloneCluster, args: list[str], cwd: Path) -> str:
    """Run the command as a user would, in ``cwd`` (which holds no msgcask;
    ARGS may name paths relative to it, which the executors, in directories
    of their own, must not see as theirs); its stderr."""
    command, env = as_a_user(cluster, args)
    apps = len(cluster.application_dirs())
    run = subprocess.run(
        command, capture_output=True, text=True, cwd=cwd, env=env, timeout=COMMAND_SECONDS
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # It ran as an application of the cluster, on its worker's executor.
    assert len(cluster.application_dirs()) == apps + 1, run.stderr
    return run.stderr


def assert_quiet(stderr: str) -> None:
    """As in local mode: no log lines of the JVM, no progress bars."""
    assert [line for line in stderr.splitlines() if not line.startswith(JVM_STARTUP_LINES)] == []


def test_the_audit_on_a_cluster_equals_the_store_and_a_local_audit(
    spark: Any, cluster: StandaloneCluster, store: Path, tmp_path: Path
) -> None:
    files, _ = index_view(store)
    with msgcask.open(store, compaction_interval=None) as opened:
        stats = opened.stats()
    relative = os.path.relpath(store, tmp_path)
    stderr = on_the_cluster(cluster, ["audit", relative, "--json", "cluster.json"], tmp_path)
    assert_quiet(stderr)
    local = CliRunner().invoke(
        main, ["pipeline", "audit", str(store), "--json", str(tmp_path / "local.json")]
    )
    assert local.exit_code == 0, local.output
    on_cluster = json.loads((tmp_path / "cluster.json").read_text())
    assert on_cluster == json.loads((tmp_path / "local.json").read_text())
    totals = on_cluster["totals"]
    assert (totals["data_files"], totals["live_messages"], totals["live_bytes"]) == (
        stats.data_files,
        stats.live_messages,
        stats.live_bytes,
    )
    assert stats.data_files > 2 and stats.live_messages > 0
    got = {
        f["file_id"]: (f["live_messages"], f["live_bytes"], f["needed_acks"])
        for f in on_cluster["files"]
    }
    assert got == files


def test_the_dead_letters_exported_on_a_cluster_are_the_stores(
    cluster: StandaloneCluster, store: Path, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    _, dlq = index_view(store)
    out = tmp_path / "dead"
    relative = os.path.relpath(store, tmp_path)
    stderr = on_the_cluster(cluster, ["dead-letters", relative, "dead"], tmp_path)
    assert_quiet(stderr)
    exported = pq.read_table(out).to_pylist()
    assert len(dlq) >= 2
    assert {r["msg_id"]: r["body"] for r in exported} == {i: m.body for i, m in dlq.items()}
    assert len(exported) == len(dlq)


def test_a_job_the_cluster_cannot_place_says_so(
    cluster: StandaloneCluster, store: Path, tmp_path: Path
) -> None:
    """Executors of more memory than the worker has: the job waits for one
    without end, and Spark's warning, every spark.starvation.timeout, is the
    only thing that says why (it is a WARN, and the rest of the log says
    errors only)."""
    starving = {
        **SPARK_DEFAULTS,
        "spark.executor.memory": "2g",  # the worker has 1g
        "spark.starvation.timeout": "1s",
    }
    conf_dir = write_spark_defaults(tmp_path / "conf", starving)
    command, env = as_a_user(cluster, ["audit", str(store)], conf_dir)
    with open(tmp_path / "stderr", "wb") as err:
        waiting = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True
        )
    said = "WARN TaskSchedulerImpl: Initial job has not accepted any resources"
    try:
        deadline = time.monotonic() + STARVED_SECONDS
        while said not in (tmp_path / "stderr").read_text() and waiting.poll() is None:
            assert time.monotonic() < deadline, (tmp_path / "stderr").read_text()
            time.sleep(0.2)
        assert said in (tmp_path / "stderr").read_text()
        assert waiting.poll() is None  # still waiting: a user stops it
    finally:
        assert stop_process_trees([waiting.pid]) == []
        waiting.poll()


def test_the_sweep_on_a_cluster_equals_a_local_sweep(
    spark: Any, cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """Its tasks open the recording themselves (each replays it), in the
    executor's directory: a relative path must not be resolved there."""
    from test_replay import record

    from msgcask.pipeline.replay import Setting
    from msgcask.pipeline.sweep import sweep

    record(tmp_path / "rec", 300)
    args = ["sweep", "rec", "--thresholds", "0.5", "--file-sizes", "65536", "--json", "s.json"]
    assert_quiet(on_the_cluster(cluster, args, tmp_path))
    (on_cluster,) = json.loads((tmp_path / "s.json").read_text())["rows"]
    (local,) = [
        r.asDict() for r in sweep(spark, str(tmp_path / "rec"), [Setting(0.5, 65536)]).collect()
    ]
    for row in (on_cluster, local):
        del row["seconds"]  # the only figure that is not the recording's
    assert on_cluster == local and local["records"] > 0
