"""Which files to compact, in what order, within which budget. Pure: no I/O.

Two kinds of knob, as in Bitcask: triggers decide *whether* a pass runs
(``compaction_interval``, space pressure, ``compact()``), thresholds decide
*which* files it touches. The threshold is the user's; the order is ours:

- a file with nothing needed in it is deleted whole, at no copying cost;
- a file whose live fraction is below the threshold is rewritten, if that
  frees at least a minimum gain (1/64 of a data file, at least 4 KiB); victims are
  taken in order of benefit/cost as in log-structured file systems,
  ``(1 - u) * age / (1 + u)`` for live fraction ``u``: space freed per byte
  copied, weighted by age so that files still dying (young) are left to die
  and cold files are compacted once rather than again and again;
- small sealed files (each pass writes a new compacted file) are merged, so
  their number stays bounded however many passes run;
- victims are added while their copying cost fits the byte budget and their
  sizes fit the read budget (at least one victim per pass, so a pass always
  makes progress). Victims are deleted only when their pass ends, so the read
  budget keeps passes short and space coming back steadily. However small they
  are, no more are taken than a MANIFEST that recovery can read names.
"""

from __future__ import annotations

from dataclasses import dataclass

from msgcask.store import format as fmt
from msgcask.store.manifest_rule import MAX_MANIFEST_VICTIMS

# An ACK (21 bytes) or DELIVER (23 bytes) record carried forward costs at most this.
MARK_COST = fmt.RECORD_HEADER_SIZE + fmt.DELIVER_PAYLOAD.size


def copy_cost(live_bytes: int, needed_marks: int) -> int:
    """Bytes a rewrite copies for a file's live records and needed marks."""
    return live_bytes + needed_marks * MARK_COST


@dataclass(frozen=True, slots=True)
class FileView:
    """What the policy knows of a data file."""

    file_id: int
    size: int
    live_bytes: int
    live_messages: int
    needed_marks: int
    age: float  # seconds since the file was created
    active: bool  # the journal's write head: never touched

    @property
    def reclaimable(self) -> bool:
        return not self.active and self.live_messages == 0 and self.needed_marks == 0

    @property
    def copy_cost(self) -> int:
        return copy_cost(self.live_bytes, self.needed_marks)

    @property
    def live_ratio(self) -> float:
        return self.copy_cost / self.size if self.size else 0.0

    @property
    def dead_bytes(self) -> int:
        return max(self.size - self.copy_cost, 0)


@dataclass(frozen=True, slots=True)
class Plan:
    reclaim: list[int]  # delete whole
    rewrite: list[int]  # copy what is needed, then delete

    def __bool__(self) -> bool:
        return bool(self.reclaim or self.rewrite)


def sparse_dead_bytes(files: list[FileView], threshold: float, min_gain: int) -> int:
    """Dead bytes a pass at ``threshold`` could free by rewriting (the trigger
    that starts a pass early)."""
    return sum(
        f.dead_bytes
        for f in files
        if not f.active and f.live_ratio < threshold and f.dead_bytes >= min_gain
    )


def behind(files: list[FileView], threshold: float, min_gain: int, max_file_size: int) -> bool:
    """Whether passes have at least two data files' worth of bytes to free
    (whole deletable files, and dead bytes of files worth rewriting): compaction
    should then take the CPU it needs rather than step aside, or the work left
    would grow with the traffic, and disk with it."""
    # A deletable file counts whole here: nothing in it is needed.
    return sparse_dead_bytes(files, threshold, min_gain) >= 2 * max_file_size


# Data files' worth of bytes over (live + needed) / threshold at which disk use
# counts as near the space bound (a few files over it; see docs/tuning.md).
NEAR_BOUND_FILES = 2


def near_bound(data_bytes: int, needed_bytes: int, threshold: float, max_file_size: int) -> bool:
    """Whether the data files hold more than ``NEAR_BOUND_FILES`` data files beyond
    what the space bound allows for ``needed_bytes`` (live records and needed
    ACK/DELIVER records) at ``threshold``: a drain can make files sparse faster
    than periodic checks notice, and a pass should start at once."""
    return data_bytes > needed_bytes / threshold + NEAR_BOUND_FILES * max_file_size


def reclaimable_bytes(files: list[FileView], min_gain: int) -> int:
    """An upper bound of what passes can free: whole deletable files, the dead
    bytes of files worth rewriting, and the write head's dead bytes (freed
    once it is sealed)."""
    total = 0
    for f in files:
        if f.reclaimable:
            total += f.size
        elif f.dead_bytes >= min_gain or f.active:
            total += f.dead_bytes
    return total


def manifest_size(victims: int) -> int:
    """Bytes of the MANIFEST record that names ``victims`` files."""
    return fmt.RECORD_HEADER_SIZE + fmt.MANIFEST_COUNT.size + victims * fmt.MANIFEST_ENTRY.size


def _fits_one_file(victims: int, copied: int, file_room: int | None) -> bool:
    """Whether ``copied`` bytes and a MANIFEST naming ``victims`` files fit
    in the ``file_room`` of one compacted file (None: no limit)."""
    return file_room is None or manifest_size(victims) + copied <= file_room


def min_gain_for(max_file_size: int) -> int:
    """The smallest rewrite worth doing: 1/64 of a data file, at least 4 KiB."""
    return max(4096, max_file_size // 64)


def benefit_cost(f: FileView) -> float:
    u = min(f.live_ratio, 1.0)
    return (1.0 - u) * max(f.age, 1e-3) / (1.0 + u)


def plan(
    files: list[FileView],
    *,
    threshold: float,
    budget: int,
    small_file: int,
    min_gain: int = 0,
    read_budget: int | None = None,
    file_room: int | None = None,
    defer: frozenset[int] = frozenset(),
) -> Plan:
    """Choose what one pass does.

    ``threshold``: files whose live fraction is below it are rewritten.
    ``budget``: bytes a pass may copy (the first victim is always allowed).
    ``small_file``: sealed files smaller than this are merged when there are
    two or more of them.
    ``min_gain``: a file is rewritten only if that frees at least this many
    bytes (so a nearly full file is not copied to save its header).
    ``read_budget``: bytes of victims a pass may read (the first victim is
    always allowed); None for no limit.
    ``file_room``: bytes a compacted file holds past its header: its MANIFEST
    (4 more bytes a victim) and the copies must fit (the first victim is always
    allowed); None for no limit.
    ``defer``: files not to rewrite in this pass (they are still being
    consumed); they are deleted whole all the same once nothing in them is needed.
    """
    reclaim = sorted(f.file_id for f in files if f.reclaimable)
    sealed = [f for f in files if not f.active and not f.reclaimable and f.file_id not in defer]
    sparse = [f for f in sealed if f.live_ratio < threshold and f.dead_bytes >= min_gain]
    small = [f for f in sealed if f.size < small_file and f not in sparse]
    if len(small) < 2:
        small = []
    candidates = sorted(sparse, key=benefit_cost, reverse=True) + sorted(
        small, key=lambda f: f.size
    )
    rewrite: list[int] = []
    spent = read = 0
    for f in candidates:
        if len(rewrite) == MAX_MANIFEST_VICTIMS:
            break
        if rewrite and spent + f.copy_cost > budget:
            continue
        if rewrite and read_budget is not None and read + f.size > read_budget:
            continue
        if rewrite and not _fits_one_file(len(rewrite) + 1, spent + f.copy_cost, file_room):
            continue
        rewrite.append(f.file_id)
        spent += f.copy_cost
        read += f.size
    if len(rewrite) == 1 and rewrite[0] in {f.file_id for f in small}:
        rewrite = []  # merging one small file with nothing would only move it
    return Plan(reclaim, rewrite)
