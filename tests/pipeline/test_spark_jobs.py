"""The Spark jobs against the store's own view: the audit must equal the
index's accounting file by file, and the export must hold exactly the dead
letters the store would deliver, bodies included."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import msgcask
from child_process import run_cli
from held_task_slots import GIVE_UP_SECONDS, held_task_slots
from msgcask.check import scan_files
from msgcask.cli.main import main
from msgcask.pipeline.audit import audit
from msgcask.pipeline.dead_letters import dead_letters, export_dead_letters
from msgcask.pipeline.live import read_rows
from msgcask.plural import acks_or_delivery_counts, counted
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.filenames import data_file_name

pytestmark = pytest.mark.spark
SMALL = 2**16
# What the JVM prints as it starts, before any log setting applies: the only
# lines a command's stderr may hold besides its own.
JVM_STARTUP_LINES = ("WARNING: Using incubator modules", "Setting default log level", "To adjust")


def pinned_store(path: Path, scaled: Any) -> None:
    """A dlq-heavy history without compaction: files pinned by unacked and
    dead-lettered messages, acks that must outlive the PUTs they cancel, and
    delivery counts of live messages held by DELIVER records."""
    with msgcask.open(path, max_file_size=SMALL, compaction_interval=None) as store:
        orders = store.queue("orders", max_deliveries=2)
        for i in range(scaled(1200)):
            orders.put(b"order %d " % i * 20, headers={"n": str(i)})
            message = orders.get(block=False)
            if i % 97 == 5:
                orders.nack(message)  # count 1: back in the queue
                orders.nack(orders.get(block=False))  # count 2: dead-lettered
            elif i % 89 == 1:
                orders.nack(message)  # live again, with a delivery count of 1
            elif i % 61 != 0:
                orders.ack(message)  # every 61st stays delivered and unacked


def index_view(path: Path) -> tuple[dict[int, tuple[int, int, int]], dict[int, msgcask.Message]]:
    with msgcask.open(path, max_file_size=SMALL, compaction_interval=None) as store:
        files = {
            f.file_id: (f.live_messages, f.live_bytes, f.needed_acks) for f in store.stats().files
        }
        dlq = {m.id: m for m in store.queue("DLQ.orders").browse()}
    return files, dlq


_SESSION_OF_ITS_OWN = """
import sys

from pyspark.sql import SparkSession

from msgcask.pipeline.audit import audit
from msgcask.pipeline.session import QUIET_CONF

builder = SparkSession.builder.master("local[1]")
for key, value in QUIET_CONF.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
print(audit(spark, sys.argv[1]).totals["live_messages"])
spark.stop()
"""


def test_the_jobs_take_a_session_made_without_spark_session(
    spark_runtime: None, tmp_path: Path
) -> None:
    """A session of the caller's own builder has no msgcask data source until
    a job registers it. In a process of its own: the fixture's session has it."""
    pinned_store(tmp_path, lambda n: 300)
    with msgcask.open(tmp_path, max_file_size=SMALL, compaction_interval=None) as store:
        live = store.stats().live_messages
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    run = subprocess.run(
        [sys.executable, "-c", _SESSION_OF_ITS_OWN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == [str(live)]


def test_a_users_java_options_are_kept_with_msgcasks_own(
    spark: Any, user_java_option: tuple[str, str, Path]
) -> None:
    """msgcask's JVM options (its log configuration; in local mode, a JVM that
    compiles less) do not replace the user's spark.driver.extraJavaOptions: the
    fixture's session was started with one in spark-defaults.conf. The user's
    come after msgcask's, so the user's win where both set the same option."""
    from msgcask.pipeline.session import QUIET_CONF

    name, value, _ = user_java_option
    jvm = spark.sparkContext._jvm
    assert jvm.System.getProperty(name) == value
    given = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    ours = " ".join(v for k, v in QUIET_CONF.items() if k.endswith("JavaOptions")).split()
    assert ours and all(option in given for option in ours), (ours, given)
    assert given.index(f"-D{name}={value}") > max(given.index(option) for option in ours)
    log_config = next(o for o in ours if o.startswith("-Dlog4j2.configurationFile="))
    assert jvm.System.getProperty("log4j2.configurationFile") == log_config.split("=", 1)[1]


@pytest.mark.parametrize("partition_bytes", [None, 1], ids=["one task", "a task per file"])
def test_the_audit_equals_the_index_file_by_file(
    spark: Any, tmp_path: Path, scaled: Any, partition_bytes: int | None
) -> None:
    pinned_store(tmp_path, scaled)
    expected, _ = index_view(tmp_path)
    result = audit(spark, str(tmp_path), partition_bytes)
    parts = read_rows(spark, str(tmp_path), partition_bytes=partition_bytes).rdd.getNumPartitions()
    assert parts == (1 if partition_bytes is None else len(expected))
    got = {
        r.file_id: (r.live_messages, r.live_bytes, r.needed_acks) for r in result.files.collect()
    }
    assert got == expected
    assert sum(n for _, _, n in got.values()) > 10  # the history has needed acks to check
    assert result.totals["live_messages"] == sum(n for n, _, _ in expected.values())
    by_queue = {(r.file_id, r.queue): r.messages for r in result.live_by_queue.collect()}
    assert sum(by_queue.values()) == result.totals["live_messages"]
    assert {q for _, q in by_queue} == {"orders", "DLQ.orders"}
    assert result.rows.is_cached
    result.release()
    assert not result.rows.is_cached


def test_the_audit_leaves_out_what_a_compaction_made_redundant(
    spark: Any, tmp_path: Path, scaled: Any
) -> None:
    pinned_store(tmp_path, scaled)
    with msgcask.open(tmp_path, max_file_size=SMALL, compaction_interval=None) as store:
        assert store.compact(threshold=0.5).files_rewritten
    expected, _ = index_view(tmp_path)
    got = {
        r.file_id: (r.live_messages, r.live_bytes, r.needed_acks)
        for r in audit(spark, str(tmp_path)).files.collect()
    }
    assert got == expected


def audit_reading_after(
    spark: Any, workdir: Path, store_dir: Path, meanwhile: Callable[[], None]
) -> tuple[Result, dict[str, Any]]:
    """`msgcask pipeline audit STORE --json`, with ``meanwhile()`` run once the
    audit has listed the data files and before any of them is read (every task
    slot is held until then): the command's result and its report."""
    report = workdir / "audit.json"
    group = f"audit of {store_dir}"  # tells the audit's jobs from any other
    outcome: list[Result] = []

    def run_audit() -> None:
        spark.sparkContext.setJobGroup(group, "an audit whose tasks wait")
        args = ["pipeline", "audit", str(store_dir), "--json", str(report), "--rows", "0"]
        outcome.append(CliRunner().invoke(main, args))

    auditing = threading.Thread(target=run_audit)
    with held_task_slots(spark, workdir) as slots:
        auditing.start()
        try:
            slots.wait_for_a_job_of(group)  # the audit's files are listed by then
            meanwhile()
        finally:
            slots.release()
            auditing.join()
    (result,) = outcome
    assert result.exit_code == 0, result.output
    return result, json.loads(report.read_text())


def test_the_audit_of_a_store_deleting_files_meanwhile_completes_and_says_so(
    spark: Any, tmp_path: Path, verify: Any, data_files: Any
) -> None:
    """A store busy acking deletes the files that empty while the audit reads
    them: the audit completes, reports those files as deleted, and the store
    goes on undisturbed. The acking starts once the audit has listed the files,
    and the audit reads them once one of them is gone."""
    store_dir = tmp_path / "store"
    stop = threading.Event()
    # No compaction passes: one would move the never-acked messages to a file the
    # listing lacks, and the audit would rightly not count them (the test below).
    with msgcask.open(
        store_dir, max_file_size=SMALL, sync_interval=0.01, compaction_interval=None
    ) as store:
        kept, q = store.queue("kept"), store.queue("q")
        for _ in range(50):
            kept.put(b"k" * 500)  # never acked: their file stays, and is read
        for _ in range(600):
            q.put(b"x" * 500)
        kept_file, first_to_empty = data_files(store_dir)[:2]  # the second holds only q's

        def churn() -> None:  # the oldest messages acked, as many put: files empty
            while not stop.is_set():
                q.put(b"x" * 500)
                q.ack(q.get(block=False))
                time.sleep(0.001)

        churning = threading.Thread(target=churn)

        def until_a_listed_file_is_deleted() -> None:
            churning.start()  # and goes on while the audit reads
            deadline = time.monotonic() + GIVE_UP_SECONDS
            while first_to_empty.exists():
                assert time.monotonic() < deadline, "the store deleted no emptied file"
                time.sleep(0.01)

        try:
            result, audited = audit_reading_after(
                spark, tmp_path, store_dir, until_a_listed_file_is_deleted
            )
        finally:
            stop.set()
            if churning.is_alive():
                churning.join()
        totals, files = audited["totals"], {f["file_id"]: f for f in audited["files"]}
        deleted = [f for f in files.values() if f["deleted"]]
        assert files[int(first_to_empty.stem)] in deleted
        assert len(deleted) == totals["deleted_files"], totals
        assert all(f["size"] == f["records"] == f["live_messages"] == 0 for f in deleted), deleted
        assert totals["data_files"] == len(files) - len(deleted), totals
        kept_by = {e["queue"]: e["messages"] for e in files[int(kept_file.stem)]["live_by_queue"]}
        assert kept_by["kept"] == len(kept), files[int(kept_file.stem)]
        deleted_files = counted(len(deleted), "data file")
        they = "it was" if len(deleted) == 1 else "they were"
        assert f"note: the store deleted {deleted_files} after {they}" in result.output
        assert (len(kept), len(q)) == (50, 600)
        verify(store)


def test_messages_a_pass_moves_after_the_audit_listed_the_files_are_not_counted(
    spark: Any, tmp_path: Path, data_files: Any
) -> None:
    """As docs/pipeline.md says: live messages that a pass copies to a file the
    listing lacks are not counted, their old file, deleted before it is read,
    is reported as deleted (why the test above runs no passes)."""
    store_dir = tmp_path / "store"
    with msgcask.open(store_dir, max_file_size=SMALL, compaction_interval=None) as store:
        kept, q = store.queue("kept"), store.queue("q")
        for _ in range(50):
            kept.put(b"k" * 500)
        for _ in range(600):
            q.put(b"x" * 500)
        for _ in range(600):
            q.ack(q.get(block=False))  # the kept messages' file is now mostly dead
        store.compact(threshold=0.01)  # only the emptied files go: nothing is moved
        kept_file, head = data_files(store_dir)

        def move_the_kept_messages() -> None:
            assert store.compact(threshold=0.9).files_rewritten
            assert not kept_file.exists()

        _, audited = audit_reading_after(spark, tmp_path, store_dir, move_the_kept_messages)
        files = {f["file_id"]: f for f in audited["files"]}
        assert sorted(files) == [int(kept_file.stem), int(head.stem)]  # not the pass's files
        assert files[int(kept_file.stem)]["deleted"]
        assert audited["totals"]["live_messages"] == 0
        assert len(kept) == 50


def test_the_audit_counts_each_files_bytes_records_and_damage(
    spark: Any, tmp_path: Path, scaled: Any
) -> None:
    # The audit's other columns against `msgcask check`'s own read of the files
    # (scan_files) and their sizes on disk, with one record damaged in a sealed file.
    pinned_store(tmp_path, scaled)
    first = sorted(tmp_path.glob("*.log"))[0]
    buf = bytearray(first.read_bytes())
    damaged = next(
        item
        for item in codec.scan(bytes(buf), fmt.FILE_HEADER_SIZE)
        if isinstance(item, codec.Record) and item.rtype == fmt.TYPE_PUT
    )
    buf[damaged.end - 10] ^= 0xFF  # a body byte: its checksum no longer matches
    first.write_bytes(bytes(buf))
    scanned = scan_files(str(tmp_path))
    expected = {
        f.file_id: (
            os.path.getsize(f.path),
            sum(f.records.values()),
            sum(d.length for d in f.damage),
        )
        for f in scanned.files
    }
    assert expected[int(first.name[:10])][2] >= damaged.size  # the damage is there to count
    result = audit(spark, str(tmp_path))
    got = {r.file_id: (r.size, r.records, r.damaged_bytes) for r in result.files.collect()}
    assert got == expected
    assert result.totals["disk_bytes"] == sum(size for size, _, _ in expected.values())
    assert result.totals["damaged_bytes"] == sum(d for _, _, d in expected.values())
    result.release()


def test_the_dead_letter_export_is_the_dead_letter_queue(
    spark: Any, tmp_path: Path, scaled: Any
) -> None:
    store = tmp_path / "store"
    pinned_store(store, scaled)
    with msgcask.open(store, max_file_size=SMALL, compaction_interval=None) as s:
        dead = s.queue("DLQ.orders")
        dead.nack(dead.get(block=False))  # looked at, put back: delivered once
    _, dlq = index_view(store)
    assert len(dlq) >= 10 and sorted(m.deliveries for m in dlq.values())[-2:] == [0, 1]
    out = tmp_path / "dead"
    assert export_dead_letters(spark, str(store), str(out)) == len(dlq)
    rows = spark.read.parquet(str(out)).orderBy("msg_id").collect()
    assert [r.msg_id for r in rows] == sorted(dlq)
    for r in rows:
        m = dlq[r.msg_id]
        assert bytes(r.body) == m.body and r.headers == dict(m.headers)
        assert r.dead_letter_from == "orders" and r.original_id == int(m.headers["x-original-id"])
        assert (r.deliveries, r.queue) == (m.deliveries, "DLQ.orders")
    # With a queue named, every live message of it: the messages left in "orders".
    with msgcask.open(store, max_file_size=SMALL, compaction_interval=None) as s:
        left = sorted(m.id for m in s.queue("orders").browse())
    assert [r.msg_id for r in dead_letters(spark, str(store), ["orders"], 1).collect()] == left


def test_json_lines_have_every_column(spark: Any, tmp_path: Path) -> None:
    from msgcask.pipeline.dead_letters import COLUMNS

    store = tmp_path / "store"
    pinned_store(store, lambda n: 50)
    out = tmp_path / "left"
    assert export_dead_letters(spark, store, out, "json", ["orders"]) > 0
    lines = [json.loads(line) for part in out.glob("part-*.json") for line in part.open()]
    assert lines and all(list(line) == list(COLUMNS) for line in lines), lines[0]
    assert lines[0]["dead_letter_from"] is None and lines[0]["original_id"] is None
    assert set(spark.read.json(str(out)).columns) == set(COLUMNS)


def test_the_dead_letter_export_reads_each_file_once(spark: Any, tmp_path: Path) -> None:
    """One scan of the store: two (PUTs, then ACKs) would read a file being
    written at two moments, and parse every body twice."""
    pinned_store(tmp_path, lambda n: 50)
    for queues in (None, ["orders"]):
        frame = dead_letters(spark, str(tmp_path), queues)
        plan = frame._jdf.queryExecution().executedPlan().toString()
        assert plan.count("BatchScan msgcask") == 1, plan


def test_the_commands_write_what_they_report(spark: Any, tmp_path: Path, scaled: Any) -> None:
    store = tmp_path / "store"
    pinned_store(store, scaled)
    expected, dlq = index_view(store)
    runner = CliRunner()
    report = tmp_path / "audit.json"
    result = runner.invoke(main, ["pipeline", "audit", str(store), "--json", str(report)])
    assert result.exit_code == 0, result.output
    written = json.loads(report.read_text())
    assert written["totals"]["live_messages"] == sum(n for n, _, _ in expected.values())
    assert {f["file_id"] for f in written["files"]} == set(expected)
    assert all(type(v) is int for v in written["totals"].values()), written["totals"]
    assert f"{written['totals']['data_files']} data files" in result.output
    for f in written["files"]:  # the rows documented in docs/pipeline.md
        assert sum(q["messages"] for q in f["live_by_queue"]) == expected[f["file_id"]][0]
        assert sum(q["bytes"] for q in f["live_by_queue"]) == f["live_bytes"]
    # The needed count holds acks and delivery counts alike, and the words say so.
    needed = written["totals"]["needed_acks"]
    assert f"; {acks_or_delivery_counts(needed)}; " in result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:]}
    assert rows["file"].split()[5] == "needed"
    with_needed = [f for f in written["files"] if f["needed_acks"] and str(f["file_id"]) in rows]
    assert with_needed
    for f in with_needed:
        assert acks_or_delivery_counts(f["needed_acks"]) in rows[str(f["file_id"])]
    out = tmp_path / "dead"
    args = ["pipeline", "dead-letters", str(store), str(out), "--format", "json"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"{len(dlq)} dead letters written" in result.output
    assert len(spark.read.json(str(out)).collect()) == len(dlq)
    again = runner.invoke(main, args)
    assert again.exit_code != 0 and "--overwrite" in again.output
    # --queue exports a queue's live messages, which are not dead letters.
    result = runner.invoke(main, [*args, "--queue", "orders", "--queue", "orders", "--overwrite"])
    assert result.exit_code == 0, result.output
    exported = len(spark.read.json(str(out)).collect())
    assert exported > len(dlq)
    assert f"{exported} live messages of queue orders written to {out} (json)" in result.output
    assert "dead letters" not in result.output


def test_bad_options_are_refused_with_what_to_do(spark: Any, tmp_path: Path) -> None:
    pinned_store(tmp_path, lambda n: 50)
    with pytest.raises(Exception, match="'true' or 'false'"):
        spark.read.format("msgcask").option("payload", "yes").load(str(tmp_path)).count()
    with pytest.raises(Exception, match="'deleted' of the msgcask data source is 'fail' or 'row'"):
        spark.read.format("msgcask").option("deleted", "skip").load(str(tmp_path)).count()
    for bad in ("0", "-5", "lots"):
        with pytest.raises(Exception, match=r"'partition_bytes' .* a number of bytes > 0"):
            spark.read.format("msgcask").option("partition_bytes", bad).load(str(tmp_path)).count()
    with pytest.raises(Exception, match="reads one store"):
        spark.read.format("msgcask").load().count()
    with pytest.raises(ValueError, match="choose one of parquet, json"):
        export_dead_letters(spark, str(tmp_path), str(tmp_path / "x"), fmt="csv")


def test_an_option_the_source_does_not_have_is_refused_not_ignored(
    spark: Any, tmp_path: Path
) -> None:
    pinned_store(tmp_path, lambda n: 50)
    for name in ("partiton_bytes", "payloads", "pathGlobFilter"):
        with pytest.raises(Exception, match=rf"has no option '{name.lower()}': its options are"):
            spark.read.format("msgcask").option(name, "1").load(str(tmp_path)).count()
    rows = spark.read.format("msgcask").option("PAYLOAD", "true").load(str(tmp_path))
    assert "body" in rows.columns  # option names are Spark's: any case


def test_a_schema_other_than_the_rows_own_is_refused_before_a_task_runs(
    spark: Any, tmp_path: Path
) -> None:
    pinned_store(tmp_path, lambda n: 50)
    with pytest.raises(Exception, match="columns are fixed") as refused:
        spark.read.format("msgcask").schema("msg_id BIGINT").load(str(tmp_path)).count()
    assert "Python worker" not in str(refused.value)  # refused while planning, not in a task
    own = spark.read.format("msgcask").load(str(tmp_path))
    same = spark.read.format("msgcask").schema(own.schema).load(str(tmp_path))
    assert same.count() == own.count()


def test_the_sweep_is_a_replay_per_setting(spark: Any, tmp_path: Path) -> None:
    from test_replay import record

    from msgcask.pipeline.replay import replay
    from msgcask.pipeline.sweep import settings, sweep

    rec = str(tmp_path / "rec")
    live = record(Path(rec), 900)
    grid = settings([0.9, 0.4], [4 * SMALL, SMALL])
    rows = [r.asDict() for r in sweep(spark, rec, grid, pass_every=400).collect()]
    assert [(r["compaction_threshold"], r["max_file_size"]) for r in rows] == [
        (0.4, SMALL),
        (0.4, 4 * SMALL),
        (0.9, SMALL),
        (0.9, 4 * SMALL),
    ]
    assert {r["final_live_bytes"] for r in rows} == {live}
    direct = replay(rec, grid[1], pass_every=400).as_dict()
    for row in (direct, rows[1]):
        row.pop("seconds")
    assert rows[1] == direct


def test_each_setting_is_replayed_once_in_a_task_of_its_own(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the sweep promises: the settings run in parallel, not some of them one
    after another in a shared task, and no replay runs twice (for Spark to
    sample the rows it sorts, say). Each replay leaves a file naming its task."""
    from test_replay import record

    import msgcask.pipeline.sweep as sweep_module

    rec, ran = tmp_path / "rec", tmp_path / "ran"
    record(rec, 60)
    ran.mkdir()
    replay = sweep_module.replay

    def replay_saying_where(recording: str, setting: Any, pass_every: int) -> Any:
        # Pickled with the job (a nested function), and run in a Python worker.
        from pyspark import TaskContext

        task = TaskContext.get()
        where = f"{setting.max_file_size}-stage{task.stageId()}-part{task.partitionId()}"
        (ran / where).touch(exist_ok=False)
        return replay(recording, setting, pass_every)

    monkeypatch.setattr(sweep_module, "replay", replay_saying_where)
    sizes = [SMALL * (i + 1) for i in range(6)]  # the default grid's size
    rows = sweep_module.sweep(spark, str(rec), sweep_module.settings([0.5], sizes)).collect()
    assert [r.max_file_size for r in rows] == sizes
    runs = sorted((int(size), task) for size, task in (p.name.split("-", 1) for p in ran.iterdir()))
    assert [size for size, _ in runs] == sizes, runs  # each once
    assert len({task for _, task in runs}) == len(sizes), runs


def test_the_sweep_command(spark: Any, tmp_path: Path) -> None:
    from test_replay import record

    rec = tmp_path / "rec"
    record(rec, 600)
    runner = CliRunner()
    base = ["pipeline", "sweep", str(rec), "--pass-every", "300"]
    out = tmp_path / "sweep.json"
    result = runner.invoke(main, [*base, "--thresholds", "0.5", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2  # the default file sizes
    assert f"{rows[0]['records']} records replayed per setting" in result.output
    for bad, says in [("0.5,abc", "'abc' is not a number"), ("1.5", "must be in (0, 1]")]:
        result = runner.invoke(main, [*base, "--thresholds", bad])
        assert result.exit_code == 2 and says in result.output, result.output
    result = runner.invoke(main, [*base, "--file-sizes", "1000"])
    assert result.exit_code == 2 and "1000 bytes is too small" in result.output
    result = runner.invoke(main, [*base, "--json", str(tmp_path / "nowhere" / "s.json")])
    assert result.exit_code == 2 and "its directory does not exist" in result.output
    with msgcask.open(
        rec, max_file_size=2**20, compaction_interval=None, keep_data_files=True
    ) as s:
        s.queue("big").put(bytes(100_000))
    result = runner.invoke(main, [*base, "--file-sizes", "65536"])
    assert result.exit_code == 2 and "cannot hold the recording's largest message" in result.output
    (rec / "0000000001.log").unlink()
    result = runner.invoke(main, base)
    assert result.exit_code == 1 and "not a whole journal" in result.output


def test_the_sweep_command_notes_what_it_could_not_replay(spark: Any, tmp_path: Path) -> None:
    from test_replay import record_what_cannot_be_replayed

    rec = tmp_path / "rec"
    record_what_cannot_be_replayed(rec)
    args = ["pipeline", "sweep", str(rec), "--thresholds", "0.5", "--file-sizes", str(SMALL)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    said = (
        "note: the replay differs from the recording: 10 gets returned another message, "
        "20 acks of undelivered messages were not replayed, 0 damaged records were skipped"
    )
    assert said in result.output, result.output


def test_the_sweep_command_parses_the_recording_once_before_the_replays(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check made before Spark starts reads every record (for the largest
    message); the replays read the recording again, each in its own task."""
    from test_replay import record

    import msgcask.pipeline.replay as replay_module

    rec = tmp_path / "rec"
    record(rec, 300)
    parsed: list[int] = []
    file_rows = replay_module.file_rows

    def counted_file_rows(info: Any, payload: bool) -> Any:
        parsed.append(info.file_id)
        return file_rows(info, payload)

    monkeypatch.setattr(replay_module, "file_rows", counted_file_rows)
    command = ["pipeline", "sweep", str(rec), "--thresholds", "0.5", "--file-sizes", str(SMALL)]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    assert sorted(parsed) == list(range(1, len(list(rec.glob("*.log"))) + 1))


@pytest.mark.parametrize(
    "out", ["the store", "its parent", "inside it", "the store's URI", "a data file's URI"]
)
def test_the_export_never_writes_over_the_store(tmp_path: Path, out: str) -> None:
    """Checked before Spark starts: --overwrite would delete the store first."""
    store = tmp_path / "store"
    pinned_store(store, lambda n: 100)
    before = sorted(p.name for p in store.iterdir())
    target = {
        "the store": str(store),
        "its parent": str(tmp_path),
        "inside it": str(store / "dead"),
        "the store's URI": f"file://{store}",
        "a data file's URI": f"file://{store}/0000000009.log",
    }[out]
    result = CliRunner().invoke(
        main, ["pipeline", "dead-letters", str(store), target, "--overwrite"]
    )
    assert result.exit_code == 1 and "would destroy the store" in result.output
    assert sorted(p.name for p in store.iterdir()) == before
    with pytest.raises(ValueError, match="would destroy the store"):
        export_dead_letters(None, str(store), target, overwrite=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["audit", "sweep"])
def test_a_report_never_writes_into_the_store(tmp_path: Path, command: str) -> None:
    """Checked before Spark starts: the report would replace a data file."""
    store = tmp_path / "store"
    if command == "audit":
        pinned_store(store, lambda n: 100)
    else:
        from test_replay import record

        record(store, 100)
    data_file = min(store.glob("*.log"))
    before = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    for report in (data_file, store / "report.json"):
        result = CliRunner().invoke(main, ["pipeline", command, str(store), "--json", str(report)])
        assert result.exit_code == 2 and "would destroy the store" in result.output, result.output
    assert {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()} == before


def test_bad_command_input_is_refused_before_spark_starts(tmp_path: Path) -> None:
    store = tmp_path / "store"
    pinned_store(store, lambda n: 50)
    (tmp_path / "empty").mkdir()
    runner = CliRunner()
    for args in (
        ["audit", str(tmp_path / "empty")],
        ["dead-letters", str(tmp_path / "empty"), "x"],
    ):
        result = runner.invoke(main, ["pipeline", *args])
        assert result.exit_code == 1 and "holds no msgcask data files" in result.output
        assert "Traceback" not in result.output
    for report, says in [
        (tmp_path / "nowhere" / "a.json", "its directory does not exist"),
        (tmp_path, "is a directory"),
        (Path("/proc/a.json"), "cannot be written"),
    ]:
        result = runner.invoke(main, ["pipeline", "audit", str(store), "--json", str(report)])
        assert result.exit_code == 2 and says in result.output, result.output
    assert not Path("/proc/a.json").exists()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--thresholds", "0.5,abc", "'abc' is not a number"),
        ("--thresholds", "nan", "compaction_threshold must be finite"),
        ("--thresholds", "2", "compaction_threshold must be in (0, 1]"),
        ("--thresholds", ",", "',' holds no value: give at least one"),
        ("--file-sizes", "64KiB,big", "'big' is not a size (bytes, or with KiB/MiB/GiB)"),
        ("--file-sizes", "65536,0", "0 bytes is too small; msgcask takes data files of 64 KiB"),
        ("--file-sizes", "3GiB", "3221225472 bytes is too large; msgcask takes data files of"),
    ],
)
def test_a_bad_sweep_setting_is_refused_naming_its_option_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, value: str, says: str
) -> None:
    import msgcask.cli.pipeline as cli_pipeline

    def no_spark(master: str) -> None:
        raise AssertionError("Spark started: the setting should have been refused first")

    monkeypatch.setattr(cli_pipeline, "_spark", no_spark)
    rec = tmp_path / "rec"
    pinned_store(rec, lambda n: 50)
    result = CliRunner().invoke(main, ["pipeline", "sweep", str(rec), option, value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}': {says}" in result.output


class _Swept(Exception):
    """Raised in place of the replays, carrying the settings they were given."""


@pytest.mark.parametrize(
    ("value", "sizes"),
    [
        ("64KiB,1MiB", [65536, 2**20]),
        ("65536, 256k", [65536, 262144]),
        ("2GiB", [2**31]),
    ],
)
def test_sweep_file_sizes_take_units_as_every_size_option_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, sizes: list[int]
) -> None:
    import msgcask.cli.pipeline as cli_pipeline
    from msgcask.pipeline import sweep

    def no_replays(spark: object, recording: str, grid: list[Any], pass_every: int) -> None:
        raise _Swept(grid)

    monkeypatch.setattr(cli_pipeline, "_spark", lambda master: None)
    monkeypatch.setattr(sweep, "replays", no_replays)
    rec = tmp_path / "rec"
    pinned_store(rec, lambda n: 50)
    args = ["pipeline", "sweep", str(rec), "--thresholds", "0.5", "--file-sizes", value]
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, _Swept), result.output
    assert [s.max_file_size for s in result.exception.args[0]] == sizes


def test_a_job_that_fails_in_spark_ends_with_one_line(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import msgcask.cli.pipeline as pipeline_command
    import msgcask.pipeline.dead_letters as dead_letters_module

    store = tmp_path / "store"
    pinned_store(store, lambda n: 50)
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "dead"  # under a regular file: Spark cannot make it
    argv = ["pipeline", "dead-letters", str(store), str(out)]
    refused = CliRunner().invoke(main, argv)
    assert "a-file is not a directory" in refused.output  # checked before Spark runs
    # Without that check, the job runs and Spark fails writing.
    for module in (pipeline_command, dead_letters_module):
        monkeypatch.setattr(module, "check_spark_output", lambda *args: None)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    assert (
        result.output.startswith("Error: the Spark job failed: ") and "Exception" in result.output
    )
    assert len(result.output.splitlines()) == 1, result.output


def _tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> bytes)."""
    return {str(f.relative_to(path)): f.read_bytes() for f in path.rglob("*") if f.is_file()}


# What the JVM may write to a file while a test makes its writes fail for real: the
# JSON lines of ``dead_letter_store``'s export need more, its other files (the
# shuffle's, of compressible bodies) far less.
FILE_SIZE_LIMIT = 256 * 1024


def dead_letter_store(path: Path) -> None:
    """30 dead letters of 20 KB: a JSON export of them holds files over
    FILE_SIZE_LIMIT (base64 makes the bodies larger); their compressible bodies
    keep the shuffle's files under it."""
    with msgcask.open(path, max_file_size=2**20, compaction_interval=None) as store:
        orders = store.queue("orders", max_deliveries=1)
        for i in range(30):
            orders.put(b"%d" % i * 20_000)
            orders.nack(orders.get(block=False))


@contextlib.contextmanager
def files_limited(spark: Any, size: int) -> Iterator[None]:
    """While the block runs, the session's JVM may make files of ``size`` bytes at
    most (its RLIMIT_FSIZE, as `ulimit -f` sets it for a process it starts): a
    write past that fails with EFBIG, "File too large", as a full disk fails one
    with ENOSPC. (The JVM ignores SIGXFSZ, which would otherwise end it.)"""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    before = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, before[1]))
    try:
        yield
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, before)


def test_an_export_that_fails_writing_keeps_the_old_one_and_leaves_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """--overwrite writes the new export beside OUT and swaps it in once Spark
    wrote all of it: a job that fails writing leaves the old export byte for byte,
    and nothing beside it. Without --overwrite, a failed export leaves no OUT (so
    it can be run again as it was)."""
    store, out = tmp_path / "store", tmp_path / "dead"
    dead_letter_store(store)
    runner = CliRunner()
    args = ["pipeline", "dead-letters", str(store), str(out), "--format", "json"]
    assert runner.invoke(main, args).exit_code == 0
    first = _tree(out)
    assert max(map(len, first.values())) > FILE_SIZE_LIMIT  # what the limit stops
    result = runner.invoke(main, [*args, "--queue", "DLQ.orders", "--overwrite"])
    assert result.exit_code == 0, result.output
    second = _tree(out)  # another export: its part files have names of their own
    assert second.keys() != first.keys() and any(name.endswith(".json") for name in second)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dead", "store"]
    fresh = tmp_path / "fresh"
    with files_limited(spark, FILE_SIZE_LIMIT):
        overwriting = runner.invoke(main, [*args, "--overwrite"])
        creating = runner.invoke(main, [*args[:3], str(fresh), "--format", "json"])
    for result in (overwriting, creating):
        assert result.exit_code == 1, result.output
        assert "java.io.IOException: File too large" in result.output, result.output
    assert _tree(out) == second
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dead", "store"]


def test_a_relative_export_is_written_in_the_working_directory_it_was_checked_in(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JVM's working directory is the one this process had when the session
    started: after a chdir, a relative OUT is still where the checks looked (and
    so never the store they kept it from)."""
    store = tmp_path / "store"
    pinned_store(store, lambda n: 300)
    _, dlq = index_view(store)
    jvm_directory = Path(spark.sparkContext._jvm.System.getProperty("user.dir"))
    assert not (jvm_directory / "dead").exists()
    monkeypatch.chdir(tmp_path)
    assert Path.cwd() != jvm_directory
    assert export_dead_letters(spark, store, "dead", "json") == len(dlq)
    assert export_dead_letters(spark, store, "dead", "json", overwrite=True) == len(dlq)
    assert not (jvm_directory / "dead").exists()
    assert len(spark.read.json(str(tmp_path / "dead")).collect()) == len(dlq)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dead", "store"]


_JVM_STACK = re.compile(r"^\s+at [\w$.]+\(|^Caused by: |^\s*\.\.\. \d+ more|Exception:")


def test_an_export_spark_cannot_write_ends_with_one_line(spark: Any, tmp_path: Path) -> None:
    """In a process of its own, stderr and all, whose files may grow to
    FILE_SIZE_LIMIT only (as `ulimit -f 256` sets it): Spark's tasks fail writing
    the export, as on a full disk. The command says so in one line, with what to
    do, and exit status 1: no Java stack. The export it was to replace is kept."""
    store, out = tmp_path / "store", tmp_path / "dead"
    dead_letter_store(store)
    assert export_dead_letters(spark, store, out, "json") == 30  # the earlier export
    old = _tree(out)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))

    command = ["pipeline", "dead-letters", str(store), str(out), "--format", "json"]
    run = subprocess.run(
        [sys.executable, "-m", "msgcask.cli.main", *command, "--overwrite"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limited,
    )
    assert run.returncode == 1, run.stderr
    lines = [line for line in run.stderr.splitlines() if not line.startswith(JVM_STARTUP_LINES)]
    assert len(lines) == 1, run.stderr
    (said,) = lines
    assert said.startswith(f"Error: Spark could not write the export to {out}: "), said
    assert "java.io.IOException: File too large" in said and "run it again" in said, said
    assert not _JVM_STACK.search(said.split(": ", 2)[-1].replace("java.io.IOException:", "")), said
    assert _tree(out) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dead", "store"]


@pytest.mark.parametrize(
    ("master", "cause"),
    [
        ("nonsense://nowhere", "Spark takes yarn or a URL that starts with local, spark or k8s"),
        ("local[0]", "org.apache.spark.SparkException: Asked to run locally with 0 threads"),
    ],
)
def test_a_bad_master_is_a_clear_error(tmp_path: Path, master: str, cause: str) -> None:
    """In a process of its own: a session already running would be reused. The
    JVM says nothing of it on stderr (no ERROR line, no Java stack): only the
    lines it prints as it starts, then the command's error."""
    pinned_store(tmp_path, lambda n: 20)
    run = run_cli("pipeline", "audit", str(tmp_path), "--master", master)
    assert run.returncode == 1
    said = run.stderr.split(f"Error: cannot start Spark with --master {master!r}: ", 1)
    assert len(said) == 2, run.stderr
    assert said[1].startswith(cause) and len(said[1].splitlines()) == 1, said[1]
    assert [line for line in said[0].splitlines() if not line.startswith(JVM_STARTUP_LINES)] == []


def test_the_jobs_refuse_a_path_that_is_no_store(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(msgcask.Error, match="holds no msgcask data files"):
        audit(spark, str(tmp_path))
    with pytest.raises(msgcask.Error, match="not a directory"):
        dead_letters(spark, str(tmp_path / "missing"))
    pinned_store(tmp_path, lambda n: 20)
    with pytest.raises(ValueError, match="partition_bytes is a number of bytes > 0"):
        audit(spark, str(tmp_path), partition_bytes=0)


def test_the_jobs_take_a_pathlib_path_and_refuse_what_is_no_path(
    spark: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    pinned_store(store, lambda n: 300)
    _, dlq = index_view(store)
    assert audit(spark, store).totals == audit(spark, str(store)).totals
    assert dead_letters(spark, store).count() == len(dlq)
    assert export_dead_letters(spark, store, tmp_path / "dead") == len(dlq)
    assert spark.read.parquet(str(tmp_path / "dead")).count() == len(dlq)
    with pytest.raises(TypeError, match="the store is a path"):
        audit(spark, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the output is a path"):
        export_dead_letters(spark, store, None)  # type: ignore[arg-type]


def test_the_jobs_refuse_a_spark_that_is_no_session(spark: Any, tmp_path: Path) -> None:
    from test_replay import record

    from msgcask.pipeline.replay import Setting
    from msgcask.pipeline.sweep import replays, sweep

    store, rec, out = tmp_path / "store", tmp_path / "rec", tmp_path / "out"
    pinned_store(store, lambda n: 300)
    record(rec, 20)
    grid = [Setting(0.5, SMALL)]
    jobs: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (read_rows, (store,)),
        (audit, (store,)),
        (dead_letters, (store,)),
        (export_dead_letters, (store, out)),
        (sweep, (str(rec), grid)),
        (replays, (str(rec), grid, 10)),
    ]
    for not_a_session in (None, "local[2]", spark.sparkContext):
        for job, args in jobs:
            with pytest.raises(TypeError, match=r"spark is a SparkSession \(.*spark_session\(\)"):
                job(not_a_session, *args)
    assert not out.exists()


def test_the_sweep_refuses_a_bad_setting_before_spark_runs_it(spark: Any, tmp_path: Path) -> None:
    from test_replay import record

    from msgcask.pipeline.replay import Setting
    from msgcask.pipeline.sweep import sweep

    rec = str(tmp_path / "rec")
    record(Path(rec), 50)
    for bad, error in [
        (Setting(float("nan"), SMALL), "compaction_threshold must be finite"),
        (Setting(-0.5, SMALL), r"compaction_threshold must be in \(0, 1\]"),
        (Setting(0.5, 2**40), "max_file_size must be 65536 to"),
    ]:
        with pytest.raises(ValueError, match=error):
            sweep(spark, rec, [Setting(0.5, SMALL), bad])
    with pytest.raises(TypeError, match="max_file_size is a whole number of bytes"):
        sweep(spark, rec, [Setting(0.5, 65536.0)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the grid is a list of Setting"):
        sweep(spark, rec, [(0.5, SMALL)])  # type: ignore[list-item]
    rows = sweep(spark, rec, [Setting(1, SMALL)]).collect()  # type: ignore[arg-type]
    assert [(r.compaction_threshold, r.max_file_size) for r in rows] == [(1.0, SMALL)]


def test_a_task_that_fails_is_one_line_on_the_terminal_too(tmp_path: Path) -> None:
    """In a process of its own, stderr and all: the JVM's log is not the
    CliRunner's output. An ACK of an id past BIGINT fails the reading task,
    saying where it is."""
    pinned_store(tmp_path, lambda n: 20)
    newest = max(p for p in tmp_path.iterdir() if p.suffix == ".log")
    offset = newest.stat().st_size
    with open(newest, "ab") as f:
        f.write(codec.encode_ack(2**64 - 1))
    run = run_cli("pipeline", "audit", str(tmp_path))
    assert run.returncode == 1
    said = f"Error: {newest}: the ACK record at offset {offset} holds message id {2**64 - 1}"
    assert run.stderr.splitlines()[-1].startswith(said), run.stderr
    assert "Traceback" not in run.stderr and "\tat org.apache" not in run.stderr, run.stderr


_SCHEDULER_LOGS = """
from msgcask.pipeline.session import QUIET_CONF, spark_session

spark = spark_session(conf=QUIET_CONF)
jvm = spark.sparkContext._jvm
log = jvm.org.apache.logging.log4j.LogManager.getLogger(
    "org.apache.spark.scheduler.TaskSchedulerImpl"
)
turned_away = jvm.java.util.concurrent.RejectedExecutionException(
    "Task rejected from java.util.concurrent.ThreadPoolExecutor[Terminated]"
)
log.error("Exception in statusUpdate", turned_away)
log.error("a scheduler error of another kind")
spark.stop()
"""


def test_the_statuses_a_stopping_scheduler_turns_away_are_not_logged(spark_runtime: None) -> None:
    """What the scheduler logs for each task status that comes in after a failed
    job stopped the session is left out; its other errors are not. In a process
    of its own: the JVM's stderr is that process's."""
    run = subprocess.run(
        [sys.executable, "-c", _SCHEDULER_LOGS], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "statusUpdate" not in run.stderr and "Rejected" not in run.stderr, run.stderr
    said = "spark: ERROR TaskSchedulerImpl: a scheduler error of another kind"
    assert said in run.stderr, run.stderr


@pytest.mark.parametrize("partition_bytes", [None, 1], ids=["one task", "a task per file"])
def test_a_dead_letter_with_several_put_records_is_the_one_recovery_keeps(
    spark: Any, tmp_path: Path, partition_bytes: int | None
) -> None:
    """Copies of one message (only their delivery counts differ) in several
    files: the export takes the first read, oldest file first, as recovery does."""
    store = tmp_path / "store"
    store.mkdir()
    headers = codec.encode_headers({"x-dead-letter-from": "orders"})
    for file_id, counts in ((1, (2, 1)), (2, (0,)), (3, (1,))):
        puts = [codec.encode_put(7, b"DLQ.orders", 4, n, headers, b"body") for n in counts]
        header = codec.encode_file_header(fmt.KIND_JOURNAL, file_id, 1)
        (store / data_file_name(file_id)).write_bytes(header + b"".join(puts))
    rows = dead_letters(spark, str(store), partition_bytes=partition_bytes).collect()
    shutil.copytree(store, tmp_path / "opened")  # opening writes to the store
    with msgcask.open(tmp_path / "opened", compaction_interval=None) as opened:
        kept = opened.queue("DLQ.orders").get(timeout=1)
    assert kept is not None and kept.deliveries == 2 + 1  # the first record's count
    assert len(rows) == 1
    row = rows[0]
    assert (row["msg_id"], row["file_id"], row["offset"]) == (7, 1, fmt.FILE_HEADER_SIZE)
    assert row["deliveries"] == 2


def test_replays_refuse_what_their_tasks_would_fail_on_before_spark_runs_them(
    spark: Any, tmp_path: Path
) -> None:
    from test_replay import record

    from msgcask.pipeline.replay import Setting
    from msgcask.pipeline.sweep import replays

    rec = str(tmp_path / "rec")
    record(Path(rec), 20)
    grid = [Setting(0.5, SMALL)]
    for bad, error in [
        ((rec, grid, 0), ValueError("pass_every is a whole number of records > 0")),
        ((rec, [Setting(2.0, SMALL)], 10), ValueError(r"compaction_threshold must be in \(0, 1\]")),
        ((rec, [], 10), ValueError("a sweep needs at least one setting")),
        ((str(tmp_path / "missing"), grid, 10), msgcask.Error("is not a directory")),
    ]:
        with pytest.raises(type(error), match=str(error)) as refused:
            replays(spark, *bad)  # no collect(): refused before any task
        assert "Python worker" not in str(refused.value)


def test_a_conf_that_is_no_dict_of_settings_is_refused_before_spark_starts() -> None:
    from msgcask.pipeline.session import spark_session

    for conf in ([("spark.ui.enabled", "false")], "spark.ui.enabled=false", {1: "x"}):
        with pytest.raises(TypeError, match=r"conf is a dict of Spark settings \({'spark"):
            spark_session(conf=conf)  # type: ignore[arg-type]
    # A None value ended in the JVM: "must not be null", with a Java stack.
    for value in (None, ["2"]):
        with pytest.raises(
            TypeError, match=r"the value of 'spark.ui.enabled' is .*, not a str or number"
        ):
            spark_session(conf={"spark.ui.enabled": value})  # type: ignore[dict-item]


def test_a_session_on_another_master_than_the_running_ones_is_refused(spark: Any) -> None:
    # Spark runs one session per process: its builder would hand back the running
    # session, on its own master, for whatever master was asked for.
    from msgcask.pipeline.session import spark_session

    running = spark.sparkContext.master
    other = "local[1]" if running != "local[1]" else "local[2]"
    with pytest.raises(msgcask.Error) as refused:
        spark_session(other)
    said = str(refused.value)
    assert f"a Spark session on master {running!r} is running in this process" in said
    assert "stop it (spark.stop())" in said and f"pass master={running!r}" in said
    assert spark.sparkContext.master == running  # the running session is untouched
    # The same master, or none asked for, is the running session.
    assert spark_session(running) is spark
    assert spark_session() is spark


def test_an_export_under_a_file_is_refused_before_spark_runs_it(spark: Any, tmp_path: Path) -> None:
    store, a_file = tmp_path / "store", tmp_path / "notes.txt"
    pinned_store(store, lambda n: 50)
    a_file.write_text("kept")
    for out in (a_file / "dead", a_file / "deeper" / "dead"):
        with pytest.raises(ValueError, match=f"{a_file} is not a directory: give a path in"):
            export_dead_letters(spark, store, out)
    assert a_file.read_text() == "kept"
    made_on_the_way = tmp_path / "new" / "dead"
    assert export_dead_letters(spark, store, made_on_the_way) == dead_letters(spark, store).count()
    assert made_on_the_way.is_dir()


def test_a_store_named_by_a_file_uri_is_read_and_another_file_systems_is_refused(
    spark: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    pinned_store(store, lambda n: 300)
    uri = store.as_uri()
    assert audit(spark, uri).totals == audit(spark, store).totals
    rows = spark.read.format("msgcask").load(uri).count()
    assert rows == spark.read.format("msgcask").load(str(store)).count()
    with pytest.raises(ValueError, match="would destroy the store"):
        export_dead_letters(spark, uri, store / "dead")
    assert not (store / "dead").exists()
    with pytest.raises(msgcask.Error, match=r"read from a local path .* not another file system"):
        dead_letters(spark, "hdfs://namenode/store")


def test_a_conf_the_running_session_cannot_take_is_refused_and_runtime_ones_applied(
    spark: Any,
) -> None:
    # Spark's builder would hand back the running session with a warning in its
    # log, without the settings it can only take when it starts.
    from msgcask.pipeline.session import QUIET_CONF, spark_session

    asked = {
        "spark.driver.memory": "3g",  # not set in the running session
        "spark.ui.enabled": True,  # set there, to "false"
        "spark.sql.shuffle.partitions": "5",  # can change at runtime
    }
    with pytest.raises(msgcask.Error) as refused:
        spark_session(conf=asked)
    said = str(refused.value)
    assert "a Spark session is running in this process" in said
    assert "spark.driver.memory='3g' (it runs with none)" in said
    assert "spark.ui.enabled='true' (it runs with 'false')" in said
    assert "shuffle" not in said  # the runtime setting is not the problem
    assert (
        "stop it (spark.stop())" in said
        and "or leave them out of conf to use the running session" in said
    )
    # Nothing was applied: not the static settings, not the runtime one.
    assert spark.conf.get("spark.driver.memory", None) is None
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    # Static settings the running session has, with its values, are that session.
    assert spark_session(conf=QUIET_CONF) is spark
    # Runtime settings are applied to the running session, as Spark's builder does.
    # So are keys Spark does not define (Hadoop's, an application's own): the
    # builder sets them in the running session's conf too.
    own = {"spark.hadoop.msgcask.test": "a", "spark.msgcask.test.own": "b"}
    try:
        assert spark_session(conf={"spark.sql.shuffle.partitions": 3}) is spark
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        assert spark_session(conf=own) is spark
        assert [spark.conf.get(k, None) for k in own] == ["a", "b"]
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", QUIET_CONF["spark.sql.shuffle.partitions"])
        for key in own:
            spark.conf.unset(key)


def test_the_commands_say_one_of_a_thing_in_the_singular(spark: Any, tmp_path: Path) -> None:
    store, recording = tmp_path / "store", tmp_path / "recording"
    with msgcask.open(store, compaction_interval=None) as s:
        q = s.queue("orders", max_deliveries=1)
        q.put(b"x" * 100)
        q.nack(q.get(timeout=1))  # the one live message: a dead letter
    with msgcask.open(recording, compaction_interval=None, keep_data_files=True) as s:
        s.queue("orders").put(b"x" * 100)
    runner = CliRunner()
    said = runner.invoke(main, ["pipeline", "audit", str(store), "--rows", "0"])
    assert said.exit_code == 0, said.output
    assert said.output.startswith("1 data file, "), said.output
    assert "; 1 live message, " in said.output and "\n... and 1 more file (--rows" in said.output
    out = tmp_path / "dead"
    said = runner.invoke(main, ["pipeline", "dead-letters", str(store), str(out)])
    assert said.exit_code == 0 and f"1 dead letter written to {out}" in said.output, said.output
    args = ["--thresholds", "0.5", "--file-sizes", "64KiB"]
    said = runner.invoke(main, ["pipeline", "sweep", str(recording), *args])
    assert said.exit_code == 0 and "\n1 record replayed per setting" in said.output, said.output


def test_the_audit_and_export_raise_the_msgcask_error_that_stopped_their_job(
    spark: Any, tmp_path: Path
) -> None:
    """Their job runs before they return: a msgcask error a task raised is
    raised as that, not as Spark's exception holding a worker's traceback."""
    store, out = tmp_path / "store", tmp_path / "dead"
    store.mkdir()
    headers = codec.encode_headers({"x-dead-letter-from": "orders"})
    put = codec.encode_put(2**63, b"DLQ.orders", 0, 1, headers, b"body")
    (store / data_file_name(1)).write_bytes(codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1) + put)
    says = f"{store / data_file_name(1)}: the PUT record at offset 32 holds message id {2**63}"
    for job in (lambda: audit(spark, store), lambda: export_dead_letters(spark, store, out)):
        with pytest.raises(msgcask.Error) as failed:
            job()
        assert str(failed.value).startswith(says), failed.value
        assert "Traceback" not in str(failed.value)
    assert not out.exists()


def test_a_recording_named_by_a_file_uri_is_swept(spark: Any, tmp_path: Path) -> None:
    # The driver read the URI as a store's path, and every task as a relative one.
    from test_replay import record

    from msgcask.pipeline.replay import replay
    from msgcask.pipeline.sweep import settings, sweep

    rec = tmp_path / "rec"
    live = record(rec, 300)
    grid = settings([0.5], [SMALL])
    (row,) = sweep(spark, rec.as_uri(), grid, pass_every=200).collect()
    assert row["final_live_bytes"] == live
    assert row["records"] == replay(rec, grid[0], pass_every=200).records
