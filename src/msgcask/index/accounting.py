"""Per-file accounting: one plain record per data file.

The compactor decides everything from these numbers, so they must be exact:
``live_bytes``/``live_messages`` count PUT records of live messages in the file,
``needed_marks`` counts its ACK and DELIVER records that must outlive some other
record (an ACK whose message's PUT record is still in another file; a DELIVER
that holds a live message's current delivery count), and ``dead_puts`` counts
PUT records of consumed messages whose ACK lives in another file and which
have an ACKED entry in the index (deleting this file releases those ACKs).

Most consumed messages of a journal file need no ACKED entry: a journal
file's PUT records (but those of transactions) lie in its range of ids, from
its ``id_floor`` up to the next journal file's, so a file can keep, instead of
one entry per message, only how many of its PUT records each other file's
ACKs cancel (``acked_in``). Deleting the file releases those counts in one
step, and an ACK record without an entry is needed while the file whose range
holds its id counts ACKs in the ACK's file (see ``IdRanges``).

The records live in memory while the store is open and are written to the
``files`` table in the same LMDB transaction as the changes that produced them.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from msgcask.index.keys import FILE_KEY
from msgcask.store.format import KIND_JOURNAL

# kind retired size live_bytes live_messages needed_marks dead_puts created
# id_floor, then the number of acked_in pairs and the pairs (ACK file, count)
_FILE_VALUE: Final = struct.Struct("<BBQQQQQdQI")
_ACKED_IN: Final = struct.Struct("<II")


@dataclass(slots=True)
class FileAccount:
    """What one data file holds, by the index's count."""

    file_id: int
    kind: int
    size: int = 0
    live_bytes: int = 0
    live_messages: int = 0
    needed_marks: int = 0
    dead_puts: int = 0
    created: float = 0.0
    retired: bool = False  # deleted from the index's point of view; unlink pending
    id_floor: int = 0  # the header's: no message put in the file since has a lower id
    # ACK file -> how many consumed messages' PUT records here it cancels,
    # without ACKED entries (journal files only).
    acked_in: dict[int, int] = field(default_factory=dict)

    @property
    def reclaimable(self) -> bool:
        """Nothing in the file is needed any more: it can be deleted whole."""
        return self.live_messages == 0 and self.needed_marks == 0

    def in_id_range(self, msg_id: int) -> bool:
        """Whether a PUT record of ``msg_id`` in this file lies in its range of
        ids (always, but for a transaction's, whose id can be older than the file)."""
        return self.kind == KIND_JOURNAL and msg_id >= self.id_floor

    def pack(self) -> bytes:
        head = _FILE_VALUE.pack(
            self.kind,
            self.retired,
            self.size,
            self.live_bytes,
            self.live_messages,
            self.needed_marks,
            self.dead_puts,
            self.created,
            self.id_floor,
            len(self.acked_in),
        )
        pairs = sorted(self.acked_in.items())  # one byte form per content
        return head + b"".join(_ACKED_IN.pack(f, n) for f, n in pairs)

    @classmethod
    def unpack(cls, file_id: int, value: bytes) -> FileAccount:
        kind, retired, size, lb, lm, nm, dp, created, floor, count = _FILE_VALUE.unpack_from(value)
        acked_in = dict(_ACKED_IN.iter_unpack(value[_FILE_VALUE.size :]))
        if len(acked_in) != count:
            raise ValueError(f"file account {file_id}: {len(acked_in)} pairs, header says {count}")
        return cls(file_id, kind, size, lb, lm, nm, dp, created, bool(retired), floor, acked_in)


@dataclass
class Accounting:
    """The in-memory table of FileAccounts.

    Callers change the records in place; ``flush`` writes the ones whose packed
    form differs from what was last written, so the hot path pays for no
    change tracking.
    """

    files: dict[int, FileAccount] = field(default_factory=dict)
    _written: dict[int, bytes] = field(default_factory=dict)
    # Files that became reclaimable (nothing needed left): deleted at once by
    # the store's background flush instead of waiting for a compaction pass.
    emptied: set[int] = field(default_factory=set)
    # Victims of a running rewrite: a message in one acked meanwhile keeps an
    # ACKED entry, which the swap moves to the message's copy (a count could
    # not say which message it was).
    rewriting: set[int] = field(default_factory=set)
    # Victims retired by a swap (their copy is in): deleting one, by that pass
    # or by a later one after a failed deletion, completes a rewrite.
    swapped: set[int] = field(default_factory=set)
    # Retired files unlinked whose unlink is not durable yet (the directory
    # fsync after it failed): gone from the disk, and counted so by the
    # deletion that unlinked them, not again by the one that completes it.
    unlinked: set[int] = field(default_factory=set)

    def note(self, stats: FileAccount) -> None:
        """Call after lowering a counter: remembers the file if nothing in it is needed."""
        if not stats.live_messages and not stats.needed_marks:
            self.emptied.add(stats.file_id)

    def drop_mark(self, file_id: int) -> None:
        """One ACK/DELIVER record in ``file_id`` stopped being needed."""
        stats = self.files[file_id]
        stats.needed_marks -= 1
        self.note(stats)

    def id_ranges(self) -> IdRanges:
        return IdRanges(
            sorted(
                (a.id_floor, f)
                for f, a in self.files.items()
                if a.kind == KIND_JOURNAL and not a.retired
            )
        )

    def add(self, stats: FileAccount) -> None:
        self.files[stats.file_id] = stats

    def __getitem__(self, file_id: int) -> FileAccount:
        return self.files[file_id]

    def peek(self, file_id: int) -> FileAccount:
        return self.files[file_id]

    def forget(self, file_id: int) -> None:
        self.files.pop(file_id, None)
        self.swapped.discard(file_id)
        self.unlinked.discard(file_id)

    def flush(
        self, put: Callable[[bytes, bytes], object], delete: Callable[[bytes], object]
    ) -> None:
        """Write every changed record with ``put(key, value)`` / ``delete(key)``."""
        for file_id in [f for f in self._written if f not in self.files]:
            delete(FILE_KEY.pack(file_id))
            del self._written[file_id]
        for file_id, stats in self.files.items():
            packed = stats.pack()
            if self._written.get(file_id) != packed:
                put(FILE_KEY.pack(file_id), packed)
                self._written[file_id] = packed

    @classmethod
    def load(cls, items: list[tuple[bytes, bytes]]) -> Accounting:
        acct = cls()
        for key, value in items:
            (file_id,) = FILE_KEY.unpack(key)
            acct.files[file_id] = FileAccount.unpack(file_id, value)
            acct._written[file_id] = bytes(value)
        return acct


@dataclass(frozen=True, slots=True)
class IdRanges:
    """The journal files by id floor, to tell which one's range holds an id."""

    floors: list[tuple[int, int]]  # (id floor, file id), ascending

    def holder(self, msg_id: int) -> int | None:
        """The file whose range holds ``msg_id``: the newest with the highest
        floor not above it (a file rolled over empty shares its floor with the
        next, which got every id from that floor on). A deleted file's range
        falls to the file before it, which is harmless: its count of ACKs in a
        given file tells how many are needed, not which."""
        at = bisect.bisect_right(self.floors, (msg_id, 2**32)) - 1
        return self.floors[at][1] if at >= 0 else None
