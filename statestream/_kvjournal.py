"""The per-tuple undo journal of :class:`~statestream._kvstate.StoredKeyValueState`.

Exactly-once retries a tuple its bolt failed where it failed (issue 44): the
tuple's state writes are undone first. The state journals, for the tuple
being executed, each key it changes with the value visible before the first
change (:meth:`UndoJournal.remember`), and undoes them in reverse by putting
the old values back. Part of the compiled per-tuple core
(:mod:`statestream._core`): most tuples change one key, so the first key and
its value have their own fields and the rest go in two lists that are reused
from tuple to tuple (no allocation per tuple).
"""

from __future__ import annotations

from typing import Any, Final


class _NoKey:
    """The last read's key when there is none (no user key is this object)."""

    __slots__ = ()


_NO_KEY: Final = _NoKey()


class UndoJournal:
    """The keys the tuple being executed changed, each with the value it had."""

    __slots__ = ("first_key", "first_old", "keys", "last_key", "last_value", "n", "olds")

    def __init__(self) -> None:
        self.n = 0  # keys journaled for the current tuple
        self.first_key: Any = None  # the first of them (most tuples change one)
        self.first_old: Any = None
        self.keys: list[Any] = []  # the others, in their first n-1 places
        self.olds: list[Any] = []
        # The tuple's last read (state.put(k, state.get(k) + 1) is the common
        # case): the old value of a put of that key, without a second lookup.
        self.last_key: Any = _NO_KEY
        self.last_value: Any = None

    def begin(self) -> None:
        """A new tuple starts: forget what the last one changed and read."""
        self.n = 0
        self.last_key = _NO_KEY

    def read(self, key: Any, value: Any) -> None:
        """The tuple read ``value`` for ``key`` (as the state holds it)."""
        self.last_key = key
        self.last_value = value

    def last_read(self, key: Any, missing: Any) -> Any:
        """The value the tuple read last if that was ``key`` (by identity), else ``missing``."""
        return self.last_value if key is self.last_key else missing

    def holds(self, key: Any) -> bool:
        """Whether the tuple changed ``key`` already (1 and True are two keys)."""
        n = self.n
        if not n:
            return False
        first = self.first_key
        if first == key and type(first) is type(key):
            return True
        keys = self.keys
        for i in range(n - 1):  # noqa: SIM110 (a loop: any() of a generator costs more compiled)
            if keys[i] == key and type(keys[i]) is type(key):
                return True
        return False

    def remember(self, key: Any, old: Any) -> None:
        """Journal that the tuple changes ``key``, whose visible value was ``old``."""
        n = self.n
        if n == 0:
            self.first_key, self.first_old = key, old
        elif n - 1 < len(self.keys):
            self.keys[n - 1] = key
            self.olds[n - 1] = old
        else:
            self.keys.append(key)
            self.olds.append(old)
        self.n = n + 1

    def take(self) -> list[tuple[Any, Any]]:
        """The tuple's changes, ``(key, old value)`` in the order made, and begin afresh."""
        n = self.n
        changed: list[tuple[Any, Any]] = []
        if n:
            changed.append((self.first_key, self.first_old))
            changed.extend(zip(self.keys[: n - 1], self.olds[: n - 1], strict=True))
        self.begin()
        return changed
