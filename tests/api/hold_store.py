"""Helper process: open a store, say so, and hold it until stdin closes.

Usage: python hold_store.py <store-path>
Prints "held <pid>" once the store is open.
"""

from __future__ import annotations

import os
import sys

import msgcask


def main() -> None:
    store = msgcask.open(sys.argv[1])
    store.queue("held").put(b"by the holder")
    print(f"held {os.getpid()}", flush=True)
    sys.stdin.read()  # returns when the parent closes our stdin
    store.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
