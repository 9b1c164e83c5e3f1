"""Fixtures of the fault-injection tests."""

from __future__ import annotations

import pytest
from faulty_fs import FaultyFileSystem


@pytest.fixture
def fs() -> FaultyFileSystem:
    """A fresh fault-injecting file system, no fault armed."""
    return FaultyFileSystem()
