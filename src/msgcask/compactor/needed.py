"""What in a data file is still needed, by the index's count.

The rewrite copies exactly this out of a victim, and ``Store.why_kept`` reports
it: live PUT records (the index points at this very record), ACK records whose
message's PUT record still exists elsewhere, and DELIVER records that hold a
live message's current delivery count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from msgcask.index.catalog import Catalog
from msgcask.index.keys import STATE_LIVE, Live
from msgcask.store import codec
from msgcask.store import format as fmt

YIELD_EVERY = 32  # records parsed between yields of the interpreter


@dataclass
class Needed:
    file_id: int
    puts: list[tuple[int, codec.Record, Live]] = field(default_factory=list)
    acks: list[tuple[int, int]] = field(default_factory=list)  # (id, file of its PUT)
    delivers: list[tuple[int, int]] = field(default_factory=list)  # (id, count)
    all_put_ids: list[int] = field(default_factory=list)  # every PUT record in the file


@dataclass
class FileRecords:
    """A file's records by kind, parsed without the index (no lock needed)."""

    puts: list[tuple[int, codec.Record]] = field(default_factory=list)
    acks: list[int] = field(default_factory=list)
    delivers: list[tuple[int, int]] = field(default_factory=list)
    damaged: int = 0  # stretches that did not parse


def parse(buf: bytes) -> FileRecords:
    """Sort a file's records by kind. Runs in the background: it gives other
    threads the interpreter every few records, so a foreground put never waits
    a whole file's parse (the GIL would otherwise pass only every 5 ms)."""
    out = FileRecords()
    for n, item in enumerate(codec.scan(buf, fmt.FILE_HEADER_SIZE)):
        if not n % YIELD_EVERY:
            time.sleep(0)
        if not isinstance(item, codec.Record):
            out.damaged += 1
            continue
        if item.rtype == fmt.TYPE_PUT:
            out.puts.append((fmt.PUT_FIXED.unpack_from(buf, item.payload_start)[0], item))
        elif item.rtype == fmt.TYPE_ACK:
            out.acks.append(fmt.ACK_PAYLOAD.unpack_from(buf, item.payload_start)[0])
        elif item.rtype == fmt.TYPE_DELIVER:
            msg_id, count = fmt.DELIVER_PAYLOAD.unpack_from(buf, item.payload_start)
            out.delivers.append((msg_id, count))
    return out


def chunks(records: FileRecords, size: int) -> list[FileRecords]:
    """Split a file's records so each part can be classified under a short lock hold."""
    out = []
    for start in range(0, max(len(records.puts), len(records.acks), len(records.delivers)), size):
        end = start + size
        out.append(
            FileRecords(
                records.puts[start:end], records.acks[start:end], records.delivers[start:end]
            )
        )
    return out


def merge(parts: list[Needed], file_id: int) -> Needed:
    whole = Needed(file_id)
    for part in parts:
        whole.puts += part.puts
        whole.acks += part.acks
        whole.delivers += part.delivers
        whole.all_put_ids += part.all_put_ids
    return whole


def classify(catalog: Catalog, file_id: int, records: FileRecords) -> Needed:
    """Decide, from the index, which of a file's records are needed now.
    Call with the store lock held."""
    needed = Needed(file_id)
    for msg_id, item in records.puts:
        needed.all_put_ids.append(msg_id)
        entry = catalog.lookup(msg_id)
        if (
            isinstance(entry, Live)
            and entry.state == STATE_LIVE
            and entry.file_id == file_id
            and entry.offset == item.offset
        ):
            needed.puts.append((msg_id, item, entry))
    for msg_id in records.acks:
        acked = catalog.needed_ack(msg_id, file_id)
        if acked is not None:
            needed.acks.append((msg_id, acked.put_file))
    for msg_id, count in records.delivers:
        entry = catalog.lookup(msg_id)
        if isinstance(entry, Live) and entry.deliver_file == file_id and entry.deliveries == count:
            needed.delivers.append((msg_id, count))
    return needed
