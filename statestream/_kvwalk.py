"""Walking a state (see ``StoredKeyValueState._walk``): whole in its read cache, or
the store's pages merged with the uncommitted changes.

Apart from ``_kvstate`` along the seam between the state's protocol and its
iteration; compiled with it, so the calls between them stay native.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from statestream._state import StateBackend

PAGE: Final = 1024
"""Committed entries :meth:`StoredKeyValueState.items` reads from the store at a time."""


def freeze(obj: Any) -> Any:
    """JSON has no tuples: turn a decoded list key back into the tuple it was."""
    if isinstance(obj, list):
        return tuple(freeze(item) for item in obj)
    return obj


def cached_items(
    view: dict[Hashable, Any], absent: object, *, ordered: bool
) -> Iterator[tuple[Any, Any]]:
    """The visible ``(key, value)`` of a read cache that holds the whole state.

    ``view`` maps cache keys (a ``str`` or ``int`` key itself, else
    ``(marker, encoded key)``) to decoded values or ``absent``, with every
    uncommitted change already in it. With ``ordered`` the entries come in
    the order of their encoded keys, as a paged read of the store gives
    them; that costs one ``orjson.dumps`` per key and a sort of bytes, still
    less than reading the store and merging (issue 34). The entries are
    taken at the first ``next``: changes made while iterating are not seen
    and do not break the walk.
    """
    if not ordered:
        snapshot = [
            (cache_key[1] if type(cache_key) is tuple else cache_key, value)
            for cache_key, value in view.items()
            if value is not absent
        ]
        for key, value in snapshot:
            yield (freeze(orjson.loads(key)) if type(key) is bytes else key), value
        return
    by_encoded: dict[bytes, tuple[Any, Any]] = {}
    for cache_key, value in view.items():
        if value is absent:
            continue
        if type(cache_key) is tuple:
            encoded: bytes = cache_key[1]
            by_encoded[encoded] = (freeze(orjson.loads(encoded)), value)
        else:
            by_encoded[b"%b" % orjson.dumps(cache_key)] = (cache_key, value)
    for encoded in sorted(by_encoded):
        yield by_encoded[encoded]


def committed_entries(backend: StateBackend) -> Iterator[tuple[bytes, bytes]]:
    """The committed entries of ``backend``, in pages in key order where it can
    (``scan_page``; else its ``scan``, in its own order)."""
    scan_page = getattr(backend, "scan_page", None)
    if scan_page is None:
        yield from backend.scan()
        return
    after: bytes | None = None
    while True:
        page, after = scan_page(after, PAGE)
        yield from page
        if after is None:
            return


def merged_items(
    dirty: Iterable[dict[Hashable, tuple[Any, bytes, Any, bytes | None]]],
    committed: Iterable[tuple[bytes, bytes]],
    stored: Callable[[bytes, bytes], tuple[Any, Any]],
    *,
    ordered: bool,
) -> Iterator[tuple[Any, Any]]:
    """The uncommitted changes over the committed entries, merged.

    ``dirty``: dicts of entries ``(key, encoded key or b"" for a deferred
    put, value, encoded value or None for a tombstone)``, a later dict's
    entry winning over an earlier one's; ``committed``: the store's
    ``(encoded key, value bytes)``, in encoded-key order with ``ordered``
    (then the output is in that order too), else in any order (then the
    changes come first); ``stored`` turns a committed entry into what is
    yielded. A committed key that has a change is not read back from the
    store's bytes.
    """
    overlay: dict[bytes, tuple[Any, bytes, Any, bytes | None]] = {}
    for entries in dirty:
        for entry in entries.values():
            encoded_key = entry[1] or b"%b" % orjson.dumps(entry[0])  # a plain prepared key
            overlay[encoded_key] = entry
    changes = sorted(overlay) if ordered else list(overlay)
    i = 0
    if not ordered:  # the backend's own order: the changes first
        i = len(changes)
        for encoded_key in changes:
            entry = overlay[encoded_key]
            if entry[3] is not None:  # None: a tombstone
                yield entry[0], entry[2]
    for encoded_key, data in committed:
        while i < len(changes) and changes[i] < encoded_key:
            entry = overlay[changes[i]]
            i += 1
            if entry[3] is not None:
                yield entry[0], entry[2]
        if encoded_key in overlay:
            continue
        yield stored(encoded_key, data)
    while i < len(changes):
        entry = overlay[changes[i]]
        i += 1
        if entry[3] is not None:
            yield entry[0], entry[2]
