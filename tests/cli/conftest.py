"""Fixtures of the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from claims import Store, redis_store


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A new store: a sqlite file, or the real Redis under a key prefix of its own."""
    if request.param == "sqlite":
        yield Store.sqlite(tmp_path / "data" / "state.db")
        return
    with redis_store() as store:
        yield store
