"""The ``runner`` fixture: every behaviour test meant to hold on both runtimes runs
on the local runtime (in one process and on two worker processes) and on
Spark (marked ``spark``), as bytewax runs
its flows through one parametrized fixture. See ``runtime_harness.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_harness import RECORDS_ENV, Runner, use_records_dir


@pytest.fixture(autouse=True)
def _records_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's Records (cross-process sinks) live under its own tmp_path."""
    monkeypatch.setenv(RECORDS_ENV, "")
    use_records_dir(tmp_path / "records")


@pytest.fixture(params=["local", "workers", pytest.param("spark", marks=pytest.mark.spark)])
def runner(request: pytest.FixtureRequest, tmp_path: Path) -> Runner:
    """A :class:`Runner` for the local runtime in one process, the local runtime on two
    worker processes (``topology.workers: 2``), or Spark on the session's SparkSession."""
    if request.param == "spark":
        return Runner("spark", tmp_path, request.getfixturevalue("spark_session"))
    return Runner(request.param, tmp_path)


@pytest.fixture(params=["local", "workers"])
def local_runner(request: pytest.FixtureRequest, tmp_path: Path) -> Runner:
    """A :class:`Runner` for the local runtime only, in one process and on two worker
    processes: for behaviour of the local runtime (Storm's per-tuple acking,
    timeouts, retries, dead letters) that Spark replaces by whole-batch replay."""
    return Runner(request.param, tmp_path)
