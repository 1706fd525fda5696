"""TransactionalTopologyBuilder: a transactional topology as an ordinary Topology.

``build()`` validates the wiring the user declared (with the ordinary
builder, so the errors read the same) and then lays it out as Storm does,
with components the runtime knows nothing special about::

    $coordinator  (spout, 1 task)  --$batch (all)-->   <spout id> (EmitterExecutor)
                                   --$commit (all)-->  every committer
    <spout id> / each bolt --data streams (direct)-->  subscribers (BatchBoltExecutor)
                           --$coord (direct)------->   every task of each subscriber

Every data stream becomes a direct stream: the executors route with the
user's groupings themselves, so that they can count what each task was sent
(see :mod:`statestream._transactional.completion`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout, StatefulBolt
from .._errors import TopologyError
from .._routing import Grouping
from .._topology import BoltDeclarer, ComponentSpec, Subscription, Topology, TopologyBuilder
from .api import (
    BatchBolt,
    Committer,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from .completion import LogicalRoute
from .components import (
    BATCH_FIELDS,
    BATCH_STREAM,
    COMMIT_FIELDS,
    COMMIT_STREAM,
    COORD_FIELDS,
    COORD_STREAM,
    COORDINATOR,
    BatchBoltExecutor,
    EmitterExecutor,
    TransactionalCoordinatorSpout,
    adapt_spout,
)

__all__ = ["TransactionalTopologyBuilder"]

_SPOUT_KINDS = (
    TransactionalSpout,
    PartitionedTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
)


class _SpoutShape(Spout):
    """Stands for the transactional spout while the ordinary builder validates the wiring."""

    def __init__(self, spout: Any) -> None:
        self.spout = spout

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.spout.declare_output_fields(declarer)

    def component_configuration(self) -> dict[str, Any] | None:
        conf: dict[str, Any] | None = self.spout.component_configuration()
        return conf


class _BoltShape(Bolt):
    """Stands for a batch or basic bolt while the ordinary builder validates the wiring."""

    def __init__(self, bolt: Any) -> None:
        self.bolt = bolt

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.bolt.declare_output_fields(declarer)

    def component_configuration(self) -> dict[str, Any] | None:
        conf: dict[str, Any] | None = self.bolt.component_configuration()
        return conf


class TransactionalTopologyBuilder:
    """Declare a transactional topology: one transactional spout, batch bolts, committers.

    >>> spout = MemoryTransactionalSpout(DATA, ["word"], 3)
    >>> b = TransactionalTopologyBuilder("global-count", "spout", spout, 3)
    >>> b.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
    >>> b.set_committer_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    >>> topology = b.build()

    ``id`` is the topology's name: config keys under ``<id>.`` pass through to
    it, and the coordinator's stored state is named after it, so a restart
    continues where the last run left off. Bolts subscribe to the spout by
    ``spout_id``; ``parallelism`` is the number of emitter tasks.
    """

    def __init__(self, id: str, spout_id: str, spout: Any, parallelism: int = 1) -> None:
        if not isinstance(spout, _SPOUT_KINDS):
            raise TopologyError(
                f"transactional topology {id!r}: spout {spout_id!r} must be a "
                "TransactionalSpout, PartitionedTransactionalSpout or "
                f"OpaquePartitionedTransactionalSpout, got {type(spout).__name__}"
            )
        self.id = id
        self.spout_id = spout_id
        self.spout = spout
        self._shape = TopologyBuilder(id)
        self._shape.set_spout(spout_id, _SpoutShape(spout), parallelism)
        self._bolts: dict[str, tuple[Any, bool]] = {}

    def set_bolt(
        self, id: str, bolt: BatchBolt[Any] | BasicBolt, parallelism: int = 1
    ) -> BoltDeclarer:
        """Add a batch bolt (a committer if it subclasses :class:`Committer`) or a basic bolt."""
        return self._add(id, bolt, parallelism, isinstance(bolt, Committer))

    def set_committer_bolt(
        self, id: str, bolt: BatchBolt[Any], parallelism: int = 1
    ) -> BoltDeclarer:
        """Add a batch bolt whose ``finish_batch`` runs in the commit phase, in txid order."""
        return self._add(id, bolt, parallelism, True)

    def _add(self, cid: str, bolt: Any, parallelism: int, committer: bool) -> BoltDeclarer:
        if isinstance(bolt, StatefulBolt):
            raise TopologyError(
                f"bolt {cid!r} is a StatefulBolt; a transactional topology keeps its state in "
                "committers (a BatchBolt that subclasses Committer), which store the txid "
                "with each value"
            )
        if not isinstance(bolt, (BatchBolt, BasicBolt)):
            raise TopologyError(
                f"bolt {cid!r} of transactional topology {self.id!r} must be a BatchBolt, "
                f"TransactionalBolt or BasicBolt, got {type(bolt).__name__}"
            )
        if committer and not isinstance(bolt, BatchBolt):
            raise TopologyError(
                f"bolt {cid!r} is a committer but not a BatchBolt; only batch bolts have a "
                "finish_batch to run in the commit phase"
            )
        declarer = self._shape.set_bolt(cid, _BoltShape(bolt), parallelism)
        self._bolts[cid] = (bolt, committer)
        return declarer

    def build(self) -> Topology:
        """The topology, validated; raises :class:`TopologyError` naming the fix."""
        shape = self._shape.build()
        cycle = shape.find_cycle()
        if cycle:
            raise TopologyError(
                f"transactional topology {self.id!r} must be acyclic (a bolt knows it has a "
                f"whole batch from its upstream tasks); found the cycle {' -> '.join(cycle)}"
            )
        specs = shape.components
        routes = {cid: _routes(shape, cid) for cid in specs}
        commit_phase: dict[str, bool] = {}
        for cid in shape.topological_order():
            if cid == self.spout_id:
                commit_phase[cid] = False
            else:
                committer = self._bolts[cid][1]
                commit_phase[cid] = committer or any(commit_phase[u] for u in shape.upstream(cid))

        spout = adapt_spout(self.spout, self.spout_id)
        comps: dict[str, ComponentSpec] = {
            COORDINATOR: ComponentSpec(
                COORDINATOR,
                TransactionalCoordinatorSpout(spout),
                1,
                outputs={
                    BATCH_STREAM: (BATCH_FIELDS, False),
                    COMMIT_STREAM: (COMMIT_FIELDS, False),
                },
            )
        }
        emitter = specs[self.spout_id]
        comps[self.spout_id] = ComponentSpec(
            self.spout_id,
            EmitterExecutor(spout, routes[self.spout_id]),
            emitter.parallelism,
            inputs=[Subscription(COORDINATOR, BATCH_STREAM, Grouping("all"))],
            outputs=_direct_outputs(emitter.outputs),
            config=dict(emitter.config),
        )
        for cid, (bolt, committer) in self._bolts.items():
            spec = specs[cid]
            data = list(dict.fromkeys((s.source, s.stream) for s in spec.inputs))
            upstream = list(dict.fromkeys(src for src, _ in data))
            inputs = [Subscription(src, stream, Grouping("direct")) for src, stream in data]
            inputs += [Subscription(src, COORD_STREAM, Grouping("direct")) for src in upstream]
            if committer:
                inputs.append(Subscription(COORDINATOR, COMMIT_STREAM, Grouping("all")))
            executor = BatchBoltExecutor(
                bolt,
                routes[cid],
                sources={src: commit_phase[src] for src in upstream},
                committer=committer,
                commit_phase=commit_phase[cid],
            )
            comps[cid] = ComponentSpec(
                cid,
                executor,
                spec.parallelism,
                inputs=inputs,
                outputs=_direct_outputs(spec.outputs),
                config=dict(spec.config),
            )
        topology = Topology(self.id, comps)
        topology.check_picklable()
        return topology


def _direct_outputs(outputs: Mapping[str, Any]) -> dict[str, Any]:
    out = {stream: (fields, True) for stream, (fields, _) in outputs.items()}
    out[COORD_STREAM] = (COORD_FIELDS, True)
    return out


def _routes(shape: Topology, cid: str) -> dict[str, list[LogicalRoute]]:
    """Each stream of ``cid`` with its subscribers' groupings, as the user declared them."""
    out: dict[str, list[LogicalRoute]] = {}
    for stream, (fields, _) in shape.components[cid].outputs.items():
        rs = []
        for target, sub in shape.subscribers(cid, stream):
            g = sub.grouping
            key = tuple(fields.index_of(f) for f in g.fields) if g.kind == "fields" else ()
            rs.append(LogicalRoute(target.id, g.kind, key, g.custom))
        out[stream] = rs
    return out
