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

import enum
import math
import reprlib
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Final, Protocol, Self, TypeVar, runtime_checkable

import orjson

from statestream._errors import (
    ConfigError,
    ProtocolViolation,
    SerializationError,
    StateCorruptError,
    StateError,
)
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


class CommitOutcome(enum.Enum):
    """What :meth:`StateBackend.apply_prepared` found in the store."""

    APPLIED = "applied"  #: the prepared delta was applied and the txid recorded
    ALREADY_COMMITTED = "already-committed"  #: txid <= committed txid: nothing done
    NOT_PREPARED = "not-prepared"  #: no delta of that txid is prepared: nothing done


class StateBackend(Protocol):
    """The storage primitives of one namespace, all a provider implements.

    Keys and values arrive encoded. Every method is a complete operation on
    the store: the writes are atomic (one transaction, one MULTI/EXEC or one
    script), so a crash between two calls leaves either the old or the new
    store, never a mix. Calls may be repeated after a failure (a lost
    connection), so they must be idempotent. Failures to reach the store raise
    ProviderUnavailableError, unreadable stores StateCorruptError.
    """

    def load(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or None."""
        ...

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed ``(key, value)``, lazily, each key once; order unspecified."""
        ...

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


# --------------------------------------------------------------------------- implementation


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: Not in the read cache: ask the store.
_MISSING: Final = _Sentinel("<missing>")
#: Known to be absent (deleted, or not in the store): ``get`` returns its default.
_ABSENT: Final = _Sentinel("<absent>")
#: Tags cache keys made from encoded keys, so that they can equal no user key.
_ENCODED: Final = _Sentinel("<encoded-key>")

_short_repr = reprlib.Repr()
_short_repr.maxstring = 60
_short_repr.maxother = 60

#: A pending or prepared change: (key as given, encoded key, value, encoded
#: value or None for a tombstone). The key is kept for items().
_Entry = tuple[Any, bytes, Any, bytes | None]


def _cache_key(plain: Any, encoded: bytes) -> Hashable:
    """The cache key of a key whose JSON is ``encoded`` and decodes to ``plain``.

    A key is cached under the plain ``str`` or ``int`` its JSON decodes to,
    else under its encoding. So keys the store cannot tell apart share an
    entry (``IntEnum`` members and their int, ``StrEnum`` members and their
    str), and keys it can (``1``, ``1.0``, ``True``; equal in Python) do not.
    """
    cls = plain.__class__
    return plain if cls is str or cls is int else (_ENCODED, encoded)


def _freeze(obj: Any) -> Any:
    """JSON has no tuples: turn a decoded list key back into the tuple it was."""
    if isinstance(obj, list):
        return tuple(_freeze(item) for item in obj)
    return obj


PRELOAD_LIMIT: Final = 50_000
"""Committed entries a state reads whole on its first miss (see StoredKeyValueState._preload)."""


class StoredKeyValueState:
    """The :class:`KeyValueState` of every shipped provider, over a :class:`StateBackend`.

    In memory it keeps three dicts:

    * ``_pending``: changes since the last prepare/commit (cache key -> entry);
    * ``_prepared``: the delta this object prepared and that is not yet
      committed, mirrored from the store so rollback knows what to forget;
    * ``_view``: what ``get`` returns, for every key in the two above and for
      every committed key read so far (``_ABSENT`` for known misses).

    So a hot ``get`` is one dict lookup, ``put`` is two dict writes plus the
    encoding, opening a state reads nothing (keys load one by one on a miss,
    ``items()`` scans the store), and a commit sends only the changed keys.
    The view grows with the keys touched; it is never larger than the state.

    A delta left prepared in the store by an earlier incarnation (a crash
    between prepare and commit) is not visible: the state reads as the last
    committed one until recovery commits that txid (then the delta shows) or
    rolls it back.

    Cache keys: ``str`` and ``int`` keys are their own cache keys (the hot
    path, no decoding); see :func:`_cache_key` for the others. The view thus
    tells keys apart exactly as the store does.

    The read cache assumes this object is the only writer of its namespace,
    which the topology guarantees (one task, one namespace). Not thread-safe.
    """

    __slots__ = (
        "_backend",
        "_committed_txid",
        "_complete",
        "_decode",
        "_encode",
        "_foreign_prepared",
        "_loaded",
        "_pending",
        "_preload_tried",
        "_prepared",
        "_prepared_txid",
        "_view",
        "namespace",
    )

    def __init__(self, namespace: str, backend: StateBackend, serializer: Serializer) -> None:
        self.namespace: Final = namespace
        self._backend = backend
        self._encode = serializer.encode
        self._decode = serializer.decode
        self._pending: dict[Hashable, _Entry] = {}
        self._prepared: dict[Hashable, _Entry] = {}
        self._view: dict[Hashable, Any] = {}
        # Txids are read from the store on the first protocol call, not at open.
        self._loaded = False
        self._committed_txid = -1
        self._prepared_txid: int | None = None
        # True while the store holds a delta prepared by an earlier incarnation,
        # whose keys are not in _prepared (nor in the view).
        self._foreign_prepared = False
        # Set once the whole committed state is known to be in the view, so a
        # miss is an absent key without asking the store (see _preload).
        self._complete = False
        self._preload_tried = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.namespace!r}>"

    # ------------------------------------------------------------------ keys and values

    def _key(self, key: Any) -> tuple[Hashable, bytes]:
        """Return ``(cache key, encoded key)`` or raise SerializationError."""
        try:
            encoded = b"%b" % orjson.dumps(key)  # encode_json, inlined: this is per put
        except orjson.JSONEncodeError as exc:
            raise SerializationError(
                f"state {self.namespace!r}: cannot use key {_short_repr.repr(key)} of type "
                f"{type(key).__name__!r}: keys must be JSON scalars (str, int, float, bool, "
                f"None) or tuples of them ({exc})"
            ) from exc
        cls = key.__class__
        if cls is str or cls is int:
            return key, encoded
        if cls is float and not math.isfinite(key):
            # JSON would store it as null, colliding with the key None.
            raise SerializationError(
                f"state {self.namespace!r}: cannot use key {key!r} of type 'float': "
                "NaN and infinities have no JSON form"
            )
        try:
            hash(key)
        except TypeError as exc:
            raise SerializationError(
                f"state {self.namespace!r}: cannot use key {_short_repr.repr(key)} of type "
                f"{type(key).__name__!r}: keys must be hashable (use a tuple, not a list)"
            ) from exc
        return _cache_key(orjson.loads(encoded), encoded), encoded

    def _stored_key(self, encoded: bytes) -> tuple[Any, Hashable]:
        """Decode a key read from the store; return ``(key, cache key)``."""
        try:
            plain = orjson.loads(encoded)
        except orjson.JSONDecodeError as exc:
            raise StateCorruptError(
                f"state {self.namespace!r}: the store holds a key that is not JSON: "
                f"{_short_repr.repr(encoded)}"
            ) from exc
        return _freeze(plain), _cache_key(plain, encoded)

    def _decode_value(self, key: Any, data: bytes) -> Any:
        try:
            return self._decode(data)
        except Exception as exc:  # any serializer, any failure: the bytes are bad
            raise StateCorruptError(
                f"state {self.namespace!r}: the stored value of key {_short_repr.repr(key)} "
                f"cannot be decoded ({type(exc).__name__}: {exc})"
            ) from exc

    def _load(self, key: Any, cache_key: Hashable) -> Any:
        """Read a committed value into the view (a cache miss)."""
        if not self._complete and not self._preload_tried:
            self._preload()
            value = self._view.get(cache_key, _MISSING)
            if value is not _MISSING:
                return value
        if self._complete:
            self._view[cache_key] = _ABSENT
            return _ABSENT
        data = self._backend.load(self._key(key)[1])
        value = _ABSENT if data is None else self._decode_value(key, data)
        self._view[cache_key] = value
        return value

    def _preload(self) -> None:
        """On the first miss, read a small committed state whole.

        A bolt meeting new keys would otherwise pay a store round trip per
        key, even on an empty store (20,000 Redis round trips for a 20,000
        word vocabulary). Up to PRELOAD_LIMIT committed entries are streamed
        into the view; if the scan ends within the limit the view is complete
        and later misses need no I/O. A larger state stays lazy (what was read
        is kept), so opening a state of millions of keys stays fast.
        """
        self._preload_tried = True
        if self._foreign_prepared:
            return
        view = self._view
        overlay = self._pending.keys() | self._prepared.keys()
        for n, (encoded_key, data) in enumerate(self._backend.scan(), 1):
            if n > PRELOAD_LIMIT:
                return
            key, cache_key = self._stored_key(encoded_key)
            if cache_key not in overlay and cache_key not in view:
                view[cache_key] = self._decode_value(key, data)
        self._complete = True

    # ------------------------------------------------------------------ mapping

    def get(self, key: Any, default: Any = None) -> Any:
        """The visible value of ``key``, or ``default`` when it has none."""
        cls = key.__class__
        cache_key = key if cls is str or cls is int else self._key(key)[0]
        value = self._view.get(cache_key, _MISSING)
        if value is _MISSING:
            value = self._load(key, cache_key)
        return default if value is _ABSENT else value

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` in the pending changes.

        The value is encoded here, so an unencodable one fails now, naming the
        namespace, the key and the type, rather than at the next checkpoint.
        """
        cache_key, encoded_key = self._key(key)
        try:
            encoded = self._encode(value)
        except SerializationError as exc:
            raise SerializationError(
                f"state {self.namespace!r}: cannot put key {_short_repr.repr(key)}: {exc}"
            ) from exc
        if not encoded:  # b"" marks a tombstone in some stores (see Serializer)
            raise SerializationError(
                f"state {self.namespace!r}: the serializer encoded the value of key "
                f"{_short_repr.repr(key)} as empty bytes, which serializers must not do"
            )
        self._pending[cache_key] = (key, encoded_key, value, encoded)
        self._view[cache_key] = value

    def delete(self, key: Any) -> Any:
        """Delete ``key``; return the value it had (None if none).

        The tombstone hides prepared and committed values until it is
        committed, then the key is gone from the store.
        """
        cache_key, encoded_key = self._key(key)
        old = self._view.get(cache_key, _MISSING)
        if old is _MISSING:
            old = self._load(key, cache_key)
        self._pending[cache_key] = (key, encoded_key, None, None)
        self._view[cache_key] = _ABSENT
        return None if old is _ABSENT else old

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every visible ``(key, value)``: pending over prepared over committed.

        Committed entries are streamed from the store, not loaded at once and
        not added to the read cache. Changes made while iterating may or may
        not be seen.
        """
        return self._walk(values=True)

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self._walk(values=False))

    def keys(self) -> Iterator[Any]:
        """The visible keys (as ``iter(state)``)."""
        return iter(self)

    def _walk(self, *, values: bool) -> Iterator[tuple[Any, Any]]:
        overlay = {**self._prepared, **self._pending}  # a snapshot; pending wins
        view = self._view
        for cache_key, entry in overlay.items():
            value = view[cache_key]
            if value is not _ABSENT:
                yield entry[0], value
        for encoded_key, data in self._backend.scan():
            key, cache_key = self._stored_key(encoded_key)
            if cache_key in overlay:
                continue
            value = view.get(cache_key, _MISSING)
            if value is _ABSENT:
                continue  # consistent with get(), which trusts the cache
            if value is _MISSING:
                value = self._decode_value(key, data) if values else None
            yield key, value

    # ------------------------------------------------------------------ checkpoint protocol

    def _load_txids(self) -> None:
        if not self._loaded:
            committed, prepared = self._backend.load_txids()
            self._committed_txid = committed
            self._prepared_txid = prepared
            self._foreign_prepared = prepared is not None
            self._loaded = True

    @property
    def committed_txid(self) -> int:
        """The last txid committed with ``commit(txid)``; -1 when there is none."""
        self._load_txids()
        return self._committed_txid

    @property
    def prepared_txid(self) -> int | None:
        """The txid whose delta is prepared in the store and not yet committed, if any."""
        self._load_txids()
        return self._prepared_txid

    def _check_txid(self, operation: str, txid: object) -> int:
        # bool is an int to Python, but True as a txid is a bug, not txid 1.
        if not isinstance(txid, int) or isinstance(txid, bool):
            raise ProtocolViolation(
                f"state {self.namespace!r}: {operation} needs an int txid, "
                f"not {type(txid).__name__} {txid!r}"
            )
        return int(txid)

    def prepare_commit(self, txid: int) -> None:
        """Store the pending changes as (part of) the prepared delta of ``txid``.

        Allowed: ``txid == committed_txid + 1``; with nothing prepared, any
        later txid (a state that was not in the topology for the txids between
        joins at the current checkpoint); or ``txid`` already prepared, in
        which case the pending changes are merged onto its delta. Otherwise
        ProtocolViolation.
        On a store failure nothing changes here and the call can be repeated.
        """
        txid = self._check_txid("prepare_commit", txid)
        self._load_txids()
        prepared = self._prepared_txid
        committed = self._committed_txid
        if prepared is not None:
            if txid != prepared:
                raise ProtocolViolation(
                    f"state {self.namespace!r}: cannot prepare txid {txid}: txid {prepared} "
                    "is prepared and not committed; commit or roll it back first"
                )
        elif txid <= committed:
            raise ProtocolViolation(
                f"state {self.namespace!r}: cannot prepare txid {txid}: txid {committed} is "
                f"committed already, so the next one to prepare is {committed + 1}"
            )
        pending = self._pending
        self._backend.write_prepared(txid, [(e[1], e[3]) for e in pending.values()])
        self._prepared.update(pending)
        pending.clear()
        self._prepared_txid = txid

    def commit(self, txid: int | None = None) -> None:
        """Commit the prepared delta of ``txid``, or the pending changes if ``txid`` is None.

        ``txid`` at or below :attr:`committed_txid`: no-op. ``txid`` not the
        prepared one: ProtocolViolation. ``txid=None`` while a delta is
        prepared: ProtocolViolation (the direct write would be overwritten by
        the older prepared values). On a store failure nothing changes here
        and the call can be repeated.
        """
        self._load_txids()
        if txid is None:
            self._commit_direct()
            return
        txid = self._check_txid("commit", txid)
        if txid <= self._committed_txid:
            return
        if txid != self._prepared_txid:
            what = "nothing is" if self._prepared_txid is None else f"txid {self._prepared_txid} is"
            raise ProtocolViolation(
                f"state {self.namespace!r}: cannot commit txid {txid}: {what} prepared "
                f"(last committed txid: {self._committed_txid})"
            )
        outcome = self._backend.apply_prepared(txid)
        if outcome is CommitOutcome.NOT_PREPARED:
            raise ProtocolViolation(
                f"state {self.namespace!r}: cannot commit txid {txid}: the store holds no "
                "prepared delta for it (is another process writing this namespace?)"
            )
        # APPLIED, or ALREADY_COMMITTED when an earlier attempt reached the store
        # but its reply was lost: the delta is in the committed layer either way.
        if self._foreign_prepared:
            # The applied delta holds keys this object never saw: only the
            # pending changes are still known to be newer than the store.
            self._view = {
                cache_key: (_ABSENT if entry[3] is None else entry[2])
                for cache_key, entry in self._pending.items()
            }
            self._foreign_prepared = False
            self._complete = False
            self._preload_tried = False
        self._prepared.clear()
        self._prepared_txid = None
        self._committed_txid = txid

    def _commit_direct(self) -> None:
        if self._prepared_txid is not None:
            raise ProtocolViolation(
                f"state {self.namespace!r}: commit() without a txid while txid "
                f"{self._prepared_txid} is prepared; commit or roll it back first"
            )
        pending = self._pending
        if pending:
            self._backend.commit_direct([(e[1], e[3]) for e in pending.values()])
            pending.clear()

    def rollback(self) -> None:
        """Forget the prepared delta (in the store too) and the pending changes."""
        self._load_txids()
        # Always, not only when this object knows of a prepared delta: a
        # prepare whose reply was lost (a dropped connection) may have stored
        # one, and its keys must not ride along with the next prepare.
        self._backend.discard_prepared()
        view = self._view
        for cache_key in self._pending:
            view.pop(cache_key, None)
        for cache_key in self._prepared:
            view.pop(cache_key, None)
        self._pending.clear()
        self._prepared.clear()
        self._prepared_txid = None
        self._foreign_prepared = False
        # Dropped keys must be read from the store again.
        self._complete = False
        self._preload_tried = False


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


class BackendStateProvider(ABC):
    """Base of providers built on :class:`StateBackend`: memory, sqlite and redis.

    Subclasses implement :meth:`from_config`, :meth:`_open_backend`,
    :meth:`namespaces` and, if they hold resources, :meth:`_close`.
    ``get_state`` hands out one :class:`StoredKeyValueState` per namespace.

    ``sharing`` defaults to :data:`SHARING_PROCESS`, the conservative
    answer: a provider whose store other processes can reach says so.
    """

    name: ClassVar[str]
    sharing: ClassVar[str] = SHARING_PROCESS

    def __init__(self, serializer: Serializer) -> None:
        self._serializer = serializer
        self._states: dict[str, StoredKeyValueState] = {}
        self._closed = False

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

    def _close(self) -> None:  # noqa: B027 - an optional hook, not abstract on purpose
        """Release resources; called once, by :meth:`close`."""

    @property
    def closed(self) -> bool:
        return self._closed

    def get_state(self, namespace: str) -> StoredKeyValueState:
        """The state of ``namespace``: the same object on every call."""
        if self._closed:
            raise StateError(f"the {self.name} state provider is closed; open a new one")
        state = self._states.get(namespace)
        if state is None:
            if not isinstance(namespace, str) or not namespace:
                raise ConfigError(f"a state namespace must be a non-empty str, not {namespace!r}")
            state = StoredKeyValueState(namespace, self._open_backend(namespace), self._serializer)
            self._states[namespace] = state
        return state

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
