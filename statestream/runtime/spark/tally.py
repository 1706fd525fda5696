"""What the parts of the Spark driver share: the run's tally and its control.

:class:`RunTally` is every count, error and per-task figure of a run, kept in
one object that each part is handed (the spout reader reports a spout's
error into it, the batch runner counts a committed batch, the coordinator
reads it back for the :class:`~statestream.runtime.contract.Runtime` calls).
:class:`RunControl` is when the run must end (a stop, the end of its
duration), read on the runtime's clock by every part that waits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..._clock import Clock
from ..._components import task_namespace
from ..._messages import MessageBook
from ..._results import ErrorReport, TaskMetrics
from ..errorlog import ErrorLog
from ..metrics import MetricsBank


class RunTally:
    """The counters, errors and per-task metrics of one runtime's runs.

    ``tasks`` are the ``(component, index)`` pairs whose counts the run
    reports (the user's components; a ``-1`` index is added on first use for
    what no task of a component did, a coordinator's error say).
    """

    def __init__(self, bank: MetricsBank, tasks: Iterable[tuple[str, int]]) -> None:
        self.bank = bank
        """The run's metrics bank (timings, checkpoints, sources)."""
        self.counters: dict[str, int] = {"batches": 0, "replays": 0, "recovered": 0}
        self.errors: list[ErrorReport] = []
        # Reports into self.errors; the driver logs none of them itself.
        self.error_log = ErrorLog(logging.getLogger("statestream"), self.errors)
        # Per task, the counts of the committed batches (or transactions).
        self._tasks: dict[tuple[str, int], TaskMetrics] = {
            (cid, i): TaskMetrics(cid, i) for cid, i in tasks
        }

    def count(self, counter: str, n: int = 1) -> None:
        """Add ``n`` to ``counter`` (created at 0 on first use: ``skipped``, say)."""
        self.counters[counter] = self.counters.get(counter, 0) + n

    def task(self, cid: str, index: int) -> TaskMetrics:
        """The counts of task ``index`` of ``cid`` (index -1: the component's own)."""
        m = self._tasks.get((cid, index))
        if m is None:
            m = self._tasks[cid, index] = TaskMetrics(cid, index)
        return m

    def report(self, cid: str, index: int, exc: BaseException, what: Any) -> None:
        """Record an error of a component on the driver (a spout's, say)."""
        self.task(cid, index).errors += 1
        self.error_log.record(cid, index, exc, what)

    def task_metrics(self, books: Mapping[str, MessageBook]) -> list[TaskMetrics]:
        """Per task, copies of the counts; a spout task's ``retrying`` counts its
        messages that failed and are to be run again (from its message book)."""
        out = []
        for (cid, index), m in list(self._tasks.items()):
            copy = TaskMetrics(**vars(m))
            book = books.get(task_namespace(cid, index)) if index >= 0 else None
            if book is not None:
                copy.retrying = len(book.failures)
            out.append(copy)
        return out

    def metrics(self, books: Mapping[str, MessageBook]) -> dict[str, TaskMetrics]:
        """Per-component totals of :meth:`task_metrics`."""
        out = {cid: TaskMetrics(cid, -1) for cid, _ in self._tasks}
        for m in self.task_metrics(books):
            out[m.component].add(m)
        return out


def acked_by_commit(
    emitted: Mapping[tuple[str, int], int], on_driver: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Per spout task, the tuples of a committed batch that no message id acks.

    Spark has no per-tuple acking: a batch's tuples are done when the batch
    commits, and a spout's ``acked`` counts them then. The records the driver
    read itself are acked one by one, by their message ids (an untracked one
    is not acked, as on the local runtime); those its read stages produced on
    the executors (the ranges of a partitioned source, a fed DataFrame's rows)
    have no message id on the driver, so they are counted here: what a task's
    read stages ``emitted`` beyond the records it read ``on_driver``.
    """
    out = {}
    for task, n in emitted.items():
        extra = n - on_driver.get(task, 0)
        if extra > 0:
            out[task] = extra
    return out


class RunControl:
    """When a run ends: :meth:`stop` (from any thread or a signal handler), or its
    duration over on ``clock``; and a wait on that clock that a stop cuts short."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.stopped = False
        self.deadline: float | None = None
        """When the current run's duration ends (on ``clock``), None for no end."""

    def stop(self) -> None:
        self.stopped = True

    def start(self, duration: float | None) -> float:
        """A run starts now and lasts ``duration`` seconds (None: until stopped); the
        start time, on the clock."""
        now = self.clock.monotonic()
        self.deadline = None if duration is None else now + duration
        return now

    def over(self) -> bool:
        """Whether the run's duration has ended."""
        return self.deadline is not None and self.clock.monotonic() >= self.deadline

    def wait_until(self, when: float) -> bool:
        """Wait on the clock until ``when``; False if the run was stopped or its
        duration ended meanwhile (the wait is cut in steps of 0.1 s to see it)."""
        while not self.stopped:
            if self.over():
                return False
            left = when - self.clock.monotonic()
            if left <= 0:
                return True
            self.clock.sleep(min(left, 0.1))
        return False


class NullCollector:
    """The collector of a bolt instance on the driver, whose emits go nowhere."""

    def emit(self, *args: Any, **kwargs: Any) -> None:
        pass

    emit_direct = emit
    ack = emit
    fail = emit
    reset_timeout = emit
    report_error = emit
