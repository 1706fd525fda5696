"""The one key-value state every shipped provider shares (:class:`StoredKeyValueState`).

Its contract is in :mod:`statestream._state`, which re-exports what is
here. This module is part of the compiled per-tuple core
(:mod:`statestream._core`): ``get`` and ``put`` run once per tuple of every
stateful bolt, so it holds no Protocol class (mypyc cannot compile one) and
reads its tunables from attributes rather than module globals.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable, Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any, Final

import orjson

from statestream._errors import ProtocolViolation, SerializationError, caused_by
from statestream._kventry import (
    _ABSENT,
    _MISSING,
    _bad_key,
    _bad_stored_key,
    _bad_stored_value,
    _cache_key,
    _encoded_bytes,
    _Entry,
    _generation_size,
    _isascii,
    _plain_value,
    _short_repr,
)
from statestream._kvfilter import KeyFilter as _KeyFilter
from statestream._kvjournal import UndoJournal
from statestream._kvprepared import PreparedDelta
from statestream._kvwalk import cached_items, committed_entries, merged_items
from statestream._kvwalk import freeze as _freeze
from statestream._serde import JsonSerializer, Serializer

if TYPE_CHECKING:
    from statestream._state import StateBackend


class CommitOutcome(enum.Enum):
    """What :meth:`StateBackend.apply_prepared` found in the store."""

    APPLIED = "applied"  #: the prepared delta was applied and the txid recorded
    ALREADY_COMMITTED = "already-committed"  #: txid <= committed txid: nothing done
    NOT_PREPARED = "not-prepared"  #: no delta of that txid is prepared: nothing done


PRELOAD_LIMIT: Final = 50_000
"""Committed entries a state reads whole on its first miss (see StoredKeyValueState._preload)."""

DEFAULT_CACHE_MB: Final = 32.0
"""The read cache of a process's states, MiB (``topology.state.cache.mb``)."""


class StoredKeyValueState:
    """The :class:`KeyValueState` of every shipped provider, over a :class:`StateBackend`.

    In memory it keeps three dicts:

    * ``_pending``: changes since the last prepare/commit (cache key -> entry);
    * ``_prepared``: the delta this object prepared and that is not yet
      committed, mirrored from the store so rollback knows what to forget;
    * ``_view``: what ``get`` returns, for every key in the two above and for
      every committed key read so far (``_ABSENT`` for known misses), but for
      the keys of ``_plain`` (the deferred puts, see ``__init__``), whose
      values there are newer: ``get`` looks there first, and the view takes
      them when they are settled.

    So a hot ``get`` is one dict lookup (two while deferred puts wait), a
    deferred ``put`` one dict write, any other ``put`` two plus the encoding,
    opening a state reads nothing (keys load one by one on a miss,
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
        "_ascii_key",
        "_backend",
        "_committed_txid",
        "_complete",
        "_decode",
        "_defer",
        "_encode",
        "_filter",
        "_foreign_prepared",
        "_generation",
        "_journal",
        "_journaling",
        "_loaded",
        "_old",
        "_pending",
        "_plain",
        "_preload_tried",
        "_prepared",
        "_prepared_bytes",
        "_prepared_txid",
        "_view",
        "batch_reads",
        "cache_bytes",
        "namespace",
        "prefetched",
        "preload_limit",
        "store_reads",
    )

    def __init__(
        self,
        namespace: str,
        backend: StateBackend,
        serializer: Serializer,
        cache_bytes: int = int(DEFAULT_CACHE_MB * 1024 * 1024),
    ) -> None:
        self.namespace: Final = namespace
        self._backend = backend
        self._encode = serializer.encode
        self._decode = serializer.decode
        self._pending: dict[Hashable, _Entry] = {}
        # Puts whose encoding cannot fail (an ASCII str key, a value of
        # _PLAIN_VALUE, the JSON serializer) wait here unencoded, key ->
        # value, until something reads the pending changes (_settle_plain):
        # the bytes are the same, made once per checkpoint instead of per put.
        # Its values are newer than the view's, which takes them when they
        # are settled: a put writes one dict, not two.
        self._plain: dict[str, Any] = {}
        self._defer = type(serializer) is JsonSerializer
        # The key object of get's last hit there, an ASCII str: a put of that
        # very object (state.put(k, state.get(k) + 1)) skips its str.isascii
        # call, some 100 instructions a tuple. A sentinel until then: no key is it.
        self._ascii_key: Any = _MISSING
        self._prepared = PreparedDelta()
        self._view: dict[Hashable, Any] = {}
        # The read cache is two generations (a segmented approximation of
        # LRU that costs nothing on a hit): _view, the young one, takes every
        # read and write; a miss there looks in _old, the previous one, and
        # moves what it finds back up. When _view reaches _generation
        # entries, _old (clean entries only: every uncommitted change is in
        # _view) is dropped and _view becomes _old (see _rotate).
        self._old: dict[Hashable, Any] = {}
        #: The bytes this state's read cache may keep (its share of
        #: ``topology.state.cache.mb``, set by its provider with resize_cache).
        self.cache_bytes = cache_bytes
        self._generation = _generation_size({}, cache_bytes)
        # Txids are read from the store on the first protocol call, not at open.
        self._loaded = False
        self._committed_txid = -1
        self._prepared_txid: int | None = None
        # Bytes this object sent the store as the prepared delta (prepared_bytes).
        self._prepared_bytes = 0
        # True while the store holds a delta prepared by an earlier incarnation,
        # whose keys are not in _prepared (nor in the view).
        self._foreign_prepared = False
        # Set once the whole committed state is known to be in the view, so a
        # miss is an absent key without asking the store (see _preload).
        self._complete = False
        self._preload_tried = False
        # The keys the store may hold, once a complete state outgrew the cache (_rotate).
        self._filter: _KeyFilter | None = None
        #: Committed entries read whole on the first miss (see _preload).
        self.preload_limit = PRELOAD_LIMIT
        #: Store reads: keys read one at a time (misses); batched reads and their keys.
        self.store_reads = self.batch_reads = self.prefetched = 0
        # The per-tuple undo journal (start_journal, statestream._kvjournal).
        self._journaling = False
        self._journal = UndoJournal()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.namespace!r}>"

    # ------------------------------------------------------------------ keys and values

    def _key(self, key: Any) -> tuple[Hashable, bytes]:
        """Return ``(cache key, encoded key)`` or raise SerializationError."""
        try:
            encoded = b"%b" % orjson.dumps(key)  # encode_json, inlined: this is per put
        except orjson.JSONEncodeError as exc:
            why = (
                f"keys must be JSON scalars (str, int, float, bool, None) or tuples of them ({exc})"
            )
            raise caused_by(_bad_key(self.namespace, key, why), exc) from exc
        cls = type(key)
        if cls is str or cls is int:
            return key, encoded
        if cls is float and not math.isfinite(key):
            # JSON would store it as null, colliding with the key None.
            raise _bad_key(self.namespace, key, "NaN and infinities have no JSON form")
        try:
            hash(key)
        except TypeError as exc:
            why = "keys must be hashable (use a tuple, not a list)"
            raise caused_by(_bad_key(self.namespace, key, why), exc) from exc
        return _cache_key(orjson.loads(encoded), encoded), encoded

    def _stored_key(self, encoded: bytes) -> tuple[Any, Hashable]:
        """Decode a key read from the store; return ``(key, cache key)``."""
        try:
            plain = orjson.loads(encoded)
        except orjson.JSONDecodeError as exc:
            raise caused_by(_bad_stored_key(self.namespace, encoded), exc) from exc
        return _freeze(plain), _cache_key(plain, encoded)

    def _decode_value(self, key: Any, data: bytes) -> Any:
        try:
            return self._decode(data)
        except Exception as exc:  # any serializer, any failure: the bytes are bad
            raise caused_by(_bad_stored_value(self.namespace, key, exc), exc) from exc

    def _load(self, key: Any, cache_key: Hashable) -> Any:
        """Read a committed value into the view (a miss in the young generation)."""
        view = self._view
        if len(view) >= self._generation:
            self._rotate()
            view = self._view
        value = self._old.get(cache_key, _MISSING)
        if value is not _MISSING:
            view[cache_key] = value  # used again: back to the young generation
            return value
        if not self._complete and not self._preload_tried:
            self._preload()
            value = view.get(cache_key, _MISSING)
            if value is not _MISSING:
                return value
        if self._complete:
            view[cache_key] = _ABSENT
            return _ABSENT
        known = self._filter
        if known is not None and not known.might_hold(cache_key):
            view[cache_key] = _ABSENT  # never stored: a new key
            return _ABSENT
        self.store_reads += 1
        data = self._backend.load(self._key(key)[1])
        value = _ABSENT if data is None else self._decode_value(key, data)
        view[cache_key] = value
        return value

    def prefetch(self, keys: Iterable[Any]) -> int:
        """Read the committed values of those of ``keys`` the read cache lacks in one
        call of the backend (its ``get_many``; a ``load`` a key without it), so that
        their ``get`` is a hit. Returns the keys read from the store.

        A guess: a key that cannot be a state key is skipped, never an error,
        and a key never read costs its read only. Cached keys, keys of a state
        read whole and keys the filter says were never stored cost no read; at
        most half a generation is read, so the keys stay cached until read.
        """
        if self._complete:
            return 0
        if not self._preload_tried:
            self._preload()
            if self._complete:
                return 0
        view, old, plain, known = self._view, self._old, self._plain, self._filter
        wanted: dict[Hashable, Any] = {}
        limit = self._generation // 2
        for key in keys:
            cls = type(key)
            try:
                cache_key = key if cls is str or cls is int else self._key(key)[0]
            except SerializationError:
                continue  # not a key this state can hold: a wrong guess
            if cache_key in view or cache_key in wanted or (plain and cache_key in plain):
                continue
            value = old.get(cache_key, _MISSING)
            if value is not _MISSING:
                view[cache_key] = value  # used again: back to the young generation
            elif known is not None and not known.might_hold(cache_key):
                view[cache_key] = _ABSENT  # never stored: a new key
            elif len(wanted) < limit:
                wanted[cache_key] = key
        if len(view) + len(wanted) >= self._generation:
            self._rotate()
            view = self._view
        encoded: list[bytes] = []
        for cache_key, key in list(wanted.items()):
            try:
                encoded.append(self._key(key)[1])
            except SerializationError:  # a str JSON refuses (a lone surrogate)
                del wanted[cache_key]
        if not encoded:
            return 0
        get_many = getattr(self._backend, "get_many", None)
        if get_many is None:  # the SDK's default: a load a key
            found: list[bytes | None] = [self._backend.load(k) for k in encoded]
        else:
            found = get_many(encoded)
        self.batch_reads += 1
        self.prefetched += len(encoded)
        for (cache_key, key), data in zip(wanted.items(), found, strict=True):
            view[cache_key] = _ABSENT if data is None else self._decode_value(key, data)
        return len(encoded)

    def get_many(self, keys: Iterable[Any], default: Any = None) -> list[Any]:
        """The visible values of ``keys``, in their order (``default`` for a key
        without one), read from the store in one batched call for those the cache
        lacks (:meth:`prefetch`)."""
        wanted = list(keys)
        self.prefetch(wanted)
        get = self.get
        return [get(key, default) for key in wanted]

    def _rotate(self) -> None:
        """Drop the old generation, and make the young one old (see ``_view``).

        Every uncommitted change stays young: the entries of ``_pending``
        and ``_prepared`` move to the new young generation (``_plain`` is
        apart from the view), so eviction drops only what the store holds.
        The generation's size is then set from the budget's share and the
        bytes a sample of the entries takes.
        """
        view = self._view
        if self._complete and self._filter is None:
            # The whole store is cached and about to be evicted: keep its keys (and each stored).
            known = self._filter = _KeyFilter()
            for generation in (view, self._old):
                for cache_key, value in generation.items():
                    if value is not _ABSENT:
                        known.add(cache_key)
            for dirty in (self._prepared.keys(), self._pending.keys()):
                for cache_key in dirty:
                    known.add(cache_key)
        young: dict[Hashable, Any] = {}
        for dirty in (self._prepared.keys(), self._pending.keys()):
            for cache_key in dirty:
                value = view.get(cache_key, _MISSING)
                if value is not _MISSING:
                    young[cache_key] = value
        self._old = view
        self._view = young
        self._complete = False  # what was evicted is no longer known absent or present
        self._preload_tried = True  # and a state that outgrew the cache is not read whole
        self._size_generation(view)
        # A checkpoint's changes larger than a generation stay cached all the
        # same: room for as many again, or every miss would rotate.
        self._generation = max(self._generation, 2 * len(young))

    def _size_generation(self, sample_of: dict[Hashable, Any]) -> None:
        """Size a generation from the budget and what an entry of ``sample_of`` takes."""
        # The filter of stored keys is the cache's too: what it takes, the
        # generations do not (a 20M-key state's filter is 20-40 MB).
        budget = self.cache_bytes
        if self._filter is not None:
            budget -= self._filter.nbytes
        self._generation = _generation_size(sample_of, budget)

    def resize_cache(self, cache_bytes: int) -> None:
        """Let the read cache keep ``cache_bytes`` (its provider's share for it)."""
        self.cache_bytes = cache_bytes
        self._size_generation(self._old or self._view)

    @property
    def cache_entries(self) -> int:
        """Entries the read cache holds now (both generations; for tests and benches)."""
        return len(self._view) + len(self._old)

    def _preload(self) -> None:
        """On the first miss, read a small committed state whole.

        A bolt meeting new keys would otherwise pay a store round trip per
        key, even on an empty store (20,000 Redis round trips for a 20,000
        word vocabulary). Up to ``preload_limit`` committed entries (and no
        more than the young generation holds) are streamed into the view; if
        the scan ends within the limit the view is complete and later misses
        need no I/O. A larger state stays lazy (what was read is kept), so
        opening a state of millions of keys stays fast.
        """
        self._preload_tried = True
        if self._foreign_prepared:
            return
        view = self._view
        self._settle_plain()
        overlay = self._pending.keys() | self._prepared.keys()
        # Half a generation at most, so that a complete state has room for new keys.
        limit = min(self.preload_limit, self._generation // 2 - len(view))
        if limit <= 0:
            return
        count = getattr(self._backend, "key_count", None)
        if count is not None and count() > limit:
            return  # too large, said in O(1): no page of limit + 1 entries read
        # Read raw, decoded only if that is all: a large state (a restart with
        # a million keys) costs one read of limit + 1 entries, not their decoding.
        entries: list[tuple[bytes, bytes]] = []
        scan_page = getattr(self._backend, "scan_page", None)
        if scan_page is not None:
            entries, after = scan_page(None, limit + 1)
            if after is not None:
                return
        else:
            entries = list(islice(self._backend.scan(), limit + 1))
        if len(entries) > limit:
            return
        for encoded_key, data in entries:
            key, cache_key = self._stored_key(encoded_key)
            if cache_key not in overlay and cache_key not in view:
                view[cache_key] = self._decode_value(key, data)
        self._complete = True

    # ------------------------------------------------------------------ mapping

    def get(self, key: Any, default: Any = None) -> Any:
        """The visible value of ``key``, or ``default`` when it has none."""
        cls = type(key)
        cache_key = key if cls is str or cls is int else self._key(key)[0]
        if self._plain and type(cache_key) is str:
            value = self._plain.get(cache_key, _MISSING)
            if value is not _MISSING:
                self._ascii_key = key
                if self._journaling:
                    journal = self._journal
                    journal.last_key, journal.last_value = key, value
                return value  # never _ABSENT: a deferred put's value
        value = self._view.get(cache_key, _MISSING)
        if value is _MISSING:
            value = self._load(key, cache_key)
        if self._journaling:
            # What a put of this key in the same tuple journals, without a
            # second lookup (state.put(k, state.get(k) + 1) is the common case);
            # the fields set here, not through a call: this runs once a tuple.
            journal = self._journal
            journal.last_key, journal.last_value = key, value
        return default if value is _ABSENT else value

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` in the pending changes.

        A value that could fail to encode is encoded here, so an unencodable
        one fails now, naming the namespace, the key and the type, rather
        than at the next checkpoint.
        """
        if self._journaling:
            self._remember(key)
        if (
            self._defer
            and (key is self._ascii_key or (type(key) is str and _isascii(key)))
            and _plain_value(value)
        ):
            pending = self._pending
            if pending and key in pending:
                del pending[key]
            self._plain[key] = value  # the view takes it when it is settled
            return
        cache_key, encoded_key = self._key(key)
        try:
            encoded = self._encode(value)
        except SerializationError as exc:
            raise caused_by(
                SerializationError(
                    f"state {self.namespace!r}: cannot put key {_short_repr.repr(key)}: {exc}"
                ),
                exc,
            ) from exc
        if not encoded:  # b"" marks a tombstone in some stores (see Serializer)
            raise SerializationError(
                f"state {self.namespace!r}: the serializer encoded the value of key "
                f"{_short_repr.repr(key)} as empty bytes, which serializers must not do"
            )
        if self._plain and type(cache_key) is str:
            self._plain.pop(cache_key, None)
        self._pending[cache_key] = (key, encoded_key, value, encoded)
        self._view[cache_key] = value

    def delete(self, key: Any) -> Any:
        """Delete ``key``; return the value it had (None if none).

        The tombstone hides prepared and committed values until it is
        committed, then the key is gone from the store.
        """
        if self._journaling:
            self._remember(key)
        cache_key, encoded_key = self._key(key)
        old: Any = _MISSING
        if self._plain and type(cache_key) is str:
            old = self._plain.pop(cache_key, _MISSING)  # newer than the view
        if old is _MISSING:
            old = self._view.get(cache_key, _MISSING)
        if old is _MISSING:
            old = self._load(key, cache_key)
        self._pending[cache_key] = (key, encoded_key, None, None)
        self._view[cache_key] = _ABSENT
        return None if old is _ABSENT else old

    # -- the per-tuple undo journal ------------------------------------------
    def start_journal(self) -> None:
        """Journal the changes of each tuple from now on (:meth:`journal_begin`
        before each, :meth:`journal_undo` after one that failed), so that a
        runtime can execute a failed tuple again with its changes undone."""
        self._journaling = True

    def journal_begin(self) -> None:
        """A new tuple starts: forget what the last one changed and read."""
        self._journal.begin()

    def journal_undo(self) -> None:
        """Put back every key the tuple changed since :meth:`journal_begin`, as it was."""
        changed = self._journal.take()
        if not changed:
            return
        self._journaling = False  # the undo's own puts are not journaled
        try:
            for key, before in changed:
                if before is _MISSING or before is _ABSENT:
                    self.delete(key)  # a tombstone of a key the store lacks is a no-op
                else:
                    self.put(key, before)
        finally:
            self._journaling = True

    def _remember(self, key: Any) -> None:
        """Journal ``key``'s visible value, unless this tuple changed it already."""
        journal = self._journal
        n = journal.n
        if n and journal.holds(key):
            return
        # The journal's fields read and set here, not through its methods, for
        # the common case (a tuple's first change, of the key it read last):
        # each call costs some 30 instructions a tuple in the compiled core.
        old = journal.last_value if key is journal.last_key else self.get(key, _MISSING)
        if n == 0:
            journal.first_key, journal.first_old = key, old
            journal.n = 1
        else:
            journal.remember(key, old)

    def _settle_plain(self) -> None:
        """Encode the deferred puts into the pending changes and the view (see ``_plain``)."""
        plain = self._plain
        if plain:
            self._view.update(plain)
            pending = self._pending
            for key, value in plain.items():
                # encode_json, inlined as in _key: a call into _serde per key costs
                # ~170 instructions per word at the word count's end-of-run checkpoint.
                data = b"%b" % orjson.dumps(key)
                pending[key] = (key, data, value, b"%b" % orjson.dumps(value))
            plain.clear()

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
        """Pending over prepared over committed, in key order where the backend
        pages in key order (``scan_page``): the committed entries are read a
        page at a time and merged with the uncommitted changes sorted by
        encoded key. Nothing is added to the read cache."""
        self._settle_plain()
        ordered = getattr(self._backend, "scan_page", None) is not None
        if self._complete:  # the view is the whole state, changes included: no read
            yield from cached_items(self._view, _ABSENT, ordered=ordered)
            return
        yield from merged_items(
            (self._prepared.as_entries(), self._pending),  # pending wins
            committed_entries(self._backend),
            self._stored_item if values else self._stored_key_only,
            ordered=ordered,
        )

    def _stored_item(self, encoded_key: bytes, data: bytes) -> tuple[Any, Any]:
        key, _ = self._stored_key(encoded_key)
        return key, self._decode_value(key, data)

    def _stored_key_only(self, encoded_key: bytes, data: bytes) -> tuple[Any, Any]:
        return self._stored_key(encoded_key)[0], None

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

    @property
    def prepared_bytes(self) -> int:
        """Bytes of the keys and values this object sent the store as the prepared
        delta (Flink's checkpointed data size of an incremental checkpoint; 0
        with none prepared): the encoded entries, and for the deferred puts
        what the backend's ``write_prepared_plain`` says it wrote (0 where it
        says nothing). Known without a store read."""
        return self._prepared_bytes

    @property
    def prepared_keys(self) -> int:
        """The keys this object put in the prepared delta (what the commit changes; 0
        with none prepared); a delta found in the store at start is not counted."""
        return len(self._prepared)

    def _check_txid(self, operation: str, txid: object) -> int:
        # bool is an int to Python, but True as a txid is a bug, not txid 1.
        if not isinstance(txid, int) or isinstance(txid, bool):
            raise ProtocolViolation(
                f"state {self.namespace!r}: {operation} needs an int txid, "
                f"not {type(txid).__name__} {txid!r}"
            )
        return int(txid)

    # txids are typed object: a compiled method would refuse a wrong type with
    # a bare TypeError before _check_txid could say what is wrong.
    def prepare_commit(self, txid: object) -> None:
        """Store the pending changes as (part of) the prepared delta of ``txid``.

        Allowed: ``txid == committed_txid + 1``; with nothing prepared, any
        later txid (a state that was not in the topology for the txids between
        joins at the current checkpoint); or ``txid`` already prepared, in
        which case the pending changes are merged onto its delta. Otherwise
        ProtocolViolation.
        On a store failure nothing changes here and the call can be repeated.
        """
        t = self._check_txid("prepare_commit", txid)
        self._load_txids()
        prepared = self._prepared_txid
        committed = self._committed_txid
        if prepared is not None:
            if t != prepared:
                raise ProtocolViolation(
                    f"state {self.namespace!r}: cannot prepare txid {t}: txid {prepared} "
                    "is prepared and not committed; commit or roll it back first"
                )
        elif t <= committed:
            raise ProtocolViolation(
                f"state {self.namespace!r}: cannot prepare txid {t}: txid {committed} is "
                f"committed already, so the next one to prepare is {committed + 1}"
            )
        pending = self._pending
        plain = self._plain
        staged = self._prepared
        self._remember_stored()
        # A backend that stores the deferred puts as they are (one JSON
        # document per prepare, see StateBackend) spares the encoding of each
        # key and value at every checkpoint.
        write_plain = getattr(self._backend, "write_prepared_plain", None) if plain else None
        if write_plain is not None:
            written = write_plain(t, plain, [(e[1], e[3]) for e in pending.values()])
            # The backend's count covers the whole record; else the encoded entries.
            size = written if type(written) is int else _encoded_bytes(pending)
            self._view.update(plain)
            self._plain = staged.take_plain(plain)  # the dict itself, not a copy a key
        else:
            self._settle_plain()
            self._backend.write_prepared(t, [(e[1], e[3]) for e in pending.values()])
            size = _encoded_bytes(pending)
        self._prepared_bytes = size if prepared is None else self._prepared_bytes + size
        staged.add_entries(pending)  # its keys are never plain ones (put keeps them apart)
        pending.clear()
        self._prepared_txid = t

    def commit(self, txid: object = None) -> None:
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
        t = self._check_txid("commit", txid)
        if t <= self._committed_txid:
            return
        if t != self._prepared_txid:
            what = "nothing is" if self._prepared_txid is None else f"txid {self._prepared_txid} is"
            raise ProtocolViolation(
                f"state {self.namespace!r}: cannot commit txid {t}: {what} prepared "
                f"(last committed txid: {self._committed_txid})"
            )
        outcome = self._backend.apply_prepared(t)
        if outcome is CommitOutcome.NOT_PREPARED:
            raise ProtocolViolation(
                f"state {self.namespace!r}: cannot commit txid {t}: the store holds no "
                "prepared delta for it (is another process writing this namespace?)"
            )
        # APPLIED, or ALREADY_COMMITTED when an earlier attempt reached the store
        # but its reply was lost: the delta is in the committed layer either way.
        if self._foreign_prepared:
            # The applied delta holds keys this object never saw: only the
            # pending changes are still known to be newer than the store.
            self._settle_plain()
            self._view = {
                cache_key: (_ABSENT if entry[3] is None else entry[2])
                for cache_key, entry in self._pending.items()
            }
            self._old = {}
            self._foreign_prepared = False
            self._filter = None  # the delta stored keys it never saw
            self._complete = False
            self._preload_tried = False
        self._prepared.clear()
        self._prepared_txid = None
        self._prepared_bytes = 0
        self._committed_txid = t
        # The committed changes are clean now: the cache may evict them.
        if len(self._view) >= self._generation:
            self._rotate()

    def _remember_stored(self) -> None:
        """Add the keys about to be stored to the filter, if there is one."""
        known = self._filter
        if known is not None:
            for dirty in (self._plain.keys(), self._pending.keys()):
                for cache_key in dirty:
                    known.add(cache_key)

    def _commit_direct(self) -> None:
        if self._prepared_txid is not None:
            raise ProtocolViolation(
                f"state {self.namespace!r}: commit() without a txid while txid "
                f"{self._prepared_txid} is prepared; commit or roll it back first"
            )
        self._settle_plain()
        pending = self._pending
        self._remember_stored()
        if pending:
            self._backend.commit_direct([(e[1], e[3]) for e in pending.values()])
            pending.clear()
        if len(self._view) >= self._generation:
            self._rotate()

    def rollback(self) -> None:
        """Forget the prepared delta (in the store too) and the pending changes."""
        self._load_txids()
        # Always, not only when this object knows of a prepared delta: a
        # prepare whose reply was lost (a dropped connection) may have stored
        # one, and its keys must not ride along with the next prepare.
        self._backend.discard_prepared()
        self._settle_plain()
        view, old = self._view, self._old
        for dirty in (self._pending.keys(), self._prepared.keys()):
            for cache_key in dirty:
                view.pop(cache_key, None)
                # The old generation may hold an uncommitted value too: the
                # young one had it when it became old.
                old.pop(cache_key, None)
        self._pending.clear()
        self._prepared.clear()
        self._prepared_txid = None
        self._prepared_bytes = 0
        self._foreign_prepared = False
        # Dropped keys must be read from the store again.
        self._complete = False
        self._preload_tried = False
