"""Where the pipeline may write, and what a failed Spark job says; no Spark needed."""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

import msgcask
from child_process import run_cli
from disk_files import listdir_refusing
from msgcask.pipeline.failures import job_failure
from msgcask.pipeline.outputs import check_report, check_spark_output, local_path


@pytest.mark.parametrize(
    ("out", "path"),
    [
        ("/data/dead", "/data/dead"),
        ("dead", "dead"),
        ("file:///data/dead", "/data/dead"),
        ("file://localhost/data/dead", "/data/dead"),
        ("file:/data/dead", "/data/dead"),
        # Taken as Hadoop takes it: literally.
        ("FILE:///data/a%20b", "/data/a%20b"),
        ("file:///data/st#1?x", "/data/st#1?x"),
        ("hdfs://namenode/dead", None),
        ("s3a://bucket/dead", None),
    ],
)
def test_local_path_of_an_output(out: str, path: str | None) -> None:
    assert local_path(out) == path


def test_a_report_path_is_local_even_with_a_colon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver writes it with open(): "ru:n/x" is a relative path, not a URI.
    monkeypatch.chdir(tmp_path)
    os.mkdir("ru:n")
    with pytest.raises(ValueError, match="would destroy the store"):
        check_report("ru:n", "ru:n/0000000001.log")


def test_a_uri_is_compared_with_the_store_literally(tmp_path: Path) -> None:
    for name in ("st%41", "st#1", "a b"):
        store = tmp_path / name
        store.mkdir()
        with pytest.raises(ValueError, match="would destroy the store"):
            check_spark_output(str(store), f"file://{store}", overwrite=True)
    # Spark writes "a%20b" for this URI, not the store "a b".
    check_spark_output(str(tmp_path / "a b"), f"file://{tmp_path}/a%20b", overwrite=False)


def test_a_spark_output_may_not_overlap_the_store_in_any_spelling(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    for out in (
        f"file://{store}",
        f"file://{store}/0000000001.log",
        f"file://{tmp_path}",
        f"{store}/../store/x",
    ):
        with pytest.raises(ValueError, match="would destroy the store"):
            check_spark_output(str(store), out, overwrite=True)
    check_spark_output(str(store), str(tmp_path / "elsewhere"), overwrite=False)
    check_spark_output(str(store), "hdfs://namenode/tmp/store", overwrite=False)
    (tmp_path / "taken").mkdir()
    with pytest.raises(ValueError, match="exists"):
        check_spark_output(str(store), f"file://{tmp_path}/taken", overwrite=False)


def test_a_report_is_tried_before_the_job_and_nothing_is_left(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    with pytest.raises(ValueError, match="would destroy the store"):
        check_report(str(store), str(store / "0000000001.log"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "nowhere" / "report.json")
    for odd, says in (("elsewhere", "is a directory"), ("link", "is a link to nothing")):
        with pytest.raises(ValueError, match=says):
            check_report(str(store), str(tmp_path / odd))
    assert (tmp_path / "link").is_symlink() and not (tmp_path / "nowhere").exists()
    # A device or a pipe is taken as it is, and not opened now: opening the pipe
    # would wait for a reader.
    os.mkfifo(tmp_path / "pipe")
    done: list[str] = []

    def check_both() -> None:
        for taken in (str(tmp_path / "pipe"), "/dev/null"):
            check_report(str(store), taken)
            done.append(taken)

    checking = threading.Thread(target=check_both, daemon=True)
    checking.start()
    checking.join(30)
    assert done == [str(tmp_path / "pipe"), "/dev/null"], f"check_report waited: {done}"
    with pytest.raises(ValueError, match="cannot be written"):
        check_report(str(store), "/proc/report.json")
    report = tmp_path / "report.json"
    check_report(str(store), str(report))
    assert not report.exists()  # tried, then taken away
    report.write_text("kept")
    check_report(str(store), str(report))
    assert report.read_text() == "kept"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["audit", "{store}", "--json", ""], "the report's path is empty: give a file's path"),
        (["sweep", "{store}", "--json", ""], "the report's path is empty: give a file's path"),
        (["audit", "{store}", "--json", "{file}/a.json"], "is not a directory: give a path in"),
        (["dead-letters", "{store}", ""], "the output's path is empty: give the directory"),
        # Spark would fail every task making it, each with a Java stack in the log.
        (["dead-letters", "{store}", "/proc/dead"], "/proc/dead cannot be written: No such file"),
        (["dead-letters", "{store}", "/proc/new/dead"], "/proc/new/dead cannot be written"),
        # --overwrite replaces OUT whole: not a file, nor a directory of other files.
        (["dead-letters", "{store}", "{file}", "--overwrite"], "not a directory an export wrote"),
        (["dead-letters", "{store}", "{store}/..", "--overwrite"], "would destroy the store"),
        (["dead-letters", "{store}", "{home}", "--overwrite"], "holds files no export writes"),
    ],
)
def test_an_empty_or_impossible_output_path_is_refused_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    # An empty --json was taken for none: the job ran and wrote no report.
    import msgcask.cli.pipeline as cli_pipeline
    from msgcask.cli.main import main

    def no_spark(master: str) -> None:
        raise AssertionError("Spark started: the path should have been refused first")

    monkeypatch.setattr(cli_pipeline, "_spark", no_spark)
    store = tmp_path / "store"
    with msgcask.open(store, compaction_interval=None) as s:
        s.queue("q").put(b"x")
    afile = tmp_path / "afile"
    afile.write_text("kept")
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("kept")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["pipeline", *(a.format(store=store, file=afile, home=home) for a in args)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code in (1, 2) and isinstance(result.exception, SystemExit), result.output
    assert says in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert afile.read_text() == "kept"
    assert [p.name for p in home.iterdir()] == ["notes.txt"]


def test_an_empty_store_or_recording_path_is_refused_not_taken_for_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As msgcask.open("") is: "" would read whatever store the process runs in."""
    from msgcask.pipeline.dead_letters import export_dead_letters
    from msgcask.pipeline.live import read_rows
    from msgcask.pipeline.replay import Setting, replay

    with msgcask.open(tmp_path, compaction_interval=None) as s:
        s.queue("q").put(b"x")
    monkeypatch.chdir(tmp_path)  # a store, which "" would have named
    with pytest.raises(ValueError, match=r"^the store's path is empty: give its directory$"):
        export_dead_letters(None, "", str(tmp_path.parent / "out"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^the store's path is empty"):
        read_rows(None, "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^the recording's path is empty"):
        replay("", Setting(0.5, 64 * 1024))
    assert not (tmp_path.parent / "out").exists()


def test_an_export_refuses_an_overwrite_that_is_no_bool(tmp_path: Path) -> None:
    """Checked before Spark is needed: "false" is true, and would delete OUT."""
    from msgcask.pipeline.dead_letters import export_dead_letters

    store, out = tmp_path / "store", tmp_path / "out"
    with msgcask.open(store, compaction_interval=None) as s:
        s.queue("q").put(b"x")
    out.mkdir()
    (out / "kept").write_text("kept")
    for bad in ("false", 0, None):
        with pytest.raises(TypeError, match="overwrite is True or False"):
            export_dead_letters(None, store, out, overwrite=bad)  # type: ignore[arg-type]
    assert (out / "kept").read_text() == "kept"


SPARK_EXPORT = [
    "part-00000-4c1e-c000.json",
    ".part-00000-4c1e-c000.json.crc",
    "_SUCCESS",
    "._SUCCESS.crc",
    "_temporary",
]


def test_an_overwrite_is_refused_where_it_would_delete_more_than_an_export(
    tmp_path: Path,
) -> None:
    """--overwrite replaces the whole directory: a mistyped OUT (".", a home
    directory) must keep its files."""
    store = tmp_path / "store"
    store.mkdir()
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name in SPARK_EXPORT:
        (earlier / name).write_text("")
    check_spark_output(str(store), str(earlier), overwrite=True)
    (tmp_path / "empty").mkdir()
    check_spark_output(str(store), str(tmp_path / "empty"), overwrite=True)

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in [*SPARK_EXPORT, "notes.txt", "thesis.tex", "a", "b"]:
        (mixed / name).write_text("")
    with pytest.raises(ValueError) as refused:
        check_spark_output(str(store), f"file://{mixed}", overwrite=True)
    assert str(refused.value) == (
        f"file://{mixed} holds files no export writes ('a', 'b', 'notes.txt', ...), and "
        "overwriting replaces the whole directory: choose another path, or empty it first"
    )
    (tmp_path / "afile").write_text("kept")
    with pytest.raises(ValueError, match="afile is not a directory an export wrote"):
        check_spark_output(str(store), str(tmp_path / "afile"), overwrite=True)


def _spark_error(module: str, name: str, text: str) -> Exception:
    """An exception as PySpark raises one: only its module, name and text matter."""
    return type(name, (Exception,), {"__module__": module})(text)


WORKER_TRACEBACK = """
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/worker.py", line 1247, in main
    process()
  File "/src/msgcask/pipeline/rows.py", line 70, in file_rows
    raise Error(
msgcask.errors.Error: data file 12 was deleted while the store was being read: run it again
"""

JVM_TRACE = """An error occurred while calling o93.json.
: org.apache.hadoop.fs.ParentNotDirectoryException: /tmp/a-file (is not a directory)
\tat org.apache.hadoop.fs.RawLocalFileSystem.mkOneDirWithMode(RawLocalFileSystem.java:709)
\tat java.base/java.lang.Thread.run(Thread.java:840)
"""


def test_a_failed_job_says_one_line() -> None:
    worker = _spark_error("pyspark.errors.exceptions.captured", "PythonException", WORKER_TRACEBACK)
    failure = job_failure(worker)
    assert isinstance(failure, msgcask.Error)
    assert str(failure) == "data file 12 was deleted while the store was being read: run it again"
    for raised in ("ZeroDivisionError: division by zero", "AssertionError", "struct.error: short"):
        other = WORKER_TRACEBACK.replace(WORKER_TRACEBACK.splitlines()[-1], raised)
        said = str(job_failure(_spark_error("pyspark.errors", "PythonException", other)))
        assert said == f"the Spark job failed in a worker: {raised}"
    # A JVM failure that quotes the worker's traceback: the worker's error is the cause.
    quoting = _spark_error(
        "py4j.protocol",
        "Py4JJavaError",
        "An error occurred while calling o93.json.\n: org.apache.spark.SparkException: Job "
        "aborted due to stage failure: Task 0 failed: org.apache.spark.api.python."
        "PythonException: Traceback (most recent call last):"
        + WORKER_TRACEBACK.split("(most recent call last):", 1)[1]
        + "\tat org.apache.spark.api.python.BasePythonRunner.run(PythonRunner.scala:572)\n",
    )
    assert str(job_failure(quoting)) == str(failure)
    jvm = job_failure(_spark_error("py4j.protocol", "Py4JJavaError", JVM_TRACE))
    assert str(jvm) == (
        "the Spark job failed: org.apache.hadoop.fs.ParentNotDirectoryException: "
        "/tmp/a-file (is not a directory)"
    )
    captured = _spark_error(
        "pyspark.errors.exceptions.captured",
        "IllegalArgumentException",
        "java.net.URISyntaxException: Relative path in absolute URI: dl:x",
    )
    assert "Relative path in absolute URI: dl:x" in str(job_failure(captured))
    bare = WORKER_TRACEBACK.replace(WORKER_TRACEBACK.splitlines()[-1], "msgcask.errors.Error")
    assert str(job_failure(_spark_error("pyspark.errors", "PythonException", bare))) == "Error"
    assert job_failure(ValueError("not Spark's")) is None


# What PySpark raises when a task fails writing an export (a Py4JJavaError), cut short.
WRITE_TRACE = """An error occurred while calling o185.json.
: org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows to file:/x/.dead.msgcask-new-1/_temporary/0/part-00001-c000.json. SQLSTATE: 58030
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.taskFailedWhileWritingRowsError(QueryExecutionErrors.scala:823)
\tSuppressed: org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows to file:/x/.dead.msgcask-new-1. SQLSTATE: 58030
\t\t... 1 more
\tCaused by: org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device
\t\t... 21 more
\tCaused by: java.io.IOException: Suppressed, not the cause
\t\t... 43 more
Caused by: org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device
\tat org.apache.hadoop.fs.RawLocalFileSystem$LocalFSFileOutputStream.write(RawLocalFileSystem.java:549)
\t... 1 more
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
\t... 52 more
"""


def test_a_failed_write_is_its_root_cause() -> None:
    from msgcask.pipeline.failures import write_failure

    failed = _spark_error("py4j.protocol", "Py4JJavaError", WRITE_TRACE)
    assert write_failure(failed) == "java.io.IOException: No space left on device"
    causeless = WRITE_TRACE.split("\tSuppressed:")[0]
    assert write_failure(_spark_error("py4j.protocol", "Py4JJavaError", causeless)) == (
        "org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows "
        "to file:/x/.dead.msgcask-new-1/_temporary/0/part-00001-c000.json. SQLSTATE: 58030"
    )
    # Other failures are not a write's, nor is what Spark did not raise.
    assert write_failure(_spark_error("py4j.protocol", "Py4JJavaError", JVM_TRACE)) is None
    assert write_failure(OSError(WRITE_TRACE)) is None


@pytest.mark.parametrize(
    "args",
    [["audit", "{store}"], ["dead-letters", "{store}", "{out}"], ["sweep", "{store}"]],
    ids=["audit", "dead-letters", "sweep"],
)
def test_a_store_directory_that_cannot_be_listed_is_refused_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    from click.testing import CliRunner

    from msgcask.cli.main import main

    store, out = tmp_path / "store", tmp_path / "out"
    with msgcask.open(store, compaction_interval=None, keep_data_files=True) as s:
        s.queue("q").put(b"x")
    monkeypatch.setattr(os, "listdir", listdir_refusing(store))
    argv = ["pipeline", *(a.format(store=store, out=out) for a in args)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert f"cannot list {store}: Permission denied" in result.output
    assert "Check the permissions" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("queues", "error", "says"),
    [
        ([], ValueError, "names no queue"),
        ([""], ValueError, "must not be empty"),
        (["DLQ.q", "a\0b"], ValueError, "NUL"),
        (["x" * 256], ValueError, "at most 255"),
        ("DLQ.q", TypeError, "a list of queue names"),
        ([b"DLQ.q"], TypeError, "must be a str"),
    ],
    ids=["empty-list", "empty-name", "nul", "too-long", "one-str", "bytes"],
)
def test_an_export_refuses_queues_no_store_can_have_before_spark(
    tmp_path: Path, queues: object, error: type[Exception], says: str
) -> None:
    """Checked before Spark is needed: no queue can match them, so every such
    export would be empty (and ``[]`` would export by the headers instead)."""
    from msgcask.pipeline.dead_letters import dead_letters, export_dead_letters

    store, out = tmp_path / "store", tmp_path / "out"
    with msgcask.open(store, compaction_interval=None) as s:
        s.queue("q").put(b"x")
    with pytest.raises(error, match=says):
        export_dead_letters(None, store, out, queues=queues)  # type: ignore[arg-type]
    with pytest.raises(error, match=says):
        dead_letters(None, store, queues)  # type: ignore[arg-type]
    assert not out.exists()


def test_the_dead_letters_command_refuses_an_empty_queue_name_before_spark(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from msgcask.cli.main import main

    store, out = tmp_path / "store", tmp_path / "out"
    with msgcask.open(store, compaction_interval=None) as s:
        s.queue("q").put(b"x")
    argv = ["pipeline", "dead-letters", str(store), str(out), "--queue", "DLQ.q", "--queue", ""]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert "Invalid value for --queue: queue name must not be empty" in result.output
    assert not out.exists()


@pytest.mark.parametrize("flag", ["yes", "true", 1, None], ids=["yes", "true", "one", "none"])
def test_read_rows_refuses_a_flag_that_is_no_bool_before_spark(
    tmp_path: Path, flag: object
) -> None:
    """Else Spark's planner fails with the source's traceback, or takes "true" for True."""
    from msgcask.pipeline.live import read_rows

    store = tmp_path / "store"
    with msgcask.open(store, compaction_interval=None) as s:
        s.queue("q").put(b"x")
    with pytest.raises(TypeError, match="payload is True or False"):
        read_rows(None, store, payload=flag)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deleted_rows is True or False"):
        read_rows(None, store, deleted_rows=flag)  # type: ignore[arg-type]


def test_a_master_spark_would_refuse_is_refused_before_the_jvm_starts() -> None:
    from msgcask.pipeline.session import spark_session

    with pytest.raises(ValueError, match="Spark takes yarn or a URL that starts with local"):
        spark_session("nonsense://nowhere")
    with pytest.raises(TypeError, match="the Spark master is a URL"):
        spark_session(7077)  # type: ignore[arg-type]


def _port_nobody_listens_on() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("master", "said"),
    [
        ("spark://:7077", "names no host"),
        ("spark://host:port", "'host:port' in 'spark://host:port' is not host:port"),
        ("spark://a:7077,b:99999", "'b:99999' in 'spark://a:7077,b:99999' is not host:port"),
    ],
)
def test_a_standalone_master_url_that_is_not_host_port_is_refused(master: str, said: str) -> None:
    from msgcask.pipeline.session import spark_session

    with pytest.raises(ValueError, match=re.escape(said)):
        spark_session(master)


def test_a_standalone_master_that_does_not_answer_is_the_commands_one_line_error(
    tmp_path: Path,
) -> None:
    """In a process of its own, as a user runs it: the error comes before a JVM
    starts (none of its start-up lines), not after Spark's minute of retries."""
    store = tmp_path / "store"
    with msgcask.open(store, compaction_interval=None) as s:
        s.queue("q").put(b"x")
    port = _port_nobody_listens_on()
    master = f"spark://127.0.0.1:{port}"
    run = run_cli("pipeline", "audit", str(store), "--master", master)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"Error: no Spark master answers at 127.0.0.1:{port} (Connection refused): "
        f"start the master, or check the URL {master!r}"
    ]


def test_a_standalone_url_answers_if_any_of_its_masters_does() -> None:
    from msgcask.pipeline.session import check_master_answers

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        live = listening.getsockname()[1]
        dead = _port_nobody_listens_on()
        check_master_answers(f"spark://127.0.0.1:{dead},127.0.0.1:{live}")
        with pytest.raises(msgcask.Error, match=f"127.0.0.1:{dead} .*127.0.0.1:{dead}"):
            check_master_answers(f"spark://127.0.0.1:{dead},127.0.0.1:{dead}")
