"""Argument checks shared by the public API. Each raises TypeError or ValueError
with a message that says what to pass instead, before anything is changed."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from msgcask.store import format as fmt


def body(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(
        f"message body must be bytes, bytearray or memoryview, got {type(value).__name__}; "
        "encode text first, e.g. text.encode()"
    )


def _utf8(text: str, what: str) -> bytes:
    """``text`` in UTF-8; ValueError if it cannot be (a lone surrogate)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise ValueError(
            f"{what} {text[:40]!r} is not valid Unicode text: it holds a lone surrogate "
            "(as str from bytes decoded with errors='surrogateescape' does); pass text "
            "that encodes to UTF-8"
        ) from None


def headers(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"headers must be a dict of str to str, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not isinstance(val, str):
            raise TypeError(
                f"headers must map str to str; got {type(key).__name__} -> "
                f"{type(val).__name__} for {key!r} (convert values with str())"
            )
        if len(_utf8(key, "header name")) > 0xFFFF:
            raise ValueError(f"header name {key[:20]!r}... is longer than 65535 bytes")
        if not val.isascii():
            _utf8(val, f"the value of header {key[:40]!r},")
        out[key] = val
    if len(out) > fmt.MAX_HEADERS:
        raise ValueError(f"a message can carry at most {fmt.MAX_HEADERS} headers")
    return out


def priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"priority must be an int from 0 to 9, got {type(value).__name__}")
    if not 0 <= value <= fmt.MAX_PRIORITY:
        raise ValueError(f"priority must be from 0 (lowest) to 9 (highest), got {value}")
    return value


def queue_name(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"queue name must be a str, got {type(value).__name__}")
    encoded = _utf8(value, "queue name")
    if not encoded:
        raise ValueError("queue name must not be empty")
    if len(encoded) > fmt.MAX_QUEUE_NAME_BYTES:
        raise ValueError(
            f"queue name must be at most {fmt.MAX_QUEUE_NAME_BYTES} UTF-8 bytes, got {len(encoded)}"
        )
    if "\x00" in value:
        raise ValueError("queue name must not contain NUL characters")
    return value


def optional_positive_int(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def timeout(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(value).__name__}")
    if isinstance(value, float) and math.isnan(value):  # not for ints: they may not fit a float
        raise ValueError("timeout must be a number of seconds, got nan")
    if value < 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {value}")
    if value > threading.TIMEOUT_MAX:  # longer than any wait can be: wait for good
        return None
    return float(value)


def sequence(name: str, value: object, what: str) -> list[Any]:
    """``value``, an iterable of several values, as a list; a TypeError saying
    that ``name`` is a list of ``what`` for a str (whose characters would be
    taken one by one), bytes, or anything that is not iterable."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} is a list of {what}, not {type(value).__name__}: {value!r}")
    return list(value)
