"""Helper process: open a store (recovering it as needed), then close it.

Usage: python open_store.py <store>
Prints "S" just before ``msgcask.open`` (imports done) and "O" once it returned.
"""

from __future__ import annotations

import sys

import msgcask


def main() -> None:
    print("S", flush=True)
    store = msgcask.open(sys.argv[1], compaction_interval=None)
    print("O", flush=True)
    store.close()


if __name__ == "__main__":
    main()
