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
from .._registry import provider_sharing
from .._runners import Runner, runners
from .._runners import runner as runner_entry
from .._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM
from .._topology import ComponentSpec, Topology
from .._transactional.components import TransactionalCoordinatorSpout
from .._tuple import Fields

if TYPE_CHECKING:
    from .._settings import Settings
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
    spec: str, sharing: str, *, runner: str | Runner, workers: int = 1, master: str = ""
) -> str | None:
    """Why the provider ``spec``, shared as far as ``sharing`` (``process``, ``machine``
    or ``network``, :func:`~statestream._registry.provider_sharing`), cannot hold the
    state of a run on ``runner`` (a name or a registry entry; ``workers`` processes;
    Spark's ``master``), as the runner's
    :attr:`~statestream._runners.Capabilities.store_refusal` says;
    None if it can.
    """
    refuse = runner_entry(runner).capabilities.store_refusal
    return refuse(spec, sharing, workers=workers, master=master) if refuse else None


def refusals(
    topology: Topology, config: Config, *, sharing: Callable[[str], str] | None = None
) -> list[str]:
    """Why ``topology`` cannot run with ``config`` on the runner it names, in the order
    the runtimes checked them; empty if nothing is refused.

    What is refused follows the runner's :class:`~statestream._runners.Capabilities`:
    ``topology.workers``
    where it starts no worker processes; on several worker processes, a store
    they cannot share and a transactional topology it cannot spread; a stateful
    topology without ackers where it acks per tuple; then its own refusals.
    ``sharing`` resolves a provider spec to its sharing scope (default:
    :func:`~statestream._registry.provider_sharing`, asked only when a topology
    with stateful bolts runs on several worker processes). A runner that knows
    more at open (Spark's master) asks :func:`provider_refusal` then.
    """
    settings = settings_of(config)
    entry = runner_entry(settings.topology_runner)
    can, workers = entry.capabilities, settings.topology_workers
    found: list[str] = []
    if workers != 1 and not can.worker_processes:
        found.append(
            f"topology.workers is {workers}, but the {entry.name} runner does not start "
            f"worker processes itself: {can.workers_advice}"
        )
    elif workers > 1:
        found += _refusals_on_workers(topology, settings, entry, sharing)
    if can.acks_per_tuple:
        refusal = acking_refusal(topology, settings.topology_acker_executors)
        if refusal:
            found.append(refusal)
    found += [r for r in (refuse(topology, settings) for refuse in can.refusals) if r]
    return found


def _refusals_on_workers(
    topology: Topology, settings: Settings, entry: Runner, sharing: Callable[[str], str] | None
) -> list[str]:
    """What a runner refuses of ``topology`` on ``settings.topology_workers`` > 1 processes."""
    found: list[str] = []
    if topology.has_stateful_bolts:
        spec = settings.topology_state_provider
        scope = (sharing or provider_sharing)(spec)
        refusal = provider_refusal(spec, scope, runner=entry, workers=settings.topology_workers)
        if refusal:
            found.append(refusal)
    if entry.capabilities.transactional_on_workers:
        return found
    for cid, spec_ in topology.components.items():
        if isinstance(spec_.obj, TransactionalCoordinatorSpout):
            # The fix names the runners that do spread one (the built-in spark).
            spread = [
                f"topology.runner: {name}"
                for name in runners()
                if runner_entry(name).capabilities.transactional_on_workers
            ]
            elsewhere = f", or run them on several with {' or '.join(spread)}" if spread else ""
            found.append(
                f"topology {topology.name!r} is transactional (its coordinator is "
                f"{cid!r}); transactional topologies run on one process here: set "
                f"topology.workers: 1{elsewhere}"
            )
            break
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
