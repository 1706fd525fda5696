"""Threads that outlive the test that started them (issue 48 item 6).

pytest (9) reports an exception raised in any thread as an error of the test
phase it happens to be in, so a thread a failed Spark run left running
errors inside whatever unrelated test runs next. Two parts:

* :meth:`ThreadOrigins.excepthook`, the session's ``threading.excepthook``
  (installed after pytest's own, which it calls): an uncaught error of a
  thread gets a note naming the test that started the thread, so the report
  points at its cause, not at the test it landed in.
* :func:`surviving_threads`: the threads a test started that are still alive
  once each had a bounded join, less Spark's own (py4j's gateway and
  callback threads, pyspark's accumulator server: they live as long as the
  session), so a fixture can fail the test that leaked one.

Which test started a thread is taken from snapshots of
``threading.enumerate()`` around each test (:meth:`ThreadOrigins.began`,
:meth:`ThreadOrigins.ended`): a thread first seen alive at the end of a test
was started by it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

#: Spark's own threads are recognised by where their class or target lives.
_SPARK_MODULES = ("py4j", "pyspark")
#: The one thread statestream leaves running on purpose, by its target: a
#: KafkaSink call to the broker that librdkafka held past its timeout
#: (``KafkaSink._bounded`` gives up on it, raises ``Stuck`` and drops the
#: producer). librdkafka 2.16.1 holds ``send_offsets_to_transaction`` after its
#: connections were cut for as long as the process lives (seen still blocked 90 s
#: after the broker had stopped): no call ends it. Its target catches whatever
#: the call raises, so it cannot error inside another test.
_GIVEN_UP_ON = ("statestream.connectors.kafka_sink", "KafkaSink._bounded.<locals>.run")


class ThreadOrigins:
    """Which test started each thread: :meth:`began` and :meth:`ended` around each
    test, :meth:`started_by` for a thread, :meth:`excepthook` to wrap pytest's."""

    def __init__(self) -> None:
        # Per thread still alive when the test that started it ended, that test.
        self._started_by: weakref.WeakKeyDictionary[threading.Thread, str] = (
            weakref.WeakKeyDictionary()
        )
        # The test running now and the threads alive when it began.
        self._current: tuple[str, frozenset[threading.Thread]] | None = None

    def began(self, nodeid: str) -> None:
        """Test ``nodeid`` starts now, with the threads already alive."""
        self._current = (nodeid, frozenset(threading.enumerate()))

    def ended(self) -> None:
        """The running test ended: the threads it started still alive are its."""
        if self._current is None:
            return
        (nodeid, before), self._current = self._current, None
        for thread in threading.enumerate():
            if thread not in before:
                self._started_by.setdefault(thread, nodeid)

    def started_by(self, thread: threading.Thread | None) -> str | None:
        """The test that started ``thread``: an earlier one it outlived, or the running
        one (None for a thread older than both, or between tests)."""
        if thread is None:
            return None
        if thread in self._started_by:
            return self._started_by[thread]
        if self._current is not None and thread not in self._current[1]:
            return self._current[0]
        return None

    def excepthook(
        self, hook: Callable[[threading.ExceptHookArgs], object]
    ) -> Callable[[threading.ExceptHookArgs], object]:
        """A ``threading.excepthook`` that notes on the exception which test started
        the thread, then hands it to ``hook`` (pytest's, which reports it)."""

        def excepthook(args: threading.ExceptHookArgs) -> object:
            origin = self.started_by(args.thread)
            exc = args.exc_value
            if exc is not None and origin is not None:
                name = "<unknown>" if args.thread is None else args.thread.name
                running = None if self._current is None else self._current[0]
                where = "this test" if origin == running else f"an earlier test, {origin}"
                exc.add_note(f"thread {name!r} was started by {where}")
            return hook(args)

        return excepthook


#: The test session's (tests/conftest.py).
ORIGINS = ThreadOrigins()


def is_spark_own(thread: threading.Thread) -> bool:
    """Whether ``thread`` is one py4j or pyspark keeps for the session's life."""
    target: Any = getattr(thread, "_target", None)
    owner = getattr(target, "__self__", None)
    modules = (
        type(thread).__module__,
        getattr(target, "__module__", None) or "",
        "" if owner is None else type(owner).__module__,
    )
    return any(m.split(".")[0] in _SPARK_MODULES for m in modules)


def given_up_on(thread: threading.Thread) -> bool:
    """Whether ``thread`` is a broker call KafkaSink gave up on (:data:`_GIVEN_UP_ON`)."""
    target: Any = getattr(thread, "_target", None)
    where = (getattr(target, "__module__", None), getattr(target, "__qualname__", None))
    return where == _GIVEN_UP_ON


def surviving_threads(
    before: Iterable[threading.Thread], *, within: float
) -> list[threading.Thread]:
    """The threads started since ``before`` (not Spark's own, nor a broker call
    KafkaSink gave up on) still alive after each was joined, all of them within
    ``within`` seconds in total."""
    known = set(before)
    new = [
        t
        for t in threading.enumerate()
        if t not in known
        and t is not threading.current_thread()
        and not is_spark_own(t)
        and not given_up_on(t)
    ]
    deadline = time.monotonic() + within
    for thread in new:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in new if t.is_alive()]


def describe(thread: threading.Thread) -> str:
    """A thread as a failure names it: its name, class and target."""
    target: Any = getattr(thread, "_target", None)
    what = getattr(target, "__qualname__", None) or type(thread).__qualname__
    module = getattr(target, "__module__", None) or type(thread).__module__
    return f"{thread.name!r} ({module}.{what}, daemon={thread.daemon})"
