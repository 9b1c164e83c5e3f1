"""What ``Store.stats()``, ``Store.compact()`` and ``Store.why_kept()`` return."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from msgcask.plural import acks_or_delivery_counts, counted
from msgcask.store.recovery import CorruptionReport


@dataclass(frozen=True, slots=True)
class FileStats:
    """One data file as the index accounts for it."""

    file_id: int
    kind: str  # "journal" (foreground writes) or "compacted" (compaction output)
    size: int
    live_bytes: int
    live_messages: int
    # Needed ACK and DELIVER records here: acks that must outlive the PUT records
    # they cancel elsewhere, and live messages' delivery counts. One count in the
    # index; ``Store.why_kept`` tells the two apart.
    needed_acks: int
    active: bool  # the journal's write head (never compacted)
    # Being deleted (nothing in it is needed), but still on disk, so counted in the
    # store's sizes: for a moment in a pass, or until a failed deletion is retried.
    # (Also once unlinked if the directory fsync after it failed: until a retry
    # makes the deletion durable, a power cut may bring it back.)
    retired: bool = False
    # What keeps the file whatever its counts say ("" for nothing), as the latest
    # compaction pass that tried to delete it found: damage that hides some of its
    # consumed PUT records (``hidden_puts``: deleting the file needs them all), or
    # a read error (``unreadable``). ``msgcask check`` shows where.
    damage: str = ""

    @property
    def live_ratio(self) -> float:
        return self.live_bytes / self.size if self.size else 0.0

    @property
    def kept_by(self) -> str:
        """Why the file still exists, in words ("" for the write head)."""
        if self.active:
            return "write head"
        if self.retired:
            return "nothing (being deleted)"
        parts = []
        if self.live_messages:
            parts.append(counted(self.live_messages, "live message"))
        if self.needed_acks:
            parts.append(acks_or_delivery_counts(self.needed_acks))
        if self.damage:
            parts.append(f"{self.damage}: run msgcask check")
        return ", ".join(parts) or "nothing (reclaimable)"


def hidden_puts(found: int, expected: int) -> str:
    """In words: damage hides the rest of a file's ``expected`` consumed PUT records
    (``found`` of them were read): "damage hides 1 of its 18 consumed PUT records"."""
    return f"damage hides {expected - found} of its {counted(expected, 'consumed PUT record')}"


def unreadable(reason: str) -> str:
    """In words: a file cannot be read (``reason``: the OS's, "Input/output error")."""
    return f"cannot be read ({reason})"


@dataclass(frozen=True, slots=True)
class CompactionStats:
    """Compaction activity since the store was opened."""

    passes: int = 0  # passes that ended without an error (whether or not they did anything)
    files_deleted: int = 0
    files_rewritten: int = 0
    bytes_copied: int = 0  # the passes' CompactionReport.bytes_copied
    bytes_reclaimed: int = 0
    # Passes (background, compact() or space pressure) that ended in an error, and
    # the latest such error: a background pass only logs it, so here a monitor
    # sees compaction that keeps failing while disk use grows.
    failed_passes: int = 0
    last_failure: str | None = None

    def plus(self, done: CompactionReport, passes: int = 0) -> CompactionStats:
        """These totals with what ``done`` did added (and ``passes`` more passes)."""
        return replace(
            self,
            passes=self.passes + passes,
            files_deleted=self.files_deleted + done.files_deleted,
            files_rewritten=self.files_rewritten + done.files_rewritten,
            bytes_copied=self.bytes_copied + done.bytes_copied,
            bytes_reclaimed=self.bytes_reclaimed + done.bytes_reclaimed,
        )

    def failed(self, done: CompactionReport, error: BaseException) -> CompactionStats:
        """These totals with a failed pass added: what it did before ``error``."""
        return replace(
            self.plus(done),
            failed_passes=self.failed_passes + 1,
            last_failure=f"{public_name(type(error))}: {error}",
        )


def public_name(kind: type[BaseException]) -> str:
    """The name of the nearest class of ``kind`` a caller can catch by name: not
    one internal to msgcask (a failed deletion is raised as a subclass of
    ``msgcask.Error``, and named ``Error``), but msgcask's exported errors
    (``msgcask.errors``) and every other library's classes by their own names."""
    for cls in kind.__mro__:
        internal = cls.__module__.startswith("msgcask.") and cls.__module__ != "msgcask.errors"
        if not internal:
            return cls.__name__
    return kind.__name__  # pragma: no cover - object ends every MRO


@dataclass(frozen=True, slots=True)
class StoreStats:
    disk_bytes: int  # data files + index
    data_bytes: int
    index_bytes: int
    live_bytes: int  # on-disk bytes of the records of live messages
    live_messages: int
    # ACK/DELIVER records that must be kept (``FileStats.needed_acks``, at most 23
    # bytes each): with live_bytes, what the store must retain. The space bound is
    # stated on the sum.
    needed_bytes: int
    data_files: int
    files: list[FileStats]
    bytes_written: int  # appended to data files since open (journal + every compaction copy)
    bytes_put: int  # PUT record bytes written by puts since open
    compaction: CompactionStats
    corruptions: list[CorruptionReport] = field(default_factory=list)

    @property
    def space_amplification(self) -> float:
        return self.disk_bytes / self.live_bytes if self.live_bytes else float("inf")

    @property
    def write_amplification(self) -> float:
        return self.bytes_written / self.bytes_put if self.bytes_put else 0.0


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one ``Store.compact()`` call (or one background pass) did."""

    files_deleted: int = 0  # data files deleted whole, nothing copied out of them
    files_rewritten: int = 0  # data files deleted once what they held was copied
    # Bytes of the compacted files the pass added to the store (as stats().files
    # lists them). A copy it wrote and removed again (its victims' counts were
    # found wrong before the swap) is not counted: the pass copied nothing into
    # the store; stats().bytes_written still counts its bytes, as written.
    bytes_copied: int = 0
    # Bytes of the data files deleted, of both kinds: what the pass freed, never
    # negative (the copies it wrote are bytes_copied, not subtracted here).
    # Files count once, by the pass (or deletion between passes) that removes them
    # from the disk: files a failed deletion left count when a later one removes them.
    bytes_reclaimed: int = 0
    seconds: float = 0.0

    def plus(self, done: CompactionReport) -> CompactionReport:
        """This report with the files and bytes of ``done`` added."""
        return CompactionReport(
            self.files_deleted + done.files_deleted,
            self.files_rewritten + done.files_rewritten,
            self.bytes_copied + done.bytes_copied,
            self.bytes_reclaimed + done.bytes_reclaimed,
            self.seconds,
        )


@dataclass(frozen=True, slots=True)
class KeptReport:
    """Why a data file cannot be deleted yet (``Store.why_kept``)."""

    file_id: int
    live_messages: list[tuple[str, int]]  # (queue, message id) whose record is here
    needed_acks: list[tuple[int, int]]  # (message id, file holding its PUT record)
    needed_deliveries: list[int]  # message ids whose delivery count is recorded here
    active: bool
    # Damage that hides some of its consumed PUT records (``hidden_puts``): the
    # file can be deleted only once they are all found ("" if none is hidden).
    damage: str = ""

    @property
    def reclaimable(self) -> bool:
        return not (
            self.active
            or self.live_messages
            or self.needed_acks
            or self.needed_deliveries
            or self.damage
        )
