"""What every runtime derives from a :class:`~statestream.Topology`, computed once.

Task ids, the namespace of each task's state, where each (component,
stream) routes to, each component's config and the upstream tasks a bolt's
checkpoint barrier waits for are facts of the topology and the config, not
of a runtime. Both runtimes take them from a :class:`RuntimePlan`, so a task
id, a namespace or a route means the same on ``local`` and on ``spark``
(``emit_direct`` task ids, stored state and recorded spout positions carry
over from one runtime to the other).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._clock import Clock
from .._components import TopologyContext, task_namespace
from .._config import Config, settings_of
from .._errors import ConfigError
from .._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM
from .._topology import ComponentSpec, Topology
from .._tuple import Fields

if TYPE_CHECKING:
    from .._state import KeyValueState

__all__ = [
    "RouteSpec",
    "RuntimePlan",
    "acking_refusal",
    "as_config",
    "check_refusals",
    "provider_refusal",
    "refusals",
    "task_namespace",
]


def as_config(config: Mapping[str, Any] | None, topology_prefixes: Collection[str] = ()) -> Config:
    """``config`` as a validated :class:`Config` (a plain mapping is applied over the defaults)."""
    if isinstance(config, Config):
        return config
    return Config(config or {}, topology_prefixes=topology_prefixes)


# -- refusals: what no runtime runs, decided once ---------------------------------------
#
# Pure: the topology's facts and the settings in, the messages out. make_runtime
# raises the first before it builds a runtime; a runtime that checks something
# only it knows later (Spark's session master, at open) asks provider_refusal.


def provider_refusal(
    spec: str, sharing: str, *, runner: str, workers: int = 1, master: str = ""
) -> str | None:
    """Why the provider ``spec``, shared as far as ``sharing`` (``process``, ``machine``
    or ``network``, :func:`~statestream._registry.provider_sharing`), cannot hold the
    state of a run on ``runner`` (``workers`` processes; Spark's ``master``); None if it can.
    """
    if runner == "spark":
        local_master = master == "local" or master.startswith("local[")
        if sharing == "process":
            return (
                f"topology.state.provider is {spec!r}, which keeps state inside one Python "
                "process; on Spark every bolt task runs in a Python worker process apart from "
                f"the driver (even with spark.master {master!r}), so the state a task prepares "
                "would be invisible to the driver and lost. Use a shared store: "
                "topology.state.provider: redis (or sqlite with a local[...] master)"
            )
        if sharing == "machine" and not local_master:
            return (
                f"topology.state.provider is {spec!r}, a store on one machine, but spark.master "
                f"{master!r} runs executors in several processes or hosts that cannot share it "
                "safely; use topology.state.provider: redis, or a local[...] master"
            )
        return None
    if workers > 1 and sharing == "process":
        return (
            f"topology.state.provider is {spec!r}, which keeps state inside one process; "
            f"with topology.workers: {workers} every worker is a process of its own, "
            "so their checkpoints and the spouts' stored positions could not meet, and a "
            "restarted worker would find nothing. Use a store the workers share: "
            "topology.state.provider: sqlite (or redis), or topology.workers: 1"
        )
    return None


def refusals(
    topology: Topology, config: Config, *, sharing: Callable[[str], str] | None = None
) -> list[str]:
    """Why ``topology`` cannot run with ``config`` on the runner it names, in the order
    the runtimes checked them; empty if nothing is refused.

    ``sharing`` resolves a provider spec to its sharing scope (default:
    :func:`~statestream._registry.provider_sharing`, asked only when a
    topology with stateful bolts runs on several worker processes). Spark's
    provider check waits for the session's master (:func:`provider_refusal`).
    """
    settings = settings_of(config)
    runner, workers = settings.topology_runner, settings.topology_workers
    found: list[str] = []
    if runner == "spark":
        if workers != 1:
            found.append(
                f"topology.workers is {workers}, but the spark runner does not start worker "
                "processes itself: Spark spreads the tasks over its executors. Remove "
                "topology.workers and set spark.executor.instances (spark.executor.cores for "
                "the cores of each) instead"
            )
        return found
    if workers > 1:
        if topology.has_stateful_bolts:
            from .._registry import provider_sharing

            spec = settings.topology_state_provider
            scope = (sharing or provider_sharing)(spec)
            refusal = provider_refusal(spec, scope, runner=runner, workers=workers)
            if refusal:
                found.append(refusal)
        from .._transactional.components import TransactionalCoordinatorSpout

        for cid, spec_ in topology.components.items():
            if isinstance(spec_.obj, TransactionalCoordinatorSpout):
                found.append(
                    f"topology {topology.name!r} is transactional (its coordinator is "
                    f"{cid!r}); transactional topologies run on one process here: set "
                    "topology.workers: 1, or run them on several with topology.runner: spark"
                )
                break
    refusal = acking_refusal(topology, settings.topology_acker_executors)
    if refusal:
        found.append(refusal)
    return found


def acking_refusal(topology: Topology, ackers: int) -> str | None:
    """Why a stateful topology cannot run without ackers (a runner that acks per
    tuple asks this once more when it is built directly, not through
    :func:`check_refusals`); None if it can."""
    if topology.has_stateful_bolts and ackers == 0:
        return (
            f"topology {topology.name!r} has stateful bolts, which need acking to know when "
            "a checkpoint has passed every bolt; set topology.acker.executors to 1 or more"
        )
    return None


def check_refusals(topology: Topology, config: Config) -> None:
    """Raise ConfigError with the first of :func:`refusals`, if any."""
    found = refusals(topology, config)
    if found:
        raise ConfigError(found[0])


@dataclass(frozen=True)
class RouteSpec:
    """One subscriber of one (component, stream).

    ``kind`` is the grouping kind (``shuffle``, ``none``, ``fields``,
    ``global``, ``all``, ``direct``, ``custom``); ``key`` the index of the
    grouped field (an int) or indexes (a tuple) for a fields grouping;
    ``task_ids`` the subscriber's global task ids, in task-index order.
    """

    target: str
    kind: str
    key: int | tuple[int, ...] | None
    custom: Any
    task_ids: tuple[int, ...]


class RuntimePlan:
    """Task ids, namespaces, routes, configs and checkpoint sources of one topology run.

    Task ids are assigned in topological order (sources first), each
    component's tasks numbered consecutively, as Storm numbers them.
    """

    def __init__(self, topology: Topology, config: Config) -> None:
        self.topology = topology
        self.config = config
        self.component_tasks: dict[str, list[int]] = {}
        next_id = 0
        for cid in topology.topological_order():
            n = topology.components[cid].parallelism
            self.component_tasks[cid] = list(range(next_id, next_id + n))
            next_id += n
        self.owner: dict[int, tuple[str, int]] = {
            tid: (cid, index)
            for cid, tids in self.component_tasks.items()
            for index, tid in enumerate(tids)
        }
        self.task_names: dict[int, str] = {
            tid: f"{cid}[{index}]" for tid, (cid, index) in self.owner.items()
        }
        self.output_fields: dict[str, dict[str, Fields]] = {
            cid: {s: f for s, (f, _) in spec.outputs.items()}
            for cid, spec in topology.components.items()
        }
        order = topology.topological_order()
        self.spouts: list[ComponentSpec] = [
            topology.components[c] for c in order if topology.components[c].is_spout
        ]
        self.bolts: list[ComponentSpec] = [
            topology.components[c] for c in order if not topology.components[c].is_spout
        ]
        self.data_spouts: list[ComponentSpec] = [s for s in self.spouts if s.id != CHECKPOINT_SPOUT]
        self.stateful_namespaces: list[str] = [
            task_namespace(b.id, i)
            for b in self.bolts
            if b.is_stateful
            for i in range(b.parallelism)
        ]
        self._confs: dict[str, Config] = {}

    @property
    def checkpointed(self) -> bool:
        """Whether the topology has stateful bolts (and so ``$checkpointspout``)."""
        return CHECKPOINT_SPOUT in self.topology.components

    def conf_for(self, cid: str) -> Config:
        """The topology config with component ``cid``'s own keys on top."""
        conf = self._confs.get(cid)
        if conf is None:
            spec = self.topology.components[cid]
            conf = self.config
            if spec.config:
                conf = self.config.with_overrides(spec.config, source=f"component {cid!r}")
            self._confs[cid] = conf
        return conf

    def routes(self, cid: str, stream: str) -> list[RouteSpec]:
        """Where component ``cid``'s tuples on ``stream`` go, one entry per subscriber."""
        fields = self.topology.components[cid].outputs[stream][0]
        out = []
        for target, sub in self.topology.subscribers(cid, stream):
            g = sub.grouping
            key: int | tuple[int, ...] | None = None
            if g.kind == "fields":
                idx = tuple(fields.index_of(f) for f in g.fields)
                key = idx[0] if len(idx) == 1 else idx
            out.append(
                RouteSpec(target.id, g.kind, key, g.custom, tuple(self.component_tasks[target.id]))
            )
        return out

    def checkpoint_sources(self, cid: str) -> frozenset[tuple[str, int]]:
        """The ``(component, task id)`` a bolt's checkpoint barrier waits for (empty if none)."""
        return frozenset(
            (sub.source, tid)
            for sub in self.topology.components[cid].inputs
            if sub.stream == CHECKPOINT_STREAM
            for tid in self.component_tasks[sub.source]
        )

    def context(
        self,
        cid: str,
        index: int,
        *,
        state_opener: Callable[[str], KeyValueState] | None = None,
        clock: Clock | None = None,
        exactly_once: bool = False,
    ) -> TopologyContext:
        """The :class:`TopologyContext` of task ``index`` of ``cid``."""
        spec = self.topology.components[cid]
        return TopologyContext(
            self.topology.name,
            cid,
            index,
            self.component_tasks[cid][index],
            self.component_tasks,
            self.output_fields,
            state_opener=state_opener,
            clock=clock,
            sources=[(sub.source, sub.stream) for sub in spec.inputs],
            exactly_once=exactly_once,
        )

    def namespace(self, cid: str, index: int) -> str:
        """The state namespace of task ``index`` of ``cid``."""
        return task_namespace(cid, index)
