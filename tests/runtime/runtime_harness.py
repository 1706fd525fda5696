"""One way to run a topology on either runtime, for the behaviour tests of tests/runtime/.

The ``runner`` fixture (``conftest.py`` here) hands a test a :class:`Runner`
for ``local``, ``workers`` (the local runtime on two worker processes) or
``spark``; ``local_runner`` for ``local`` and ``workers`` only, for behaviour of
the local runtime that Spark replaces by whole-batch replay. Two things differ
between the runtimes and are bridged here, so that one test body asserts the
same behaviour on all of them:

* **Where components run.** On Spark a bolt task runs in a Python worker
  process, and on ``workers`` every spout and bolt task runs in one of two
  worker processes, so :func:`statestream.testing.sink` (a list in one
  process) cannot collect what it saw. :class:`Records` is an append-only list in a file that every
  process of the run appends to; :class:`Sink` is the ``SinkBolt`` that
  collects into it, and :func:`records` reads it back.
* **Replay.** The Spark runtime replays a batch by seeking its spouts back,
  so its spouts must rewind (:class:`statestream.Rewindable`).
  :class:`Items` is a ``ListSpout`` that does.

Spouts run on the Spark driver, i.e. in the test process, but in a worker
process on ``workers``: a spout records into :class:`Records` too. Each
worker has its own copy of the FakeClock, advanced by its own idle sleeps.
"""

from __future__ import annotations

import os
import pickle
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statestream import Bolt, FakeClock, OutputCollector, Topology, TopologyContext, Tuple
from statestream._results import RunResult
from statestream.testing import ListSpout

__all__ = ["Items", "Records", "Runner", "Sink", "records", "use_records_dir"]

#: Where this test's Records live (a directory under its tmp_path), set per test.
#: An environment variable, not a module global: this module travels to Spark by
#: value, and cloudpickle gives the methods it unpickles (on the driver too, where
#: the runtime copies components) their own copy of the module's globals.
RECORDS_ENV = "SSTREAM_TEST_RECORDS"  # not STATESTREAM_*: those are config keys


def use_records_dir(path: Path) -> None:
    """Keep the Records of the current test under ``path`` (the conftest does this)."""
    path.mkdir(parents=True, exist_ok=True)
    os.environ[RECORDS_ENV] = str(path)


class Records:
    """An append-only list of picklable records in a file, shared by every process.

    The file is fixed when the object is made (in the test process), so the
    object can travel to a Spark worker and append there. Each append is one
    ``write`` to a file opened with ``O_APPEND``: appends from several
    processes do not interleave.
    """

    def __init__(self, name: str) -> None:
        directory = os.environ.get(RECORDS_ENV)
        if not directory:
            raise RuntimeError(f"no records directory ({RECORDS_ENV}): use the runner fixture")
        self.name = name
        self.path = os.path.join(directory, f"{name}.records")

    def append(self, record: Any) -> None:
        data = pickle.dumps(record)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, len(data).to_bytes(4, "little") + data)
        finally:
            os.close(fd)

    def clear(self) -> None:
        """Forget every record."""
        with open(self.path, "wb"):
            pass

    def read(self) -> list[Any]:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        out, i = [], 0
        while i < len(raw):
            n = int.from_bytes(raw[i : i + 4], "little")
            out.append(pickle.loads(raw[i + 4 : i + 4 + n]))
            i += 4 + n
        return out


def records(name: str) -> list[Any]:
    """What was appended to ``Records(name)`` in this test, in append order."""
    return Records(name).read()


class Sink(Bolt):
    """``testing.SinkBolt`` over :class:`Records`: appends every input and acks it.

    ``record``: ``"values"`` (a tuple of the values), ``"task"`` (``(task_index,
    values)``) or ``"dict"`` (``(source component, source stream, as_dict())``).
    """

    def __init__(self, name: str, record: str = "values") -> None:
        if record not in ("values", "task", "dict"):
            raise ValueError(f"record must be 'values', 'task' or 'dict', got {record!r}")
        self.out = Records(name)
        self.record = record

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)

    def execute(self, tup: Tuple) -> None:
        if self.record == "values":
            self.out.append(tuple(tup.values))
        elif self.record == "task":
            self.out.append((self.context.task_index, tuple(tup.values)))
        else:
            self.out.append((tup.source_component, tup.source_stream, tup.as_dict()))
        self.collector.ack(tup)


class Items(ListSpout):
    """A ListSpout that can rewind (position: the next index and the failed ones)."""

    def position(self) -> Any:
        return {"next": self._next, "replay": list(self._replay)}

    def seek(self, position: Any) -> None:
        self._next = 0 if position is None else int(position["next"])
        self._replay = deque(() if position is None else position["replay"])
        self._pending = set()


class Runner:
    """Runs a topology on the runtime ``name``: ``local`` (one process), ``workers``
    (the local runtime on two worker processes) or ``spark``.

    Every runtime gets a sqlite state store in the test's tmp_path unless the
    config names a provider (the Spark runtime refuses the in-process memory
    store). The local runtime runs on a FakeClock (each worker on its own copy).
    """

    def __init__(self, name: str, tmp_path: Path, spark: Any = None) -> None:
        self.name = name
        self.tmp_path = tmp_path
        self.spark = spark
        self.last: Any = None

    @property
    def local(self) -> bool:
        return self.name == "local"

    @property
    def workers(self) -> bool:
        """The local runtime on two worker processes under a supervisor."""
        return self.name == "workers"

    def config(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        conf = dict(config or {})
        if self.workers:
            conf.setdefault("topology.workers", 2)
        if "topology.state.provider" not in conf:
            conf["topology.state.provider"] = "sqlite"
            conf["topology.state.provider.config"] = {"path": str(self.tmp_path / "state.db")}
        return conf

    def runtime(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        *,
        batch_size: int | None = None,
        clock: Any = None,
    ) -> Any:
        """The runtime, not started (``LocalRuntime``, ``WorkerSupervisor`` or
        ``SparkRuntime``). ``clock``: the local runtime's clock (a new FakeClock by
        default); on workers each worker gets its own copy of it."""
        conf = self.config(config)
        if clock is None:
            clock = FakeClock()
        if self.local:
            from statestream.runtime.local import LocalRuntime

            self.last = LocalRuntime(topology, conf, clock=clock)
        elif self.workers:
            from statestream.runtime.workers import WorkerSupervisor

            # Each worker gets its own copy of the fake clock (fork).
            self.last = WorkerSupervisor(topology, conf, clock=clock)
        else:
            from statestream.runtime.spark import SparkRuntime

            self.last = SparkRuntime(topology, conf, spark=self.spark, batch_size=batch_size)
        return self.last

    def run(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        *,
        batch_size: int | None = None,
        until_idle: bool = True,
        duration: float | None = None,
        clock: Any = None,
    ) -> RunResult:
        """Run ``topology`` until every spout is exhausted and everything is acked
        (or for ``duration`` seconds of the runtime's clock)."""
        rt = self.runtime(topology, config, batch_size=batch_size, clock=clock)
        if duration is None:
            result: RunResult = rt.run(until_idle=until_idle)
        else:
            result = rt.run(until_idle=until_idle, duration=duration)
        return result


def xfail_on_workers(request: Any, runner: Runner, reason: str) -> None:
    """Mark this test an expected failure (strict) when it runs on two workers: a
    statestream bug the test shows there, with its reproduction in ``reason``."""
    if runner.workers:
        import pytest

        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
