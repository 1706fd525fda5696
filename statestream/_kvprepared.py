"""The delta a state prepared and has not committed (``StoredKeyValueState._prepared``).

Apart from ``_kvstate`` along the seam between the changes a state is making
and the checkpoint it handed them to; compiled with it, so the calls between
them stay native.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from itertools import chain
from typing import Any

from statestream._kventry import _Entry


class PreparedDelta:
    """What a state sent the store at ``prepare_commit`` and the store has not
    committed yet, mirrored in memory: a rollback forgets the cached values of its
    keys, ``items()`` merges it over the committed entries, ``prepared_keys`` counts it.

    Two parts that never share a key (a txid prepared again: the later prepare
    wins): ``entries``, as the pending changes hold them (cache key -> entry),
    and ``plain``, the deferred puts (str key -> value), whose dict a prepare
    hands over whole (:meth:`take_plain`). A checkpoint of many keys thus costs
    nothing a key here; an entry tuple and a dict write a key cost some 640
    instructions, more than the record's encoding (the seed word count's
    checkpoint at the end of its input, 13,223 keys).
    """

    __slots__ = ("entries", "plain")

    def __init__(self) -> None:
        self.entries: dict[Hashable, _Entry] = {}
        self.plain: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.entries) + len(self.plain)

    def keys(self) -> Iterator[Hashable]:
        """The cache keys of both parts."""
        return chain(self.entries, self.plain)

    def add_entries(self, pending: dict[Hashable, _Entry]) -> None:
        """Add the encoded pending changes (over a plain put of the same key)."""
        if not pending:
            return
        plain = self.plain
        if plain:
            for cache_key in pending:
                if type(cache_key) is str:
                    plain.pop(cache_key, None)
        self.entries.update(pending)

    def take_plain(self, plain: dict[str, Any]) -> dict[str, Any]:
        """Add the deferred puts ``plain`` (over an entry of the same key); return the
        dict the state defers its next puts in: a new one when ``plain`` itself
        was kept (the first prepare of a txid), else ``plain``, emptied."""
        entries = self.entries
        if entries:
            for key in plain:
                entries.pop(key, None)
        if not self.plain:
            self.plain = plain
            return {}
        self.plain.update(plain)
        plain.clear()
        return plain

    def as_entries(self) -> dict[Hashable, _Entry]:
        """Both parts as entries (a plain put's ``(key, b"", value, b"")``), for a walk."""
        if not self.plain:
            return self.entries
        merged = dict(self.entries)
        for key, value in self.plain.items():
            merged[key] = (key, b"", value, b"")
        return merged

    def clear(self) -> None:
        self.entries.clear()
        self.plain = {}
