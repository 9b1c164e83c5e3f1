"""Builds a subject by name for a run's configuration."""

from __future__ import annotations

from msgcask.workloads.config import RunConfig
from msgcask.workloads.subjects import PEERS
from msgcask.workloads.subjects.base import Subject
from msgcask.workloads.subjects.msgcask_store import MsgcaskSubject

MSGCASK = "msgcask"


def make_subject(name: str, path: str, cfg: RunConfig, compaction: bool = True) -> Subject:
    """A closed subject ``name`` at ``path``; call ``open()`` on it."""
    # Only dlq-heavy dead-letters; elsewhere a nack (none happen) would simply requeue.
    max_deliveries = cfg.max_deliveries if cfg.workload == "dlq-heavy" else None
    if name == MSGCASK:
        return MsgcaskSubject(
            path,
            sync=cfg.sync,
            max_deliveries=max_deliveries,
            max_file_size=cfg.max_file_size,
            max_store_size=cfg.store_size_limit,
            threshold=cfg.threshold,
            compaction=compaction,
            compaction_interval=cfg.compaction_interval,
        )
    cls = PEERS[name][0]
    return cls(path, sync=cfg.sync, max_deliveries=max_deliveries or 0)
