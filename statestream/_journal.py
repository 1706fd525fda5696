"""The per-tuple undo journal of a key-value state (used by the Spark runtime).

Pure: no I/O but the wrapped state's; tested in ``tests/unit/test_journal.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["TupleJournal"]

_ABSENT = object()


class TupleJournal:
    """A key-value state with the changes of the tuple being executed journaled,
    so that a failed tuple leaves no effect on it.

    In exactly-once mode a failed tuple must not count: the local runtime goes
    back to the last checkpoint; the Spark runtime executes the tuple again
    within its batch, so the puts and deletes its failed attempt made are
    undone first (what the bolt keeps in its own fields is its business, as
    ``pre_rollback`` is on the local runtime).

    Call order: :meth:`begin` before each tuple, then the bolt's reads and
    writes through this object, then :meth:`undo` if the tuple failed. Every
    other call (``get``, ``keys``, the txids...) goes to the state unchanged.
    """

    def __init__(self, state: Any) -> None:
        self._state = state
        self._before: dict[Any, Any] = {}

    def begin(self) -> None:
        """Start journaling the next tuple: forget what the last one changed."""
        self._before.clear()

    def undo(self) -> None:
        """Put back every key the tuple changed since :meth:`begin`, as it was then."""
        state = self._state
        for key, value in self._before.items():
            if value is _ABSENT:
                state.delete(key)
            else:
                state.put(key, value)
        self._before.clear()

    def _remember(self, key: Any) -> None:
        if key not in self._before:
            self._before[key] = self._state.get(key, _ABSENT)

    def put(self, key: Any, value: Any) -> None:
        self._remember(key)
        self._state.put(key, value)

    def delete(self, key: Any) -> Any:
        self._remember(key)
        return self._state.delete(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._state)

    def __contains__(self, key: object) -> bool:
        return key in self._state
