"""Replay a recorded workload on a new store under other compaction settings.

The recording is a store's own journal, kept whole: a store opened with
``keep_data_files=True`` (and so ``compaction_interval=None``) never deletes a
data file, so its journal files, from the first, hold every put, delivery and
ack in the order they happened. A replay applies them in that order to a new
store in one thread and runs the store's scheduled compaction (its background
passes) every ``pass_every`` records, and early when a pass is due, checked
every ``RECLAIM_EVERY`` records, as the store's background loop checks every
``sync_interval``; so two settings see the same workload and the same passes (a
schedule in seconds would depend on how fast each replay ran).

Bodies are replayed as zero bytes of the recorded size, with the recorded
queue, priority and headers. A delivery is replayed as a ``get`` of the
message's queue (after a ``nack`` if the recording delivered it again); a get
that returns another message than the recorded one is counted, and the replay
goes on with the message it got (the recording's consumer used a selector, or
a transaction's puts were written after later puts: a transaction takes its
ids when ``put`` is called and writes them when it commits, and the replay can
only number puts in the order they were written). An ack of a message the
recording never delivered (``purge``, ``delete_queue``) cannot be replayed,
and damaged records cannot be read: both are counted too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import msgcask
from msgcask.errors import Error, MessageTooLargeError
from msgcask.options import MAX_SYNC_INTERVAL
from msgcask.pipeline.files import DataFileInfo, list_data_files, local_directory_of, path_text
from msgcask.pipeline.rows import AT, file_rows
from msgcask.store import format as fmt

_TYPE, _MSG_ID, _QUEUE, _SIZE = AT["type"], AT["msg_id"], AT["queue"], AT["size"]
_PRIORITY, _HEADERS, _BODY_SIZE = AT["priority"], AT["headers"], AT["body_size"]
DEFAULT_PASS_EVERY = 10_000
# Records between two deletions of the files that hold nothing needed (a store
# deletes them every sync_interval: 1,000 records is about 0.1 s at the rates
# of docs/benchmarks.md).
RECLAIM_EVERY = 1000


@dataclass(frozen=True)
class Setting:
    compaction_threshold: float
    max_file_size: int


@dataclass(frozen=True)
class ReplayResult:
    """What one setting did with the recorded workload. Disk figures are data
    files only (what ``stats().data_bytes`` counts), sampled before and after
    every pass, and a last pass ends the replay; ``max_disk_over_live`` is over
    the samples with anything live, against live and needed bytes."""

    compaction_threshold: float
    max_file_size: int
    records: int
    passes: int
    max_data_bytes: int
    final_data_bytes: int
    final_live_bytes: int
    max_disk_over_live: float
    final_disk_over_live: float
    write_amplification: float
    files_rewritten: int
    bytes_copied: int
    gets_out_of_order: int
    acks_not_replayed: int
    damaged_records: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def whole_journal(recording: str | os.PathLike[str]) -> list[DataFileInfo]:
    """The recording's data files, refused with ``msgcask.Error`` unless they
    are a whole journal: journal files only, numbered from 1 without a gap."""
    files = list_data_files(path_text(recording, "the recording"))
    other = [f for f in files if f.kind != "journal"]
    missing = sorted(set(range(1, files[-1].file_id + 1)) - {f.file_id for f in files})
    if other or missing:
        what = (
            f"data file {other[0].file_id} is {other[0].kind}"
            if other
            else f"data file {missing[0]} is missing: deleted, or never made (its creation failed)"
        )
        raise Error(
            f"{recording} is not a whole journal ({what}), so it does not hold the whole "
            "workload. Record it with msgcask.open(path, keep_data_files=True, "
            "compaction_interval=None)."
        )
    return files


def replay(
    recording: str | os.PathLike[str],
    setting: Setting,
    pass_every: int = DEFAULT_PASS_EVERY,
    workdir: str | None = None,
) -> ReplayResult:
    """Replay the workload recorded at ``recording`` on a new store (in a
    temporary directory under ``workdir``, removed afterwards) with ``setting``.

    The same recording and setting give the same figures (but ``seconds``):
    the store's clock, which dates its data files for compaction's choice of
    victims by age, counts replayed records, and nothing runs in the
    background: files that hold nothing needed are deleted every
    ``RECLAIM_EVERY`` records, not every ``sync_interval`` of the wall clock
    (which is an hour here: a replay longer than that is not repeatable)."""
    if not isinstance(setting, Setting):
        raise TypeError(
            "setting is a Setting(compaction_threshold, max_file_size), "
            f"not {type(setting).__name__}: {setting!r}"
        )
    check_pass_every(pass_every)
    files = whole_journal(recording)
    recording = local_directory_of(recording, "the recording")  # a file: URI's path
    target = tempfile.mkdtemp(prefix="msgcask-replay-", dir=check_workdir(workdir, recording))
    state = _Replay(setting, pass_every)
    try:
        with msgcask.open(
            target,
            max_file_size=setting.max_file_size,
            compaction_threshold=setting.compaction_threshold,
            compaction_interval=None,
            sync="never",  # what is measured is disk use, not durability
            sync_interval=MAX_SYNC_INTERVAL,
            _clock=state.clock,
        ) as store:
            return state.run(store, files)
    except MessageTooLargeError as e:
        raise ValueError(
            f"max_file_size {setting.max_file_size} cannot hold a recorded message ({e}); "
            f"sweep file sizes of at least {largest_put(files) + fmt.FILE_HEADER_SIZE} bytes"
        ) from None
    finally:
        shutil.rmtree(target, ignore_errors=True)


def check_workdir(workdir: object, recording: str | os.PathLike[str]) -> str:
    """Where the replay's store goes (``workdir``, the temporary directory if
    None): refused (ValueError) unless it is a directory outside the recording,
    which is only ever read."""
    where = tempfile.gettempdir() if workdir is None else path_text(workdir, "workdir")
    if not os.path.isdir(where):
        raise ValueError(f"workdir {where} is not a directory: give an existing directory")
    inside, home = os.path.realpath(where), os.path.realpath(recording)
    if inside == home or inside.startswith(home + os.sep):
        raise ValueError(
            f"workdir {where} is inside the recording {recording}, which a replay only "
            "reads: give a directory outside it"
        )
    return where


def check_pass_every(pass_every: int) -> None:
    if isinstance(pass_every, bool) or not isinstance(pass_every, int) or pass_every <= 0:
        raise ValueError(f"pass_every is a whole number of records > 0, not {pass_every!r}")


def largest_put(files: list[DataFileInfo]) -> int:
    """The largest PUT record of the recording, in bytes (0 if none)."""
    return max(
        (row[_SIZE] for info in files for row in file_rows(info, False) if row[_TYPE] == "put"),
        default=0,
    )


class _Replay:
    def __init__(self, setting: Setting, pass_every: int) -> None:
        self.store: msgcask.Store
        self.setting = setting
        self.pass_every = pass_every
        self.queues: dict[str, msgcask.Queue] = {}
        self.queue_of: dict[int, str] = {}  # recorded id -> its queue
        self.recorded_id: dict[int, int] = {}  # the replay's id -> the recorded one
        self.delivered: dict[int, msgcask.Message] = {}  # recorded id -> the replay's message
        self.bodies: dict[int, bytes] = {}
        self.out_of_order = self.not_replayed = self.damaged = self.records = 0
        self.max_data = 0
        self.max_ratio = 0.0

    def clock(self) -> float:
        """The replay's time: records replayed so far."""
        return float(self.records)

    def run(self, store: msgcask.Store, files: list[DataFileInfo]) -> ReplayResult:
        self.store = store
        started = time.perf_counter()
        for info in files:
            for row in file_rows(info, payload=False):
                kind = row[_TYPE]
                if kind == "put":
                    self._put(row)
                elif kind == "deliver":
                    self._deliver(row[_MSG_ID])
                elif kind == "ack":
                    self._ack(row[_MSG_ID])
                else:
                    self.damaged += kind == "damage"
                    continue  # the file row, a MANIFEST (none in a journal), damage
                self.records += 1
                if self.records % RECLAIM_EVERY == 0:
                    # What the background loop does every sync_interval, on the
                    # replay's own clock: delete emptied files, and start the
                    # scheduled compaction early when a pass is due.
                    store._compactor.reclaim_emptied()
                    if self.records % self.pass_every and store._compactor.due():
                        self._pass()
                if self.records % self.pass_every == 0:
                    self._pass()  # what the schedule does every compaction_interval
        final = self._pass()
        live = final.live_bytes + final.needed_bytes
        return ReplayResult(
            self.setting.compaction_threshold,
            self.setting.max_file_size,
            self.records,
            final.compaction.passes,
            self.max_data,
            final.data_bytes,
            final.live_bytes,
            self.max_ratio,
            final.data_bytes / live if live else 0.0,
            final.write_amplification,
            final.compaction.files_rewritten,
            final.compaction.bytes_copied,
            self.out_of_order,
            self.not_replayed,
            self.damaged,
            time.perf_counter() - started,
        )

    def _queue(self, name: str) -> msgcask.Queue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = self.store.queue(name)
        return queue

    def _put(self, row: tuple[Any, ...]) -> None:
        size = row[_BODY_SIZE]
        body = self.bodies.get(size)
        if body is None:
            body = self.bodies[size] = bytes(size)
        new_id = self._queue(row[_QUEUE]).put(body, headers=row[_HEADERS], priority=row[_PRIORITY])
        self.queue_of[row[_MSG_ID]] = row[_QUEUE]
        self.recorded_id[new_id] = row[_MSG_ID]

    def _deliver(self, recorded: int) -> None:
        name = self.queue_of.get(recorded)
        if name is None:  # its PUT record was damaged in the recording
            self.out_of_order += 1
            return
        queue = self._queue(name)
        again = self.delivered.pop(recorded, None)
        if again is not None:
            queue.nack(again)  # the recording's consumer gave it back, then got it again
        try:
            message = queue.get(block=False)
        except msgcask.Empty:
            self.out_of_order += 1
            return
        if self.recorded_id[message.id] != recorded:
            self.out_of_order += 1
        self.delivered[recorded] = message

    def _ack(self, recorded: int) -> None:
        message = self.delivered.pop(recorded, None)
        if message is None:
            self.not_replayed += 1
            return
        self._queue(message.queue).ack(message)
        # Gone in both stores: forget it (a long recording would fill memory).
        self.queue_of.pop(recorded, None)
        self.recorded_id.pop(message.id, None)

    def _pass(self) -> Any:
        """The store's scheduled compaction, as its background job runs it:
        background passes (fewer victims a pass, files being drained left for
        later), back to back while compaction is behind. Disk use is sampled
        before (the most the setting let pile up) and after (what it came down
        to); returns the stats after."""
        self._sample()
        self.store._compact_in_background()
        return self._sample()

    def _sample(self) -> Any:
        stats = self.store.stats()
        self.max_data = max(self.max_data, stats.data_bytes)
        live = stats.live_bytes + stats.needed_bytes
        if stats.live_messages:
            self.max_ratio = max(self.max_ratio, stats.data_bytes / live)
        return stats
