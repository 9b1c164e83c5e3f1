"""A pipeline command without PySpark or without Java stops with one line that
says what to install, as docs/pipeline.md's set-up promises, and writes nothing.
Each command runs in a process of its own, where the runtime is hidden from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import msgcask

# Runs the command with PySpark made impossible to import, as where the spark
# extra is not installed (nothing of it in sys.modules, every import refused).
_WITHOUT_PYSPARK = """
import sys

class NoPySpark:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pyspark":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoPySpark())
from msgcask.cli.main import main

main(sys.argv[1:])
"""
NO_PYSPARK = "Error: the Spark pipeline needs PySpark: pip install 'msgcask[spark]'"
NO_JAVA = (
    "Error: the Spark pipeline needs a Java 17+ runtime and none was found (JAVA_HOME={}): "
    "install one (Debian: apt-get install openjdk-17-jre-headless"
)


@pytest.mark.parametrize("missing", ["pyspark", "java"])
@pytest.mark.parametrize("command", ["audit", "dead-letters", "sweep"])
def test_a_command_without_the_runtime_says_what_to_install(
    tmp_path: Path, missing: str, command: str
) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    # A recording is a store too: every command takes it.
    with msgcask.open(store, compaction_interval=None, keep_data_files=True) as s:
        s.queue("orders").put(b"x")
    args = [command, str(store), *([str(out)] if command == "dead-letters" else [])]
    env = dict(os.environ)
    if missing == "pyspark":
        argv = [sys.executable, "-c", _WITHOUT_PYSPARK, "pipeline", *args]
        said = NO_PYSPARK
    else:
        env["JAVA_HOME"] = str(tmp_path / "no-java")
        argv = [sys.executable, "-m", "msgcask.cli.main", "pipeline", *args]
        said = NO_JAVA.format(env["JAVA_HOME"])
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(said), run.stderr
    assert not out.exists()


def _java_saying(bin_dir: Path, first_line: str) -> Path:
    """A JAVA_HOME whose ``bin/java -version`` prints ``first_line``, as a JVM
    does (to stderr), and nothing else it can do."""
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho '{first_line}' >&2\n")
    java.chmod(0o755)
    return bin_dir.parent


@pytest.mark.parametrize(
    ("first_line", "major"),
    [('openjdk version "11.0.2" 2019-01-15', 11), ('java version "1.8.0_292"', 8)],
)
def test_a_command_with_a_java_older_than_17_says_so(
    tmp_path: Path, first_line: str, major: int
) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    with msgcask.open(store, compaction_interval=None) as s:
        s.queue("orders").put(b"x")
    java_home = _java_saying(tmp_path / "old-java" / "bin", first_line)
    env = {**os.environ, "JAVA_HOME": str(java_home)}
    argv = [sys.executable, "-m", "msgcask.cli.main", "pipeline", "dead-letters", str(store)]
    run = subprocess.run([*argv, str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stderr
    assert run.stderr == (
        "Error: the Spark pipeline needs a Java 17+ runtime, and "
        f"{java_home / 'bin' / 'java'} is Java {major}: install one (Debian: apt-get install "
        "openjdk-17-jre-headless) and set JAVA_HOME to it or put it first on PATH\n"
    )
    assert not out.exists()
