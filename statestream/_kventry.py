"""The entries of :class:`~statestream._kvstate.StoredKeyValueState`'s cache and
pending changes: the sentinels, the cache key of a key, what an entry costs in
memory, and which values a put may defer encoding (JSON always encodes them
exactly). Part of the compiled per-tuple core (:mod:`statestream._core`); the
names keep their underscore: they are the state's internals, not an API.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from typing import Any, Final


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
