"""Several PUT records of one id: copies of one message, which recovery counts once."""

from __future__ import annotations

from pathlib import Path

import msgcask
from msgcask.store import codec
from msgcask.store import format as fmt


def test_two_put_records_of_one_id_in_one_file_count_once(store_path: Path) -> None:
    store_path.mkdir()
    first = codec.encode_put(1, b"q", 4, 2, b"", b"body")
    copy = codec.encode_put(1, b"q", 4, 1, b"", b"body")
    other = codec.encode_put(2, b"q", 4, 0, b"", b"other")
    header = codec.encode_file_header(fmt.KIND_JOURNAL, 1, 1)
    (store_path / "0000000001.log").write_bytes(header + first + copy + other)
    with msgcask.open(store_path, compaction_interval=None) as store:
        q = store.queue("q")
        assert len(q) == 2
        assert store.stats().live_messages == 2
        assert store.verify() == []
        m = q.get(timeout=1)
        # The first record read is the one kept, with the count it carries.
        assert (m.id, m.deliveries) == (1, 3)
        q.ack(m)
        assert len(q) == 1
        assert store.verify() == []
