"""The Bloom filter of the keys a state stored (see ``StoredKeyValueState._rotate``).

Apart from ``_kvstate`` along a seam of its own (a set of keys, not the
state's protocol); compiled with it, so the calls between them stay native.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final

#: _KeyFilter layers: bits a key, bits set a key (~3% false positives), first keys.
_FILTER_BITS: Final = 8
_FILTER_PROBES: Final = 3
_FILTER_FIRST: Final = 1 << 16


class KeyFilter:
    """A Bloom filter of every key the store may hold, so that a miss on a key it
    never held costs no store read (see ``StoredKeyValueState._rotate``). Each
    layer added is as large as all before it: 8 to 16 bits a key whatever the
    state's size. Process-local: probes come from ``hash()``."""

    __slots__ = ("_capacity", "_count", "_layers")

    def __init__(self) -> None:
        self._layers: list[bytearray] = []
        self._capacity = self._count = 0

    def _holds(self, bits: bytearray, h: int, setting: bool) -> bool:
        mask = len(bits) * 8 - 1
        step = ((h >> 32) & 0xFFFFFFFF) | 1
        for i in range(_FILTER_PROBES):
            p = (h + i * step) & mask
            if setting:
                bits[p >> 3] |= 1 << (p & 7)
            elif not bits[p >> 3] & (1 << (p & 7)):
                return False
        return True

    @property
    def nbytes(self) -> int:
        """The bytes its layers take (what it costs the cache's budget)."""
        return sum(len(bits) for bits in self._layers)

    def might_hold(self, key: Hashable) -> bool:
        return any(self._holds(bits, hash(key), False) for bits in self._layers)

    def add(self, key: Hashable) -> None:
        if self.might_hold(key):
            return  # counted once: the layers grow with distinct keys only
        if self._count >= self._capacity:
            size = max(_FILTER_FIRST, self._capacity)
            self._layers.append(bytearray(size * _FILTER_BITS // 8))
            self._capacity += size
        self._count += 1
        self._holds(self._layers[-1], hash(key), True)
