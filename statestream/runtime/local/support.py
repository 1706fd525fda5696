"""Helpers of the local runtime's loop: errors named by task, the collector's
settings during a run, tick tuples."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from ..._errors import RuntimeFailure, StatestreamError, caused_by
from ..._text import error_line
from ..._tuple import Origin, Tuple

if TYPE_CHECKING:
    from .bolt import BoltTask
    from .tasks import Task


@contextlib.contextmanager
def naming(task: Task, method: str) -> Iterator[None]:
    """Let a user's exception out of ``method`` as a RuntimeFailure naming the task;
    our own errors already name what is wrong."""
    try:
        yield
    except StatestreamError:
        raise
    except Exception as exc:
        raise caused_by(
            RuntimeFailure(
                f"component {task.component!r} task {task.task_index}: {method} raised "
                f"{error_line(exc)}"
            ),
            exc,
        ) from exc


# A run allocates a tuple object or two per tuple, nearly all short-lived:
# with CPython's default young-generation threshold (700) the collector runs
# every few hundred tuples and walks the live ones each time.
GC_YOUNG: Final = 50_000


def tune_gc() -> tuple[tuple[int, int, int], bool]:
    """Collect less often during a run: what was allocated before it (the
    topology, a loaded state) moves to the permanent generation and is not
    walked again, and the young generation is collected every GC_YOUNG
    allocations. Returns what restore_gc puts back. A process that froze
    objects itself (a pre-forking server) keeps its own freeze untouched."""
    before = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(max(before[0], GC_YOUNG), before[1], before[2])
    return before, freeze


def restore_gc(saved: tuple[tuple[int, int, int], bool]) -> None:
    before, froze = saved
    gc.set_threshold(*before)
    if froze:
        gc.unfreeze()


class TickSender:
    """Delivers a tick tuple to every task of the bolts that asked for this frequency."""

    def __init__(self, bolts: list[BoltTask], origin: Origin, freq: float) -> None:
        self.bolts = bolts
        self.origin = origin
        self.values = [freq]

    def __call__(self) -> None:
        for bolt in self.bolts:
            bolt.inbox.append(Tuple(self.values, self.origin))
