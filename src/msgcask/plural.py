"""Counts in words, for messages and reports: "1 live message", "2 live messages"."""

from __future__ import annotations


def counted(n: int, thing: str) -> str:
    """``n`` things, in words: the singular for one."""
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"
