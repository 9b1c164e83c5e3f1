"""Message bodies: fixed size or the size mix, each carrying its own index.

The first 8 bytes of every body are the message's index (big-endian), so a
consumer can tell which message it holds with any subject, peers included,
without headers. The rest is seeded random filler: compressible data would
flatter stores that compress.
"""

from __future__ import annotations

import random

INDEX_BYTES = 8

# The size mix of the workload spec: 80% 512 B, 15% 4 KiB, 5% 64 KiB.
SIZE_MIX = ((512, 80), (4096, 15), (65536, 5))
_MIX_TABLE_LEN = 10_007  # prime, so the cycle does not line up with pin periods


class Payloads:
    """Builds the body of message ``i`` for a run; deterministic for a seed."""

    def __init__(self, size: int, size_mix: bool, seed: int) -> None:
        rng = random.Random(seed)
        self._sizes: list[int] | None = None
        if size_mix:
            choices = [s for s, weight in SIZE_MIX for _ in range(weight)]
            self._sizes = [rng.choice(choices) for _ in range(_MIX_TABLE_LEN)]
        self._size = size
        biggest = max(s for s, _ in SIZE_MIX) if size_mix else size
        self._filler = rng.randbytes(biggest)

    def size_of(self, i: int) -> int:
        """Body size in bytes of message ``i``."""
        if self._sizes is not None:
            return self._sizes[i % _MIX_TABLE_LEN]
        return self._size

    def body(self, i: int) -> bytes:
        """The body of message ``i``: its index, then filler up to its size."""
        return i.to_bytes(INDEX_BYTES, "big") + self._filler[: self.size_of(i) - INDEX_BYTES]

    @property
    def period(self) -> int:
        """Body sizes repeat every ``period`` messages: size_of(i + period) == size_of(i)."""
        return _MIX_TABLE_LEN if self._sizes is not None else 1


def index_of(body: bytes) -> int:
    """The index a body carries."""
    return int.from_bytes(body[:INDEX_BYTES], "big")
