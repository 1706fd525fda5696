"""Walking a state that is whole in its read cache (see ``StoredKeyValueState._walk``).

Apart from ``_kvstate`` only for room (a module stays under 800 lines); it
is compiled with it, so the calls between them stay native.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

import orjson


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
