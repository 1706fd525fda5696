"""A sink task's overlapped writes (statestream.connectors._overlap), alone.

Writes are gated by events, never timed: each test says what has happened
when a call returns.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable

import pytest

from statestream.connectors._overlap import OverlappedWrites


def _gated(log: list[str], name: str) -> tuple[Callable[[], None], threading.Event]:
    gate = threading.Event()

    def write() -> None:
        gate.wait(30)
        log.append(f"{name} on {threading.current_thread().name}")

    return write, gate


def test_submit_returns_before_the_write_and_settle_waits_for_it() -> None:
    writes, log = OverlappedWrites(), list[str]()
    writes.start(("t", "sink", 0), "writer-a")
    write, gate = _gated(log, "w1")
    writes.submit(write)
    assert writes.in_flight
    assert log == []  # still gated: submit did not wait
    gate.set()
    writes.settle()
    assert log == ["w1 on writer-a_0"]
    assert not writes.in_flight
    writes.close(lambda: log.append(f"closed on {threading.current_thread().name}"))
    assert log[-1] == "closed on writer-a_0"  # where the target's client lives


def test_settle_raises_what_the_write_raised_and_abandon_does_not() -> None:
    writes = OverlappedWrites()
    writes.start(("t", "sink", 1), "writer-b")

    def fails() -> None:
        raise ConnectionResetError("the server closed the connection")

    writes.submit(fails)
    with pytest.raises(ConnectionResetError):
        writes.settle()
    writes.settle()  # nothing in flight any more: a no-op
    writes.submit(fails)
    writes.abandon()  # waited for, its error dropped
    assert not writes.in_flight
    writes.close(lambda: None)


def test_one_write_in_flight_at_most() -> None:
    writes = OverlappedWrites()
    writes.start(("t", "sink", 2), "writer-c")
    write, gate = _gated([], "w")
    writes.submit(write)
    with pytest.raises(RuntimeError, match="settle it"):
        writes.submit(write)
    gate.set()
    writes.settle()
    writes.close(lambda: None)


def test_a_new_instance_of_the_task_waits_for_the_write_a_dropped_one_has_in_flight() -> None:
    key = ("t", "sink", 3)
    log: list[str] = []
    dropped = OverlappedWrites()
    dropped.start(key, "writer-old")
    write, gate = _gated(log, "old")
    dropped.submit(write)

    started = threading.Event()

    def replace() -> None:
        OverlappedWrites().start(key, "writer-new")
        log.append("new started")
        started.set()

    thread = threading.Thread(target=replace)
    thread.start()
    assert not started.wait(0.2)  # held by the old write (a bound on a hang, not a timing)
    gate.set()
    thread.join(30)
    assert log == ["old on writer-old_0", "new started"]
    dropped.abandon()
    dropped.close(lambda: None)


def test_another_task_does_not_wait() -> None:
    busy = OverlappedWrites()
    busy.start(("t", "sink", 4), "writer-d")
    write, gate = _gated([], "w")
    busy.submit(write)
    OverlappedWrites().start(("t", "sink", 5), "writer-e")  # returns at once
    gate.set()
    busy.settle()
    busy.close(lambda: None)


def test_close_without_a_write_runs_here_and_travels_without_its_thread() -> None:
    writes, log = OverlappedWrites(), list[str]()
    writes.start(("t", "sink", 6), "writer-f")
    writes.submit(lambda: None)
    writes.settle()
    copy = pickle.loads(pickle.dumps(writes))
    assert copy.key == ("t", "sink", 6) and not copy.in_flight
    writes.close(lambda: None)
    copy.close(lambda: log.append(threading.current_thread().name))
    assert log == [threading.current_thread().name]
