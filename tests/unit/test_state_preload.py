"""A state reads a small committed store whole on its first miss, and stays exact."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from statestream import _kventry, _kvstate, _state
from statestream_providers.memory import MemoryStateProvider


@pytest.fixture
def provider() -> Iterator[MemoryStateProvider]:
    name = uuid.uuid4().hex
    with MemoryStateProvider.from_config({"name": name}) as p:
        yield p
    MemoryStateProvider.clear(name)


def _committed(provider: MemoryStateProvider, n: int) -> None:
    state = provider.get_state("ns")
    for i in range(n):
        state.put(f"k{i}", i)
    state.commit()


def _reopen(provider: MemoryStateProvider) -> tuple[_state.StoredKeyValueState, list[bytes]]:
    fresh = type(provider).from_config({"name": provider.store_name})  # type: ignore[attr-defined]
    state = fresh.get_state("ns")
    loads: list[bytes] = []
    real = state._backend

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def load(self, key: bytes) -> bytes | None:
            loads.append(key)
            return real.load(key)

    state._backend = Counting()  # type: ignore[assignment]
    return state, loads


def test_a_small_state_answers_misses_without_asking_the_store(
    provider: MemoryStateProvider,
) -> None:
    _committed(provider, 3)
    state, loads = _reopen(provider)
    assert state.get("k1") == 1
    assert [state.get(f"new{i}", 0) for i in range(100)] == [0] * 100
    assert state.get("k2") == 2
    assert loads == []


def test_a_large_state_stays_lazy_and_exact(
    provider: MemoryStateProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    _committed(provider, 10)
    state, loads = _reopen(provider)
    state.preload_limit = 5
    assert [state.get(f"k{i}") for i in range(10)] == list(range(10))
    assert state.get("missing", "d") == "d"
    assert loads  # beyond the limit, misses go to the store


def test_after_a_rollback_overwritten_keys_show_their_committed_value_again(
    provider: MemoryStateProvider,
) -> None:
    _committed(provider, 3)
    state, _ = _reopen(provider)
    assert state.get("k0") == 0  # preloads
    state.put("k0", 100)
    state.put("fresh", 1)
    state.rollback()
    assert state.get("k0") == 0
    assert state.get("fresh") is None


def test_a_rollback_of_a_foreign_prepare_reads_the_small_state_whole_again(
    provider: MemoryStateProvider,
) -> None:
    # A delta left prepared by a crashed incarnation keeps the state lazy (its
    # keys are not in this object's view); once rolled back, the state is
    # small and whole again: misses cost no store round trip.
    _committed(provider, 3)
    crashed = type(provider).from_config({"name": provider.store_name}).get_state("ns")
    crashed.put("k0", 99)
    crashed.prepare_commit(0)
    state, loads = _reopen(provider)
    assert state.prepared_txid == 0  # a foreign delta
    assert state.get("k1") == 1
    assert loads  # lazy while the foreign delta stands
    state.rollback()
    loads.clear()
    assert state.get("k0") == 0
    assert [state.get(f"new{i}", 0) for i in range(20)] == [0] * 20
    assert loads == []
    state.put("k1", 10)
    state.prepare_commit(0)
    state.commit(0)
    assert dict(state.items()) == {"k0": 0, "k1": 10, "k2": 2}


def test_a_rollback_after_a_preload_reads_the_store_whole_again(
    provider: MemoryStateProvider,
) -> None:
    _committed(provider, 3)
    state, loads = _reopen(provider)
    assert state.get("k0") == 0  # preloads
    state.put("k0", 5)
    state.prepare_commit(0)
    state.rollback()
    assert [state.get(f"new{i}", 0) for i in range(20)] == [0] * 20
    assert state.get("k0") == 0
    assert loads == []


def test_sentinels_and_states_have_readable_reprs(provider: MemoryStateProvider) -> None:
    assert repr(_kventry._Sentinel("<gone>")) == "<gone>"
    assert (repr(_kvstate._MISSING), repr(_kvstate._ABSENT)) == ("<missing>", "<absent>")
    assert repr(provider.get_state("count-3")) == "<StoredKeyValueState 'count-3'>"


def test_keys_are_the_visible_keys(provider: MemoryStateProvider) -> None:
    _committed(provider, 3)
    state, _ = _reopen(provider)
    state.delete("k0")
    state.put("new", 1)
    assert sorted(state.keys()) == sorted(state) == ["k1", "k2", "new"]
