"""tests/thread_watch.py: the threads a test leaves running are named, and a thread's
error names the test that started it (issue 48 item 6), on real threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from thread_watch import ThreadOrigins, describe, given_up_on, is_spark_own, surviving_threads


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """An event the test's threads wait on, set at the end whatever happens."""
    event = threading.Event()
    yield event
    event.set()


def test_a_thread_still_running_after_the_bound_is_named_and_one_that_ends_is_not(
    release: threading.Event,
) -> None:
    before = threading.enumerate()
    quick = threading.Thread(target=lambda: None, name="quick")
    stuck = threading.Thread(target=release.wait, name="stuck", daemon=True)
    quick.start()
    stuck.start()
    left = surviving_threads(before, within=0.2)
    assert left == [stuck]
    assert describe(stuck).startswith("'stuck' (threading.Event.wait, daemon=True)")
    release.set()
    stuck.join()
    assert surviving_threads(before, within=0.2) == []


def test_spark_own_threads_are_known_by_their_class_or_target() -> None:
    class Server:
        def serve_forever(self) -> None: ...

    Server.__module__ = "pyspark.accumulators"  # as pyspark's accumulator server
    assert is_spark_own(threading.Thread(target=Server().serve_forever))

    class Gateway(threading.Thread): ...

    Gateway.__module__ = "py4j.clientserver"
    assert is_spark_own(Gateway())
    assert not is_spark_own(threading.Thread(target=lambda: None))


def test_only_a_kafka_call_given_up_on_is_let_run() -> None:
    def run() -> None: ...

    run.__module__ = "statestream.connectors.kafka_sink"
    run.__qualname__ = "KafkaSink._bounded.<locals>.run"
    assert given_up_on(threading.Thread(target=run, name="statestream-kafka-commit"))
    run.__qualname__ = "KafkaSink.other"
    assert not given_up_on(threading.Thread(target=run, name="statestream-kafka-commit"))


def test_a_thread_error_names_the_earlier_test_that_started_the_thread(
    release: threading.Event,
) -> None:
    origins = ThreadOrigins()
    heard: list[threading.ExceptHookArgs] = []
    hook = origins.excepthook(heard.append)
    raised = ValueError("late")
    origins.began("tests/a.py::test_leaks")
    thread = threading.Thread(target=release.wait, name="leaked")
    thread.start()
    origins.ended()
    origins.began("tests/b.py::test_unrelated")
    assert origins.started_by(thread) == "tests/a.py::test_leaks"
    # The hook as Python calls it when a thread's target raises (this one only waits).
    hook(threading.ExceptHookArgs((ValueError, raised, None, thread)))
    assert heard and heard[0].exc_value is raised
    assert raised.__notes__ == [
        "thread 'leaked' was started by an earlier test, tests/a.py::test_leaks"
    ]
    release.set()
    thread.join()


def test_a_thread_started_by_the_running_test_is_said_to_be_this_tests() -> None:
    origins = ThreadOrigins()
    older = threading.current_thread()
    origins.began("tests/a.py::test_one")
    thread = threading.Thread(target=lambda: None, name="mine")
    thread.start()
    thread.join()
    raised = OSError("x")
    origins.excepthook(lambda args: None)(threading.ExceptHookArgs((OSError, raised, None, thread)))
    assert raised.__notes__ == ["thread 'mine' was started by this test"]
    assert origins.started_by(older) is None  # alive before the test began
