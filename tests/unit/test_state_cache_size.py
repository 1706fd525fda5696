"""The read cache's budget in bytes buys about as many entries as those bytes hold (issue 34)."""

from __future__ import annotations

import tracemalloc

import pytest

from statestream._kvstate import CommitOutcome, StoredKeyValueState
from statestream._serde import JsonSerializer


class _NoStore:
    """A store that keeps nothing, so that what tracemalloc sees is the state's own."""

    def load(self, key: bytes) -> bytes | None:
        return None

    def load_txids(self) -> tuple[int, int | None]:
        return -1, None

    def commit_direct(self, delta: object) -> None:
        pass

    def discard_prepared(self) -> None:
        pass

    def write_prepared(self, txid: int, delta: object) -> None:
        pass

    def apply_prepared(self, txid: int) -> CommitOutcome:
        return CommitOutcome.APPLIED

    def scan(self) -> list[tuple[bytes, bytes]]:
        return []


@pytest.mark.parametrize(
    ("value_of", "what"),
    [
        (lambda i: i % 7 + 1, "word counts (shared small ints)"),
        (lambda i: 1_000_000 + i, "large ints"),
        (lambda i: f"value-{i:08d}", "short strs"),
    ],
)
def test_a_generation_fills_about_its_share_of_the_budget(value_of: object, what: str) -> None:
    budget = 8 * 1024 * 1024
    state = StoredKeyValueState("ns", _NoStore(), JsonSerializer(), budget)  # type: ignore[arg-type]
    # A first generation, so that the size is measured on real entries.
    for i in range(2_000):
        state.put(f"warm{i}", value_of(i))  # type: ignore[operator]
    state.commit()
    state.resize_cache(budget)
    generation = state._generation
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        view = {}
        # What the young generation holds when full: keys made one by one, as a bolt's are.
        for i in range(generation):
            view[f"key-{i}"] = value_of(i)  # type: ignore[operator]
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    state._size_generation(view)
    assert state._generation == pytest.approx(generation, rel=0.25), what
    # Two full generations stay within the budget, and use most of it.
    assert 0.6 * budget <= 2 * used <= 1.15 * budget, (what, used, generation)


def test_the_filter_of_stored_keys_counts_against_the_budget() -> None:
    budget = 2 * 1024 * 1024
    state = StoredKeyValueState("ns", _NoStore(), JsonSerializer(), budget)  # type: ignore[arg-type]
    for start in range(0, 80_000, 10_000):  # far more keys than the cache holds
        for i in range(start, start + 10_000):
            state.get(f"k{i}")  # a miss: the first one finds the store empty (complete)
            state.put(f"k{i}", 1)
        state.commit()
    known = state._filter
    assert known is not None and known.nbytes > 0
    state._size_generation(state._old)
    with_filter = state._generation
    state._filter = None
    state._size_generation(state._old)
    without = state._generation
    assert with_filter == pytest.approx(without * (1 - known.nbytes / budget), rel=0.02)


def test_the_filter_holds_every_key_added_and_few_others() -> None:
    from statestream._kvfilter import KeyFilter

    known = KeyFilter()
    keys: list[object] = [f"w{i}" for i in range(150_000)] + list(range(-50_000, 50_000))
    keys += [("t", i) for i in range(1_000)]  # hashed as tuples, any sign
    for key in keys:
        known.add(key)
    assert all(known.might_hold(key) for key in keys)
    others = sum(known.might_hold(f"x{i}") for i in range(50_000))
    # ~3% a layer, and a key absent is probed in each of the 3 layers here.
    assert others < 0.10 * 50_000
    # Bits a key within 8..16 (+ the first layer's slack), counted once per key.
    assert known.nbytes <= 2 * len(keys) + (1 << 16)
