"""A thread that samples a subject's disk use, RSS and compaction counters over time."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from msgcask.workloads.subjects.base import Subject

# Each sample holds these keys; the msgcask-only ones are None for peers.
STORE_KEYS = ("data_bytes", "index_bytes", "live_bytes", "live_messages", "data_files")
COMPACTION_KEYS = ("passes", "files_deleted", "files_rewritten", "bytes_copied")


def rss_bytes() -> int | None:
    """Resident set size of this process."""
    try:
        import psutil
    except ImportError:
        return _statm_rss()
    return int(psutil.Process().memory_info().rss)


def _statm_rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def anon_rss_bytes() -> int | None:
    """The anonymous part of RSS (heap, stacks): RSS minus file-backed pages such as the
    LMDB memory map, which the OS can drop like page cache (Linux ``RssAnon``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def written_bytes() -> int | None:
    """Bytes this process has caused to be written to storage so far (Linux
    ``write_bytes`` less ``cancelled_write_bytes``: pages dirtied, whether by a
    write call or through a memory map, less those of files truncated or deleted
    before they were written back). Not ``wchar``, the bytes passed to write
    calls, which leaves out msgcask's mapped write head."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                name, _, value = line.partition(":")
                fields[name] = int(value)
    except (OSError, ValueError):
        return None
    if "write_bytes" not in fields:
        return None
    return fields["write_bytes"] - fields.get("cancelled_write_bytes", 0)


class Sampler:
    """Samples every ``interval`` seconds until stopped, and once more at stop.

    ``counts`` returns (messages put, body bytes put, messages acked, body bytes
    acked) so far; live payload bytes = bytes put - bytes acked. ``on_sample``
    gets every sample (the progress bar).
    """

    def __init__(
        self,
        subject: Subject,
        t0: float,
        interval: float,
        counts: Callable[[], tuple[int, int, int, int]],
        on_sample: Callable[[dict[str, Any]], None] | None = None,
        buffers: Callable[[], int] | None = None,
    ) -> None:
        self.subject = subject
        self.t0 = t0
        self.interval = interval
        self.counts = counts
        self.on_sample = on_sample
        self.buffers = buffers
        self.samples: list[dict[str, Any]] = []
        self.compaction_events: list[float] = []  # times at which a pass completed
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="msgcask-bench-sampler", daemon=True
        )

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        put_msgs, put_bytes, acked_msgs, acked_bytes = self.counts()
        try:
            stats = self.subject.store_stats()
            disk = self.subject.disk_bytes()
        except Exception as e:  # noqa: BLE001 - a failed sample is recorded, the run goes on
            self.errors.append(f"{type(e).__name__}: {e}")
            return
        s: dict[str, Any] = {
            "t": round(time.perf_counter() - self.t0, 6),
            "disk_bytes": disk,
            "live_payload_bytes": put_bytes - acked_bytes,
            "messages_put": put_msgs,
            "messages_acked": acked_msgs,
            "rss_bytes": rss_bytes(),
            "rss_anon_bytes": anon_rss_bytes(),
            "runner_buffer_bytes": self.buffers() if self.buffers is not None else None,
        }
        comp = (stats or {}).get("compaction") or {}
        for key in STORE_KEYS:
            s[key] = (stats or {}).get(key)
        for key in COMPACTION_KEYS:
            s["compaction_" + key] = comp.get(key)
        prev = self.samples[-1]["compaction_passes"] if self.samples else None
        if (
            prev is not None
            and s["compaction_passes"] is not None
            and s["compaction_passes"] > prev
        ):
            self.compaction_events.append(s["t"])
        self.samples.append(s)
        if self.on_sample is not None:
            self.on_sample(s)
