"""msgcask: an embeddable, log-structured persistent message store.

>>> import msgcask, tempfile
>>> store = msgcask.open(tempfile.mkdtemp())
>>> orders = store.queue("orders")
>>> orders.put(b"first", priority=1) < orders.put(b"urgent", priority=9)
True
>>> orders.get(timeout=1).body
b'urgent'
>>> store.close()
"""

from msgcask.cpu import confine_to_one_cpu
from msgcask.db import Store, open
from msgcask.errors import (
    ClosedError,
    CorruptionError,
    Empty,
    Error,
    FormatVersionError,
    IndexFailedError,
    MessageTooLargeError,
    NotAStoreError,
    StoreFullError,
    StoreLockedError,
)
from msgcask.message import Message
from msgcask.queue import Queue
from msgcask.stats import CompactionReport, CompactionStats, FileStats, KeptReport, StoreStats
from msgcask.transaction import Transaction

__version__ = "0.1.0"

__all__ = [
    "ClosedError",
    "CompactionReport",
    "CompactionStats",
    "CorruptionError",
    "Empty",
    "Error",
    "FileStats",
    "FormatVersionError",
    "IndexFailedError",
    "KeptReport",
    "Message",
    "MessageTooLargeError",
    "NotAStoreError",
    "Queue",
    "Store",
    "StoreFullError",
    "StoreLockedError",
    "StoreStats",
    "Transaction",
    "confine_to_one_cpu",
    "open",
]
