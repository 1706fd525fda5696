"""The error log: a user's exception as a runtime reports it, formatted once.

Every runtime turns an exception raised by user code (a bolt's ``execute``, a
spout's ``next_tuple``, a ``cleanup``) into an
:class:`~statestream._results.ErrorReport` for the run's result and the
summary, and the local runtime also logs it. The text is made here only:

- the *what*, a tuple's repr or the call that raised (``'next_tuple()'``), is
  a value, cut at 200 characters (:func:`~statestream._text.cut_value`): a
  whole read buffer must not fill the log;
- the *error*, the exception's repr, is a message, kept whole up to
  :data:`~statestream._text.MESSAGE_LIMIT` and cut in its middle past it
  (:func:`~statestream._text.cut_message`), since a message ends with its fix;
- the *traceback* is kept whole, or its last ``limit`` characters where it
  crosses a process boundary (:data:`TRACEBACK_LIMIT`, Spark's executors).

:class:`ErrorLog` keeps the reports and logs them by one rule: a given error
(the same component, task, type and place) shows its traceback once; its
repeats are counted, logged at the 10th, 100th, 1000th... and, at the end of
the run (:meth:`ErrorLog.log_repeats`), with their total.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import MutableSequence
from typing import Final

from .._results import ErrorReport
from .._text import cut_message, cut_value

__all__ = ["TRACEBACK_LIMIT", "ErrorLog", "error_parts", "error_report"]

#: The longest traceback text that crosses a process boundary (its end is kept,
#: where the frame that raised is).
TRACEBACK_LIMIT: Final = 20_000

#: What makes two errors "the same": component, task index, type name, and the
#: (file, line) of the last three frames of the traceback.
Signature = tuple[str, int, str, tuple[tuple[str, int | None], ...]]


def traceback_text(exc: BaseException, limit: int | None = None) -> str:
    """``exc``'s traceback as ``traceback.format_exception`` writes it; with ``limit``,
    its last ``limit`` characters."""
    text = "".join(traceback.format_exception(exc))
    return text if limit is None else text[-limit:]


def error_parts(exc: BaseException, what: str, limit: int | None = None) -> tuple[str, str, str]:
    """The three texts of a report of ``exc``: ``what`` (already a text: a
    tuple's repr) cut as a value, ``exc``'s repr cut as a message, and the
    traceback (its last ``limit`` characters if given)."""
    return cut_value(what), cut_message(repr(exc)), traceback_text(exc, limit)


def error_report(
    component: str, task_index: int, exc: BaseException, what: str, limit: int | None = None
) -> ErrorReport:
    """The :class:`ErrorReport` of ``exc``, raised by ``component``'s task
    ``task_index`` (-1: none in particular) on ``what`` (see :func:`error_parts`)."""
    return ErrorReport(component, task_index, *error_parts(exc, what, limit))


def signature(component: str, task_index: int, exc: BaseException) -> Signature:
    """What makes two errors "the same": task, type, and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    where = tuple((f.filename, f.lineno) for f in frames[-3:])
    return (component, task_index, type(exc).__name__, where)


def is_power_of_ten(n: int) -> bool:
    """True for 1, 10, 100, ...: the repeats of an error that are logged."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


class ErrorLog:
    """The reports of a run's errors, and their log.

    ``reports`` is where :meth:`record` and :meth:`report` append (the
    runtime's ``errors``: a bounded deque on the local runtime, a list on
    Spark's driver). Not thread-safe: one run loop calls it.
    """

    def __init__(self, logger: logging.Logger, reports: MutableSequence[ErrorReport]) -> None:
        self.logger = logger
        self.reports = reports
        self._seen: dict[Signature, int] = {}  # error signature -> times reported

    def record(
        self, component: str, task_index: int, exc: BaseException, what: object
    ) -> ErrorReport:
        """Keep the report of ``exc`` raised on ``what`` (a tuple, or the call that
        raised), in its repr; nothing is logged."""
        report = error_report(component, task_index, exc, repr(what))
        self.reports.append(report)
        return report

    def report(
        self, component: str, task_index: int, exc: BaseException, what: object
    ) -> ErrorReport:
        """:meth:`record` ``exc``, and log it: with its traceback the first time
        this error is seen, as a count at its 10th, 100th, ... time."""
        report = self.record(component, task_index, exc, what)
        seen = self._count(signature(component, task_index, exc))
        if seen == 1:
            self.logger.error(
                "%s[%d] raised %s while processing %s\n%s",
                component,
                task_index,
                report.error,
                report.tuple,
                report.traceback,
            )
        elif is_power_of_ten(seen):
            self.logger.error(
                "%s[%d] raised %s again: %d times so far (traceback above)",
                component,
                task_index,
                type(exc).__name__,
                seen,
            )
        return report

    def _count(self, sig: Signature) -> int:
        seen = self._seen[sig] = self._seen.get(sig, 0) + 1
        return seen

    def log_repeats(self) -> None:
        """Log the total of each error repeated since the last call whose count was
        not just logged (a count that is a power of ten was); forget the counts."""
        for (component, task_index, type_name, _), seen in self._seen.items():
            if seen > 1 and not is_power_of_ten(seen):
                self.logger.error(
                    "%s[%d] raised %s %d times in all (traceback above)",
                    component,
                    task_index,
                    type_name,
                    seen,
                )
        self._seen.clear()
