"""The ``memory`` state provider: the default, fast and not durable (as in Storm).

Committed state lives in a process-wide store chosen by the config key
``name`` (default ``"default"``), so a provider opened again in the same
process, as the local runtime does when it restarts a topology after a
failure, finds what was committed. The process ending loses everything.

Config (``topology.state.provider.config``)::

    name:        "default"   # which process-wide store
    serializer:  "json"      # or "pickle" (see statestream.provider)

Values are stored encoded, like in the durable providers, so the memory
provider fails on the same values they would and never aliases a live object.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Self

from statestream.provider import (
    SHARING_PROCESS,
    BackendStateProvider,
    CommitOutcome,
    Delta,
    check_config_keys,
    config_option,
    get_serializer,
)

__all__ = ["MemoryStateProvider"]


class _Namespace:
    """The stored layers of one namespace. Guarded by its store's lock."""

    __slots__ = ("committed", "committed_txid", "ordered", "prepared", "prepared_txid")

    def __init__(self) -> None:
        self.committed: dict[bytes, bytes] = {}
        # The committed keys sorted, for paged reads (scan_page); None once a
        # key was added since. A deleted key may linger in it (pages skip
        # it), so a commit of deletions alone keeps it: a rescale deleting
        # the keys it moves pages on without sorting again.
        self.ordered: list[bytes] | None = None
        self.committed_txid = -1
        self.prepared: dict[bytes, bytes | None] = {}
        self.prepared_txid: int | None = None


class _Store:
    """One named process-wide store: namespaces and the lock that makes commits atomic."""

    __slots__ = ("lock", "namespaces")

    def __init__(self) -> None:
        # Commits must look atomic to other threads (another provider instance
        # dumping namespaces, a runtime restarting in a thread), hence a lock.
        self.lock = threading.Lock()
        self.namespaces: dict[str, _Namespace] = {}


_STORES: dict[str, _Store] = {}
_STORES_LOCK = threading.Lock()


def _reset_locks_after_fork() -> None:
    # A lock held by another thread at fork time would stay held forever in
    # the child, which has only the forking thread: give the child fresh ones.
    global _STORES_LOCK
    _STORES_LOCK = threading.Lock()
    for store in _STORES.values():
        store.lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_after_fork)


def _store(name: str) -> _Store:
    with _STORES_LOCK:
        store = _STORES.get(name)
        if store is None:
            store = _STORES[name] = _Store()
        return store


class _MemoryBackend:
    """:class:`~statestream.provider.StateBackend` of one namespace of a memory store."""

    __slots__ = ("_namespace", "_provider", "_store")

    def __init__(self, provider: MemoryStateProvider, store: _Store, namespace: str) -> None:
        self._provider = provider
        self._store = store
        self._namespace = namespace

    def _ns(self) -> _Namespace:
        """The namespace, created on first use; call with the lock held."""
        self._provider.check_open()
        namespace = self._store.namespaces.get(self._namespace)
        if namespace is None:
            namespace = self._store.namespaces[self._namespace] = _Namespace()
        return namespace

    def load(self, key: bytes) -> bytes | None:
        with self._store.lock:
            return self._ns().committed.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        with self._store.lock:
            committed = self._ns().committed
            return [committed.get(key) for key in keys]

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        # Copy under the lock so a concurrent commit cannot break the iteration;
        # the values are immutable bytes, so this costs one list of references.
        with self._store.lock:
            entries = list(self._ns().committed.items())
        return iter(entries)

    def scan_page(
        self, after: bytes | None, limit: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        with self._store.lock:
            namespace = self._ns()
            committed = namespace.committed
            ordered = namespace.ordered
            if ordered is None:
                ordered = namespace.ordered = sorted(committed)
            start = 0 if after is None else bisect_right(ordered, after)
            keys = ordered[start : start + limit]
            page = [(key, committed[key]) for key in keys if key in committed]
        return page, (keys[-1] if len(keys) == limit else None)

    def key_count(self) -> int:
        with self._store.lock:
            return len(self._ns().committed)

    def load_txids(self) -> tuple[int, int | None]:
        with self._store.lock:
            namespace = self._ns()
            return namespace.committed_txid, namespace.prepared_txid

    def write_prepared(self, txid: int, delta: Delta) -> None:
        with self._store.lock:
            namespace = self._ns()
            namespace.prepared.update(delta)
            namespace.prepared_txid = txid

    def apply_prepared(self, txid: int) -> CommitOutcome:
        with self._store.lock:
            namespace = self._ns()
            if txid <= namespace.committed_txid:
                return CommitOutcome.ALREADY_COMMITTED
            if namespace.prepared_txid != txid:
                return CommitOutcome.NOT_PREPARED
            _apply(namespace, namespace.prepared.items())
            namespace.prepared = {}
            namespace.prepared_txid = None
            namespace.committed_txid = txid
            return CommitOutcome.APPLIED

    def commit_direct(self, delta: Delta) -> None:
        with self._store.lock:
            _apply(self._ns(), delta)

    def discard_prepared(self) -> None:
        with self._store.lock:
            namespace = self._ns()
            namespace.prepared = {}
            namespace.prepared_txid = None


def _apply(namespace: _Namespace, delta: Iterable[tuple[bytes, bytes | None]]) -> None:
    committed = namespace.committed
    for key, value in delta:
        if value is None:
            committed.pop(key, None)
        else:
            if key not in committed:  # a new key: the sorted keys miss it
                namespace.ordered = None
            committed[key] = value


class MemoryStateProvider(BackendStateProvider):
    """State in this process's memory, shared by every provider with the same ``name``."""

    name: ClassVar[str] = "memory"
    sharing: ClassVar[str] = SHARING_PROCESS  # this process only
    _KEYS: ClassVar[frozenset[str]] = frozenset({"name", "serializer"})

    def __init__(self, store_name: str = "default", serializer: str = "json") -> None:
        super().__init__(get_serializer(serializer))
        self.store_name = store_name
        self._store = _store(store_name)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        check_config_keys(cls.name, config, cls._KEYS)
        return cls(
            store_name=config_option(cls.name, config, "name", str, "default"),
            serializer=config_option(cls.name, config, "serializer", str, "json"),
        )

    def __repr__(self) -> str:
        return f"MemoryStateProvider(name={self.store_name!r})"

    def __getstate__(self) -> dict[str, Any]:
        # The store is this process's; a copy unpickled elsewhere joins the
        # store of the same name there (for local runs that pickle topologies).
        state = self.__dict__.copy()
        state.update(_store=None, _states={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._store = _store(self.store_name)

    def _open_backend(self, namespace: str) -> _MemoryBackend:
        return _MemoryBackend(self, self._store, namespace)

    def namespaces(self) -> list[str]:
        with self._store.lock:
            return sorted(name for name, ns in self._store.namespaces.items() if ns.committed)

    def stored_namespaces(self) -> list[str]:
        with self._store.lock:
            return sorted(
                name
                for name, ns in self._store.namespaces.items()
                if ns.committed
                or ns.prepared
                or ns.committed_txid != -1
                or ns.prepared_txid is not None
            )

    def _drop(self, namespaces: list[str]) -> None:
        with self._store.lock:
            for name in namespaces:
                self._store.namespaces.pop(name, None)

    @classmethod
    def clear(cls, name: str | None = None) -> None:
        """Empty the store called ``name``, or every store (for tests).

        The store is emptied in place, so providers already open on it see it
        empty too (apart from what their states had cached or left pending).
        """
        with _STORES_LOCK:
            stores = list(_STORES.values()) if name is None else [_STORES.get(name)]
        for store in stores:
            if store is not None:
                with store.lock:
                    store.namespaces.clear()
