"""Read-cache rotations between a PREPARE and its COMMIT (issue 44, item 6).

The providers' read cache (``topology.state.cache.mb``) keeps two generations
and drops the old one when the young one is full; the prepared changes must
survive every rotation. Here a checkpoint is prepared, then reads of the whole
state through a cache of a few dozen entries rotate it many times (and more
changes, for the next checkpoint, are made meanwhile) before the COMMIT: the
commit must still write every prepared key and no pending one, and reads
after it, and in a new provider over the same store, must be the model's.
Runs on every provider of the conformance suite.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from test_state_cache import N, _committed, _items_in_order, _open, _visible


@pytest.fixture
def namespace() -> str:
    return f"rot-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("changed", [5, 40])
def test_rotations_between_a_prepare_and_its_commit_lose_no_prepared_key(
    provider_factory: Any, namespace: str, changed: int
) -> None:
    state, committed = _committed(provider_factory, namespace)
    prepared = dict(committed)
    for i in range(0, changed * 7, 7):  # spread over the key range
        prepared[f"k{i:04d}"] = {"prepared": i}
        state.put(f"k{i:04d}", {"prepared": i})
    state.delete("k0001")
    del prepared["k0001"]
    state.put("new-key", "prepared")
    prepared["new-key"] = "prepared"
    state.prepare_commit(1)

    # Between the PREPARE and the COMMIT: the whole state read twice through a
    # cache of a few dozen entries (rotation after rotation), and changes for
    # the next checkpoint, one to a prepared key.
    pending = dict(prepared)
    for _ in range(2):
        _visible(state, prepared if pending == prepared else pending)
        state.put("k0007", "pending")
        pending["k0007"] = "pending"
    state.put("k0299", "pending")
    pending["k0299"] = "pending"
    assert state.cache_entries < N  # the reads did evict

    state.commit(1)
    _visible(state, pending)  # the pending changes are still the state's view
    _items_in_order(state, pending)
    state.rollback()  # drops the pending changes: the commit of 1 is what is left
    _visible(state, prepared)

    again = _open(provider_factory, namespace)  # what the store holds
    assert again.committed_txid == 1
    _visible(again, prepared)
    _items_in_order(again, prepared)
