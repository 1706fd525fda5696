"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import thread_watch

from statestream import testing

#: How long, in all, the threads a Spark test started get to end after it.
THREAD_JOIN_SECS = 5.0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """The worker count of ``-n auto`` (pyproject's addopts): xdist's own (one per
    CPU, or ``PYTEST_XDIST_AUTO_NUM_WORKERS``), but none when mutmut runs pytest in
    its own process (tools/mutate.sh): it records which tests run which code from
    inside that process, which tests on xdist workers would not report."""
    return 0 if "mutmut" in sys.modules else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (``--dist loadgroup``), every test on the in-process SparkSession
    goes to one worker, which starts the session once (a JVM, ~6 s), rather than
    one session per worker. tryfirst: xdist reads the group marks in its own hook."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if _uses_spark_session(item):
            item.add_marker(pytest.mark.xdist_group("spark-session"))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After pytest's own (trylast): an uncaught error of a thread names the test that
    started it (pytest reports it in whatever test runs when it happens)."""
    threading.excepthook = thread_watch.ORIGINS.excepthook(threading.excepthook)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Which test started each thread that outlives it (tests/thread_watch.py)."""
    thread_watch.ORIGINS.began(item.nodeid)
    try:
        return (yield)
    finally:
        thread_watch.ORIGINS.ended()


@pytest.fixture(autouse=True)
def _spark_threads_end(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test on the SparkSession, failing or not, leaves no thread of its own
    running (issue 48: one did, and it raised inside a later, unrelated test).
    Spark's own threads (py4j, pyspark) live with the session and do not count."""
    if not _uses_spark_session(request.node):
        yield
        return
    before = threading.enumerate()
    yield
    left = thread_watch.surviving_threads(before, within=THREAD_JOIN_SECS)
    if left:
        pytest.fail(
            f"{len(left)} thread(s) this test started still run {THREAD_JOIN_SECS:g} s after "
            "it: " + ", ".join(map(thread_watch.describe, left)),
            pytrace=False,
        )


def _uses_spark_session(item: pytest.Item) -> bool:
    """Whether ``item`` asks for ``spark_session``: by name, or through a fixture
    parametrized with ``"spark"`` that asks for it at run time (``runner``,
    ``run_topology``; such tests are marked ``spark``)."""
    if "spark_session" in getattr(item, "fixturenames", ()):
        return True
    if item.get_closest_marker("spark") is None:
        return False
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(
        isinstance(value, str) and value == "spark" for value in callspec.params.values()
    )


@pytest.fixture(autouse=True)
def _reset_testing_registry() -> Iterator[None]:
    """Every test starts and ends with no sinks or queues left by another."""
    testing.reset()
    yield
    testing.reset()


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """One SparkSession for the whole test session (a start costs ~6 s, a stop ~1 s),
    shared by ``tests/spark/`` and the Spark legs of ``tests/runtime/``.

    The master is ``local[2,2]``: two cores, and a failed task is retried once,
    which the fault tests rely on. Spark's test settings follow
    /work/shared/reference/spark-notes.md §4.
    """
    pytest.importorskip("pyspark", reason="the spark tests need pip install 'statestream[spark]'")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from statestream.runtime.spark import _SPARK_DEFAULTS

    builder = SparkSession.builder.master("local[2,2]").appName("statestream-tests")
    for key, value in _SPARK_DEFAULTS.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Any]:
    """A tansu Kafka-protocol broker (tests/kafka_broker.py) for the xdist worker's
    whole session: tests keep to topics of their own (``unique_topic``)."""
    from tests.kafka_broker import started_kafka_broker

    with started_kafka_broker() as broker:
        yield broker
