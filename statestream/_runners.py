"""The registry of runners: each ``topology.runner`` name with its factory and its policy.

A runner is more than a factory: the pure modules decide what a run keeps
and refuses from what its runtime can do, and they ask the registry entry
for it, never the runner's name. So a fourth runtime is one
:func:`register_runner` call, with no edit to the plan
(:func:`statestream.runtime.plan.refusals`), the run mode
(:func:`statestream._exactly_once.run_mode`) or the settings validator.

A runner also brings its own config keys (:attr:`Capabilities.settings`,
declared as the shared :class:`~statestream._settings.Settings` are) and the
roots of the keys it passes untouched to its engine
(:attr:`Capabilities.pass_through`, Spark's ``spark.*``): the config validates,
documents and reads them from the entry, and knows no runner by name.

A leaf: it imports nothing of the runtimes, of the settings schema or of
the config (only for type checking) but the kinds of config values, so that
the schema can ask it for the registered names and keys and the runtimes'
modules can read the schema. The
built-in runners name their factories by dotted path
(:mod:`statestream.runtime.builtin`), imported at the first run on them,
so that a local run never imports PySpark.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ._config_kinds import _NON_EMPTY_STR, _POSITIVE_INT, ConfigKey, _key, _schema_of
from ._errors import ConfigError

if TYPE_CHECKING:
    # Types only: importing these here would make the leaf depend on the schema and
    # on the runtime contract, which depend on it.
    from ._clock import Clock
    from ._config import Config
    from ._settings import Settings
    from ._topology import Topology
    from .runtime.contract import Runtime

__all__ = [
    "Capabilities",
    "Refusal",
    "Replay",
    "Runner",
    "RunnerFactory",
    "SparkSettings",
    "StoreRefusal",
    "entries",
    "register_runner",
    "runner",
    "runners",
]

#: Makes the runtime of one run: ``(topology, config, clock)``; ``clock`` None
#: means the system clock.
RunnerFactory = Callable[["Topology", "Config", "Clock | None"], "Runtime"]

#: How a runtime replays what failed: ``"tuple"``, a tuple tree from its spout
#: (Storm's acking, at-least-once possible); ``"batch"``, a whole batch read again
#: by seeking every spout back (no at-least-once: every spout must rewind).
Replay = Literal["tuple", "batch"]

#: A refusal of the runner's own, beside the shared ones: ``(topology, settings)`` ->
#: why it cannot run them, or None. Pure: no I/O, no provider resolved.
Refusal = Callable[["Topology", "Settings"], "str | None"]


class StoreRefusal(Protocol):
    """Why provider ``spec``, shared as far as ``sharing`` (``process``, ``machine`` or
    ``network``), cannot hold the state of a run of ``workers`` processes on Spark's
    ``master`` (``""`` where there is none); None if it can."""

    def __call__(self, spec: str, sharing: str, *, workers: int, master: str) -> str | None: ...


@dataclass(frozen=True)
class Capabilities:
    """What a runner's runtime can do: every fact a pure module asks of a runner.

    The defaults describe a runtime of one process that acks per tuple, as the
    local one with ``topology.workers: 1`` is: what a third party gets without
    saying more.
    """

    replay: Replay = "tuple"
    """How a failure is replayed (:data:`Replay`). ``"batch"``: every spout must
    rewind, or the user accepts at-most-once with ``topology.acker.executors: 0``
    (:func:`~statestream._exactly_once.run_mode`)."""
    rewinds_within_run: bool = True
    """Whether a running topology can go back to its last committed checkpoint
    (restore the state, seek the spouts) without a restart: what exactly-once
    state needs on a crash or a timed-out tree. Without it exactly-once state is
    off (``auto``) or refused (``true``). A batch replay is such a rewind."""
    acks_per_tuple: bool = True
    """Whether the runtime tracks tuple trees with ackers, so that a stateful
    topology without ackers is refused (:func:`~statestream.runtime.plan.acking_refusal`)."""
    worker_processes: bool = False
    """Whether the runtime starts ``topology.workers`` processes itself; if not, a
    value other than 1 is refused with :attr:`workers_advice`."""
    workers_advice: str = "remove topology.workers (or set it to 1)"
    """The fix the refusal of ``topology.workers`` suggests (what to set instead)."""
    transactional_on_workers: bool = False
    """Whether a transactional topology runs spread over several processes: its
    worker processes (a runner with :attr:`worker_processes` without it refuses one
    on several) or its own (Spark's executors; the refusal's fix names such runners)."""
    store_refusal: StoreRefusal | None = None
    """Which providers cannot hold its state (None: any can). The plan asks it
    for a stateful topology on several worker processes; a runtime that knows
    more at open (Spark's session master) asks it again through
    :func:`~statestream.runtime.plan.provider_refusal`."""
    refusals: tuple[Refusal, ...] = ()
    """Refusals of its own, asked after the shared ones, in order."""
    settings: type[Any] | None = None
    """Its own config keys: a frozen dataclass whose fields are declared as
    :class:`~statestream._settings.Settings`' are (``_key``), each under
    ``statestream.<runner>.`` or one of :attr:`pass_through`. Validated,
    defaulted, set by environment variables and documented as the shared keys
    are, from registration on; read with ``settings_of(config, cls)``
    (:func:`statestream._config.settings_of`)."""
    pass_through: tuple[str, ...] = ()
    """First segments of keys handed to its engine untouched (``spark`` for
    ``spark.executor.memory``): accepted untyped, unless :attr:`settings`
    declares them, and read with :meth:`~statestream._config.Config.topology_keys`."""

    def __post_init__(self) -> None:
        if self.replay == "batch" and not self.rewinds_within_run:
            raise ValueError("a runner that replays batches rewinds within a run by doing so")


@dataclass(frozen=True)
class Runner:
    """One registry entry: a runner's ``name``, its ``factory`` and its :class:`Capabilities`.

    ``factory`` is a callable :data:`RunnerFactory`, or its dotted path
    ``"package.module:function"``, imported at the first :meth:`make`.
    """

    name: str
    factory: RunnerFactory | str
    capabilities: Capabilities

    @property
    def keys(self) -> Mapping[str, ConfigKey]:
        """Its own config keys (:attr:`Capabilities.settings`), checked, in declaration order."""
        settings = self.capabilities.settings
        if settings is None:
            return {}
        return _schema_of(settings, (f"statestream.{self.name}.", *self._roots()))

    def _roots(self) -> tuple[str, ...]:
        return tuple(f"{root}." for root in self.capabilities.pass_through)

    def make(self, topology: Topology, conf: Config, clock: Clock | None) -> Runtime:
        """The runtime of one run, from the factory."""
        factory = self.factory
        if isinstance(factory, str):
            module, _, attribute = factory.partition(":")
            factory = getattr(importlib.import_module(module), attribute)
        return factory(topology, conf, clock)


_RUNNERS: dict[str, Runner] = {}


def register_runner(
    name: str, factory: RunnerFactory | str, capabilities: Capabilities | None = None
) -> Runner:
    """Make ``topology.runner: name`` run on the runtimes ``factory`` makes.

    ``capabilities`` says what they can do (default :class:`Capabilities`: one
    process, per-tuple acking and replay). A later registration of the same
    name replaces the earlier one. The factory is called once per run, with
    the validated config; it should import heavy dependencies itself (or be
    given as a dotted path), so that registering costs nothing.
    """
    entry = Runner(name, factory, capabilities or Capabilities())
    for root in entry.capabilities.pass_through:
        if root in {"topology", "statestream"} or "." in root or not root.strip():
            raise ValueError(
                f"runner {name!r}: pass-through root {root!r} must be one segment other than "
                "'topology' and 'statestream'"
            )
    entry.keys  # noqa: B018  (checks the declarations now: TypeError for a wrong one)
    _RUNNERS[name] = entry
    return entry


def entries() -> tuple[Runner, ...]:
    """The registry entries, in registration order (hashable: what the config's schema,
    derived from their keys, is cached by)."""
    return tuple(_RUNNERS.values())


def runners() -> tuple[str, ...]:
    """The registered runner names, in registration order."""
    return tuple(_RUNNERS)


def runner(name: str | Runner) -> Runner:
    """The entry of runner ``name`` (an entry is returned as it is).

    Raises ConfigError naming the registered ones for a name never registered.
    """
    if isinstance(name, Runner):
        return name
    entry = _RUNNERS.get(name)
    if entry is None:
        raise ConfigError(
            f"topology.runner is {name!r}, which no runner is registered for "
            f"(registered: {', '.join(map(repr, _RUNNERS))})"
        )
    return entry


# -- the built-in runners' policy ---------------------------------------------------------


def _local_store_refusal(spec: str, sharing: str, *, workers: int, master: str) -> str | None:
    if workers > 1 and sharing == "process":
        return (
            f"topology.state.provider is {spec!r}, which keeps state inside one process; "
            f"with topology.workers: {workers} every worker is a process of its own, "
            "so their checkpoints and the spouts' stored positions could not meet, and a "
            "restarted worker would find nothing. Use a store the workers share: "
            "topology.state.provider: sqlite (or redis), or topology.workers: 1"
        )
    return None


def _spark_store_refusal(spec: str, sharing: str, *, workers: int, master: str) -> str | None:
    # Every task runs in a Python worker apart from the driver, whatever the master;
    # only a local[...] master keeps them on the driver's machine.
    if sharing == "process":
        return (
            f"topology.state.provider is {spec!r}, which keeps state inside one Python "
            "process; on Spark every bolt task runs in a Python worker process apart from "
            f"the driver (even with spark.master {master!r}), so the state a task prepares "
            "would be invisible to the driver and lost. Use a shared store: "
            "topology.state.provider: redis (or sqlite with a local[...] master)"
        )
    local_master = master == "local" or master.startswith("local[")
    if sharing == "machine" and not local_master:
        return (
            f"topology.state.provider is {spec!r}, a store on one machine, but spark.master "
            f"{master!r} runs executors in several processes or hosts that cannot share it "
            "safely; use topology.state.provider: redis, or a local[...] master"
        )
    return None


#: The embedded runtime: one process, or N workers under a supervisor.
LOCAL = Capabilities(
    worker_processes=True,
    store_refusal=_local_store_refusal,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkSettings:
    """The spark runner's own keys, typed: ``settings_of(config, SparkSettings)``.

    Every other ``spark.*`` key passes through to Spark's session untouched.
    """

    statestream_spark_batch_size: int = _key(
        "statestream.spark.batch.size",
        _POSITIVE_INT,
        50000,
        """The most items one spout task puts into one transaction of the spark
        runtime (one Spark job per transaction).""",
    )
    statestream_spark_batch_attempts: int = _key(
        "statestream.spark.batch.attempts",
        _POSITIVE_INT,
        3,
        """How many times the spark runtime rolls back and re-runs a failed batch
        before it stops with a RuntimeFailure.""",
    )
    spark_master: str = _key(
        "spark.master",
        _NON_EMPTY_STR,
        "local[2,2]",
        """Spark master URL for the spark runtime. Every other spark.* key is
        passed to Spark untouched.""",
    )


#: PySpark: a checkpoint interval is one batch (one job), replayed whole; its
#: driver checks the store at open, when the session's master is known.
SPARK = Capabilities(
    replay="batch",
    acks_per_tuple=False,
    workers_advice=(
        "Spark spreads the tasks over its executors. Remove topology.workers and set "
        "spark.executor.instances (spark.executor.cores for the cores of each) instead"
    ),
    transactional_on_workers=True,
    store_refusal=_spark_store_refusal,
    settings=SparkSettings,
    pass_through=("spark",),
)

register_runner("local", "statestream.runtime.builtin:local", LOCAL)
register_runner("spark", "statestream.runtime.builtin:spark", SPARK)
