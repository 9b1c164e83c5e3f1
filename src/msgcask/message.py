"""The message a consumer receives."""

from __future__ import annotations

from typing import NamedTuple, cast


class Message(NamedTuple):
    """A message as delivered by ``Queue.get`` or listed by ``Queue.browse``.

    Read-only. ``deliveries`` counts deliveries including this one (0 in
    ``browse`` for a message never delivered); ``redelivered`` is true when it
    was delivered before, in this process or before a restart. (A NamedTuple:
    building one is several times cheaper than a frozen dataclass, and ``get``
    builds one per message.)
    """

    id: int
    queue: str
    body: bytes
    headers: dict[str, str]
    priority: int
    deliveries: int

    @property
    def redelivered(self) -> bool:
        return self.deliveries > 1

    def __repr__(self) -> str:
        body = self.body
        # A Message built by hand may hold anything: a repr must not raise.
        shown = (
            f"<{len(body)} bytes>"
            if isinstance(body, (bytes, bytearray, memoryview))
            else repr(body)
        )
        return (
            f"Message(id={self.id!r}, queue={self.queue!r}, priority={self.priority!r}, "
            f"deliveries={self.deliveries!r}, headers={self.headers!r}, body={shown})"
        )


def delivered_message_type() -> type[Message]:
    """A subclass of Message of its own, for the deliveries of one open store.

    Message ids repeat across stores, so the type is what lets ``ack`` and
    ``nack`` refuse a Message another store delivered. It costs nothing per
    message. A copy or a pickle of one is a plain Message (whose origin is not
    known, and which is taken at its word).
    """

    def __reduce__(self: Message) -> tuple[type[Message], tuple[object, ...]]:
        return Message, tuple(self)

    return cast(
        "type[Message]",
        type("Message", (Message,), {"__slots__": (), "__reduce__": __reduce__}),
    )


def delivered_id(message: Message) -> int:
    """The id of a Message given to ack or nack. A plain Message is taken at its
    word, but not for an id that is no int and only equals one (5.0): the
    lookups would find the message, and its ACK record could not be encoded."""
    msg_id = message.id
    if isinstance(msg_id, bool) or not isinstance(msg_id, int):
        raise TypeError(
            f"a Message's id must be an int, got {type(msg_id).__name__}; pass the Message "
            "get() returned, or its id"
        )
    return msg_id
