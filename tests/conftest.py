"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statestream import testing


@pytest.fixture(autouse=True)
def _reset_testing_registry() -> Iterator[None]:
    """Every test starts and ends with no sinks or queues left by another."""
    testing.reset()
    yield
    testing.reset()
