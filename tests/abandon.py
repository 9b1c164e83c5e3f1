"""Stopping a store the way a crash would, for tests that reopen what it left."""

from __future__ import annotations

import msgcask


def abandon(store: msgcask.Store) -> None:
    """Stop ``store`` the way kill -9 or a power cut would: no sync, no index commit, no
    clean flag. Index changes since the last commit are lost with the aborted
    transaction; bytes appended to data files are in the OS (until a simulated power
    cut drops what was not fsynced)."""
    store._scheduler.shutdown()
    store._stop.set()
    store._flusher.join()
    with store._lock:
        store._closed = True
        store._env.close()
        for handle in store._handles.values():
            handle.close()
        store._lock_file.release()
