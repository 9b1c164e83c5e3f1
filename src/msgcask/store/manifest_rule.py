"""Which data files a finished or unfinished compaction made redundant.

A compacted file starts with a MANIFEST naming the files it replaced (its
victims). If every victim is still on disk, the compaction never committed (or
committed but deleted nothing yet): the copy is redundant. If any victim is
gone, the copy is the real home of those messages and the remaining victims
are redundant. Recovery removes the redundant files; the Spark pipeline reads
a store's files without them, so both see the same messages.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from msgcask.store import codec
from msgcask.store import format as fmt

# Where recovery looks for a compacted file's MANIFEST: the whole record, its
# header included, must end within this many bytes after the file header.
MAX_MANIFEST_BYTES = 256 * 1024
# So a pass may name at most this many victims (compactor/policy.py keeps to it).
MAX_MANIFEST_VICTIMS = (
    MAX_MANIFEST_BYTES - fmt.RECORD_HEADER_SIZE - fmt.MANIFEST_COUNT.size
) // fmt.MANIFEST_ENTRY.size


def parse_manifest(head: codec.Buffer) -> list[int] | None:
    """The victims named by the MANIFEST that starts ``head`` (a compacted
    file's bytes after its header, up to MAX_MANIFEST_BYTES); None if that
    record is damaged."""
    for item in codec.scan(head, 0):
        if isinstance(item, codec.Record) and item.rtype == fmt.TYPE_MANIFEST:
            return codec.decode_manifest(head, item.payload_start)
        break
    return None


def redundant_files(
    on_disk: Collection[int],
    compacted: Iterable[int],
    manifest: Callable[[int], list[int] | None],
) -> dict[int, str]:
    """The files to leave out, each with why. ``compacted`` are the compacted
    files among ``on_disk``; ``manifest(file_id)`` gives a file's victims, or
    None if its MANIFEST cannot be read (then nothing is left out on its
    account: a file that cannot tell what it replaced keeps its victims too).
    Compacted files are judged oldest first, each against the files on disk
    before any was left out: a victim left out here, itself an unfinished copy,
    was not deleted by the compaction that named it, so that one never finished."""
    redundant: dict[int, str] = {}
    for file_id in sorted(compacted):
        if file_id in redundant:
            continue
        victims = manifest(file_id)
        if victims is None:
            continue
        if all(v in on_disk for v in victims):
            redundant[file_id] = "an unfinished compaction's copy: every file it replaced is here"
            continue
        for victim in victims:
            if victim in on_disk and victim not in redundant:
                redundant[victim] = f"replaced by compacted file {file_id}"
    return redundant
