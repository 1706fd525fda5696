"""The Bloom filter of the keys a state stored (see ``StoredKeyValueState._rotate``).

Apart from ``_kvstate`` along a seam of its own (a set of keys, not the
state's protocol); compiled with it, so the calls between them stay native.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final

#: Layers: bits a key (3 set a key: ~3% false positives), keys of the first layer.
_FILTER_BITS: Final = 8
_FILTER_FIRST: Final = 1 << 16
#: The hash bits the probes use: within the compiled core's machine ints.
_HASH_BITS: Final = (1 << 61) - 1


class KeyFilter:
    """A Bloom filter of every key the store may hold, so that a miss on a key it
    never held costs no store read (see ``StoredKeyValueState._rotate``). Each
    layer added is as large as all before it: 8 to 16 bits a key whatever the
    state's size. Process-local: probes come from ``hash()``."""

    __slots__ = ("_capacity", "_count", "_layers")

    def __init__(self) -> None:
        self._layers: list[bytearray] = []
        self._capacity = self._count = 0

    # Three probes, written out: a loop and a flag cost the compiled core
    # more than the probes. ``h`` is the key's hash cut to 61 bits, so that
    # every step stays a machine int there (a full 64-bit hash is a boxed
    # Python int, and each shift and mask on it a call: ~7,800 instructions
    # an add, measured, before).
    def _holds(self, bits: bytearray, h: int) -> bool:
        mask = (len(bits) << 3) - 1
        step = (h >> 32) | 1
        p = h & mask
        if not bits[p >> 3] & (1 << (p & 7)):
            return False
        p = (p + step) & mask
        if not bits[p >> 3] & (1 << (p & 7)):
            return False
        p = (p + step) & mask
        return bool(bits[p >> 3] & (1 << (p & 7)))

    def _set(self, bits: bytearray, h: int) -> None:
        mask = (len(bits) << 3) - 1
        step = (h >> 32) | 1
        p = h & mask
        bits[p >> 3] |= 1 << (p & 7)
        p = (p + step) & mask
        bits[p >> 3] |= 1 << (p & 7)
        p = (p + step) & mask
        bits[p >> 3] |= 1 << (p & 7)

    @property
    def nbytes(self) -> int:
        """The bytes its layers take (what it costs the cache's budget)."""
        return sum(len(bits) for bits in self._layers)

    def _in_any(self, h: int) -> bool:
        # A loop, not any(): compiled, any() of a generator allocates one per call.
        for bits in self._layers:  # noqa: SIM110
            if self._holds(bits, h):
                return True
        return False

    def might_hold(self, key: Hashable) -> bool:
        return self._in_any(hash(key) & _HASH_BITS)

    def add(self, key: Hashable) -> None:
        h = hash(key) & _HASH_BITS
        if self._in_any(h):
            return  # counted once: the layers grow with distinct keys only
        if self._count >= self._capacity:
            size = max(_FILTER_FIRST, self._capacity)
            self._layers.append(bytearray(size * _FILTER_BITS // 8))
            self._capacity += size
        self._count += 1
        self._set(self._layers[-1], h)
