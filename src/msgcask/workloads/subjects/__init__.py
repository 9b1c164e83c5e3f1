"""Subjects: msgcask and the peers, behind one interface (``base.Subject``).

Peers are optional: ``peer_unavailable`` says why one cannot run (its package
is missing) without importing anything heavy up front.
"""

from __future__ import annotations

import importlib.util

from msgcask.workloads.subjects.base import Subject
from msgcask.workloads.subjects.diskcache_deque import DiskcacheDequeSubject
from msgcask.workloads.subjects.litequeue_table import LiteQueueSubject
from msgcask.workloads.subjects.persistqueue_ack import PersistQueueAckSubject
from msgcask.workloads.subjects.persistqueue_file import PersistQueueFileSubject
from msgcask.workloads.subjects.sqlite_table import SqliteSubject

# name -> (class, the module it needs)
PEERS: dict[str, tuple[type[Subject], str]] = {
    "sqlite3": (SqliteSubject, "sqlite3"),
    "persistqueue-ack": (PersistQueueAckSubject, "persistqueue"),
    "persistqueue-file": (PersistQueueFileSubject, "persistqueue"),
    "litequeue": (LiteQueueSubject, "litequeue"),
    "diskcache-deque": (DiskcacheDequeSubject, "diskcache"),
}


def peer_unavailable(name: str) -> str | None:
    """Why peer ``name`` cannot run here, or None if it can."""
    if name not in PEERS:
        return f"unknown peer; known: {', '.join(PEERS)}"
    module = PEERS[name][1]
    if importlib.util.find_spec(module) is None:
        return f"package for {module!r} is not installed (pip install 'msgcask[bench]')"
    return None


# The names that stand for a whole selection of peers, not for one.
STANDALONE_NAMES = ("all", "none")


def parse_peers(spec: str) -> list[str]:
    """``none``, ``all`` or a comma-separated list of peer names."""
    # A peer named twice runs once (two runs under one label would read as one).
    names = list(dict.fromkeys(p.strip() for p in spec.split(",") if p.strip()))
    if names in ([], ["none"]):
        return []
    if names == ["all"]:
        return list(PEERS)
    alone = [n for n in names if n in STANDALONE_NAMES]
    if alone:
        raise ValueError(
            f"{' and '.join(map(repr, alone))} {'stand' if len(alone) > 1 else 'stands'} alone "
            "and cannot be combined with other names: give 'all', 'none', or a "
            f"comma-separated list of the peers {', '.join(PEERS)}"
        )
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise ValueError(
            f"unknown peer {', '.join(map(repr, unknown))}: the peers are {', '.join(PEERS)} "
            "(or 'all', or 'none')"
        )
    return names
