"""The factories of the built-in runners, ``local`` and ``spark``.

:mod:`statestream._runners` names them by dotted path with their
capabilities, so that nothing here is imported before a run asks for it;
each imports its runtime only when called, so that a local run never
imports PySpark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._config import settings_of

if TYPE_CHECKING:
    from .._clock import Clock
    from .._config import Config
    from .._topology import Topology
    from .contract import Runtime

__all__ = ["local", "spark"]


def local(topology: Topology, conf: Config, clock: Clock | None) -> Runtime:
    """The local runtime: one process, or a supervisor of ``topology.workers`` workers."""
    if settings_of(conf).topology_workers > 1:
        from .workers import WorkerSupervisor

        return WorkerSupervisor(topology, conf, clock=clock)
    from .local import LocalRuntime

    return LocalRuntime(topology, conf, clock=clock)


def spark(topology: Topology, conf: Config, clock: Clock | None) -> Runtime:
    """The PySpark runtime, on ``clock`` (None: the system clock)."""
    from .spark import SparkRuntime

    return SparkRuntime(topology, conf, clock=clock)
