"""Whether an emitted tuple can cross processes: the check every runtime makes alike.

Tuples cross processes with ``topology.workers > 1`` (the link between
workers pickles what marshal cannot carry) and on Spark (stages shuffle
pickled records); in one process they never do. So that a topology that
passes on one process does not fail only at scale-out, every runtime pickles
the first tuple each task emits on each stream (:func:`check_first`) and
stops the run with :class:`~statestream._errors.UnpicklableTupleError` if it
cannot be pickled.

Why the first tuple only: the check must cost nothing measurable per tuple
on one process (the local runtime's emit is a few hundred instructions; a
pickle of every tuple would double it). The values of one stream nearly
always have the same types, and what cannot be pickled is a type (a lock, a
generator, an open file, a connection, a lambda), so the first tuple finds
it. A stream whose values change type midway can still carry an unpicklable
one later: with several workers the link then stops the run with the same
error (:func:`unpicklable`), in one process nothing does.

Plain :mod:`pickle` everywhere, although Spark's serializer is cloudpickle:
a value one runtime accepts must be accepted by all of them. On Spark a
bolt's check fails on an executor: the task gives the tuple up with the
error's class name and message, and the driver stops the run with it
(:func:`run_ending`).

Pure: no I/O; table-tested in ``tests/unit/test_picklable.py``.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from . import _errors
from ._errors import RuntimeFailure, UnpicklableTupleError

__all__ = ["check_first", "run_ending", "unpicklable"]


def unpicklable(
    component: str, task_index: int, stream: str, values: Sequence[Any], where: str = ""
) -> UnpicklableTupleError | None:
    """The error naming the first value of ``values`` pickle cannot carry, or None
    if every one pickles. ``where``: a few words on where the tuple was going."""
    for value in values:
        try:
            pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            return UnpicklableTupleError(
                f"component {component!r} task {task_index} emitted on stream {stream!r}"
                f"{where} a {type(value).__name__} that cannot be pickled ({exc}); tuples "
                "cross processes with topology.workers > 1 and on Spark, so every runtime "
                "refuses it: emit plain data (str, int, float, bytes, lists, dicts) or "
                "picklable objects"
            )
    return None


def check_first(component: str, task_index: int, stream: str, values: Sequence[Any]) -> None:
    """Raise :class:`~statestream._errors.UnpicklableTupleError` unless ``values``
    (the first tuple a task emits on ``stream``) can be pickled."""
    error = unpicklable(component, task_index, stream, values)
    if error is not None:
        raise error


def run_ending(error_type: str, message: str) -> RuntimeFailure | None:
    """The error a task gave a tuple up with, rebuilt from its class name and
    message (what a Spark task reports to the driver), if it is one that ends
    the run (a :class:`~statestream._errors.RuntimeFailure`); else None."""
    cls = getattr(_errors, error_type, None)
    if isinstance(cls, type) and issubclass(cls, RuntimeFailure):
        return cls(message)
    return None
