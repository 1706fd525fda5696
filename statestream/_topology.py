"""TopologyBuilder and the validated, runtime-free Topology it builds.

A :class:`Topology` is a description: component prototypes, their
parallelism, their declared streams and their subscriptions. It holds no
threads, queues or connections, so it pickles (cloudpickle) and can be shipped
to Spark executors. Runtimes instantiate one copy of each prototype per task.
"""

from __future__ import annotations

import copy
import difflib
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import cloudpickle

from ._components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout, StatefulBolt
from ._errors import TopologyError
from ._routing import Grouping
from ._tuple import DEFAULT_STREAM, Fields
from ._windowed import BaseWindowedBolt, WindowedBoltExecutor

__all__ = ["BoltDeclarer", "ComponentSpec", "Subscription", "Topology", "TopologyBuilder"]

RESERVED_PREFIXES = ("$", "__")


@dataclass(frozen=True)
class Subscription:
    """A bolt's input: tuples of ``stream`` from ``source``, routed by ``grouping``."""

    source: str
    stream: str
    grouping: Grouping


@dataclass
class ComponentSpec:
    """One component of a topology: its prototype object and how it is wired."""

    id: str
    obj: Spout | Bolt | BasicBolt
    parallelism: int
    inputs: list[Subscription] = field(default_factory=list)
    outputs: dict[str, tuple[Fields, bool]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def is_spout(self) -> bool:
        return isinstance(self.obj, Spout)

    @property
    def is_stateful(self) -> bool:
        from ._executors import unwrap

        return isinstance(unwrap(self.obj), StatefulBolt)

    @property
    def user_obj(self) -> Any:
        """The user's component prototype (``obj`` without the executors ``build()`` added)."""
        from ._executors import unwrap

        return unwrap(self.obj)

    def output_fields(self, stream: str) -> Fields:
        return self.outputs[stream][0]


def _check_topology_name(name: object) -> str:
    # The name scopes the topology's state in the store ("<name>/<namespace>")
    # and its config keys ("<name>.input"), hence the characters refused.
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(RESERVED_PREFIXES)
        or any(c in name for c in "/. \t\n")
    ):
        raise TopologyError(
            f"a topology's name is a non-empty string without '/', '.' or spaces, not "
            f"starting with '$' or '__' (it names the topology's state and config keys); "
            f"got {name!r}"
        )
    return name


def _check_id(kind: str, cid: object) -> str:
    if not isinstance(cid, str) or not cid:
        raise TopologyError(f"{kind} ids are non-empty strings, got {cid!r}")
    if cid.startswith(RESERVED_PREFIXES):
        raise TopologyError(
            f"{kind} id {cid!r} is reserved: ids starting with '$' or '__' belong to the "
            "system ($checkpointspout, __acker); rename it"
        )
    return cid


def _check_parallelism(cid: str, parallelism: object) -> int:
    if type(parallelism) is not int or parallelism < 1:
        raise TopologyError(
            f"component {cid!r}: parallelism must be a positive integer, got {parallelism!r}"
        )
    return parallelism


def _suggest(name: str, known: Iterable[str]) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"(known: {', '.join(repr(k) for k in known)}){hint}"


class BoltDeclarer:
    """Returned by :meth:`TopologyBuilder.set_bolt`; chain groupings on it."""

    def __init__(self, spec: ComponentSpec) -> None:
        self._spec = spec

    def _add(self, source: str, stream: str, grouping: Grouping) -> BoltDeclarer:
        if not isinstance(source, str) or not source:
            raise TopologyError(
                f"bolt {self._spec.id!r}: the source of a grouping is a component id, "
                f"got {source!r}"
            )
        self._spec.inputs.append(Subscription(source, stream, grouping))
        return self

    def shuffle_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Spread tuples evenly over this bolt's tasks."""
        return self._add(source, stream, Grouping("shuffle"))

    def local_or_shuffle_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """A shuffle; in one process every task is local."""
        return self._add(source, stream, Grouping("shuffle"))

    def fields_grouping(
        self, source: str, fields: Fields | Sequence[str] | str, stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        """Tuples with equal values of ``fields`` go to the same task (stable hash)."""
        names = (fields,) if isinstance(fields, str) else tuple(fields)
        if not names:
            raise TopologyError(
                f"bolt {self._spec.id!r}: fields_grouping on {source!r} names no fields"
            )
        return self._add(source, stream, Grouping("fields", names))

    def global_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Every tuple goes to this bolt's first task."""
        return self._add(source, stream, Grouping("global"))

    def all_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Every tuple goes to every task of this bolt."""
        return self._add(source, stream, Grouping("all"))

    def direct_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """The emitter picks the task with ``emit_direct``; the stream must be declared direct."""
        return self._add(source, stream, Grouping("direct"))

    def none_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """No preference: behaves as a shuffle."""
        return self._add(source, stream, Grouping("none"))

    def custom_grouping(
        self, source: str, grouping: Any, stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        """``grouping.choose_tasks(values, n_tasks) -> list[int]`` picks the task indexes."""
        if not callable(getattr(grouping, "choose_tasks", None)):
            raise TopologyError(
                f"bolt {self._spec.id!r}: a custom grouping needs a "
                "choose_tasks(values, n_tasks) method"
            )
        return self._add(source, stream, Grouping("custom", custom=grouping))

    def add_configuration(self, key: str, value: Any) -> BoltDeclarer:
        """A config key for this component only (e.g. ``topology.tick.tuple.freq.secs``)."""
        self._spec.config[key] = value
        return self


class SpoutDeclarer:
    """Returned by :meth:`TopologyBuilder.set_spout`."""

    def __init__(self, spec: ComponentSpec) -> None:
        self._spec = spec

    def add_configuration(self, key: str, value: Any) -> SpoutDeclarer:
        self._spec.config[key] = value
        return self


class TopologyBuilder:
    """Declare spouts and bolts, wire them with groupings, then :meth:`build`.

    >>> b = TopologyBuilder("wordcount")
    >>> b.set_spout("sentences", SentenceSpout())
    >>> b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    >>> b.set_bolt("count", Count(), 2).fields_grouping("split", "word")
    >>> topology = b.build()
    """

    def __init__(self, name: str = "topology") -> None:
        self.name = _check_topology_name(name)
        self._components: dict[str, ComponentSpec] = {}

    def _add(self, kind: str, cid: str, obj: Any, parallelism: int) -> ComponentSpec:
        _check_id(kind, cid)
        if cid in self._components:
            raise TopologyError(f"component id {cid!r} is used twice; ids must be unique")
        spec = ComponentSpec(cid, obj, _check_parallelism(cid, parallelism))
        self._components[cid] = spec
        return spec

    def set_spout(self, cid: str, spout: Spout, parallelism: int = 1) -> SpoutDeclarer:
        if not isinstance(spout, Spout):
            raise TopologyError(
                f"spout {cid!r} must be a statestream.Spout instance, got {type(spout).__name__}"
            )
        return SpoutDeclarer(self._add("spout", cid, spout, parallelism))

    def set_bolt(
        self, cid: str, bolt: Bolt | BasicBolt | BaseWindowedBolt, parallelism: int = 1
    ) -> BoltDeclarer:
        if isinstance(bolt, BaseWindowedBolt):
            # Checkpointed as a stateful bolt, its windows in its state (_windowed);
            # its window comes from its with_* methods or its config (checked when
            # its tasks are prepared: add_configuration may follow).
            bolt = WindowedBoltExecutor(bolt)
        if not isinstance(bolt, (Bolt, BasicBolt)):
            hint = " (a spout? use set_spout)" if isinstance(bolt, Spout) else ""
            raise TopologyError(
                f"bolt {cid!r} must be a statestream.Bolt, BasicBolt, StatefulBolt or "
                f"BaseWindowedBolt instance, got {type(bolt).__name__}{hint}"
            )
        return BoltDeclarer(self._add("bolt", cid, bolt, parallelism))

    def build(self) -> Topology:
        """Validate and freeze the topology; raises :class:`TopologyError` naming the fix."""
        comps = self._components
        if not any(s.is_spout for s in comps.values()):
            raise TopologyError(f"topology {self.name!r} has no spout; add one with set_spout")
        for spec in comps.values():
            declarer = OutputFieldsDeclarer()
            try:
                spec.obj.declare_output_fields(declarer)
            except (TypeError, ValueError) as exc:
                raise TopologyError(f"component {spec.id!r}: declare_output_fields: {exc}") from exc
            for stream in declarer.streams:
                if stream.startswith(RESERVED_PREFIXES):
                    raise TopologyError(
                        f"component {spec.id!r} declares stream {stream!r}; stream ids "
                        "starting with '$' or '__' are reserved for the system"
                    )
            spec.outputs = dict(declarer.streams)
            conf = spec.obj.component_configuration()
            if conf:
                spec.config = {**conf, **spec.config}
        for spec in comps.values():
            if spec.is_spout:
                continue
            if not spec.inputs:
                raise TopologyError(
                    f"bolt {spec.id!r} subscribes to nothing; add a grouping, e.g. "
                    f".shuffle_grouping('<source id>')"
                )
            for sub in spec.inputs:
                self._validate_subscription(spec, sub)
        # Copies, so that using the builder (or a declarer) after build() cannot
        # change the validated topology behind the caller's back.
        topo = Topology(
            self.name,
            {
                cid: replace(
                    spec,
                    inputs=list(spec.inputs),
                    outputs=dict(spec.outputs),
                    config=dict(spec.config),
                )
                for cid, spec in comps.items()
            },
        )
        if topo.has_stateful_bolts:
            cycle = topo.find_cycle()
            if cycle:
                raise TopologyError(
                    "a topology with stateful bolts must be acyclic so checkpoint barriers "
                    f"can flow; found the cycle {' -> '.join(cycle)}"
                )
            topo = _with_checkpointing(topo)
        topo = _with_executors(topo)
        topo.check_picklable()
        return topo

    def _validate_subscription(self, spec: ComponentSpec, sub: Subscription) -> None:
        comps = self._components
        if sub.source not in comps:
            raise TopologyError(
                f"bolt {spec.id!r} subscribes to unknown component {sub.source!r} "
                f"{_suggest(sub.source, comps)}"
            )
        src = comps[sub.source]
        if sub.stream not in src.outputs:
            if not src.outputs:
                raise TopologyError(
                    f"bolt {spec.id!r} subscribes to {sub.source!r}, which declares no output "
                    f"streams; declare them in {type(src.obj).__name__}.declare_output_fields"
                )
            raise TopologyError(
                f"bolt {spec.id!r} subscribes to stream {sub.stream!r} of {sub.source!r}, which "
                f"does not declare it {_suggest(sub.stream, src.outputs)}"
            )
        fields, direct = src.outputs[sub.stream]
        g = sub.grouping
        if g.kind == "fields":
            for name in g.fields:
                if name not in fields:
                    raise TopologyError(
                        f"bolt {spec.id!r} groups {sub.source!r}:{sub.stream} by field {name!r}, "
                        f"which the stream does not have {_suggest(name, fields)}"
                    )
        if g.kind == "direct" and not direct:
            raise TopologyError(
                f"bolt {spec.id!r} uses direct_grouping on {sub.source!r}:{sub.stream}, which is "
                "not a direct stream; declare it with declare_stream(..., direct=True)"
            )
        if direct and g.kind != "direct":
            raise TopologyError(
                f"bolt {spec.id!r} subscribes to the direct stream {sub.source!r}:{sub.stream} "
                f"with a {g.describe()} grouping; use direct_grouping"
            )


def _with_checkpointing(topo: Topology) -> Topology:
    """Add ``$checkpointspout`` and wire ``$checkpoint`` through every bolt (all grouping).

    A bolt gets the checkpoint stream from the checkpoint spout for each of
    its inputs that is a spout, and from each upstream bolt otherwise, so a
    barrier reaches every bolt only after it passed everything upstream.
    """
    from ._stateful import CHECKPOINT_FIELDS, CHECKPOINT_SPOUT, CHECKPOINT_STREAM, CheckpointSpout

    comps = {cid: copy.copy(spec) for cid, spec in topo.components.items()}
    cp = ComponentSpec(CHECKPOINT_SPOUT, CheckpointSpout(), 1)
    cp.outputs = {CHECKPOINT_STREAM: (CHECKPOINT_FIELDS, False)}
    for spec in comps.values():
        if spec.is_spout:
            continue
        sources = dict.fromkeys(
            CHECKPOINT_SPOUT if comps[sub.source].is_spout else sub.source for sub in spec.inputs
        )
        spec.inputs = [
            *spec.inputs,
            *(Subscription(src, CHECKPOINT_STREAM, Grouping("all")) for src in sources),
        ]
        spec.outputs = {**spec.outputs, CHECKPOINT_STREAM: (CHECKPOINT_FIELDS, False)}
    return Topology(topo.name, {CHECKPOINT_SPOUT: cp, **comps})


def _with_executors(topo: Topology) -> Topology:
    """Wrap each bolt in the executor of its protocol, as Storm's builder does
    (see :mod:`statestream._executors`)."""
    from ._executors import wrap
    from ._stateful import CHECKPOINT_SPOUT

    checkpointed = CHECKPOINT_SPOUT in topo.components
    comps = {
        cid: spec if spec.is_spout else replace(spec, obj=wrap(spec.obj, checkpointed))
        for cid, spec in topo.components.items()
    }
    return Topology(topo.name, comps)


class Topology:
    """A validated topology. Picklable; holds no runtime resources."""

    def __init__(self, name: str, components: Mapping[str, ComponentSpec]) -> None:
        self.name = name
        self.components: dict[str, ComponentSpec] = dict(components)

    @property
    def spouts(self) -> list[ComponentSpec]:
        return [s for s in self.components.values() if s.is_spout]

    @property
    def bolts(self) -> list[ComponentSpec]:
        return [s for s in self.components.values() if not s.is_spout]

    @property
    def has_stateful_bolts(self) -> bool:
        return any(s.is_stateful for s in self.components.values())

    def subscribers(self, source: str, stream: str) -> list[tuple[ComponentSpec, Subscription]]:
        """The bolts subscribed to ``source``:``stream``, in declaration order."""
        return [
            (spec, sub)
            for spec in self.components.values()
            for sub in spec.inputs
            if sub.source == source and sub.stream == stream
        ]

    def downstream(self, cid: str) -> list[str]:
        return list(
            dict.fromkeys(
                spec.id for spec in self.components.values() for s in spec.inputs if s.source == cid
            )
        )

    def upstream(self, cid: str) -> list[str]:
        return list(dict.fromkeys(s.source for s in self.components[cid].inputs))

    def topological_order(self) -> list[str]:
        """Component ids, sources before their subscribers (declaration order on cycles)."""
        order: list[str] = []
        seen: set[str] = set()
        visiting: set[str] = set()

        def visit(cid: str) -> None:
            if cid in seen or cid in visiting:
                return
            visiting.add(cid)
            for up in self.upstream(cid):
                visit(up)
            visiting.discard(cid)
            seen.add(cid)
            order.append(cid)

        for cid in self.components:
            visit(cid)
        return order

    def find_cycle(self) -> list[str] | None:
        state: dict[str, int] = {}
        path: list[str] = []

        def visit(cid: str) -> list[str] | None:
            state[cid] = 1
            path.append(cid)
            for nxt in self.downstream(cid):
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt) :], nxt]
                if nxt not in state:
                    found = visit(nxt)
                    if found:
                        return found
            path.pop()
            state[cid] = 2
            return None

        for cid in self.components:
            if cid not in state:
                found = visit(cid)
                if found:
                    return found
        return None

    def check_picklable(self) -> None:
        for spec in self.components.values():
            try:
                cloudpickle.dump(spec.obj, io.BytesIO())
            except Exception as exc:
                raise TopologyError(
                    f"component {spec.id!r} ({type(spec.obj).__name__}) cannot be pickled, so "
                    f"it cannot be copied per task or shipped to Spark: {exc}. Create "
                    "connections, locks and open files in open()/prepare(), not in __init__"
                ) from exc

    def instantiate(self, cid: str) -> Any:
        """A fresh copy of component ``cid``'s prototype for one task.

        A deep copy, not a pickle round trip: while a Spark run ships user
        modules by value, cloudpickle unpickling a class in the process that
        defined it rebinds the class's methods to copies of their module's
        globals, and the user's module-level state would be cut off.
        """
        return copy.deepcopy(self.components[cid].obj)

    def __repr__(self) -> str:
        parts = ", ".join(f"{s.id}x{s.parallelism}" for s in self.components.values())
        return f"Topology({self.name!r}: {parts})"
