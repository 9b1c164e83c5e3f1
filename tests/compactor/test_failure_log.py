"""compactor/failure_log.py: a lasting failure is logged once, not on every retry,
and again when it changes, comes back after a success, or is forgotten."""

from __future__ import annotations

import pytest

from msgcask.compactor.failure_log import RepeatedFailureLog, SaidOnce


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_a_failure_is_logged_once_until_it_changes_or_a_success_comes_between(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = RepeatedFailureLog("a pass")
    with caplog.at_level("ERROR", logger="msgcask"):
        failures.failed(OSError("disk full"))
        failures.failed(OSError("disk full"))
        failures.failed(OSError("read-only"))
        failures.succeeded()
        failures.failed(OSError("read-only"))
    assert _said(caplog) == [
        "msgcask: a pass failed: disk full",
        "msgcask: a pass failed: read-only",
        "msgcask: a pass failed: read-only",
    ]


def test_an_unexpected_failure_of_another_kind_with_the_same_words_is_news(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = RepeatedFailureLog("a pass")
    with caplog.at_level("ERROR", logger="msgcask"):
        failures.failed(KeyError("x"), traceback=True)
        failures.failed(KeyError("x"), traceback=True)
        failures.failed(IndexError("'x'"), traceback=True)
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("msgcask: a pass failed: 'x'", True),
        ("msgcask: a pass failed: 'x'", True),
    ]
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [KeyError, IndexError]


def test_said_once_is_news_when_a_condition_starts_changes_or_comes_back() -> None:
    said = SaidOnce()
    assert said.news(1, "EIO")
    assert not said.news(1, "EIO")
    assert said.news(2, "EIO")  # another file
    assert said.news(1, "ENOENT")  # changed
    assert said.said(1) == "ENOENT"
    said.forget(1)
    assert said.said(1) is None
    assert said.news(1, "ENOENT")  # back after it ended
