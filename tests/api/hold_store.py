"""Helper process: open a store, say so, and hold it until stdin closes.

Usage: python hold_store.py <store-path>
Prints "held <pid>" once the store is open.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgcask


def start_holder(store: Path) -> subprocess.Popen[str]:
    """This script in a child process holding ``store``, once it says it holds it
    (its pid follows "held" in that first line). Closing its stdin closes the store."""
    holder = subprocess.Popen(
        [sys.executable, __file__, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    line = holder.stdout.readline().split()
    assert line[:1] == ["held"] and int(line[1]) == holder.pid, f"holder did not start: {line}"
    return holder


def main() -> None:
    store = msgcask.open(sys.argv[1])
    store.queue("held").put(b"by the holder")
    print(f"held {os.getpid()}", flush=True)
    sys.stdin.read()  # returns when the parent closes our stdin
    store.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
