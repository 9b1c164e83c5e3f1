"""Directories a call creates, so that a call that fails can leave none behind."""

from __future__ import annotations

import os


def missing_dirs(path: str) -> list[str]:
    """``path`` and its missing parents, outermost first: what makedirs would make."""
    missing: list[str] = []
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        missing.insert(0, path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def remove_made_dirs(made: list[str]) -> None:
    """Remove the directories in ``made`` (from ``missing_dirs``), innermost first,
    as long as they are empty; one that holds anything stays, with those above it."""
    for path in reversed(made):
        try:
            os.rmdir(path)
        except OSError:
            return
