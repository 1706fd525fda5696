"""Test doubles for topologies: list spouts, a replaying queue, a collecting sink, a fake
clock, and a random text with its known word counts.

Component objects are copied per task (pickled), so anything a test must
observe after a run lives in a process-wide registry keyed by a name the test
chooses: ``SinkBolt("out")`` collects into ``sink("out")``, ``QueueSpout("q")``
reads ``queue("q")``. Call :func:`reset` between tests (the pytest fixture in
``tests/conftest.py`` does).
"""

from __future__ import annotations

import collections
import copy
import itertools
import os
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._clock import FakeClock, StepClock
from ._components import (
    Bolt,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
    task_namespace,
)
from ._config import settings_of
from ._errors import ConfigError, SimulatedCrash, StateError, TopologyError
from ._executors import _Wrapper
from ._results import ErrorReport, RunResult
from ._state import KeyValueState
from ._topology import Topology
from ._tuple import Fields, Origin, Tuple
from .runtime.plan import as_config

__all__ = [
    "CRASH",
    "EOF",
    "CrashPoint",
    "CrashPointNotReached",
    "CrashRecovery",
    "Emitted",
    "FakeClock",
    "ListSpout",
    "MockBasicCollector",
    "MockCollector",
    "QueueSpout",
    "ReplayingQueue",
    "RewindableListSpout",
    "SimulatedCrash",
    "SinkBolt",
    "SpoutRecord",
    "StepClock",
    "committed_state",
    "crash_and_recover",
    "crash_at_checkpoint",
    "crash_at_tuple",
    "make_tuple",
    "memory_state",
    "mock_context",
    "queue",
    "random_text",
    "reset",
    "sink",
    "spout_record",
]


def random_text(
    path: str | os.PathLike[str],
    lines: int,
    *,
    words_per_line: int = 10,
    vocabulary: int = 800,
    seed: int = 7,
) -> collections.Counter[str]:
    """Write ``lines`` lines of words drawn from ``w0 .. w<vocabulary-1>`` to ``path``
    (the same text for the same arguments) and return how often each word occurs:
    the exact answer a word count over the file must give."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    counter: collections.Counter[str] = collections.Counter()
    with open(path, "w") as f:
        for _ in range(lines):
            words = rng.choices(vocab, k=words_per_line)
            counter.update(words)
            f.write(" ".join(words) + "\n")
    return counter


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


CRASH = _Sentinel("CRASH")
"""In a ListSpout's items: raise :class:`SimulatedCrash` when reached."""
EOF = _Sentinel("EOF")
"""In a ListSpout's items: the spout is exhausted here; later items are never emitted."""

_sinks: dict[str, list[Any]] = {}
_queues: dict[str, ReplayingQueue] = {}


def reset() -> None:
    """Forget every sink, queue and spout record, and empty every store of the
    ``memory`` provider (its state would otherwise leak from test to test).

    The pytest fixture ``statestream_reset`` (``pytest_plugins =
    ["statestream.pytest_plugin"]`` in a ``conftest.py``) calls it before and
    after a test that asks for it.
    """
    from ._registry import resolve_provider

    _sinks.clear()
    _queues.clear()
    _records.clear()
    resolve_provider("memory").clear()  # type: ignore[attr-defined]


@dataclass
class SpoutRecord:
    """What the tasks of a named :class:`ListSpout` were told, in order
    (``dead_lettered``: the items given up on, in the dead-letter file)."""

    acked: list[Any]
    failed: list[Any]
    dead_lettered: list[Any] = field(default_factory=list)


_records: dict[str, SpoutRecord] = {}


def spout_record(name: str) -> SpoutRecord:
    """The acks and fails ``ListSpout(..., name=name)`` received (its tasks are
    copies of the spout you built, so their own lists are not yours to read)."""
    record = _records.get(name)
    if record is None:
        record = _records[name] = SpoutRecord([], [])
    return record


def sink(name: str) -> list[Any]:
    """What ``SinkBolt(name)`` tasks have collected, in arrival order."""
    return _sinks.setdefault(name, [])


class ListSpout(Spout):
    """Emits each item of a list as a one-field tuple (or the item itself if it is a
    list/tuple matching ``fields``), with its index as message id when ``reliable``.

    A failed item is emitted again (when the runtime hands it back, after the
    retry policy's delay). An item given up on (``dead_lettered``) is settled
    and never emitted again. :data:`CRASH` raises :class:`SimulatedCrash`,
    :data:`EOF` ends the list early. Exhausted once every item was emitted and
    (when reliable) acked or dead-lettered. With a ``name``, acks, fails and
    dead letters are recorded in :func:`spout_record` ``(name)`` where a test
    can read them.
    """

    def __init__(
        self,
        items: Iterable[Any],
        fields: Sequence[str] = ("value",),
        *,
        reliable: bool = True,
        stream: str = "default",
        name: str | None = None,
    ) -> None:
        self.items = list(items)
        self.fields = list(fields)
        self.reliable = reliable
        self.stream = stream
        self.name = name
        self._next = 0
        self._replay: deque[int] = deque()
        self._pending: set[int] = set()
        self.acked: list[int] = []
        self.failed: list[int] = []
        self.dead: list[int] = []

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(self.stream, self.fields)

    def _values(self, item: Any) -> list[Any]:
        if len(self.fields) > 1 and isinstance(item, (list, tuple)):
            return list(item)
        return [item]

    def next_tuple(self) -> None:
        if self._replay:
            i = self._replay.popleft()
        else:
            if self._next >= len(self.items):
                return
            item = self.items[self._next]
            if item is EOF:
                return
            i = self._next
            self._next += 1
            if item is CRASH:
                raise SimulatedCrash(f"ListSpout reached CRASH at index {i}")
        if self.reliable:
            self._pending.add(i)
            self.collector.emit(self._values(self.items[i]), msg_id=i, stream=self.stream)
        else:
            self.collector.emit(self._values(self.items[i]), stream=self.stream)

    def ack(self, msg_id: Any) -> None:
        self._pending.discard(msg_id)
        self.acked.append(msg_id)
        if self.name is not None:
            spout_record(self.name).acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)
        if self.name is not None:
            spout_record(self.name).failed.append(msg_id)
        if msg_id in self._pending:
            self._replay.append(msg_id)

    def dead_lettered(self, msg_id: Any) -> None:
        self._pending.discard(msg_id)
        self.dead.append(msg_id)
        if self.name is not None:
            spout_record(self.name).dead_lettered.append(msg_id)

    def exhausted(self) -> bool:
        at_end = self._next >= len(self.items) or self.items[self._next] is EOF
        return at_end and not self._replay and not self._pending


class RewindableListSpout(ListSpout):
    """A :class:`ListSpout` that can rewind (:class:`statestream.Rewindable`), so a
    stateful topology reading it keeps exactly-once state.

    Its position is the index of the next item plus the failed items waiting
    to be emitted again; ``seek(None)`` starts from the first item.
    """

    def position(self) -> dict[str, Any]:
        return {"next": self._next, "replay": list(self._replay)}

    def seek(self, position: Any) -> None:
        self._pending.clear()
        if position is None:
            self._next, self._replay = 0, deque()
        else:
            self._next, self._replay = int(position["next"]), deque(position["replay"])


class ReplayingQueue:
    """A message queue that puts unacknowledged messages back, like Kestrel or RabbitMQ.

    A client takes a message (it becomes *open*), then acks it (gone for good)
    or fails it (back on the queue). When a client goes away without acking
    (:meth:`reclaim`, called when a new consumer connects after a crash), all
    its open messages go back on the queue. Nothing is lost.
    """

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self.ready: deque[tuple[int, Any]] = deque(enumerate(items))
        self.open: dict[int, Any] = {}
        self.done: dict[int, Any] = {}
        self.deliveries = 0

    def take(self) -> tuple[int, Any] | None:
        if not self.ready:
            return None
        mid, item = self.ready.popleft()
        self.open[mid] = item
        self.deliveries += 1
        return mid, item

    def ack(self, mid: int) -> None:
        if mid in self.open:
            self.done[mid] = self.open.pop(mid)

    def fail(self, mid: int) -> None:
        if mid in self.open:
            self.ready.appendleft((mid, self.open.pop(mid)))

    def reclaim(self) -> int:
        """Put every open message back (its consumer died); returns how many."""
        n = len(self.open)
        for mid in sorted(self.open, reverse=True):
            self.ready.appendleft((mid, self.open.pop(mid)))
        return n

    @property
    def empty(self) -> bool:
        return not self.ready and not self.open


def queue(name: str, items: Iterable[Any] | None = None) -> ReplayingQueue:
    """The process-wide queue ``name`` (created, with ``items``, on first use)."""
    q = _queues.get(name)
    if q is None:
        q = _queues[name] = ReplayingQueue(items or ())
    elif items is not None:
        raise ValueError(f"queue {name!r} already exists; call reset() first")
    return q


class QueueSpout(Spout):
    """Reads :func:`queue` ``name``; acks and fails go back to the queue.

    On ``open`` it reclaims messages a previous (crashed) consumer left open,
    so a restarted topology sees them again.
    """

    def __init__(self, name: str, fields: Sequence[str] = ("value",)) -> None:
        self.name = name
        self.fields = list(fields)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.fields)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.queue = queue(self.name)
        self.queue.reclaim()

    def next_tuple(self) -> None:
        got = self.queue.take()
        if got is not None:
            mid, item = got
            self.collector.emit([item] if len(self.fields) == 1 else list(item), msg_id=mid)

    def ack(self, msg_id: Any) -> None:
        self.queue.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.queue.fail(msg_id)

    def exhausted(self) -> bool:
        return self.queue.empty


class SinkBolt(Bolt):
    """Appends every input to :func:`sink` ``name`` and acks it.

    ``record`` picks what is stored: ``"values"`` (a tuple of the values, the
    default), ``"tuple"`` (the Tuple itself) or ``"task"`` (``(task_index, values)``).
    """

    def __init__(self, name: str, record: str = "values") -> None:
        if record not in ("values", "tuple", "task"):
            raise ValueError(f"record must be 'values', 'tuple' or 'task', got {record!r}")
        self.name = name
        self.record = record

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.out = sink(self.name)

    def execute(self, tup: Tuple) -> None:
        if self.record == "values":
            self.out.append(tuple(tup.values))
        elif self.record == "task":
            self.out.append((self.context.task_index, tuple(tup.values)))
        else:
            self.out.append(tup)
        self.collector.ack(tup)


# -- crash and recover ---------------------------------------------------------------

_ARMED: dict[int, CrashPoint] = {}
_HITS: collections.Counter[int] = collections.Counter()
_ARMINGS = itertools.count(1)  # the key of each armed point
_CHECKPOINT_ACTIONS = ("prepare", "commit", "rollback", "initstate")


class CrashPointNotReached(AssertionError):
    """A run that was meant to crash ended without reaching its crash point."""


@dataclass(frozen=True)
class CrashPoint:
    """Where :func:`crash_and_recover` kills the first run. Build one with
    :func:`crash_at_tuple` or :func:`crash_at_checkpoint`."""

    component: str
    when: str
    """``"tuple"``, or ``"before"``/``"after"`` a checkpoint action."""
    n: int = 1
    action: str | None = None
    txid: int | None = None
    task: int | None = None

    def __str__(self) -> str:
        where = f"{self.component!r}" + (f" task {self.task}" if self.task is not None else "")
        if self.when == "tuple":
            return f"tuple {self.n} of {where}"
        txid = f" {self.txid}" if self.txid is not None else ""
        nth = f" (occurrence {self.n})" if self.n != 1 else ""
        return f"{self.when} {(self.action or '').upper()}{txid} in {where}{nth}"


def crash_at_tuple(component: str, n: int, *, task: int | None = None) -> CrashPoint:
    """Crash when bolt ``component`` is handed its ``n``-th data tuple (counted over
    its tasks, or in task index ``task`` only), before executing it. For a spout:
    its ``n``-th ``next_tuple`` call."""
    if n < 1:
        raise ValueError(f"n counts from 1, got {n}")
    return CrashPoint(component, "tuple", n, task=task)


def crash_at_checkpoint(
    component: str,
    action: str,
    *,
    txid: int | None = None,
    after: bool = False,
    task: int | None = None,
    n: int = 1,
) -> CrashPoint:
    """Crash when a task of bolt ``component`` acts on checkpoint ``action``
    (``"prepare"``, ``"commit"``, ``"rollback"`` or ``"initstate"``), of ``txid``
    or any. Before the action by default (nothing of it happened), or ``after``
    it (this task did it, the tasks after it in the round did not: with
    ``task=0`` and ``action="commit"``, a commit half done across tasks).
    ``n`` picks the n-th matching occurrence."""
    if action.lower() not in _CHECKPOINT_ACTIONS:
        raise ValueError(f"action must be one of {_CHECKPOINT_ACTIONS}, got {action!r}")
    if n < 1:
        raise ValueError(f"n counts from 1, got {n}")
    when = "after" if after else "before"
    return CrashPoint(component, when, n, action.lower(), txid, task)


class _Tripwire:
    """What a tripwired class (:func:`_tripwire_class`) adds to a component: the
    check of its armed point. ``_crash_key`` is a class attribute of the class
    made for one arming, so every task's copy of the component shares it; the
    component's own methods are the ones after the tripwires in the MRO
    (:meth:`_component`).

    The tripwires are classes of this module (pickled by reference, where the
    tripwired class is copied per task with cloudpickle, by value), so every
    copy reaches the one process-wide ``_ARMED`` registry.
    """

    # No __slots__ (not even empty): on 3.11 an empty one makes the tripwired
    # class's layout differ from the component's, so __class__ cannot be set.
    _crash_key: int
    context: Any  # the component's TopologyContext, set by its prepare/open

    def _component(self) -> Any:
        """The component's own methods (what the tripwires wrap)."""
        return super()

    def _trip(self, when: str, action: str | None = None, txid: int | None = None) -> None:
        key = self._crash_key
        point = _ARMED.get(key)
        if point is None or point.when != when:
            return
        if point.task is not None and self.context.task_index != point.task:
            return
        if action is not None and (action.lower() != point.action):
            return
        if point.txid is not None and txid != point.txid:
            return
        _HITS[key] += 1
        if _HITS[key] == point.n:
            del _ARMED[key]
            raise SimulatedCrash(f"crash point reached: {point}")


class _TripExecute(_Tripwire):
    def execute(self, tuple: Tuple) -> None:
        if tuple.origin.stream != "$checkpoint":
            self._trip("tuple")
        self._component().execute(tuple)


class _TripDataEntry(_Tripwire):
    def data_entry(self) -> Callable[[Tuple], None]:
        inner = self._component().data_entry()

        def execute(tuple: Tuple) -> None:
            self._trip("tuple")
            inner(tuple)

        return execute


class _TripCheckpoint(_Tripwire):
    def handle_checkpoint(self, action: Any, txid: int) -> None:
        self._trip("before", str(action), txid)
        self._component().handle_checkpoint(action, txid)
        self._trip("after", str(action), txid)


class _TripNextTuple(_Tripwire):
    def next_tuple(self) -> None:
        self._trip("tuple")
        self._component().next_tuple()


def _tripwire_class(base: type, key: int) -> type:
    """``base`` with its tuple and checkpoint entry points checking the point armed
    under ``key`` (a class per arming: the key is the class's)."""
    wires: list[type] = []
    if isinstance(base, type) and issubclass(base, Spout):
        wires.append(_TripNextTuple)
    else:
        wires.append(_TripExecute)
        if hasattr(base, "handle_checkpoint"):
            wires.append(_TripCheckpoint)
        if hasattr(base, "data_entry"):
            wires.append(_TripDataEntry)
    attrs = {"_crash_key": key, "__module__": __name__}
    return type(f"CrashAt{base.__name__}", (*wires, base), attrs)


def _armed(topology: Topology, point: CrashPoint) -> tuple[Topology, int]:
    spec = topology.components.get(point.component)
    if spec is None:
        names = sorted(c for c in topology.components if not c.startswith("$"))
        raise TopologyError(f"crash point {point}: no component {point.component!r}; {names}")
    if point.when != "tuple" and not hasattr(spec.obj, "handle_checkpoint"):
        raise TopologyError(
            f"crash point {point}: {point.component!r} takes no checkpoints (the topology "
            "has no stateful bolt, or it is a spout); crash it at a tuple instead"
        )
    if point.task is not None and not 0 <= point.task < spec.parallelism:
        raise TopologyError(
            f"crash point {point}: {point.component!r} has tasks 0..{spec.parallelism - 1}"
        )
    obj = topology.instantiate(point.component)
    key = next(_ARMINGS)
    tripwired = _tripwire_class(type(obj), key)
    if isinstance(obj, _Wrapper):
        # An executor of the compiled core takes no __class__ assignment.
        obj = tripwired(obj.bolt)
    else:
        obj.__class__ = tripwired
    _ARMED[key] = point
    _HITS[key] = 0
    components = {cid: copy.copy(s) for cid, s in topology.components.items()}
    components[point.component].obj = obj
    return Topology(topology.name, components), key


@dataclass
class CrashRecovery:
    """What :func:`crash_and_recover` saw: the crash, then the recovering run."""

    crash: SimulatedCrash
    errors_before_crash: list[ErrorReport]
    """Errors the first run reported before it crashed."""
    result: RunResult
    """The second run's result (it ran until idle)."""


def crash_and_recover(
    topology: Topology,
    config: Mapping[str, Any] | None = None,
    *,
    at: CrashPoint,
    clock: Any = None,
    between: Callable[[], object] | None = None,
    then: Topology | None = None,
) -> CrashRecovery:
    """Run ``topology`` on the local runtime until it crashes at ``at``, then run it
    again on the same config until idle, as a restart after a process death would.

    The crash is a :class:`SimulatedCrash`: bolts get no ``cleanup`` and
    nothing is committed, so the second run recovers from the last committed
    checkpoint as after a ``kill -9``. State must outlive the first run's
    runtime: sqlite, Redis, or the memory provider (its store is process-wide).
    Raises :class:`CrashPointNotReached` if the first run ends without crashing:
    the test would otherwise prove nothing. ``between`` is called after the
    crash and before the restart (to look at the store, or to change the
    world as an outage would). ``then`` is the topology the restart runs
    (default: the same one), e.g. the same topology with another parallelism.
    Read the outcome with :func:`committed_state` and the test's own sinks.
    """
    conf = as_config(config, (topology.name,))
    runner = settings_of(conf).topology_runner
    if runner != "local":
        raise ConfigError(
            f"crash_and_recover runs the local runtime; topology.runner is "
            f"{runner!r}. Set it to 'local' for this test"
        )
    from .runtime.local import LocalRuntime

    armed, key = _armed(topology, at)
    rt = LocalRuntime(armed, conf, clock=clock)
    try:
        rt.run(until_idle=True)
    except SimulatedCrash as crash:
        seen = crash
    else:
        raise CrashPointNotReached(
            f"the run ended ({sum(m.executed for m in rt.metrics().values())} tuples "
            f"executed) without reaching the crash point: {at}"
        )
    finally:
        _ARMED.pop(key, None)
    if between is not None:
        between()
    result = LocalRuntime(then or topology, conf, clock=clock).run(until_idle=True)
    return CrashRecovery(seen, list(rt.errors), result)


def committed_state(
    topology: Topology, config: Mapping[str, Any] | None, component: str
) -> dict[Any, Any]:
    """The committed state of stateful bolt ``component``, all its tasks merged, read
    from the store ``config`` names (as ``statestream state dump`` reads it)."""
    from ._registry import open_provider

    spec = topology.components.get(component)
    if spec is None or not spec.is_stateful:
        stateful = sorted(c for c, s in topology.components.items() if s.is_stateful)
        raise TopologyError(
            f"{component!r} is not a stateful bolt of {topology.name!r}; {stateful}"
        )
    settings = settings_of(as_config(config, (topology.name,)))
    merged: dict[Any, Any] = {}
    owner: dict[Any, int] = {}
    with open_provider(
        settings.topology_state_provider,
        copy.deepcopy(settings.topology_state_provider_config),
        scope=topology.name,
    ) as provider:
        for task in range(spec.parallelism):
            for key, value in provider.get_state(task_namespace(component, task)).items():
                if key in owner:
                    raise StateError(
                        f"key {key!r} of {component!r} is stored by task {owner[key]} and "
                        f"task {task}: the state was split (a parallelism change?)"
                    )
                owner[key] = task
                merged[key] = value
    return merged


# -- one bolt, without a runtime -------------------------------------------------------


def make_tuple(
    values: Sequence[Any],
    fields: Sequence[str] | None = None,
    *,
    component: str = "upstream",
    stream: str = "default",
    task_index: int = 0,
) -> Tuple:
    """A tuple as a bolt would receive it from ``component`` (fields default to
    ``f0, f1, ...``), for unit tests of one bolt's ``execute``."""
    names = list(fields) if fields is not None else [f"f{i}" for i in range(len(values))]
    if len(names) != len(values):
        raise ValueError(f"{len(values)} values {list(values)!r} for the fields {names}")
    return Tuple(list(values), Origin(component, task_index, task_index, stream, Fields(names)))


@dataclass
class Emitted:
    """One emit a :class:`MockCollector` saw."""

    values: list[Any]
    stream: str
    anchors: list[Tuple]
    task: int | None = None
    """The target task of an ``emit_direct``."""


class MockCollector:
    """Records a bolt's emits, acks, fails and errors, for unit tests of ``execute``.

    Serves as the ``OutputCollector`` of a :class:`~statestream.Bolt` (hand it
    to ``prepare``); :class:`MockBasicCollector` is the one for a BasicBolt.
    """

    def __init__(self) -> None:
        self.emitted: list[Emitted] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        self.errors: list[BaseException] = []

    @staticmethod
    def _anchors(anchors: Tuple | Sequence[Tuple] | None) -> list[Tuple]:
        if anchors is None:
            return []
        return [anchors] if isinstance(anchors, Tuple) else list(anchors)

    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        self.emitted.append(Emitted(list(values), stream, self._anchors(anchors)))

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        self.emitted.append(Emitted(list(values), stream, self._anchors(anchors), task))

    def ack(self, tuple: Tuple) -> None:
        self.acked.append(tuple)

    def fail(self, tuple: Tuple) -> None:
        self.failed.append(tuple)

    def reset_timeout(self, tuple: Tuple) -> None:
        pass

    def report_error(self, error: BaseException) -> None:
        self.errors.append(error)

    def values(self, stream: str = "default") -> list[list[Any]]:
        """The values emitted on ``stream``, in order."""
        return [e.values for e in self.emitted if e.stream == stream]


class MockBasicCollector(MockCollector):
    """The ``BasicOutputCollector`` of a BasicBolt's ``execute``: emits carry no anchors
    (the runtime would anchor them to the input)."""

    def emit(  # type: ignore[override]
        self, values: Sequence[Any], stream: str = "default"
    ) -> None:
        self.emitted.append(Emitted(list(values), stream, []))

    def emit_direct(  # type: ignore[override]
        self, task: int, values: Sequence[Any], stream: str = "default"
    ) -> None:
        self.emitted.append(Emitted(list(values), stream, [], task))


def mock_context(
    component: str = "bolt",
    *,
    task_index: int = 0,
    parallelism: int = 1,
    topology: str = "test",
    clock: Any = None,
) -> TopologyContext:
    """A :class:`~statestream.TopologyContext` for ``prepare``/``open`` outside a
    runtime; :meth:`~statestream.TopologyContext.state` gives states of a fresh
    in-memory store."""
    from ._registry import open_provider

    provider = open_provider("memory", {"name": f"mock-context-{id(object())}-{component}"})
    tasks = list(range(parallelism))
    return TopologyContext(
        topology,
        component,
        task_index,
        task_index,
        {component: tasks},
        {},
        provider.get_state,
        clock,
    )


def memory_state(name: str = "state") -> KeyValueState:
    """An empty KeyValueState of a fresh in-memory store, for a stateful bolt's
    ``init_state`` in a unit test (``put``, then ``prepare``/``commit`` as a
    checkpoint would)."""
    return mock_context(name).state()
