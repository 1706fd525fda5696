"""A state opened on a store too large to read whole reads no page of it when the
backend counts its keys in O(1) (issue 34: a Redis restart on 1,000,000 keys read
50,001 entries to learn that), behind the outage guard too."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from statestream import FakeClock
from statestream._outage import GuardedBackend, OutageGuard, StoreOutage
from statestream_providers.memory import MemoryStateProvider


@pytest.fixture
def provider() -> Iterator[MemoryStateProvider]:
    name = uuid.uuid4().hex
    with MemoryStateProvider.from_config({"name": name}) as p:
        yield p
    MemoryStateProvider.clear(name)


def _filled(provider: MemoryStateProvider, n: int) -> list[str]:
    """n keys committed; a fresh state on them, its backend's page reads logged."""
    state = provider.get_state("ns")
    for i in range(n):
        state.put(f"k{i}", i)
    state.commit()
    fresh = MemoryStateProvider.from_config({"name": provider.store_name}).get_state("ns")
    inner = fresh._backend
    guarded = GuardedBackend(inner, OutageGuard(StoreOutage("test", 1.0), FakeClock()))  # type: ignore[arg-type]
    pages: list[str] = []
    real_page = guarded.scan_page
    assert real_page is not None and guarded.key_count is not None

    def page(after: bytes | None, limit: int) -> object:
        pages.append(f"page of {limit}")
        return real_page(after, limit)

    guarded.scan_page = page  # type: ignore[assignment]
    fresh._backend = guarded  # type: ignore[assignment]
    fresh.preload_limit = 10
    assert [fresh.get(f"k{i}") for i in range(n)] == list(range(n))
    assert fresh.get("absent", "d") == "d"
    return pages


def test_a_store_too_large_to_read_whole_is_not_paged(provider: MemoryStateProvider) -> None:
    assert _filled(provider, 50) == []


def test_a_small_store_is_still_read_whole(provider: MemoryStateProvider) -> None:
    assert _filled(provider, 5) == ["page of 11"]
