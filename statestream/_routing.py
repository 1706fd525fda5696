"""Groupings and the stable hash that maps a key to a task.

Routing must give the same task for the same key in every process and every
run, and on Spark executors as on the local runtime, so the hash is xxh3 over
a canonical encoding of the key, never Python's salted ``hash()``. (CRC32 was
rejected: it is linear, so short keys that differ in one character collapse
onto few buckets.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import xxhash

from ._errors import TupleError

__all__ = ["Grouping", "RouteChoice", "stable_hash", "task_for_key"]

_xxh3 = xxhash.xxh3_64_intdigest

GroupingKind = Literal["shuffle", "fields", "global", "all", "direct", "none", "custom"]


def stable_hash(value: Any) -> int:
    """A 64-bit hash of ``value`` that is identical in every process and run.

    Strings hash their UTF-8 bytes, bytes themselves; anything else its JSON
    encoding with sorted keys (so ints, floats, lists and dicts work).
    """
    if type(value) is str:
        try:
            return _xxh3(value.encode())
        except UnicodeEncodeError as exc:  # a lone surrogate: not UTF-8, as orjson says too
            raise TupleError(
                f"cannot route on {value!r} (str): it is not valid UTF-8 ({exc.reason}); "
                "fields grouping keys must be encodable strings"
            ) from exc
    if type(value) is bytes:
        return _xxh3(value)
    try:
        encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise TupleError(
            f"cannot route on {value!r} ({type(value).__name__}): fields grouping keys must be "
            "str, bytes, numbers, bools, None, or lists/dicts of those"
        ) from exc
    return _xxh3(encoded)


def task_for_key(key: Any, n_tasks: int) -> int:
    """The task index (0..n_tasks-1) a fields grouping sends ``key`` to."""
    return stable_hash(key) % n_tasks


@dataclass(frozen=True)
class Grouping:
    """How a bolt subscribes to one (component, stream).

    ``fields`` is set for a fields grouping; ``custom`` holds an object with a
    ``choose_tasks(values, n_tasks) -> list[int]`` method for a custom grouping.
    """

    kind: GroupingKind
    fields: tuple[str, ...] = ()
    custom: Any = None

    def describe(self) -> str:
        if self.kind == "fields":
            return f"fields{list(self.fields)}"
        return self.kind


def custom_choose(custom: Any, values: Sequence[Any], n_tasks: int) -> list[int]:
    tasks = list(custom.choose_tasks(values, n_tasks))
    for t in tasks:
        if type(t) is not int or not 0 <= t < n_tasks:
            raise TupleError(
                f"custom grouping {type(custom).__name__} chose task {t!r}; "
                f"choose from 0..{n_tasks - 1}"
            )
    return tasks


class RouteChoice:
    """Which tasks of one subscriber a (producer task, stream)'s tuples go to.

    The route choice of every runtime, so that a tuple lands on the same
    task index wherever it runs: a fields grouping sends ``key`` (the index
    of the grouped field, or a tuple of indexes) to
    :func:`task_for_key`; shuffle (and none) is a round-robin that starts at
    ``start`` (the producer's task index, so that producers spread their
    first tuples); global is task 0; all is every task; direct is the task
    named by its global task id (none if it does not subscribe); custom asks
    the grouping (:func:`custom_choose`). Stateful: the round-robin moves on
    with each shuffled tuple. The local runtime inlines the hot kinds in its
    compiled emit path and agrees with this choice (tests/unit/test_routing.py).
    """

    __slots__ = ("custom", "index_of_task", "key", "kind", "n", "rr", "target")

    def __init__(
        self,
        target: str,
        kind: str,
        key: int | tuple[int, ...] | None,
        custom: Any,
        task_ids: Sequence[int],
        start: int = 0,
    ) -> None:
        self.target = target
        self.kind = kind
        self.n = len(task_ids)
        self.key: Any = key
        self.custom: Any = custom
        #: Task index by global task id (what a direct emit names).
        self.index_of_task: dict[int, int] = {tid: i for i, tid in enumerate(task_ids)}
        self.rr = start % self.n

    def choose(self, values: Sequence[Any], direct: int | None) -> list[int]:
        """The task indexes (0..n-1) of the subscriber that get a tuple of ``values``
        (``direct``: the global task id of a direct emit, else None)."""
        kind = self.kind
        if kind == "fields":
            key = self.key
            if type(key) is int:
                return [task_for_key(values[key], self.n)]
            return [task_for_key([values[i] for i in key], self.n)]
        if kind in ("shuffle", "none"):
            i = self.rr
            self.rr = i + 1 if i + 1 < self.n else 0
            return [i]
        if kind == "global":
            return [0]
        if kind == "all":
            return list(range(self.n))
        if kind == "direct":
            idx = self.index_of_task.get(direct)  # type: ignore[arg-type]
            return [] if idx is None else [idx]
        return custom_choose(self.custom, values, self.n)
