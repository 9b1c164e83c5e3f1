"""The message a consumer receives."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Message:
    """A message as delivered by ``Queue.get`` or listed by ``Queue.browse``.

    ``deliveries`` counts deliveries including this one (0 in ``browse`` for a
    message never delivered); ``redelivered`` is true when it was delivered
    before, in this process or before a restart.
    """

    id: int
    queue: str
    body: bytes = field(repr=False)
    headers: dict[str, str]
    priority: int
    deliveries: int

    @property
    def redelivered(self) -> bool:
        return self.deliveries > 1
