"""Per-file accounting: one plain record per data file.

The compactor decides everything from these numbers, so they must be exact:
``live_bytes``/``live_messages`` count PUT records of live messages in the file,
``needed_marks`` counts its ACK and DELIVER records that must outlive some other
record (an ACK whose message's PUT record is still in another file; a DELIVER
that holds a live message's current delivery count), and ``dead_puts`` counts
PUT records of consumed messages whose ACK lives in another file (deleting
this file releases those ACKs).

The records live in memory while the store is open and are written to the
``files`` table in the same LMDB transaction as the changes that produced them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from msgcask.index.keys import FILE_KEY

_FILE_VALUE: Final = struct.Struct("<BBQQQQQd")


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

    @property
    def reclaimable(self) -> bool:
        """Nothing in the file is needed any more: it can be deleted whole."""
        return self.live_messages == 0 and self.needed_marks == 0

    def pack(self) -> bytes:
        return _FILE_VALUE.pack(
            self.kind,
            self.retired,
            self.size,
            self.live_bytes,
            self.live_messages,
            self.needed_marks,
            self.dead_puts,
            self.created,
        )

    @classmethod
    def unpack(cls, file_id: int, value: bytes) -> FileAccount:
        kind, retired, size, lb, lm, nm, dp, created = _FILE_VALUE.unpack(value)
        return cls(file_id, kind, size, lb, lm, nm, dp, created, bool(retired))


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

    def note(self, stats: FileAccount) -> None:
        """Call after lowering a counter: remembers the file if nothing in it is needed."""
        if not stats.live_messages and not stats.needed_marks:
            self.emptied.add(stats.file_id)

    def drop_mark(self, file_id: int) -> None:
        """One ACK/DELIVER record in ``file_id`` stopped being needed."""
        stats = self.files[file_id]
        stats.needed_marks -= 1
        self.note(stats)

    def add(self, stats: FileAccount) -> None:
        self.files[stats.file_id] = stats

    def __getitem__(self, file_id: int) -> FileAccount:
        return self.files[file_id]

    def peek(self, file_id: int) -> FileAccount:
        return self.files[file_id]

    def forget(self, file_id: int) -> None:
        self.files.pop(file_id, None)

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
