"""The one contract between ``statestream run`` / :func:`statestream.run` and a runtime.

A runtime is anything that satisfies :class:`Runtime`; the CLI and
``statestream.run()`` see nothing else of it. Runtimes are picked by name
(``topology.runner``) from the registry of runners
(:mod:`statestream._runners`, re-exported here): :func:`register_runner`
binds a name to a factory ``(topology, config, clock) -> Runtime`` and the
runner's :class:`Capabilities`, which the plan and the run mode ask;
:func:`make_runtime` calls the factory the config names. The built-in
runners, ``local`` (one process, or the worker supervisor when
``topology.workers`` > 1) and ``spark``, import their runtime only when
asked for, so that a local run never imports PySpark.

Lifecycle, the same on every runtime::

    make_runtime(...)  ->  open()  ->  run(...)  ->  close()
                             ^ run() calls open() itself; open() twice is once
    stop() at any time (a signal handler included) asks run() to end;
    metrics(), counters(), worker_rows(), metrics_snapshot() at any time, from any thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .._config import settings_of
from .._results import RunResult, TaskMetrics, WorkerInfo
from .._runners import Capabilities, RunnerFactory, register_runner, runner, runners
from .plan import check_refusals

if TYPE_CHECKING:
    from .._clock import Clock
    from .._config import Config
    from .._topology import Topology
    from .metrics import MetricsSnapshot

__all__ = [
    "Capabilities",
    "RunnerFactory",
    "Runtime",
    "make_runtime",
    "register_runner",
    "runners",
]


class Runtime(Protocol):
    """What a runtime offers the CLI and :func:`statestream.run`.

    ``deadletter_path`` is the file the run's dead letters go to, known from
    construction on (before ``open``), so that the CLI can say it at start.
    """

    deadletter_path: Path

    def open(self) -> None:
        """Claim the state store and open the tasks (their ``open``/``prepare`` hooks).

        Idempotent: a second call does nothing. ``run`` calls it; the CLI calls it
        first so that a run refused at open (another run holds the store) fails
        before the progress starts. A failed open is reported, not cleaned up:
        call ``close``.
        """
        ...

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run the topology (opening it first) until ``stop()``, until idle or for
        ``duration`` seconds; return what the run did.

        The run's own failures raise; errors of user code are counted and
        returned in the :class:`RunResult`. Called once per runtime.
        """
        ...

    def stop(self) -> None:
        """Ask the run to end cleanly: what was processed is committed, ``run`` returns
        with reason ``"stopped"``.

        Safe from a signal handler and from another thread: it only sets a flag
        (and forwards the request to worker processes); never blocks.
        """
        ...

    def close(self) -> None:
        """Release the tasks, the state store's claim and the connections.

        Idempotent, and safe after a failed ``open`` or ``run``; nothing is called
        on the runtime after it.
        """
        ...

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals so far (``task_index`` -1), keyed by component id.

        Safe from another thread while ``run`` runs (the progress reads it).
        """
        ...

    def counters(self) -> dict[str, int]:
        """The runtime's own counters so far (timeouts, rewinds, batches, ...), a copy.

        Safe from another thread while ``run`` runs.
        """
        ...

    def worker_rows(self) -> list[WorkerInfo]:
        """One row per worker process of the run, in index order; ``[]`` where the run
        has no worker processes.

        Safe from another thread while ``run`` runs.
        """
        ...

    def metrics_snapshot(self) -> MetricsSnapshot:
        """Everything the run's metrics bank knows now (``runtime.metrics``: counts,
        sampled latencies, capacity, checkpoints, workers, input progress), for the
        terminal table, ``/metrics`` and ``/api/v1/topology``.

        Safe from another thread while ``run`` runs, and after it returned (the
        final numbers, equal to the ``RunResult``'s counts).
        """
        ...


def make_runtime(topology: Topology, conf: Config, clock: Clock | None = None) -> Runtime:
    """The runtime ``topology.runner`` names, ready to ``open`` and ``run``.

    Raises ConfigError for what no runtime would run (:func:`.plan.refusals`)
    before it builds one.
    """
    check_refusals(topology, conf)
    return runner(settings_of(conf).topology_runner).make(topology, conf, clock)
