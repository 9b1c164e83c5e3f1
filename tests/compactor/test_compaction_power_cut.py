"""Power cuts during compaction: what reached the disk, and nothing more.

A compaction deletes files because of ACKs. If the deletion is durable and the ACKs it
relied on are not, a power cut leaves neither the message nor the ACK: a message whose
put was durable is gone although its ack never was. Nor may a durable ACK be undone by a
stray copy. The FileSystem seam here remembers, for every data file, how many bytes were
fsynced and which PUT and ACK records they hold; a "power cut" is a copy of the store
with every data file cut back to its fsynced size and no index (a power cut forces a
rebuild). Invariants, for every cut taken at random points of a compaction workload:

* an id whose ACK was ever durable is not live;
* an id whose PUT was durable and whose ACK never was is live.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt
from msgcask.store.fs import DataFile, FileSystem

MFS = 64 * 1024


class Durability:
    """What has been fsynced so far, by file path and by record."""

    def __init__(self) -> None:
        self.synced: dict[str, int] = {}  # path -> bytes known to be on disk
        self.puts: set[int] = set()
        self.acks: set[int] = set()

    def fsynced(self, f: DataFile) -> None:
        buf = f.read(0, f.size)
        self.synced[f.path] = len(buf)
        for item in codec.scan(buf, fmt.FILE_HEADER_SIZE):
            if not isinstance(item, codec.Record):
                continue
            if item.rtype == fmt.TYPE_PUT:
                self.puts.add(fmt.PUT_FIXED.unpack_from(buf, item.payload_start)[0])
            elif item.rtype == fmt.TYPE_ACK:
                self.acks.add(fmt.ACK_PAYLOAD.unpack_from(buf, item.payload_start)[0])


class TrackedFile(DataFile):
    durability: Durability

    def fsync(self) -> None:
        super().fsync()
        self.durability.fsynced(self)


class TrackingFS(FileSystem):
    def __init__(self) -> None:
        self.durability = Durability()

    def _wrap(self, path: str, fd: int, size: int) -> DataFile:
        f = TrackedFile(path, fd, size)
        f.durability = self.durability
        if size:  # a file found on open: on disk already
            self.durability.fsynced(f)
        return f

    def publish(self, handle: DataFile, path: str, *, durable: bool = True) -> None:
        old = handle.path
        super().publish(handle, path, durable=durable)
        synced = self.durability.synced.pop(old, 0)
        self.durability.synced[path] = synced

    def power_cut(self, store_dir: Path, image: Path) -> tuple[set[int], set[int]]:
        """Copy what a power cut now would leave: fsynced bytes of each data file.
        Returns the ids with a durable PUT and with a durable ACK at this moment."""
        image.mkdir()
        # A file unlinked is taken as gone (the store fsyncs the directory right after
        # its unlinks); a published file keeps what was fsynced before its rename.
        for name in os.listdir(store_dir):
            if not name.endswith(".log"):
                continue  # temp files: never published; index: rebuilt after a cut
            src = store_dir / name
            keep = self.durability.synced.get(str(src), 0)
            if keep:
                (image / name).write_bytes(src.read_bytes()[:keep])
        return set(self.durability.puts), set(self.durability.acks)


def _check_image(image: Path, puts: set[int], acks: set[int]) -> None:
    with msgcask.open(image, max_file_size=MFS, compaction_interval=None) as store:
        assert store.recovery.mode == "rebuild"
        live = {m.id for n in store.queues() for m in store.queue(n).browse()}
        back = sorted(live & acks)
        assert not back, f"messages with a durable ACK are live again: {back[:10]}"
        lost = sorted((puts - acks) - live)
        assert not lost, (
            f"{len(lost)} messages with a durable PUT and no durable ACK are gone, "
            f"e.g. {lost[:10]}: a deletion was durable before the ACK it relied on"
        )
        assert store.verify() == []


@pytest.mark.slow
@pytest.mark.parametrize("trigger", ["compact_calls", "space_pressure"])
def test_power_cut_during_compaction_loses_and_resurrects_nothing(
    tmp_path: Path, trigger: str, scaled: Callable[[int], int]
) -> None:
    # Bigger runs are more runs of the same length, each with a seed of its own: a
    # longer one would fill the capped store with dead letters nobody consumes.
    for seed in range(1, scaled(1) + 1):
        _power_cuts_during_compaction(tmp_path / f"seed{seed}", trigger, random.Random(seed))


def _power_cuts_during_compaction(tmp_path: Path, trigger: str, rnd: random.Random) -> None:
    fs = TrackingFS()
    path = tmp_path / "store"
    pressure = trigger == "space_pressure"
    # sync_interval: nothing is fsynced by the background flush; only seals, explicit
    # syncs and whatever the compactor itself makes durable.
    store = msgcask.Store(
        path,
        max_file_size=MFS,
        compaction_interval=None,
        sync_interval=3600,
        max_store_size=8 * MFS if pressure else None,
        _fs=fs,
    )
    cuts: list[tuple[Path, set[int], set[int]]] = []
    try:
        q = store.queue("work", max_deliveries=1)
        window: list[msgcask.Message] = []
        for step in range(3000):
            q.put(b"%06d|" % step * rnd.choice([20, 150, 300]))
            m = q.get(block=False)
            if step % 97 == 5:
                q.nack(m)  # to DLQ.work: a PUT and an ACK in one batch
            elif step % 7 == 3:
                window.append(m)  # acked much later, from a later file
            else:
                q.ack(m)
            if len(window) > 60:
                # The last live message of an old, sealed file is acked in the unsynced
                # head: the file may now be deleted, but only once that ACK is durable.
                q.ack(window.pop(0))
            if step % 150 == 149 and not pressure:
                store.compact(threshold=rnd.choice([0.3, 0.5, 0.9]))
            if step % 250 == 200 or step % 150 == 149 or (pressure and step % 50 == 0):
                image = tmp_path / f"cut{len(cuts)}"
                cuts.append((image, *fs.power_cut(path, image)))
        assert store.stats().compaction.files_rewritten > 0
    finally:
        store.close()
    assert len(cuts) > 20
    for image, puts, acks in cuts:
        _check_image(image, puts, acks)
