"""A read cache far smaller than the state: evictions never lose a change.

Every provider runs with ``cache_mb`` so small that a state keeps a few
dozen entries; the state is hundreds of keys, so every step evicts. What
the state shows must stay exactly the model's through puts, deletes,
prepares, a crash (the provider abandoned, a new one opened), either
recovery, and a rollback; and ``items()`` must be complete and in the order
of the encoded keys (every shipped backend pages in key order, ``scan_page``).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

from statestream._state import size_cache

TINY_MB = 0.001  # a generation of the minimum size (16 entries)
N = 300


def _open(provider_factory: Any, namespace: str) -> Any:
    provider = provider_factory()
    size_cache(provider, TINY_MB)
    return provider.get_state(namespace)


def _committed(provider_factory: Any, namespace: str) -> tuple[Any, dict[str, Any]]:
    """A state of ``N`` keys, prepared and committed as txid 0, and its model."""
    state = _open(provider_factory, namespace)
    committed = {f"k{i:04d}": i for i in range(N)}
    for key, value in committed.items():
        state.put(key, value)
    state.prepare_commit(0)
    state.commit(0)
    return state, committed


def _visible(state: Any, model: dict[str, Any]) -> None:
    for key, value in model.items():
        assert state.get(key, "<none>") == value, key
    assert state.get("never-written", "<none>") == "<none>"


def _items_in_order(state: Any, model: dict[str, Any]) -> None:
    items = list(state.items())
    assert dict(items) == model
    assert len(items) == len(model)  # each key once
    # Every shipped provider pages in key order (redis through its key index).
    assert [key for key, _ in items] == sorted(model, key=orjson.dumps)


@pytest.fixture
def namespace() -> str:
    return f"cache-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("recovery", ["commit", "rollback"])
def test_evictions_keep_every_uncommitted_change_through_a_crash(
    provider_factory: Any, namespace: str, recovery: str
) -> None:
    state, committed = _committed(provider_factory, namespace)
    _visible(state, committed)  # reads the whole state through a cache of 16 entries
    assert state.cache_entries < N

    prepared = dict(committed)
    for i in range(0, N, 2):  # changes, with evictions in between
        prepared[f"k{i:04d}"] = {"v": i}
        state.put(f"k{i:04d}", {"v": i})
        assert state.get(f"k{(i * 7) % N:04d}") == prepared[f"k{(i * 7) % N:04d}"]
    for i in range(1, N, 10):
        del prepared[f"k{i:04d}"]
        state.delete(f"k{i:04d}")
    _visible(state, prepared)
    state.prepare_commit(1)
    _visible(state, prepared)
    _items_in_order(state, prepared)

    pending = dict(prepared)
    for i in range(N, N + 50):
        pending[f"k{i:04d}"] = i
        state.put(f"k{i:04d}", i)
    _visible(state, pending)
    _items_in_order(state, pending)

    # The crash: this provider is abandoned; a new one sees txid 1 prepared.
    again = _open(provider_factory, namespace)
    assert again.committed_txid == 0 and again.prepared_txid == 1
    _visible(again, committed)
    if recovery == "commit":
        again.commit(1)
        expected = prepared
    else:
        again.rollback()
        expected = committed
    _visible(again, expected)
    _items_in_order(again, expected)


def test_a_rollback_after_evictions_shows_the_committed_values(
    provider_factory: Any, namespace: str
) -> None:
    state = _open(provider_factory, namespace)
    committed = {f"k{i:04d}": i for i in range(N)}
    for key, value in committed.items():
        state.put(key, value)
    state.commit()
    for i in range(N):
        state.put(f"k{i:04d}", -i)
        if i % 3 == 0:
            state.prepare_commit(0)  # the same txid again: merged onto its delta
    _visible(state, {k: -v for k, v in committed.items()})
    state.rollback()
    _visible(state, committed)
    _items_in_order(state, committed)


def test_iteration_of_a_state_larger_than_the_cache_is_complete_and_ordered(
    provider_factory: Any, namespace: str
) -> None:
    state = _open(provider_factory, namespace)
    model: dict[Any, Any] = {}
    for i in range(2 * N):
        key: Any = f"w{i}" if i % 3 else i  # str and int keys mixed
        model[key] = i
        state.put(key, i)
        if i % 200 == 199:
            state.commit()
    state.commit()
    state.put("late", 1)  # pending, between committed keys in order
    state.delete("w1")
    model["late"] = 1
    del model["w1"]
    _items_in_order(state, model)
    assert sorted(state.keys(), key=orjson.dumps) == sorted(model, key=orjson.dumps)
    assert state.cache_entries < 2 * N


def test_a_redis_store_without_its_key_index_is_indexed_on_the_first_iteration(
    redis_factory: Any, namespace: str
) -> None:
    """A store an older version wrote has no key index: the first paged read builds it."""
    state = _open(redis_factory, namespace)
    backend = getattr(state._backend, "backend", state._backend)
    model = {f"k{i}": i for i in range(N)}
    for key, value in model.items():
        state.put(key, value)
    state.commit()
    client, _ = backend._connection.client()
    client.zrem(backend._index, b'"k7"', b'"k250"')  # as if written without the index
    _items_in_order(state, model)
    assert client.zcard(backend._index) == N


def test_a_state_that_outgrew_the_cache_reads_new_and_evicted_keys_exactly(
    provider_factory: Any, namespace: str
) -> None:
    """Once a state that started whole in the cache outgrows it, a miss on a key the
    store never held is answered without a read (a filter of the stored keys): every
    key read, new, evicted, deleted or put again, must still read as the model says.
    Puts of lists are encoded at once, of ints deferred (the filter takes the keys of
    those at a prepare only where the cache holds no value): a key goes from one
    kind of put to the other, both ways."""
    import random

    rng = random.Random(7)
    state = _open(provider_factory, namespace)
    model: dict[str, Any] = {}
    txid = 0
    for step in range(3000):
        key = f"k{rng.randrange(2 * N)}"
        action = rng.random()
        if action < 0.5:
            assert state.get(key, -1) == model.get(key, -1), key
        elif action < 0.7:
            model[key] = [step]
            state.put(key, [step])
        elif action < 0.9:
            model[key] = step
            state.put(key, step)
        else:
            model.pop(key, None)
            state.delete(key)
        if step % 100 == 99:
            if step % 200 == 199:
                state.commit()
            else:
                state.prepare_commit(txid)
                state.commit(txid)
                txid += 1
    assert state._filter is not None  # it did outgrow the cache
    _visible(state, model)
    state.commit()
    _visible(_open(provider_factory, namespace), model)


def test_a_new_key_put_encoded_then_deferred_is_kept_by_the_filter(
    provider_factory: Any, namespace: str
) -> None:
    """A key the store never held, put as a list (encoded at once) and then as an int
    (deferred) before a prepare: the cache's value of it then is the list, which was
    never stored, so the filter must take the key when the deferred put takes it
    over, or the key reads as never stored once evicted."""
    state = _open(provider_factory, namespace)
    assert state.get("k0000") is None  # an empty store, read whole: complete
    committed = {f"k{i:04d}": i for i in range(N)}
    for key, value in committed.items():
        state.put(key, value)
    state.prepare_commit(0)
    state.commit(0)
    assert state._filter is not None  # it outgrew the cache: the filter answers misses
    fresh = {f"fresh{i}": i for i in range(20)}
    for key, value in fresh.items():
        state.put(key, [value])
        state.put(key, value)
    state.prepare_commit(1)
    state.commit(1)
    _visible(state, committed)  # evicts the fresh keys
    _visible(state, {**committed, **fresh})


def test_an_o1_key_count_counts_the_committed_keys(provider_factory: Any, namespace: str) -> None:
    """The optional StateBackend.key_count, where a backend has it (issue 34)."""
    state = _open(provider_factory, namespace)
    count = getattr(state._backend, "key_count", None)
    if count is None:
        return  # optional: this backend reads a page to learn a state's size
    assert count() == 0
    for i in range(30):
        state.put(f"k{i}", i)
    state.prepare_commit(0)
    assert count() == 0  # prepared is not committed
    state.commit(0)
    state.delete("k3")
    state.put("k30", 30)
    state.commit()
    assert count() == 30
