"""The entries of :class:`~statestream._kvstate.StoredKeyValueState`'s cache and
pending changes: the sentinels, the cache key of a key, what an entry costs in
memory, and which values a put may defer encoding (JSON always encodes them
exactly). Part of the compiled per-tuple core (:mod:`statestream._core`); the
names keep their underscore: they are the state's internals, not an API.
"""

from __future__ import annotations

import reprlib
import sys
from collections.abc import Hashable
from typing import Any, Final

from statestream._errors import SerializationError, StateCorruptError


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
    cls = type(plain)
    return plain if cls is str or cls is int else (_ENCODED, encoded)


#: Deferred ints stay within what the compiled core holds unboxed (orjson
#: would take any 64-bit int; larger ones are encoded at put like the rest).
_INT_BOUND: Final = 1 << 61


# str.isascii through its descriptor: compiled code has no primitive for it,
# and ``key.isascii()`` looks the method up by name on every call.
_isascii: Final = str.isascii


def _object_bytes(obj: Any) -> int:
    """What the allocator gives ``obj`` (its size rounded up to 16 bytes), or 0 for
    the objects every reference shares: None, bools, small ints, the sentinels."""
    t = type(obj)
    if obj is None or t is bool or t is _Sentinel or (t is int and -5 <= obj <= 256):
        return 0
    return (sys.getsizeof(obj) + 15) & ~15


def _entry_bytes(key: Any, value: Any) -> int:
    """What one cache entry's key and value take (shallow), the dict slot apart.

    Issue 34: a flat 100 bytes a slot plus ``getsizeof`` of shared small ints
    reckoned a word count's entry at ~183 bytes where tracemalloc measures
    ~80-95, so the cache held half the entries its budget pays for.
    """
    size = _object_bytes(key)
    if type(key) is tuple:  # (_ENCODED, encoded key): the tuple and its bytes
        size += _object_bytes(key[1])
    return size + _object_bytes(value)


#: Bytes a cache entry is reckoned at before one was measured: a short str
#: key (64), a small int value (shared: 0) and the dict slot that holds them.
_ENTRY_GUESS: Final = 112
#: Bytes of a dict's table per entry reckoned at while the sampled dict is too
#: small to say (24 a slot, grown by up to 3x before the table doubles).
_SLOT_GUESS: Final = 48
#: Entries a generation keeps at least, whatever the budget: a tiny budget
#: must still let a checkpoint's worth of work run.
_MIN_GENERATION: Final = 16
#: Entries sampled to measure what one costs (see ``_kvstate.StoredKeyValueState._rotate``).
_SAMPLE: Final = 32


def _generation_size(sample_of: dict[Hashable, Any], budget: int) -> int:
    """The entries a generation of the read cache holds within ``budget`` bytes (two
    generations share it), from what an entry of ``sample_of`` takes: its key
    and value (a sample) and its share of the dict's table."""
    total = n = 0
    for cache_key, value in sample_of.items():
        total += _entry_bytes(cache_key, value)
        n += 1
        if n >= _SAMPLE:
            break
    if n == 0:
        per_entry = _ENTRY_GUESS
    else:
        entries = len(sample_of)
        # A dict's table is its own size: a small one says little about a full one.
        slot = sys.getsizeof(sample_of) // entries if entries >= 1024 else _SLOT_GUESS
        per_entry = total // n + slot
    return max(_MIN_GENERATION, budget // 2 // max(1, per_entry))


def _encoded_bytes(entries: dict[Hashable, _Entry]) -> int:
    """The bytes of the encoded keys and values of ``entries`` (a tombstone: its key)."""
    total = 0
    for entry in entries.values():
        data = entry[3]
        total += len(entry[1]) if data is None else len(entry[1]) + len(data)
    return total


def _plain_value(value: Any) -> bool:
    """True if JSON always encodes ``value``, to what reads back equal and of its type."""
    t = type(value)
    if t is int:
        n: int = value
        return -_INT_BOUND < n < _INT_BOUND
    if t is str:
        text: str = value
        return _isascii(text)  # no lone surrogates, which orjson refuses
    return t is bool or value is None


_short_repr: Final = reprlib.Repr()
_short_repr.maxstring = 60
_short_repr.maxother = 60


def _bad_key(namespace: str, key: Any, why: str) -> SerializationError:
    """The error of a key a state cannot use, saying ``why``."""
    return SerializationError(
        f"state {namespace!r}: cannot use key {_short_repr.repr(key)} of type "
        f"{type(key).__name__!r}: {why}"
    )


def _bad_stored_key(namespace: str, encoded: bytes) -> StateCorruptError:
    return StateCorruptError(
        f"state {namespace!r}: the store holds a key that is not JSON: {_short_repr.repr(encoded)}"
    )


def _bad_stored_value(namespace: str, key: Any, exc: Exception) -> StateCorruptError:
    return StateCorruptError(
        f"state {namespace!r}: the stored value of key {_short_repr.repr(key)} "
        f"cannot be decoded ({type(exc).__name__}: {exc})"
    )
