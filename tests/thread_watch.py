"""Threads that outlive the test that started them (issue 48 item 6).

pytest (9) reports an exception raised in any thread as an error of the test
phase it happens to be in, so a thread a failed Spark run left running
errors inside whatever unrelated test runs next. Two parts:

* :func:`attribute_thread_errors`, the session's ``threading.excepthook``
  (installed after pytest's own, which it calls): an uncaught error of a
  thread gets a note naming the test that started the thread, so the report
  points at its cause, not at the test it landed in.
* :func:`surviving_threads`: the threads a test started that are still alive
  once each had a bounded join, less Spark's own (py4j's gateway and
  callback threads, pyspark's accumulator server: they live as long as the
  session), so a fixture can fail the test that leaked one.

Which test started a thread is taken from snapshots of
``threading.enumerate()`` around each test (:func:`test_began`,
:func:`test_ended`): a thread first seen alive at the end of a test was
started by it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

#: Per thread, the test that started it (only threads still alive at its end).
_STARTED_BY: weakref.WeakKeyDictionary[threading.Thread, str] = weakref.WeakKeyDictionary()
#: The test running now and the threads alive when it began.
_current: list[tuple[str, frozenset[threading.Thread]]] = []

#: Spark's own threads are recognised by where their class or target lives.
_SPARK_MODULES = ("py4j", "pyspark")


def test_began(nodeid: str) -> None:
    """Record that ``nodeid`` starts now, with the threads already alive."""
    _current[:] = [(nodeid, frozenset(threading.enumerate()))]


def test_ended() -> None:
    """Attribute the threads still alive that the running test started to it."""
    if not _current:
        return
    nodeid, before = _current.pop()
    for thread in threading.enumerate():
        if thread not in before:
            _STARTED_BY.setdefault(thread, nodeid)


def started_by(thread: threading.Thread | None) -> str | None:
    """The test that started ``thread``: an earlier one it outlived, or the running
    one (None between tests)."""
    if thread is None:
        return None
    if thread in _STARTED_BY:
        return _STARTED_BY[thread]
    if _current and thread not in _current[0][1]:
        return _current[0][0]
    return None


def attribute_thread_errors(
    hook: Callable[[threading.ExceptHookArgs], object],
) -> Callable[[threading.ExceptHookArgs], object]:
    """A ``threading.excepthook`` that notes on the exception which test started
    the thread, then hands it to ``hook`` (pytest's, which reports it)."""

    def excepthook(args: threading.ExceptHookArgs) -> object:
        origin = started_by(args.thread)
        running = _current[0][0] if _current else None
        exc = args.exc_value
        if exc is not None and origin is not None:
            name = "<unknown>" if args.thread is None else args.thread.name
            where = "this test" if origin == running else f"an earlier test, {origin}"
            exc.add_note(f"thread {name!r} was started by {where}")
        return hook(args)

    return excepthook


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


def surviving_threads(
    before: Iterable[threading.Thread], *, within: float
) -> list[threading.Thread]:
    """The threads started since ``before`` (not Spark's own) still alive after each
    was joined, all of them within ``within`` seconds in total."""
    known = set(before)
    new = [
        t
        for t in threading.enumerate()
        if t not in known and t is not threading.current_thread() and not is_spark_own(t)
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
