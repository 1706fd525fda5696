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
from .._config import Config
from .._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM
from .._topology import ComponentSpec, Topology
from .._tuple import Fields

if TYPE_CHECKING:
    from .._state import KeyValueState

__all__ = ["RouteSpec", "RuntimePlan", "as_config", "task_namespace"]


def as_config(config: Mapping[str, Any] | None, topology_prefixes: Collection[str] = ()) -> Config:
    """``config`` as a validated :class:`Config` (a plain mapping is applied over the defaults)."""
    if isinstance(config, Config):
        return config
    return Config(config or {}, topology_prefixes=topology_prefixes)


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
