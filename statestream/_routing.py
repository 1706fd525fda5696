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

__all__ = ["Grouping", "stable_hash", "task_for_key"]

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
