"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from statestream import testing


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
