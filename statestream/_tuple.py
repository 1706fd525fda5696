"""Fields, Values and the Tuple that flows between tasks.

A tuple is on the hot path: one is built for every emit and read for every
``execute``. It therefore holds only two references of its own (its values and
a shared :class:`Origin` describing where it came from) plus the reliability
slots the acker machinery fills in. Everything that is the same for every
tuple of one (task, stream) lives in the origin, built once.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from mypy_extensions import mypyc_attr

from ._errors import TupleError, caused_by

__all__ = ["DEFAULT_STREAM", "TICK_STREAM", "Fields", "Origin", "Tuple", "Values", "check_emit"]

DEFAULT_STREAM = "default"
TICK_STREAM = "__tick"
SYSTEM_COMPONENT = "__system"


class Fields(Sequence[str]):
    """An ordered, immutable list of field names with O(1) name -> index lookup."""

    __slots__ = ("_index", "_names")

    def __init__(self, *names: str | Iterable[str]) -> None:
        flat: list[Any] = []  # Any: checked below, with a message
        for name in names:
            if isinstance(name, str):
                flat.append(name)
            else:
                flat.extend(name)
        for name in flat:
            if not isinstance(name, str) or not name:
                raise TypeError(f"field names must be non-empty strings, got {name!r}")
        if len(set(flat)) != len(flat):
            dupes = sorted({n for n in flat if flat.count(n) > 1})
            raise ValueError(f"duplicate field names {dupes} in Fields({flat})")
        self._names: tuple[str, ...] = tuple(flat)
        self._index: dict[str, int] = {n: i for i, n in enumerate(flat)}

    def index_of(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise caused_by(
                KeyError(f"no field {name!r}; fields are {list(self._names)}"), None
            ) from None

    def select(self, names: Iterable[str], values: Sequence[Any]) -> list[Any]:
        """The values of ``names`` picked out of a tuple's ``values``."""
        return [values[self._index[n]] for n in names]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        return self._names[i]

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fields):
            return self._names == other._names
        if isinstance(other, (list, tuple)):
            return list(self._names) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields({', '.join(repr(n) for n in self._names)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Fields, self._names)


def check_emit(
    component: str,
    task_index: int,
    stream: str,
    values: Sequence[Any],
    declared: Mapping[str, tuple[Fields, bool]],
    direct: bool,
) -> None:
    """Raise TupleError unless ``values`` fit ``stream`` as ``component`` declared it.

    ``declared`` maps each output stream to its (fields, is direct); ``direct``
    says whether the emit was an ``emit_direct``. Every runtime checks emits
    with this, so the errors read the same everywhere.
    """
    entry = declared.get(stream)
    if entry is None:
        names = sorted(declared) or ["(none)"]
        raise TupleError(
            f"component {component!r} task {task_index} emitted on stream {stream!r}, which it "
            f"did not declare (declared: {', '.join(names)}); declare it in declare_output_fields"
        )
    fields, is_direct = entry
    if len(values) != len(fields):
        raise TupleError(
            f"component {component!r} emitted {len(values)} values {list(values)!r} on stream "
            f"{stream!r}, which declares {len(fields)} fields {list(fields)}"
        )
    if is_direct != direct:
        how = "emit_direct(task, ...)" if is_direct else "emit(...)"
        raise TupleError(
            f"component {component!r}: stream {stream!r} is "
            f"{'a direct' if is_direct else 'not a direct'} stream; use {how}"
        )


# mypyc builds a native class without running ABCMeta.__new__, so the compiled
# Fields would share Sequence's ABC registry, where isinstance(["a"], Fields)
# is True. Give it a registry of its own (a no-op for the pure-Python class).
if "_abc_impl" not in vars(Fields):
    getattr(abc, "_abc_init")(Fields)  # noqa: B009 (a private name mypy does not know)


@mypyc_attr(native_class=False)  # mypyc compiles no subclass of list
class Values(list[Any]):
    """The values of one tuple, in the order of the declared fields (Storm's ``Values``)."""

    def __init__(self, *values: Any) -> None:
        super().__init__(values)


class Origin:
    """Where tuples come from: one instance per (component, task, stream), shared by its tuples."""

    __slots__ = ("component", "fields", "stream", "task", "task_index")

    def __init__(self, component: str, task: int, task_index: int, stream: str, fields: Fields):
        self.component = component
        self.task = task
        self.task_index = task_index
        self.stream = stream
        self.fields = fields

    def __reduce__(self) -> tuple[Any, ...]:
        return (Origin, (self.component, self.task, self.task_index, self.stream, self.fields))

    def __repr__(self) -> str:
        return (
            f"Origin({self.component}[{self.task_index}] task {self.task}, stream {self.stream!r})"
        )


@mypyc_attr(acyclic=True)
class Tuple:
    """One tuple as a bolt receives it: values readable by index or field name.

    ``tuple[0]``, ``tuple["word"]``, ``tuple.get("word")``, ``tuple.values``,
    plus where it came from: ``source_component``, ``source_stream``,
    ``source_task`` (global task id) and ``source_task_index``.

    The reliability slots are the runtime's. A tuple in one tree (the usual
    case) holds that tree's ``root`` (spout tuple) id and the ``edge`` id that
    created it; a tuple in several trees (multi-anchored) holds
    ``anchors``, a dict root -> edge, with ``root`` 0; an untracked tuple has
    neither. ``trees()`` gives the same dict in every case. ``ack_val``
    accumulates the XOR of the edges anchored to this tuple; ``done`` guards
    against acking it twice; ``owner`` is the task it was delivered to, the
    only one that may ack or fail it. (Two int slots instead of a one-entry
    dict: the dict would more than double the size of a tuple in flight.)

    The compiled core does not track tuples for the cycle collector (one is
    made for every emit, and tracking cost about 90 instructions per word of
    the word count), so a tuple must not be reachable from its own values:
    a value that refers back to the tuple carrying it would never be freed.
    """

    __slots__ = ("ack_val", "anchors", "done", "edge", "origin", "owner", "root", "values")

    def __init__(
        self,
        values: Sequence[Any],
        origin: Origin,
        anchors: dict[int, int] | None = None,
        owner: int = -1,
        root: int = 0,
        edge: int = 0,
    ) -> None:
        self.values = values
        self.origin = origin
        self.anchors = anchors
        self.root = root
        self.edge = edge
        self.ack_val = 0
        self.done = False
        self.owner = owner  # the task a tracked tuple was delivered to (-1: untracked)

    def trees(self) -> dict[int, int]:
        """Root id -> edge id for every tree this tuple belongs to (empty if untracked)."""
        if self.root:
            return {self.root: self.edge}
        return dict(self.anchors) if self.anchors else {}

    def __getitem__(self, key: int | str) -> Any:
        if type(key) is int:
            return self.values[key]
        return self.values[self.origin.fields.index_of(key)]  # type: ignore[arg-type]

    def get(self, name: str, default: Any = None) -> Any:
        fields = self.origin.fields
        if name in fields:
            return self.values[fields.index_of(name)]
        return default

    def select(self, names: Iterable[str]) -> list[Any]:
        return self.origin.fields.select(names, self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    @property
    def fields(self) -> Fields:
        return self.origin.fields

    @property
    def source_component(self) -> str:
        return self.origin.component

    @property
    def source_stream(self) -> str:
        return self.origin.stream

    @property
    def source_task(self) -> int:
        return self.origin.task

    @property
    def source_task_index(self) -> int:
        return self.origin.task_index

    @property
    def is_tick(self) -> bool:
        return self.origin.stream == TICK_STREAM

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.origin.fields, self.values, strict=False))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_tuple, (list(self.values), self.origin, self.trees() or None))

    def __repr__(self) -> str:
        o = self.origin
        return f"Tuple({o.component}[{o.task_index}]:{o.stream} {list(self.values)!r})"


def _rebuild_tuple(values: list[Any], origin: Origin, trees: dict[int, int] | None) -> Tuple:
    if trees is not None and len(trees) == 1:
        ((root, edge),) = trees.items()
        if root:
            return Tuple(values, origin, None, -1, root, edge)
    return Tuple(values, origin, trees)
