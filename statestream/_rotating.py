"""A map whose entries expire in cohorts, driven by an external tick.

:class:`RotatingMap` is the timeout device of the acker (and of anything
else that has to forget entries after a while). It keeps ``num_buckets``
plain dicts, newest first. Writing a key moves it into the newest bucket;
:meth:`RotatingMap.rotate` throws the oldest bucket away, reports what was
in it, and opens a fresh newest bucket. Nothing here reads a clock: the
owner calls ``rotate`` on every tick, so time is an input and tests need
no sleeping.

Expiry bound: with a tick period of ``T`` and ``n`` buckets, an entry is
dropped by the ``n``-th rotation after its last :meth:`~RotatingMap.put`,
that is between ``(n - 1) * T`` and ``n * T`` after that put (the first
rotation may come at any moment of the current period).

Not thread-safe: one owner drives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeVar

__all__ = ["RotatingMap"]

K = TypeVar("K")
V = TypeVar("V")

# A private sentinel, so that ``None`` stays a storable value.
# Final: a C static in the compiled core, where a plain global is a module-dict
# lookup at every use (once per completed tree, in pop).
_MISSING: Final[object] = object()


class RotatingMap(Generic[K, V]):
    """A dict split into ``num_buckets`` age cohorts; see the module docstring.

    Every key lives in exactly one bucket. Lookups try the newest bucket
    first, because recently written keys are the ones read most often (an
    acker sees the acks of a tree shortly after its init).

    ``on_expire(key, value)`` is called by :meth:`rotate` for each expired
    pair, oldest write first, before ``rotate`` returns. It must not modify
    this map.
    """

    __slots__ = ("_buckets", "_on_expire")

    def __init__(
        self,
        num_buckets: int = 3,
        on_expire: Callable[[K, V], None] | None = None,
    ) -> None:
        if not isinstance(num_buckets, int) or num_buckets < 2:
            # One bucket would expire an entry at the very next tick, possibly
            # a moment after it was written: no lower bound on its lifetime.
            raise ValueError(
                f"RotatingMap needs num_buckets >= 2, got {num_buckets!r}; "
                "with n buckets an entry lives between (n-1) and n tick periods"
            )
        # Index 0 is the newest bucket ("nursery"), the last is the next to
        # expire ("death row"). The list object itself is never replaced,
        # only mutated, so an owner in this package may keep a reference.
        self._buckets: list[dict[K, V]] = [{} for _ in range(num_buckets)]
        self._on_expire = on_expire

    @property
    def num_buckets(self) -> int:
        """The number of buckets given at construction."""
        return len(self._buckets)

    @property
    def buckets(self) -> list[dict[K, V]]:
        """The buckets themselves, newest first, for a hot path that must update a
        value where it is, without moving it, in one lookup (the acker's ledger).
        The list is mutated in place by :meth:`rotate`, so a reference taken once
        stays valid; a caller must not add or remove buckets."""
        return self._buckets

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` in the newest bucket, restarting its expiry.

        If the key is held by an older bucket it is moved, so it is never
        stored twice.
        """
        buckets = self._buckets
        newest = buckets[0]
        if key not in newest:
            for i in range(1, len(buckets)):
                older = buckets[i]
                # "in" then del: the compiled core calls dict.pop(key, default)
                # as a method, ``in`` directly (and the key is rarely there).
                if key in older:
                    del older[key]
        newest[key] = value

    def put_new(self, key: K, value: V) -> None:
        """:meth:`put` for a key known to be absent (a freshly drawn id): one store,
        no search of the older buckets. A key that is in fact present would be
        stored twice, and its older copy would expire on its own."""
        self._buckets[0][key] = value

    def get(self, key: K, default: V | None = None) -> V | None:
        """Return the value for ``key`` without touching its expiry, else ``default``."""
        for bucket in self._buckets:
            value = bucket.get(key, _MISSING)
            if value is not _MISSING:
                return value  # type: ignore[return-value]
        return default

    def __contains__(self, key: object) -> bool:
        return any(key in bucket for bucket in self._buckets)

    def pop(self, key: K, default: V | None = None) -> V | None:
        """Remove ``key`` and return its value, else return ``default``."""
        for bucket in self._buckets:
            value = bucket.get(key, _MISSING)  # get and del: see put()
            if value is not _MISSING:
                del bucket[key]
                return value  # type: ignore[return-value]
        return default

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._buckets)

    def __iter__(self) -> Iterator[K]:
        """Iterate over the keys, newest bucket first. Do not mutate while iterating."""
        for bucket in self._buckets:
            yield from bucket

    def items(self) -> Iterator[tuple[K, V]]:
        """Iterate over the pairs, newest bucket first. Do not mutate while iterating."""
        for bucket in self._buckets:
            yield from bucket.items()

    def clear(self) -> None:
        """Forget every entry without calling ``on_expire``."""
        for bucket in self._buckets:
            bucket.clear()

    def rotate(self) -> list[tuple[K, V]]:
        """Advance every cohort by one step and expire the oldest one.

        Returns the expired pairs (in the order they were written) after
        calling ``on_expire`` for each. The map is already rotated when the
        callback runs.
        """
        buckets = self._buckets
        expired = buckets.pop()
        buckets.insert(0, {})
        pairs = list(expired.items())
        callback = self._on_expire
        if callback is not None:
            for key, value in pairs:
                callback(key, value)
        return pairs

    def __repr__(self) -> str:
        sizes = ", ".join(str(len(bucket)) for bucket in self._buckets)
        return f"RotatingMap(bucket sizes newest->oldest: [{sizes}])"
