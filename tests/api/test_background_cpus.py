"""The ``background_cpus`` setting: the store's flush thread and its background
compaction passes run on the CPUs named, the opener's thread stays where it was,
and a bad value is refused before anything is created."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

import msgcask
from msgcask.options import Options

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="CPU affinity needs Linux"
)


def _two_cpus() -> list[int]:
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip(f"needs two CPUs to tell a kept thread from a free one; has {allowed}")
    return allowed


@pytest.mark.parametrize(
    ("value", "error", "says"),
    [
        ("1", TypeError, "collection of CPU numbers"),
        (1, TypeError, "collection of CPU numbers"),
        ([1.0], TypeError, "CPU numbers (ints), got float"),
        ([True], TypeError, "got bool"),
        ([], ValueError, "at least one CPU"),
        ([-1], ValueError, "CPUs [-1]"),
        ([4096], ValueError, "CPUs [4096]"),
        ([0, 4096], ValueError, "CPUs [4096]"),
        ([2**31 - 2], ValueError, f"CPUs [{2**31 - 2}]"),
        ([2**70], ValueError, f"CPUs [{2**70}]"),
    ],
)
def test_a_bad_value_is_refused_and_nothing_is_created(
    tmp_path: Path, value: object, error: type[Exception], says: str
) -> None:
    path = tmp_path / "store"
    with pytest.raises(error, match="background_cpus") as caught:
        msgcask.open(path, background_cpus=value)
    assert says in str(caught.value)
    assert not path.exists()


def test_without_affinity_calls_the_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_setaffinity")
    with pytest.raises(ValueError, match="needs Linux"):
        Options(background_cpus=[0])
    assert Options(background_cpus=None).background_cpus is None


def test_any_collection_is_kept_as_a_frozenset() -> None:
    cpu = min(os.sched_getaffinity(0))
    assert Options(background_cpus=[cpu, cpu]).background_cpus == frozenset({cpu})
    assert Options(background_cpus=iter((cpu,))).background_cpus == frozenset({cpu})


def test_the_flush_thread_and_the_passes_run_on_the_cpus_named(tmp_path: Path) -> None:
    allowed = _two_cpus()
    cpu = allowed[-1]
    seen: list[set[int]] = []
    ran = threading.Event()
    with msgcask.open(tmp_path / "s", background_cpus={cpu}, compaction_interval=0.05) as store:
        inner = store._compact_in_background

        def recording() -> None:
            seen.append(os.sched_getaffinity(0))
            ran.set()
            inner()

        store._compact_in_background = recording  # type: ignore[method-assign]
        assert ran.wait(10), "no background pass ran within 10 s"
        flusher = store._flusher
        assert flusher.native_id is not None
        assert os.sched_getaffinity(flusher.native_id) == {cpu}
        assert seen[0] == {cpu}
        # The opener's thread, and so the application's, runs where it did.
        assert sorted(os.sched_getaffinity(0)) == allowed
        q = store.queue("q")
        q.put(b"works")
        q.ack(q.get(timeout=5))


def test_an_opener_kept_on_one_cpu_may_name_another(tmp_path: Path) -> None:
    allowed = _two_cpus()
    mine, other = allowed[0], allowed[-1]
    result: list[object] = []

    def opener() -> None:
        os.sched_setaffinity(0, {mine})
        try:
            with msgcask.open(tmp_path / "s", background_cpus=[other]) as store:
                assert store._flusher.native_id is not None
                result.append(os.sched_getaffinity(store._flusher.native_id))
                result.append(os.sched_getaffinity(0))
        except BaseException as e:
            result.append(e)

    t = threading.Thread(target=opener)
    t.start()
    t.join()
    assert result == [{other}, {mine}]


def test_in_a_confined_process_the_store_threads_keep_to_background_cpus(
    tmp_path: Path,
) -> None:
    # Confining is process-wide: in a child process.
    allowed = _two_cpus()
    child = textwrap.dedent(
        """
        import json, os, sys, msgcask
        msgcask.confine_to_one_cpu(int(sys.argv[2]))
        with msgcask.open(sys.argv[1], background_cpus={int(sys.argv[3])}) as store:
            flusher = sorted(os.sched_getaffinity(store._flusher.native_id))
            print(json.dumps([flusher, sorted(os.sched_getaffinity(0))]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path / "s"), str(allowed[0]), str(allowed[-1])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout) == [[allowed[-1]], [allowed[0]]]


def test_by_default_background_threads_run_where_the_opener_may(tmp_path: Path) -> None:
    allowed = _two_cpus()
    with msgcask.open(tmp_path / "s") as store:
        assert store.options.background_cpus is None
        assert store._flusher.native_id is not None
        assert sorted(os.sched_getaffinity(store._flusher.native_id)) == allowed


def test_cpus_that_cannot_be_kept_are_logged_once_and_the_store_runs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The check at open passes; the CPU is gone by the time the threads start.
    real = os.sched_setaffinity

    def refuse_but_in_the_check(pid: int, cpus: Iterable[int]) -> None:
        if threading.current_thread().name != "msgcask-cpu-check":
            raise OSError(22, "Invalid argument")
        real(pid, cpus)

    monkeypatch.setattr(os, "sched_setaffinity", refuse_but_in_the_check)
    cpu = min(os.sched_getaffinity(0))
    caplog.set_level(logging.WARNING, logger="msgcask")
    runs = threading.Semaphore(0)
    threads: set[int] = set()
    with msgcask.open(tmp_path / "s", background_cpus={cpu}, compaction_interval=0.02) as store:
        inner = store._compact_in_background

        def counting() -> None:
            threads.add(threading.get_ident())
            runs.release()
            inner()

        store._compact_in_background = counting  # type: ignore[method-assign]
        for _ in range(5):
            assert runs.acquire(timeout=10), "background passes stopped running"
        deadline = time.monotonic() + 10
        while "the background flush keeps the CPUs it had" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.01)
        assert "Invalid argument" in caplog.text
        # Once per thread of the scheduler's pool, not once per pass (one more
        # thread may have run a pass before the count began).
        warned = caplog.text.count("background compaction keeps the CPUs it had")
        assert len(threads) < 5, threads
        assert 1 <= warned <= len(threads) + 1, caplog.text
        q = store.queue("q")
        q.put(b"still works")
        assert q.get(timeout=5).body == b"still works"
