"""The one contract between ``statestream run`` / :func:`statestream.run` and a runtime.

A runtime is anything that satisfies :class:`Runtime`; the CLI and
``statestream.run()`` see nothing else of it. Runtimes are picked by name
(``topology.runner``) from a registry of runners: :func:`register_runner`
binds a name to a factory ``(topology, config, clock) -> Runtime`` and
:func:`make_runtime` calls the one the config names. The built-in runners,
``local`` (one process, or the worker supervisor when ``topology.workers`` >
1) and ``spark``, import their runtime only when asked for, so that a local
run never imports PySpark.

Lifecycle, the same on every runtime::

    make_runtime(...)  ->  open()  ->  run(...)  ->  close()
                             ^ run() calls open() itself; open() twice is once
    stop() at any time (a signal handler included) asks run() to end;
    metrics(), counters(), worker_rows(), metrics_snapshot() at any time, from any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .._config import settings_of
from .._errors import ConfigError
from .._results import RunResult, TaskMetrics, WorkerInfo
from .plan import check_refusals

if TYPE_CHECKING:
    from .._clock import Clock
    from .._config import Config
    from .._topology import Topology
    from .metrics import MetricsSnapshot

__all__ = ["RunnerFactory", "Runtime", "make_runtime", "register_runner", "runners"]


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


#: Makes the runtime of one run: ``(topology, config, clock)``; ``clock`` None
#: means the system clock.
RunnerFactory = Callable[["Topology", "Config", "Clock | None"], Runtime]

_RUNNERS: dict[str, RunnerFactory] = {}


def register_runner(name: str, factory: RunnerFactory) -> None:
    """Make ``topology.runner: name`` run on the runtimes ``factory`` makes.

    A later registration of the same name replaces the earlier one. The
    factory is called once per run, with the validated config; it should
    import heavy dependencies itself, so that registering costs nothing.
    """
    _RUNNERS[name] = factory


def runners() -> tuple[str, ...]:
    """The registered runner names, in registration order."""
    return tuple(_RUNNERS)


def make_runtime(topology: Topology, conf: Config, clock: Clock | None = None) -> Runtime:
    """The runtime ``topology.runner`` names, ready to ``open`` and ``run``.

    Raises ConfigError for what no runtime would run (:func:`.plan.refusals`)
    before it builds one.
    """
    check_refusals(topology, conf)
    runner = settings_of(conf).topology_runner
    factory = _RUNNERS.get(runner)
    if factory is None:
        raise ConfigError(
            f"topology.runner is {runner!r}, which no runner is registered for "
            f"(registered: {', '.join(map(repr, _RUNNERS))})"
        )
    return factory(topology, conf, clock)


# -- the built-in runners ----------------------------------------------------------------


def _local(topology: Topology, conf: Config, clock: Clock | None) -> Runtime:
    if settings_of(conf).topology_workers > 1:
        from .workers import WorkerSupervisor

        return WorkerSupervisor(topology, conf, clock=clock)
    from .local import LocalRuntime

    return LocalRuntime(topology, conf, clock=clock)


def _spark(topology: Topology, conf: Config, clock: Clock | None) -> Runtime:
    from .spark import SparkRuntime

    return SparkRuntime(topology, conf, clock=clock)


register_runner("local", _local)
register_runner("spark", _spark)
