"""The bolt wrappers that run the bolt-side protocols, added by ``TopologyBuilder.build()``.

As Storm's builder does, ``build()`` wraps every bolt in the executor that
runs its protocol, so a runtime only moves tuples and calls ``execute``:

* :class:`BasicBoltExecutor` turns a :class:`~statestream.BasicBolt` into a
  rich bolt: emits anchored to the input, the input acked when ``execute``
  returns and failed when it raises :class:`~statestream.FailedException`.
* :class:`CheckpointTupleForwarder` wraps every other bolt of a topology
  with stateful bolts: it acts on a checkpoint tuple once it has it from
  every upstream task (the barrier), forwards it downstream anchored to
  the round, and (exactly-once state) holds data while a PREPARE round is
  open, so no tuple emitted after the cut lands in the prepared txid.
* :class:`StatefulBoltExecutor` wraps a :class:`~statestream.StatefulBolt`:
  the forwarder's barrier, plus data held until INITSTATE, the bolt's acks
  held until the checkpoint that covers them commits (released then, their
  roots failed on ROLLBACK), the pre-prepare/pre-commit/pre-rollback hooks
  and the state actions, a failed action failing the round.

Wrapping order: ``CheckpointTupleForwarder(BasicBoltExecutor(bolt))`` for a
basic bolt in a stateful topology. ``unwrap(obj)`` gives the user's bolt.

What the wrappers need from a runtime is :class:`ExecutorCollector`: the
bolt collector plus four transport calls (hold this task's acks, take them,
send XOR values to the ackers, fail roots). A checkpoint tuple is one more
tuple on the ``$checkpoint`` stream; a runtime may give it a priority lane
and may leave data queued while :attr:`CheckpointTupleForwarder.paused` is
true (it would only be buffered here), but needs to know nothing else.

Pure: no threads, no I/O but the state's; table-tested in
``tests/unit/test_executors.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from mypy_extensions import mypyc_attr

from ._checkpoint import Action, Barrier
from ._components import (
    BasicBolt,
    Bolt,
    OutputCollector,
    OutputFieldsDeclarer,
    StatefulBolt,
    TopologyContext,
)
from ._errors import FailedException
from ._stateful import CHECKPOINT_STREAM, StatefulTaskProtocol
from ._tuple import Tuple

__all__ = [
    "BasicBoltExecutor",
    "CheckpointTupleForwarder",
    "ExecutorCollector",
    "StatefulBoltExecutor",
    "unwrap",
]


class ExecutorCollector(OutputCollector, Protocol):
    """What a runtime hands a wrapped bolt: the bolt collector plus the acker transport."""

    def hold_acks(self) -> None:
        """From now on keep this task's acks until :meth:`take_acks`, instead of
        sending them to the ackers."""
        ...

    def take_acks(self) -> list[tuple[int, int]]:
        """The acks kept since the last call, ``(root, XOR value)`` pairs (a root
        may come more than once), now forgotten here."""
        ...

    def send_acks(self, acks: Iterable[tuple[int, int]]) -> None:
        """Send ``(root, XOR value)`` pairs to the roots' ackers."""
        ...

    def fail_roots(self, roots: Iterable[int]) -> None:
        """Fail these tuple trees at their ackers (their spouts hear ``fail``)."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)
class _Wrapper(Bolt):
    """Delegates the component contract (streams, per-component config) to the wrapped bolt."""

    def __init__(self, bolt: Any) -> None:
        self.bolt = bolt

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit, because the compiled class cannot be rebuilt without its
        # __init__ argument. A wrapper is copied or pickled as built
        # (Topology.instantiate, Spark's shipping): the bolt, plus what a
        # Python subclass added (statestream.testing's crash points).
        return (type(self), (self.bolt,), getattr(self, "__dict__", None))

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.bolt.declare_output_fields(declarer)

    def component_configuration(self) -> dict[str, Any] | None:
        conf: dict[str, Any] | None = self.bolt.component_configuration()
        return conf

    def cleanup(self) -> None:
        self.bolt.cleanup()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.bolt!r})"


def unwrap(obj: Any) -> Any:
    """The user's component inside any wrappers."""
    while isinstance(obj, _Wrapper):
        obj = obj.bolt
    return obj


class NativeCollector:
    """A runtime's bolt collector that the compiled core calls directly (the local
    runtime's bolt tasks derive from it); any other collector is called as a
    Python object. Compiled, a call through this class is a C call rather
    than a Python call with its argument parsing, once per emitted word."""

    def emit_anchored(self, values: Sequence[Any], anchor: Tuple, stream: str = "default") -> None:
        raise NotImplementedError

    def ack(self, tup: Tuple) -> None:
        raise NotImplementedError


class _BasicCollector:
    """What a BasicBolt emits through: anchored to the input it is executing.

    Built by its :class:`BasicBoltExecutor` with what it emits through (the
    runtime's collector, its one-anchor emit, the compiled core's collector
    if it is one); :attr:`anchor` is the input being executed, which the
    executor points at each input in turn (Storm's
    ``BasicOutputCollector.setContext``) rather than making one per input.
    """

    __slots__ = ("_collector", "_emit", "_native", "anchor")

    def __init__(
        self,
        collector: OutputCollector,
        emit: Callable[..., None],
        native: NativeCollector | None,
        anchor: Tuple,
    ) -> None:
        self._collector = collector
        self._emit = emit
        self._native = native
        self.anchor = anchor

    def emit(self, values: Sequence[Any], stream: str = "default") -> None:
        native = self._native
        if native is not None:
            native.emit_anchored(values, self.anchor, stream)
        else:
            self._emit(values, self.anchor, stream)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default") -> None:
        self._collector.emit_direct(task, values, self.anchor, stream)

    def report_error(self, error: BaseException) -> None:
        self._collector.report_error(error)


@mypyc_attr(allow_interpreted_subclasses=True)
class BasicBoltExecutor(_Wrapper):
    """A :class:`~statestream.BasicBolt` as a rich bolt (Storm's ``BasicBoltExecutor``).

    ``execute`` runs the basic bolt with a collector whose emits are anchored
    to the input, then acks the input; a :class:`~statestream.FailedException`
    fails it instead. Any other exception propagates: the runtime reports it
    and fails the input.
    """

    bolt: BasicBolt

    def __init__(self, bolt: BasicBolt) -> None:
        super().__init__(bolt)

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        # A runtime may offer a fast path for the one-anchor emit (the hot path
        # of every splitting bolt); the plain emit does the same.
        self._emit_anchored = getattr(collector, "emit_anchored", collector.emit)
        self._ack = collector.ack
        self._native: NativeCollector | None = (
            collector if isinstance(collector, NativeCollector) else None
        )
        self._basic: _BasicCollector | None = None
        self.bolt.prepare(conf, context)

    def execute(self, tuple: Tuple) -> None:
        # One collector, pointed at each input in turn (as Storm's
        # BasicOutputCollector.setContext): no object made per input.
        basic = self._basic
        if basic is None:
            basic = self._basic = _BasicCollector(
                self.collector, self._emit_anchored, self._native, tuple
            )
        else:
            basic.anchor = tuple
        try:
            self.bolt.execute(tuple, basic)
        except FailedException:
            self.collector.fail(tuple)
            return
        native = self._native
        if native is not None:
            native.ack(tuple)
        else:
            self._ack(tuple)


@mypyc_attr(allow_interpreted_subclasses=True)
class CheckpointTupleForwarder(_Wrapper):
    """A bolt of a topology with stateful bolts: the checkpoint barrier and forwarding.

    A checkpoint tuple ``(txid, action)`` reaches this task once from each
    upstream task. When the last one arrives (:class:`~statestream._checkpoint.Barrier`)
    the task acts (:meth:`handle_checkpoint`: nothing for a plain bolt),
    emits the checkpoint downstream anchored to the whole round, and acks
    the round; if the action raised, the round is failed instead (the
    checkpoint spout recovers). Tuples of a round that a newer checkpoint
    superseded (the spout gave up on it) are acked as they are dropped.

    Data tuples go to the bolt, except while :attr:`paused` (exactly-once
    state: a PREPARE round is open), when they are buffered and executed
    once the round completes.
    """

    paused: bool = False
    """True while data tuples would only be buffered: a runtime may leave them queued."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        sources = frozenset(
            (src, tid)
            for src, stream in context.sources()
            if stream == CHECKPOINT_STREAM
            for tid in context.component_tasks(src)
        )
        self.barrier = Barrier(sources)
        self.aligning = context.exactly_once
        self._round: list[Tuple] = []
        self._buffered: list[Tuple] = []
        self.prepare_bolt(conf, context, collector)

    def prepare_bolt(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.bolt.prepare(conf, context, collector)

    def execute(self, tuple: Tuple) -> None:
        if tuple.origin.stream == CHECKPOINT_STREAM:
            self._on_checkpoint(tuple)
        elif self.paused:
            self._buffered.append(tuple)
        else:
            self.bolt.execute(tuple)

    def data_entry(self) -> Callable[[Tuple], None]:
        """What executes a data tuple while not :attr:`paused`: the wrapped bolt's
        ``data_entry()`` if it offers one (a windowed bolt's compiled entry), else
        its own ``execute``. A runtime that hands data over only while not paused
        (it checks :attr:`paused` first) may call it directly, a call less per tuple."""
        offer = getattr(self.bolt, "data_entry", None)
        execute: Callable[[Tuple], None] = offer() if offer is not None else self.bolt.execute
        return execute

    def batch_entry(self) -> Callable[[list[Tuple]], None] | None:
        """The wrapped bolt's batch entry, if it offers one (its ``batch_entry()``), under
        the same condition as :meth:`data_entry`. A batch entry takes a list of data
        tuples in order and acks none of them: it is all or nothing (if it raises,
        it took none), and the runtime acks each tuple when it returns (see
        :meth:`statestream.connectors.TwoPhaseSink.execute_batch`)."""
        offer = getattr(self.bolt, "batch_entry", None)
        batch: Callable[[list[Tuple]], None] | None = offer() if offer is not None else None
        return batch

    def handle_checkpoint(self, action: Action, txid: int) -> None:
        """What this task does when a round completes: a plain bolt only forwards."""

    def _update_paused(self) -> None:
        current = self.barrier.current
        self.paused = self.aligning and current is not None and current.action is Action.PREPARE

    def _on_checkpoint(self, tup: Tuple) -> None:
        txid, name = tup.values
        action = Action(name)
        self._round.append(tup)
        complete = self.barrier.arrive((tup.origin.component, tup.origin.task), action, txid)
        self._update_paused()
        if not complete:
            # A newer checkpoint may have superseded the PREPARE that paused us.
            self._run_buffered()
            return
        this_round = [t for t in self._round if t.values[0] == txid and t.values[1] == name]
        stale = [t for t in self._round if not (t.values[0] == txid and t.values[1] == name)]
        self._round = []
        # A superseded round's tree failed upstream already: acking it only
        # settles this task's part.
        self._ack_round(stale)
        try:
            self.handle_checkpoint(action, txid)
        except Exception as exc:
            self.collector.report_error(exc)
            for t in this_round:
                self.collector.fail(t)
        else:
            self.collector.emit([txid, name], this_round, CHECKPOINT_STREAM)
            self._ack_round(this_round)
        self._update_paused()
        self._run_buffered()

    def _ack_round(self, tuples: list[Tuple]) -> None:
        for t in tuples:
            self.collector.ack(t)

    def _run_buffered(self) -> None:
        """Execute the data held while paused; an error fails that tuple only."""
        while self._buffered and not self.paused:
            held, self._buffered = self._buffered, []
            for i, t in enumerate(held):
                if self.paused:  # a checkpoint executed within paused us again
                    self._buffered = held[i:] + self._buffered
                    return
                try:
                    self.bolt.execute(t)
                except FailedException:
                    self.collector.fail(t)
                except Exception as exc:
                    self.collector.report_error(exc)
                    self.collector.fail(t)


@mypyc_attr(allow_interpreted_subclasses=True)
class StatefulBoltExecutor(CheckpointTupleForwarder):
    """A :class:`~statestream.StatefulBolt`'s task side of checkpointing.

    On top of the forwarder: data is held until INITSTATE (and again after
    a ROLLBACK until the next INITSTATE); the bolt's acks are kept
    (:meth:`ExecutorCollector.hold_acks`) and handed to the protocol at each
    checkpoint, released when the checkpoint covering them commits and
    their roots failed when it rolls back, so a tuple whose effect was not
    committed is replayed; the round's action runs the bolt's hook and then
    the state operation (:class:`~statestream._stateful.StatefulTaskProtocol`).
    The state is opened from the context at the first checkpoint.
    """

    bolt: StatefulBolt
    collector: ExecutorCollector

    def __init__(self, bolt: StatefulBolt) -> None:
        super().__init__(bolt)

    def prepare_bolt(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.protocol = StatefulTaskProtocol(self.bolt)
        self.state: Any = None
        self.paused = True  # until INITSTATE
        self.collector.hold_acks()
        self.bolt.prepare(conf, context, collector)

    def _update_paused(self) -> None:
        super()._update_paused()
        self.paused = self.paused or not self.protocol.ready

    def handle_checkpoint(self, action: Action, txid: int) -> None:
        if self.state is None:
            self.state = self.context.state()
        self.protocol.hold(self.collector.take_acks())
        release, fail = self.protocol.act(self.state, action, txid)
        if release:
            self.collector.send_acks(release)
        if fail:
            self.collector.fail_roots(fail)

    def _ack_round(self, tuples: list[Tuple]) -> None:
        # This task's acks are held for a commit; a checkpoint tuple's are not.
        if not tuples:
            return
        held = self.collector.take_acks()
        for t in tuples:
            self.collector.ack(t)
        self.collector.send_acks(self.collector.take_acks())
        if held:
            self.protocol.hold(held)

    @property
    def ready(self) -> bool:
        """Whether INITSTATE has run (data is executed), as the protocol says."""
        return self.protocol.ready


def wrap(obj: Any, checkpointed: bool) -> Any:
    """The executor chain ``build()`` puts around a bolt prototype (a bolt taken
    from a built topology is unwrapped first)."""
    obj = unwrap(obj)
    if isinstance(obj, StatefulBolt):
        return StatefulBoltExecutor(obj)
    if isinstance(obj, BasicBolt):
        obj = BasicBoltExecutor(obj)
    return CheckpointTupleForwarder(obj) if checkpointed else obj
