"""The provider SDK: everything needed to write a state provider, and nothing else.

statestream's own providers (``memory``, ``sqlite``, ``redis``) import only
from here and from :mod:`statestream`, exactly as a third party's would.

Writing a provider
==================

A provider stores the state of stateful bolts. The state a bolt sees
(:class:`KeyValueState`: the pending and prepared overlays, the read cache,
the txid rules of the checkpoint protocol) is implemented once, in
:class:`StoredKeyValueState`; a provider only supplies storage.

1. **Implement a** :class:`StateBackend` **for one namespace.** A namespace
   is one task's state (``"<component>-<task>"``, e.g. ``"count-0"``). Keys
   and values arrive already encoded as bytes. Seven methods: ``load``,
   ``scan``, ``load_txids``, ``write_prepared``, ``apply_prepared``,
   ``commit_direct``, ``discard_prepared``. Optional, ``scan_page``: the
   committed entries a page at a time in key order, so that ``items()``,
   ``statestream state dump`` and rescale read a state of any size in
   bounded memory and in order (see :class:`StateBackend`). Optional,
   ``get_many(keys)``: the committed values of many keys in one call of
   the store, in their order (None where absent), which the runtime uses to
   read the keys of a batch of tuples before executing them; without it
   the state calls ``load`` once a key (the default). Each is one atomic operation on
   the store (a crash leaves the old or the new store, never a mix) and
   can be repeated after a failure. ``None`` as a value in a :data:`Delta`
   is a deletion. Translate the store's errors at this boundary: a store
   that cannot be reached raises :class:`ProviderUnavailableError` (the
   runtime retries), one that cannot be read :class:`StateCorruptError`,
   each ``raise ... from exc``.

2. **Subclass** :class:`BackendStateProvider`. Set ``name`` and
   ``sharing`` (:data:`SHARING_PROCESS`, :data:`SHARING_MACHINE` or
   :data:`SHARING_NETWORK`: which processes see the same state when they
   open the provider with the same config; the default is the narrowest,
   ``SHARING_PROCESS``, and runtimes that spread tasks over processes or
   hosts refuse a provider whose scope is too narrow). Implement
   ``from_config`` (validate with :func:`check_config_keys` and
   :func:`config_option`, accept a ``serializer`` key and pass
   ``get_serializer(...)`` to ``super().__init__``), ``_open_backend`` and
   ``namespaces``, and ``_close`` if you hold resources. ``from_config``
   and ``_open_backend`` must not connect: providers are pickled and
   shipped to workers, so connect on first use, and again after a fork.

3. **Optional: claim a run's scope.** Two runs of one topology on one
   store would undo each other's checkpoints. If your store can tell who
   uses it, override :meth:`BackendStateProvider.claim`: ``claim(scope,
   wait)`` holds ``scope`` (the topology's name) of the store for one run,
   exclusively, and returns a :class:`ScopeClaim` (its ``release()`` lets
   go, idempotently); a scope that another process holds is waited for up
   to ``wait`` seconds, then refused with
   ``StateLockedError.for_scope(scope, store, pid=..., wait=wait)``. A
   claim of a scope this process holds already is granted (re-entrant), and
   a claim must end with its process (an OS file lock does; a lease would
   expire). :class:`ProcessClaims` does the bookkeeping of that: take your
   hold on the store (a :class:`Hold`: a lock, a lease, with ``end()``)
   once per process and scope, ``add`` it, ``join`` it for the claims that
   follow; the :class:`ClaimHandle` it hands out counts the releases and
   leaves a forked child's alone. Wait with a :class:`ClaimWait` on the
   provider's ``clock`` (the system's; a test sets a FakeClock and waits
   without sleeping). The runtime claims before the run reads
   any state and releases at its end. The default returns None (nothing is
   guarded; a run whose checkpoints another run keeps refusing is still
   stopped, after the fact). ``sqlite`` claims with a ``flock`` on a file
   beside the database; ``redis`` with a lease (a key that expires unless
   the holder's thread renews it; a hold that can be lost so says in its
   ``lost``, see :class:`ScopeClaim`).

4. **Optional: delete state wholly.** ``statestream state clear`` deletes
   a topology's namespaces whole, txids included, so that its next run
   starts as on a new store (never key by key: a bolt's key may be called
   anything, ``checkpoint`` included). Implement ``stored_namespaces()``
   (every namespace the store holds anything of: committed entries, a
   prepared delta or txids) and ``_drop(namespaces)`` (delete those
   namespaces whole, all or nothing where the store can);
   :meth:`BackendStateProvider.drop_namespaces` calls it and forgets the
   states it handed out. Without them ``state clear`` says the provider
   cannot.

5. **Register it** under the entry-point group ``statestream.providers``
   in your package's ``pyproject.toml``::

       [project.entry-points."statestream.providers"]
       dict = "mypkg.state:DictStateProvider"

   Users then write ``topology.state.provider: dict``
   (``statestream providers`` lists it); ``mypkg.state:DictStateProvider``
   works without registering.

6. **Run the conformance suite** from a statestream checkout; it runs every
   test on your provider, unchanged::

       SSTREAM_CONFORMANCE_PROVIDER='mypkg.state:DictStateProvider' \\
       SSTREAM_CONFORMANCE_CONFIG='{"store": "conformance"}' \\
       pytest tests/conformance -k external

A complete provider, kept in one process's memory (the conformance suite
runs on this very example, so it stays correct)::

    from collections.abc import Iterator, Mapping
    from typing import Any, ClassVar, Self

    from statestream.provider import (
        SHARING_PROCESS,
        BackendStateProvider,
        CommitOutcome,
        Delta,
        StateError,
        check_config_keys,
        config_option,
        get_serializer,
    )


    class Tables:
        \"\"\"What the store holds for one namespace.\"\"\"

        def __init__(self) -> None:
            self.committed: dict[bytes, bytes] = {}
            self.prepared: dict[bytes, bytes | None] = {}
            self.committed_txid = -1
            self.prepared_txid: int | None = None


    class DictBackend:
        \"\"\"The StateBackend of one namespace, as one provider instance sees it.\"\"\"

        def __init__(self, provider: BackendStateProvider, tables: Tables) -> None:
            self.provider = provider
            self.tables = tables

        def _open(self) -> Tables:
            # The states of a closed provider must stop working.
            if self.provider.closed:
                raise StateError(f"the {self.provider.name} state provider is closed")
            return self.tables

        def load(self, key: bytes) -> bytes | None:
            return self._open().committed.get(key)

        def scan(self) -> Iterator[tuple[bytes, bytes]]:
            return iter(list(self._open().committed.items()))

        def scan_page(
            self, after: bytes | None, limit: int
        ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
            # Optional: pages in key order (items() without it comes in scan()'s order).
            committed = self._open().committed
            keys = sorted(k for k in committed if after is None or k > after)[:limit]
            return [(k, committed[k]) for k in keys], (keys[-1] if len(keys) == limit else None)

        def load_txids(self) -> tuple[int, int | None]:
            tables = self._open()
            return tables.committed_txid, tables.prepared_txid

        def write_prepared(self, txid: int, delta: Delta) -> None:
            tables = self._open()
            tables.prepared.update(delta)
            tables.prepared_txid = txid

        def apply_prepared(self, txid: int) -> CommitOutcome:
            tables = self._open()
            if txid <= tables.committed_txid:
                return CommitOutcome.ALREADY_COMMITTED
            if txid != tables.prepared_txid:
                return CommitOutcome.NOT_PREPARED
            self.commit_direct(list(tables.prepared.items()))
            tables.prepared, tables.prepared_txid = {}, None
            tables.committed_txid = txid
            return CommitOutcome.APPLIED

        def commit_direct(self, delta: Delta) -> None:
            committed = self._open().committed
            for key, value in delta:
                if value is None:  # a deletion
                    committed.pop(key, None)
                else:
                    committed[key] = value

        def discard_prepared(self) -> None:
            tables = self._open()
            tables.prepared, tables.prepared_txid = {}, None


    class DictStateProvider(BackendStateProvider):
        \"\"\"State in dicts of this process, one set of tables per config ``store``.\"\"\"

        name: ClassVar[str] = "dict"
        sharing: ClassVar[str] = SHARING_PROCESS
        stores: ClassVar[dict[str, dict[str, Tables]]] = {}

        def __init__(self, store: str = "default", serializer: str = "json") -> None:
            super().__init__(get_serializer(serializer))
            self.store = store

        @classmethod
        def from_config(cls, config: Mapping[str, Any]) -> Self:
            check_config_keys(cls.name, config, {"store", "serializer"})
            return cls(
                store=config_option(cls.name, config, "store", str, "default"),
                serializer=config_option(cls.name, config, "serializer", str, "json"),
            )

        def _open_backend(self, namespace: str) -> DictBackend:
            tables = self.stores.setdefault(self.store, {}).setdefault(namespace, Tables())
            return DictBackend(self, tables)

        def namespaces(self) -> list[str]:
            tables = self.stores.get(self.store, {})
            return sorted(ns for ns, t in tables.items() if t.committed)

        def stored_namespaces(self) -> list[str]:
            return sorted(self.stores.get(self.store, {}))

        def _drop(self, namespaces: list[str]) -> None:
            tables = self.stores.get(self.store, {})
            for namespace in namespaces:
                tables.pop(namespace, None)

What is stored: values go through the provider's serializer
(:func:`get_serializer`; JSON by default, ``serializer: pickle`` on
request), keys always through JSON (:func:`encode_json`), so the same key
has the same bytes in every provider and reading keys back never runs code.
"""

from __future__ import annotations

from statestream._claims import ClaimHandle, ClaimWait, Hold, ProcessClaims
from statestream._errors import (
    ConfigError,
    ProtocolViolation,
    ProviderUnavailableError,
    SerializationError,
    StateCorruptError,
    StateError,
    StateLockedError,
    StoreUnwritableError,
)
from statestream._registry import ENTRY_POINT_GROUP
from statestream._serde import (
    JsonSerializer,
    PickleSerializer,
    Serializer,
    encode_json,
    get_serializer,
    serializer_names,
)
from statestream._state import (
    SHARING_MACHINE,
    SHARING_NETWORK,
    SHARING_PROCESS,
    SHARING_SCOPES,
    BackendStateProvider,
    CommitOutcome,
    Delta,
    KeyValueState,
    ScopeClaim,
    State,
    StateBackend,
    StateProvider,
    StoredKeyValueState,
    check_config_keys,
    config_option,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "SHARING_MACHINE",
    "SHARING_NETWORK",
    "SHARING_PROCESS",
    "SHARING_SCOPES",
    "BackendStateProvider",
    "ClaimHandle",
    "ClaimWait",
    "CommitOutcome",
    "ConfigError",
    "Delta",
    "Hold",
    "JsonSerializer",
    "KeyValueState",
    "PickleSerializer",
    "ProcessClaims",
    "ProtocolViolation",
    "ProviderUnavailableError",
    "ScopeClaim",
    "SerializationError",
    "Serializer",
    "State",
    "StateBackend",
    "StateCorruptError",
    "StateError",
    "StateLockedError",
    "StateProvider",
    "StoreUnwritableError",
    "StoredKeyValueState",
    "check_config_keys",
    "config_option",
    "encode_json",
    "get_serializer",
    "serializer_names",
]
