"""Counts in words, for messages and reports: "1 live message", "2 live messages"."""

from __future__ import annotations


def counted(n: int, thing: str) -> str:
    """``n`` things, in words: the singular for one."""
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def acks_or_delivery_counts(n: int) -> str:
    """``n`` needed ACK and DELIVER records in words (``FileStats.needed_acks``, one
    count of both): "1 needed ack or delivery count", "2 needed acks or delivery
    counts"."""
    return "1 needed ack or delivery count" if n == 1 else f"{n} needed acks or delivery counts"
