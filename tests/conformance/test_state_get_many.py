"""Batched reads: ``get_many`` of a backend and of a state, and ``prefetch``.

A backend's optional ``get_many(keys)`` must return exactly what ``load``
returns key by key, in the keys' order (absent keys None, duplicates
repeated), whatever layer of the store holds the committed value (sqlite: the
folded entries or the committed log); the state's ``get_many`` exactly what
``get`` returns (pending over prepared over committed), and ``prefetch`` must
leave ``get`` exact with a read cache far smaller than the state, reading the
keys the cache lacks in one call. A provider without ``get_many`` (the SDK's
example) runs every test through the state's default, a ``load`` a key.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

from statestream._state import size_cache

TINY_MB = 0.001  # a generation of the minimum size (16 entries)
N = 200


@pytest.fixture
def namespace() -> str:
    return f"many-{uuid.uuid4().hex[:8]}"


def _backend(state: Any) -> Any:
    return getattr(state._backend, "backend", state._backend)  # a guarded one's inner


def _enc(key: Any) -> bytes:
    return orjson.dumps(key)


def _store(provider_factory: Any, namespace: str, commits: int = 3) -> dict[str, Any]:
    """``N`` keys over ``commits`` checkpoints (some deleted, some changed again); the model."""
    state = provider_factory().get_state(namespace)
    model: dict[str, Any] = {}
    for txid in range(commits):
        for i in range(txid, N, commits):
            key = f"k{i:04d}"
            model[key] = state_value = [txid, i]
            state.put(key, state_value)
        for i in range(0, N, 7 * (txid + 1)):
            state.delete(f"k{i:04d}")
            model.pop(f"k{i:04d}", None)
        state.prepare_commit(txid)
        state.commit(txid)
    return model


def test_backend_get_many_is_load_key_by_key(provider_factory: Any, namespace: str) -> None:
    model = _store(provider_factory, namespace)
    state = provider_factory().get_state(namespace)
    every = [f"k{i:04d}" for i in range(N)]
    # Every provider's state, through the backend's get_many or the default loop.
    assert state.get_many(every) == [model.get(k) for k in every]
    backend = _backend(provider_factory().get_state(namespace))
    get_many = getattr(backend, "get_many", None)
    if get_many is None:  # the SDK's example: the state's default (above) is all there is
        return
    keys = [_enc(f"k{i:04d}") for i in range(N)] + [_enc("absent"), _enc("k0001"), _enc(3)]
    got = get_many(keys)
    assert got == [backend.load(k) for k in keys]
    assert [None if v is None else orjson.loads(v) for v in got[:N]] == [
        model.get(f"k{i:04d}") for i in range(N)
    ]
    assert got[N] is None and got[N + 1] == got[1]
    assert get_many([]) == []


def test_backend_get_many_after_a_fold_and_more_commits(
    provider_factory: Any, namespace: str
) -> None:
    # sqlite: some values in the folded entries, newer ones in the committed log.
    model = _store(provider_factory, namespace, commits=12)
    state = provider_factory().get_state(namespace)
    for i in range(0, N, 5):
        state.put(f"k{i:04d}", "late")
        model[f"k{i:04d}"] = "late"
    state.delete("k0003")
    model.pop("k0003", None)
    state.prepare_commit(12)
    state.commit(12)
    fresh = provider_factory().get_state(namespace)  # a restart: nothing cached
    keys = [f"k{i:04d}" for i in range(N)]
    assert fresh.get_many(keys, "<none>") == [model.get(k, "<none>") for k in keys]
    backend = _backend(fresh)
    if getattr(backend, "get_many", None) is not None:
        encoded = [_enc(k) for k in keys]
        assert backend.get_many(encoded) == [backend.load(k) for k in encoded]


def test_state_get_many_sees_pending_over_prepared_over_committed(
    provider_factory: Any, namespace: str
) -> None:
    state = provider_factory().get_state(namespace)
    for key in ("c", "p", "x", "d"):
        state.put(key, f"{key}-committed")
    state.prepare_commit(0)
    state.commit(0)
    state.put("p", "p-prepared")
    state.delete("d")
    state.prepare_commit(1)
    state.put("x", "x-pending")
    state.put(("t", 1), {"nested": [1]})
    keys = ["c", "p", "x", "d", ("t", 1), "never", "c"]
    expected = ["c-committed", "p-prepared", "x-pending", 0, {"nested": [1]}, 0, "c-committed"]
    assert state.get_many(keys, 0) == expected
    assert state.get_many([]) == []
    # A restart before the commit: only the committed layer is visible.
    assert provider_factory().get_state(namespace).get_many(keys, 0) == [
        "c-committed",
        "p-committed",
        "x-committed",
        "d-committed",
        0,
        0,
        "c-committed",
    ]


def test_prefetch_reads_what_the_cache_lacks_in_one_call_and_gets_stay_exact(
    provider_factory: Any, namespace: str
) -> None:
    model = _store(provider_factory, namespace)
    provider = provider_factory()
    size_cache(provider, TINY_MB)
    state = provider.get_state(namespace)
    state.preload_limit = 0  # a state too large to read whole, as a large one is
    keys = [*[f"k{i:04d}" for i in range(0, N, 3)][:7], "absent"]  # half a generation
    assert state.prefetch(keys) == len(keys)
    assert state.batch_reads == 1 and state.prefetched == len(keys)
    reads = state.store_reads
    assert [state.get(k, "<none>") for k in keys] == [model.get(k, "<none>") for k in keys]
    assert state.store_reads == reads, "a prefetched key was read again"
    assert state.prefetch(keys) == 0, "cached keys read again"
    # Many more keys than the cache holds: every get stays the model's.
    every = [f"k{i:04d}" for i in range(N)]
    for start in range(0, N, 8):
        state.prefetch(every[start : start + 8])
        for key in every[start : start + 8]:
            assert state.get(key, "<none>") == model.get(key, "<none>"), key
    assert dict(state.items()) == model


def test_prefetch_never_hides_uncommitted_changes(provider_factory: Any, namespace: str) -> None:
    model = _store(provider_factory, namespace)
    provider = provider_factory()
    size_cache(provider, TINY_MB)
    state = provider.get_state(namespace)
    state.preload_limit = 0
    changed = {f"k{i:04d}": "new" for i in range(0, N, 2)}
    for key, value in changed.items():
        state.put(key, value)
    state.delete("k0001")
    model.update(changed)
    model.pop("k0001", None)
    state.prepare_commit(3)
    state.put("k0005", "pending")
    model["k0005"] = "pending"
    every = [f"k{i:04d}" for i in range(N)]
    state.prefetch(every)
    assert state.get_many(every, "<none>") == [model.get(k, "<none>") for k in every]
    state.commit(3)
    assert state.get_many(every, "<none>") == [model.get(k, "<none>") for k in every]


@pytest.mark.parametrize("bad", [[["a list"]], [{"a": "dict"}], [float("nan")], [object()]])
def test_a_key_no_state_can_hold_is_skipped_by_prefetch(
    provider_factory: Any, namespace: str, bad: list[Any]
) -> None:
    model = _store(provider_factory, namespace)
    provider = provider_factory()
    size_cache(provider, TINY_MB)
    state = provider.get_state(namespace)
    state.preload_limit = 0
    assert state.prefetch([*bad, "k0002", "\ud800"]) == 1  # a guess: never an error
    assert state.get("k0002") == model["k0002"]
