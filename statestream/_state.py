"""State contracts, and the one key-value state every provider shares.

Layers, top to bottom::

    KeyValueState (Protocol)     what a stateful bolt sees: get/put/delete/items
        |                        plus State's prepare_commit/commit/rollback
    StoredKeyValueState          the shared implementation: the pending and
        |                        prepared overlays, the read cache, the txid rules
    StateBackend (Protocol)      the storage primitives of one namespace, which is
        |                        all a provider has to write (memory, sqlite, redis)
    BackendStateProvider         base class of providers: one state per namespace,
                                 close() and the context-manager protocol

A state has three layers. *Committed* entries live in the store. The
*prepared* delta of one txid lives in the store too, beside them, until that
txid is committed (applied atomically) or rolled back (discarded). *Pending*
changes, made since the last prepare or commit, live in memory only. Reads
see pending over prepared over committed; a deletion is a *tombstone* that
hides the layers below it until it is committed.

Transaction ids follow the checkpoint protocol (``statestream._checkpoint``):

* ``prepare_commit(t)`` needs ``t == committed_txid + 1``, or ``t`` equal to
  the txid already prepared, whose delta the new changes are then merged
  onto. A state with nothing prepared may also jump ahead to any later ``t``:
  it missed txids because it was not in the topology when they ran (a bolt
  added, or re-added, to a running topology, or a namespace that was reset),
  and it joins at the checkpoint spout's current txid.
* ``commit(t)`` applies the prepared delta of ``t``; a ``t`` at or below the
  committed txid is a no-op, because recovery may send a commit twice.
* ``rollback()`` discards the prepared delta and the pending changes.
* ``commit()`` without a txid writes the pending changes straight to the
  committed layer (the checkpoint spout's own phase, spout positions).

Everything else raises :class:`~statestream._errors.ProtocolViolation`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Final, Protocol, Self, TypeVar, runtime_checkable

from statestream._clock import Clock, SystemClock
from statestream._errors import (
    ConfigError,
    StateError,
)
from statestream._kvstate import (
    DEFAULT_CACHE_MB,
    CommitOutcome,
    StoredKeyValueState,
)
from statestream._outage import GuardedBackend, OutageGuard
from statestream._serde import Serializer

__all__ = [
    "SHARING_MACHINE",
    "SHARING_NETWORK",
    "SHARING_PROCESS",
    "SHARING_SCOPES",
    "BackendStateProvider",
    "CommitOutcome",
    "Delta",
    "KeyValueState",
    "ScanPage",
    "ScopeClaim",
    "State",
    "StateBackend",
    "StateProvider",
    "StoredKeyValueState",
    "check_config_keys",
    "config_option",
]

#: A change set as the store sees it: encoded key -> encoded value, where
#: ``None`` is a tombstone (delete the key). Serializers never produce ``None``,
#: and a stored JSON ``null`` is the bytes ``b"null"``, so the two cannot meet.
Delta = Sequence[tuple[bytes, bytes | None]]

#: :meth:`StateBackend.scan_page`'s signature: ``(after, limit) -> (page, next)``.
ScanPage = Callable[[bytes | None, int], tuple[list[tuple[bytes, bytes]], bytes | None]]

_MIB: Final = 1024 * 1024

#: Sharing scopes: who can see a provider's state (:attr:`StateProvider.sharing`).
#: One Python process only (the ``memory`` provider).
SHARING_PROCESS: Final = "process"
#: Any process on the machine that holds the store (``sqlite``: one file).
SHARING_MACHINE: Final = "machine"
#: Any process that can reach the store over the network (``redis``).
SHARING_NETWORK: Final = "network"
#: The scopes, narrowest first.
SHARING_SCOPES: Final = (SHARING_PROCESS, SHARING_MACHINE, SHARING_NETWORK)


# --------------------------------------------------------------------------- contracts


@runtime_checkable
class State(Protocol):
    """Checkpointed state of one task, driven by the checkpoint protocol.

    Call order (the checkpoint protocol): ``prepare_commit(t)`` then ``commit(t)``, or
    ``rollback()`` instead of the commit. A state is owned by one task and is
    not safe to use from several threads at once.
    """

    def prepare_commit(self, txid: int) -> None:
        """Store the changes since the last prepare/commit as the prepared delta of ``txid``.

        ``txid`` must be ``committed_txid + 1``, or the txid already prepared
        (the new changes are merged onto its delta, last write wins), or, with
        nothing prepared, any later txid (a state joining a running topology).
        Anything else raises ProtocolViolation and changes nothing.
        """
        ...

    def commit(self, txid: int | None = None) -> None:
        """Apply the prepared delta of ``txid`` atomically and record ``txid`` as committed.

        A ``txid`` at or below :attr:`committed_txid` is a no-op. With
        ``txid=None`` the pending changes are committed directly, atomically
        and without a prepare; the committed txid does not move.
        """
        ...

    def rollback(self) -> None:
        """Discard the prepared delta and the pending changes: back to the committed state."""
        ...

    @property
    def committed_txid(self) -> int:
        """The last txid committed with ``commit(txid)``; -1 when there is none."""
        ...

    @property
    def prepared_txid(self) -> int | None:
        """The txid whose delta is prepared and not yet committed, if any."""
        ...


@runtime_checkable
class KeyValueState(State, Protocol):
    """A mapping in a namespace, checkpointed with the :class:`State` protocol.

    Keys are JSON scalars or tuples of them (hashable); values are whatever
    the provider's serializer accepts (JSON types by default). Values are
    encoded at ``put``: what is stored is a snapshot, so a value mutated in
    place after ``put`` must be put again, and values returned by ``get``
    should be treated as read-only.
    """

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key`` (pending over prepared over committed), or ``default``."""
        ...

    def put(self, key: Any, value: Any) -> None:
        """Set ``key``; raises SerializationError (naming namespace, key and type) at once."""
        ...

    def delete(self, key: Any) -> Any:
        """Delete ``key`` and return its old value (or None); hides older layers."""
        ...

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every visible ``(key, value)``, exactly what ``get`` would return; order unspecified."""
        ...

    def __iter__(self) -> Iterator[Any]: ...

    def __contains__(self, key: object) -> bool: ...


@runtime_checkable
class StateProvider(Protocol):
    """Makes the states of a topology; a resource, so a context manager.

    ``from_config`` must not connect: providers are built on a driver and
    shipped to workers, so connections open lazily on first use and again
    after a fork. ``get_state`` returns the same object for the same
    namespace. ``close`` is idempotent; states are not usable afterwards.

    ``sharing`` says which processes see the same state when they open the
    provider with the same config: :data:`SHARING_PROCESS` (this Python
    process only), :data:`SHARING_MACHINE` (the processes of one machine) or
    :data:`SHARING_NETWORK` (any process that reaches the store). A runtime
    that spreads tasks over processes or hosts refuses a provider whose
    scope is too narrow (see ``statestream._registry.provider_sharing``).

    Optional: ``claim(scope, wait) -> ScopeClaim | None`` (see
    :meth:`BackendStateProvider.claim`). A provider without it is treated as
    one that cannot tell whether another run uses the store.

    Optional: ``stored_namespaces()`` and ``drop_namespaces(namespaces)``,
    which delete state wholly (see :class:`BackendStateProvider`); without
    them ``statestream state clear`` says the provider cannot.
    """

    name: ClassVar[str]
    sharing: ClassVar[str]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Build from ``topology.state.provider.config``; bad keys raise ConfigError."""
        ...

    def get_state(self, namespace: str) -> KeyValueState:
        """The state of ``namespace`` (e.g. ``"count-0"``, ``"$checkpointspout-0"``)."""
        ...

    def namespaces(self) -> list[str]:
        """Namespaces that have committed entries, sorted."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ScopeClaim(Protocol):
    """A run's exclusive hold on one scope of a store, from :meth:`BackendStateProvider.claim`.

    Optional: ``lost -> str | None``, for a claim that can end while it is
    held (a lease another process took over, or one that lapsed while the
    store could not be reached): why it was lost, None while it holds. A
    claim without it (a file lock) cannot be lost. A claim type that has
    ``lost`` only for some of its holds says which with ``can_lapse -> bool``.
    The runtimes read them through ``statestream._registry.RunClaim``, and
    stop a run whose claim was lost within a second or so.
    """

    def release(self) -> None:
        """Let the scope go; idempotent. A process that dies lets it go too."""
        ...


class StateBackend(Protocol):
    """The storage primitives of one namespace, all a provider implements.

    Keys and values arrive encoded. Every method is a complete operation on
    the store: the writes are atomic (one transaction, one MULTI/EXEC or one
    script), so a crash between two calls leaves either the old or the new
    store, never a mix. Calls may be repeated after a failure (a lost
    connection), so they must be idempotent. Failures to reach the store raise
    ProviderUnavailableError, unreadable stores StateCorruptError.

    Optional: ``write_prepared_plain(txid, plain, delta)`` does what
    ``write_prepared(txid, delta)`` does, with the entries of ``plain`` added
    to the delta. ``plain`` maps ASCII ``str`` keys to values that JSON
    encodes to what reads back equal and of their type (ASCII ``str``,
    ``int`` within ``±2**61``, ``bool``, ``None``), not yet encoded; the
    entry of each is ``(orjson.dumps(key), orjson.dumps(value))``. The state
    calls it, with the JSON serializer only, for the puts it kept unencoded,
    so a backend that stores them as one document encodes no key or value
    one by one. Its keys are never keys of ``delta``. It may return the
    bytes it wrote (an ``int``), which the state reports as its
    ``prepared_bytes``.

    Optional: ``key_count() -> int``: the committed keys, where the store
    knows it in O(1) (a Redis HLEN, a dict's len); a state opened on a large
    store then reads no page of it to learn that it is too large to read
    whole.

    Optional: ``get_many(keys) -> list[bytes | None]``: the committed values
    of ``keys`` (a sequence of encoded keys, duplicates allowed), in their
    order, None for a key not stored: what ``[load(k) for k in keys]``
    returns, in one operation of the store (Redis ``HMGET``, one ``SELECT
    ... IN``). The state calls it to read ahead of a batch of tuples
    (:meth:`StoredKeyValueState.prefetch`); without it, it loops ``load``.

    Optional: ``scan_page(after, limit) -> (page, next)``: committed entries
    in key order, a page at a time, so that ``items()``, ``state dump`` and
    rescale read a state of any size in bounded memory. ``page`` holds the
    entries whose encoded key is above ``after`` (every one when None), in
    ascending order of the key's bytes, about ``limit`` of them (a page may
    be shorter, even empty, or a little longer); ``next`` is the ``after``
    of the next page, None once the entries are exhausted. Each call is its
    own short read: nothing stays open between pages, and entries committed
    meanwhile may or may not be seen, but each key comes once. A backend
    without it is read with ``scan()``: in its own order, still lazily.
    """

    def load(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or None."""
        ...

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed ``(key, value)``, lazily, each key once; order unspecified."""
        ...

    # scan_page (optional) is described above; a Protocol member would make it required.

    def load_txids(self) -> tuple[int, int | None]:
        """``(committed txid or -1, prepared txid or None)``."""
        ...

    def write_prepared(self, txid: int, delta: Delta) -> None:
        """Merge ``delta`` into the prepared delta and record ``txid`` as prepared."""
        ...

    def apply_prepared(self, txid: int) -> CommitOutcome:
        """If ``txid`` > committed and is the prepared txid: apply the delta, record
        ``txid`` as committed and drop the delta, all atomically. Cost is
        proportional to the delta, never to the size of the namespace."""
        ...

    def commit_direct(self, delta: Delta) -> None:
        """Apply ``delta`` to the committed entries atomically; txids unchanged."""
        ...

    def discard_prepared(self) -> None:
        """Drop the prepared delta and the prepared txid."""
        ...


# --------------------------------------------------------------------------- providers


def check_config_keys(provider: str, config: Mapping[str, Any], known: Iterable[str]) -> None:
    """Raise ConfigError naming every key of ``config`` not in ``known``."""
    known_set = set(known)
    unknown = sorted(str(key) for key in config if key not in known_set)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(map(repr, unknown))} in the {provider} state provider "
            f"config (topology.state.provider.config); known keys: {', '.join(sorted(known_set))}"
        )


_T = TypeVar("_T", str, int, float, bool)
_TRUE: Final = frozenset({"true", "yes", "on", "1"})
_FALSE: Final = frozenset({"false", "no", "off", "0"})


def config_option(
    provider: str, config: Mapping[str, Any], key: str, kind: type[_T], default: _T
) -> _T:
    """Read ``config[key]`` as ``kind``, or ``default`` when absent or None.

    Strings are accepted for numbers and booleans, since configs also come
    from environment variables and ``--set``. A value that does not convert
    raises ConfigError quoting it.
    """
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
        return value
    try:
        if kind is bool and isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if kind in (int, float) and isinstance(value, (str, int, float)):
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return kind(value)
    except ValueError:
        pass
    raise ConfigError(
        f"{provider} state provider config {key!r} must be a {kind.__name__}, "
        f"not {type(value).__name__} {value!r}"
    )


def cannot_drop(provider: str) -> StateError:
    """The error of a provider without ``stored_namespaces`` and ``drop_namespaces``."""
    return StateError(
        f"the {provider} state provider cannot delete state wholly (it has no "
        "stored_namespaces() and drop_namespaces(); see statestream.provider); delete "
        "its store instead, or run the topology under another name"
    )


#: Between a topology's scope and its namespaces in a store (``<topology>/<namespace>``:
#: statestream._registry.ScopedProvider), so two topologies never share state.
SCOPE_SEPARATOR: Final = "/"


def runtime_namespace(namespace: str) -> bool:
    """Whether ``namespace`` (scoped or not) is the runtime's own, a few keys (its last
    part starts with ``$``: the checkpoint spout's record, the layout), not a bolt's."""
    return namespace.rpartition(SCOPE_SEPARATOR)[2].startswith("$")


class BackendStateProvider(ABC):
    """Base of providers built on :class:`StateBackend`: memory, sqlite and redis.

    Subclasses implement :meth:`from_config`, :meth:`_open_backend`,
    :meth:`namespaces` and, if they hold resources, :meth:`_close`.
    ``get_state`` hands out one :class:`StoredKeyValueState` per namespace;
    ``forget_state`` drops it, for a runtime whose namespace another process
    writes between two uses (Spark's driver and executors).

    ``sharing`` defaults to :data:`SHARING_PROCESS`, the conservative
    answer: a provider whose store other processes can reach says so.
    """

    name: ClassVar[str]
    sharing: ClassVar[str] = SHARING_PROCESS
    #: What :meth:`claim` waits on (``ClaimWait``): the system's clock, or a
    #: FakeClock that a test sets and advances, so a wait is never slept out.
    clock: Clock = SystemClock()
    #: Set by the runtime that opens the provider (``_outage.guard_store``): the
    #: states' store operations then ride out an outage. None: errors go straight up.
    outage: OutageGuard | None = None

    def __init__(self, serializer: Serializer) -> None:
        self._serializer = serializer
        self._states: dict[str, StoredKeyValueState] = {}
        self._closed = False
        self._cache_bytes = int(DEFAULT_CACHE_MB * _MIB)

    @property
    def serializer(self) -> Serializer:
        """The serializer of this provider's values (the config's ``serializer``)."""
        return self._serializer

    @property
    def cache_mb(self) -> float:
        """The read cache of this provider's states, MiB (``topology.state.cache.mb``).

        The states of bolts share it evenly; the runtime's own (a namespace
        whose last part starts with ``$``, ``runtime_namespace``: the
        checkpoint spout's record, the layout) hold a few keys and are not
        counted. The runtime sets it where it opens
        the provider (:func:`size_cache`).
        """
        return self._cache_bytes / _MIB

    @cache_mb.setter
    def cache_mb(self, mb: float) -> None:
        self._cache_bytes = int(mb * _MIB)
        self._share_cache()

    def _share_cache(self) -> None:
        states = self._states.values()
        bolts = sum(1 for state in states if not runtime_namespace(state.namespace))
        share = self._cache_bytes // max(1, bolts)
        for state in states:
            state.resize_cache(share)

    @classmethod
    @abstractmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Build from ``topology.state.provider.config``, without connecting."""

    @abstractmethod
    def _open_backend(self, namespace: str) -> StateBackend:
        """Return the backend of ``namespace``; it should not touch the store yet."""

    def missing_store(self) -> str | None:
        """Where the store would be if it does not exist yet, else None.

        Readers that must never create a store (``statestream state``) ask
        first; a provider whose store is a file returns its path when the
        file is absent. Default: None (the store exists, or cannot tell).
        """
        return None

    @abstractmethod
    def namespaces(self) -> list[str]:
        """Namespaces that have committed entries, sorted."""

    # Deleting state is a pair of operations, since namespaces() misses what
    # clear must delete too: a namespace with txids and no entries (a
    # stateful bolt that stored nothing) would refuse the next run's txid 0.

    def stored_namespaces(self) -> list[str]:
        """Every namespace the store holds anything of, sorted: committed entries,
        a prepared delta or txids (:meth:`namespaces` lists the first kind only).

        Optional, with :meth:`drop_namespaces` (``statestream state clear``
        needs both). Default: StateError saying the provider cannot.
        """
        raise cannot_drop(self.name)

    def drop_namespaces(self, namespaces: Sequence[str]) -> None:
        """Delete ``namespaces`` wholly: committed entries, the prepared delta and
        both txids, so that each reads as never written (txids ``-1`` and
        ``None``, no entries) and neither listing names it any more.

        All or nothing where the store can (one transaction, one lock, one
        MULTI/EXEC); a namespace the store does not hold is skipped. The
        states :meth:`get_state` handed out for them must not be used again;
        it hands out new ones. Run it only under the claim of the namespaces'
        topology (no run may be using them).

        Optional, with :meth:`stored_namespaces`: implement :meth:`_drop`.
        Without it, StateError saying the provider cannot (the seven
        StateBackend primitives have no way to reset a namespace's txids).
        """
        self.check_open()
        names = list(namespaces)
        self._drop(names)
        for namespace in names:
            self._states.pop(namespace, None)

    def _drop(self, namespaces: list[str]) -> None:
        """Delete ``namespaces`` wholly from the store (see :meth:`drop_namespaces`)."""
        raise cannot_drop(self.name)

    def claim(self, scope: str, wait: float) -> ScopeClaim | None:
        """Hold ``scope`` (a topology's name) of this store for one run, exclusively.

        Two runs of one topology on one store would take turns undoing each
        other's checkpoints: the process that owns a run (not its workers,
        not Spark's executors) claims its scope before it reads or writes
        any state, and releases the claim when the run ends. A claim
        another process holds is waited for, up to ``wait`` seconds of
        :attr:`clock` (:class:`~statestream._claims.ClaimWait`), then
        refused with :class:`~statestream._errors.StateLockedError`
        (``StateLockedError.for_scope(scope, store, pid=..., wait=...)``).
        A claim of a scope this same process holds already is granted
        (re-entrant: a runtime restarted within a process, as the tests
        do, claims again before the old one let go). A claim must not
        outlive its holder: a process that dies without releasing it lets
        it go (an OS file lock does; a lease would expire), and processes
        forked by the holder may share it. Other scopes of the store stay
        free. Nothing connects before the claim is asked for, as ever.
        ``sqlite`` claims with a file lock, ``redis`` with a lease (a key
        with an expiry that a thread of the holder renews).

        The default returns None: the provider cannot tell, and nothing
        is guarded (a store private to the process, as ``memory`` is, needs
        nothing more). The runtime then still stops a run whose checkpoints
        another run keeps refusing (see
        :class:`~statestream._errors.PrepareRefused`), after the fact.
        """
        return None

    def _close(self) -> None:  # noqa: B027 - an optional hook, not abstract on purpose
        """Release resources; called once, by :meth:`close`."""

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raise StateError if this provider was closed (every operation asks)."""
        if self._closed:
            raise StateError(f"the {self.name} state provider is closed; open a new one")

    def get_state(self, namespace: str) -> StoredKeyValueState:
        """The state of ``namespace``: the same object on every call."""
        self.check_open()
        state = self._states.get(namespace)
        if state is None:
            if not isinstance(namespace, str) or not namespace:
                raise ConfigError(f"a state namespace must be a non-empty str, not {namespace!r}")
            backend: StateBackend = self._open_backend(namespace)
            if self.outage is not None:  # a run's states ride out an outage (_outage)
                backend = GuardedBackend(backend, self.outage)
            state = StoredKeyValueState(namespace, backend, self._serializer)
            self._states[namespace] = state
            self._share_cache()
        return state

    def forget_state(self, namespace: str) -> None:
        """Drop the state object :meth:`get_state` cached for ``namespace``, if any,
        so that the next ``get_state(namespace)`` builds a new one that reads its
        txids (and entries) from the store again. Nothing in the store changes.

        The cached object assumes it is the namespace's only writer. Where
        another process writes the namespace between two uses (on Spark an
        executor prepares it and the driver commits it), each side forgets
        its object before acting. The forgotten object must not be used
        again: what it holds may be stale.
        """
        self._states.pop(namespace, None)

    def close(self) -> None:
        """Release the store; idempotent. States of this provider stop working."""
        if not self._closed:
            self._closed = True
            self._states.clear()
            self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def size_cache(provider: Any, mb: float) -> None:
    """Give ``provider``'s states ``mb`` MiB of read cache (``topology.state.cache.mb``).

    Every runtime calls it where it opens its provider. A provider not built
    on :class:`BackendStateProvider` (a scoped view is looked through) is
    left as is: its states cache as they please.
    """
    inner = getattr(provider, "provider", provider)
    if isinstance(inner, BackendStateProvider):
        inner.cache_mb = mb
