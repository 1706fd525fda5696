"""The embedded runtime: one process, one scheduler thread, N tasks per component.

Why one thread: Python's GIL lets only one thread run bytecode at a time, so
threads per task would add lock and hand-off costs without adding
parallelism. Instead a cooperative scheduler moves tuples between per-task
deques and calls each task in turn, bolts before spouts, sources before their
subscribers. Backpressure falls out of the schedule: a spout is polled only
while the queues it feeds are below ``topology.executor.receive.buffer.size``,
and a bolt stops draining while a queue it feeds is full, so a slow bolt slows
the spout and memory stays flat. ``next_tuple`` and ``execute`` must
therefore not block (Storm asks the same of ``nextTuple``).

The runtime is a transport and a scheduler only. Acking lives in
:mod:`statestream._acker` (the ledger) and is reached through
:class:`_Acking`; this module only delivers the messages.
"""

from __future__ import annotations

import logging
import random
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import xxhash

from .._acker import AckerLedger, acker_task_for, new_id
from .._checkpoint import Action, Barrier
from .._clock import Clock, SystemClock
from .._components import BasicBolt, Bolt, Spout, TopologyContext
from .._errors import ConfigError, FailedException, ReliabilityError, TupleError
from .._rotating import RotatingMap
from .._routing import custom_choose, stable_hash
from .._stateful import (
    CHECKPOINT_SPOUT,
    CHECKPOINT_STREAM,
    CheckpointSpout,
    HeldAcks,
    StatefulTaskProtocol,
)
from .._topology import ComponentSpec, Topology
from .._tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Origin, Tuple, check_emit

__all__ = ["ErrorReport", "LocalRuntime", "RunResult", "TaskMetrics"]

log = logging.getLogger("statestream")

_xxh3 = xxhash.xxh3_64_intdigest
_getrandbits = random.getrandbits

# Route kinds, as small ints so the emit loop compares cheaply.
_SHUFFLE, _FIELDS1, _FIELDSN, _GLOBAL, _ALL, _DIRECT, _CUSTOM = range(7)
_KIND = {
    "shuffle": _SHUFFLE,
    "none": _SHUFFLE,
    "global": _GLOBAL,
    "all": _ALL,
    "direct": _DIRECT,
    "custom": _CUSTOM,
}

# Spout pending / acker ledgers expire an entry between (B-1) and B rotation
# periods after it was last touched; with the period at timeout/(B-1) a tree
# fails between 1x and 1.5x topology.message.timeout.secs.
_TIMEOUT_BUCKETS = 3
_SPOUT_BATCH = 64


@dataclass
class ErrorReport:
    """An exception raised by user code, as the runtime recorded it."""

    component: str
    task_index: int
    tuple: str
    error: str
    traceback: str


@dataclass
class TaskMetrics:
    component: str
    task_index: int
    emitted: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    errors: int = 0
    queued: int = 0


@dataclass
class RunResult:
    """What a run did: per-component totals, errors, and why it stopped."""

    components: dict[str, TaskMetrics]
    errors: list[ErrorReport]
    elapsed: float
    reason: str
    counters: dict[str, int] = field(default_factory=dict)


class _Route:
    """One subscriber (component) of one (task, stream): where its tuples go."""

    __slots__ = (
        "custom",
        "inboxes",
        "index_of_task",
        "key",
        "kind",
        "n",
        "rr",
        "target",
        "task_ids",
    )

    def __init__(self, target: ComponentSpec, grouping_kind: int, inboxes: list[deque[Any]]):
        self.target = target.id
        self.kind = grouping_kind
        self.inboxes = inboxes
        self.n = len(inboxes)
        self.key: Any = None
        self.rr = 0
        self.custom: Any = None
        self.index_of_task: dict[int, int] = {}
        self.task_ids: list[int] = []

    def choose(self, values: Sequence[Any], direct_task: int | None) -> list[int]:
        """Target task indexes for one tuple (the general, slower path)."""
        kind = self.kind
        if kind == _FIELDS1:
            return [stable_hash(values[self.key]) % self.n]
        if kind == _FIELDSN:
            return [stable_hash([values[i] for i in self.key]) % self.n]
        if kind == _SHUFFLE:
            i = self.rr
            self.rr = i + 1 if i + 1 < self.n else 0
            return [i]
        if kind == _GLOBAL:
            return [0]
        if kind == _ALL:
            return list(range(self.n))
        if kind == _DIRECT:
            idx = self.index_of_task.get(direct_task)  # type: ignore[arg-type]
            return [] if idx is None else [idx]
        return custom_choose(self.custom, values, self.n)


class _Task:
    """State common to every task: identity, counters, routes out."""

    def __init__(self, rt: LocalRuntime, spec: ComponentSpec, task_index: int, task_id: int):
        self.rt = rt
        self.spec = spec
        self.component = spec.id
        self.task_index = task_index
        self.task_id = task_id
        self.emitted = 0
        self.executed = 0
        self.acked = 0
        self.failed = 0
        self.errors = 0
        self.tracking = rt.acking is not None  # acking on: anchored tuples get edge ids
        # stream -> (origin, arity, routes, is_direct)
        self.streams: dict[str, tuple[Origin, int, list[_Route], bool]] = {}
        self.out_queues: list[deque[Any]] = []

    def blocked(self) -> bool:
        cap = self.rt.capacity
        return any(len(q) >= cap for q in self.out_queues)

    def report(self, exc: BaseException, tup: Any = None) -> None:
        self.errors += 1
        self.rt.report_error(self, exc, tup)

    def _stream_entry(self, stream: str, values: Sequence[Any], direct: bool) -> Any:
        check_emit(self.component, self.task_index, stream, values, self.spec.outputs, direct)
        return self.streams[stream]

    def _check_direct(self, routes: list[_Route], task: int) -> None:
        if not any(task in r.index_of_task for r in routes):
            valid = sorted(t for r in routes for t in r.index_of_task)
            raise TupleError(
                f"component {self.component!r} emit_direct to task {task}, which does not "
                f"subscribe to that stream (subscribed tasks: {valid}); pick one from "
                "context.component_tasks(<bolt>)"
            )

    def deliver_untracked(
        self, origin: Origin, routes: list[_Route], values: Sequence[Any], direct: int | None
    ) -> None:
        # The hot path. One tuple object per target task, never shared: a
        # receiving task marks its input ``done`` when it acks it, so a shared
        # object would make the second receiver's ack look like a double ack.
        for r in routes:
            kind = r.kind
            if kind == _FIELDS1:
                v = values[r.key]
                h = _xxh3(v.encode()) if type(v) is str else stable_hash(v)
                r.inboxes[h % r.n].append(Tuple(values, origin))
            elif kind == _SHUFFLE:
                i = r.rr
                r.rr = i + 1 if i + 1 < r.n else 0
                r.inboxes[i].append(Tuple(values, origin))
            else:
                inboxes = r.inboxes
                for i in r.choose(values, direct):
                    inboxes[i].append(Tuple(values, origin))

    def deliver_tracked(
        self,
        origin: Origin,
        routes: list[_Route],
        values: Sequence[Any],
        direct: int | None,
        roots: Mapping[int, int],
        anchors: Sequence[Tuple],
    ) -> int:
        """Deliver one tuple per target task, each with a fresh edge id.

        ``roots`` maps each root the new tuple joins onto the parity of the
        number of anchors in that root's tree: every anchor XORs the new edge
        into its ack value, so for a root reached through two anchors the edge
        must cancel in the new tuple too (as in Storm). A spout passes
        ``{root: 1}`` and no anchors. Returns the XOR of the edge ids created.
        """
        created = 0
        one_root = len(roots) == 1
        if one_root:
            ((root, parity),) = roots.items()
        for r in routes:
            kind = r.kind
            # The two common groupings inline; the rest through choose().
            if kind == _FIELDS1:
                v = values[r.key]
                targets: Sequence[int] = (
                    (_xxh3(v.encode()) if type(v) is str else stable_hash(v)) % r.n,
                )
            elif kind == _SHUFFLE:
                i = r.rr
                r.rr = i + 1 if i + 1 < r.n else 0
                targets = (i,)
            else:
                targets = r.choose(values, direct)
            inboxes = r.inboxes
            for i in targets:
                edge = _getrandbits(64) or new_id()
                created ^= edge
                if one_root:
                    tup = Tuple(values, origin, None, r.task_ids[i], root, edge if parity else 0)
                else:
                    ids = {root: edge if p else 0 for root, p in roots.items()}
                    tup = Tuple(values, origin, ids, r.task_ids[i])
                inboxes[i].append(tup)
                for a in anchors:
                    a.ack_val ^= edge
        return created


class _Acking:
    """The runtime's side of the acker: routes messages to ledgers, outcomes to spouts."""

    def __init__(self, rt: LocalRuntime, n_ackers: int) -> None:
        self.rt = rt
        self.ledgers = [AckerLedger(_TIMEOUT_BUCKETS) for _ in range(n_ackers)]
        self.n = n_ackers
        self.timeouts = 0

    def _route(self, outcome: Any) -> None:
        if outcome is None:
            return
        spout = self.rt.spout_by_task.get(outcome.spout_task)
        if spout is not None:
            spout.completions.append((outcome.root, outcome.kind == "ack"))

    def init(self, root: int, spout_task: int, ack_val: int) -> None:
        self._route(self.ledgers[acker_task_for(root, self.n)].init(root, spout_task, ack_val))

    def ack(self, root: int, xor_val: int) -> None:
        outcome = self.ledgers[root % self.n].ack(root, xor_val)  # acker_task_for, inlined
        if outcome is not None:
            self._route(outcome)

    def fail(self, root: int) -> None:
        self._route(self.ledgers[acker_task_for(root, self.n)].fail(root))

    def reset_timeout(self, root: int) -> None:
        self.ledgers[acker_task_for(root, self.n)].reset_timeout(root)

    def tick(self) -> None:
        # Expired ledger entries are dropped; the spout's own pending map
        # fails the message (it must, since a lost ledger cannot time out).
        for ledger in self.ledgers:
            self.timeouts += len(ledger.tick())

    def pending(self) -> int:
        return sum(len(ledger) for ledger in self.ledgers)


class SpoutTask(_Task):
    """Runs one spout task: polls ``next_tuple``, tracks its message ids."""

    def __init__(self, rt: LocalRuntime, spec: ComponentSpec, task_index: int, task_id: int):
        super().__init__(rt, spec, task_index, task_id)
        self.spout: Spout = rt.topology.instantiate(spec.id)
        self.completions: deque[tuple[int, bool]] = deque()
        self.pending: RotatingMap[int, Any] = RotatingMap(_TIMEOUT_BUCKETS, self._expired)
        self.max_pending: int | None = rt.conf_for(spec).get("topology.max.spout.pending")
        self.timed_out = 0
        self.system = False  # the checkpoint spout: not a data source

    # -- the collector the spout sees ------------------------------------
    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> None:
        entry = self.streams.get(stream)
        if entry is None or len(values) != entry[1] or entry[3]:
            entry = self._stream_entry(stream, values, False)  # raises the right error
        self._emit(entry[0], entry[2], values, msg_id, None)

    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = "default"
    ) -> None:
        origin, _, routes, _ = self._stream_entry(stream, values, True)
        self._check_direct(routes, task)
        self._emit(origin, routes, values, msg_id, task)

    def report_error(self, error: BaseException) -> None:
        self.report(error)

    def _emit(
        self,
        origin: Origin,
        routes: list[_Route],
        values: Sequence[Any],
        msg_id: Any,
        direct: int | None,
    ) -> None:
        self.emitted += 1
        acking = self.rt.acking
        if msg_id is None:
            self.deliver_untracked(origin, routes, values, direct)
        elif acking is None:
            # At-most-once: nothing is tracked, the spout hears "ack" at once.
            self.deliver_untracked(origin, routes, values, direct)
            self.completions.append((msg_id, True))
            self.rt.untracked_acks += 1
        else:
            root = new_id()
            self.pending.put(root, msg_id)
            created = self.deliver_tracked(origin, routes, values, direct, {root: 1}, ())
            acking.init(root, self.task_id, created)

    # -- scheduling ---------------------------------------------------------
    def _expired(self, root: int, msg_id: Any) -> None:
        self.timed_out += 1
        self._call_fail(msg_id)

    def _call_fail(self, msg_id: Any) -> None:
        self.failed += 1
        try:
            self.spout.fail(msg_id)
        except Exception as exc:
            self.report(exc, f"fail({msg_id!r})")

    def _drain_completions(self) -> None:
        completions = self.completions
        spout = self.spout
        untracked = self.rt.acking is None
        while completions:
            key, ok = completions.popleft()
            msg_id: Any
            if untracked:
                msg_id = key
            else:
                msg_id = self.pending.pop(key, _MISSING)
                if msg_id is _MISSING:
                    continue  # already timed out and failed
            if ok:
                self.acked += 1
                try:
                    spout.ack(msg_id)
                except Exception as exc:
                    self.report(exc, f"ack({msg_id!r})")
            else:
                self._call_fail(msg_id)

    def poll(self) -> bool:
        """Deliver completions, then call ``next_tuple`` while there is room."""
        busy = bool(self.completions)
        if busy:
            self._drain_completions()
        max_pending = self.max_pending
        next_tuple = self.spout.next_tuple
        start = self.emitted
        for _ in range(_SPOUT_BATCH):
            if max_pending is not None and len(self.pending) >= max_pending:
                break
            if self.out_queues and self.blocked():
                break
            before = self.emitted
            try:
                next_tuple()
            except Exception as exc:
                self.report(exc, "next_tuple()")
                break
            if self.emitted == before:
                break
        return busy or self.emitted != start

    def idle(self) -> bool:
        return not self.completions and not len(self.pending) and self.spout.exhausted()


_MISSING = object()


class BoltTask(_Task):
    """Runs one bolt task: drains its inbox through ``execute``; its collector."""

    def __init__(self, rt: LocalRuntime, spec: ComponentSpec, task_index: int, task_id: int):
        super().__init__(rt, spec, task_index, task_id)
        self.inbox: deque[Tuple] = deque()
        self.bolt: Bolt | BasicBolt = rt.topology.instantiate(spec.id)
        self.basic = isinstance(self.bolt, BasicBolt)
        self._current: Tuple | None = None  # the input a BasicBolt is executing
        self.ack_buf: dict[int, int] = {}  # root -> XOR of acks not yet sent to the acker
        self.execute: Callable[[Tuple], None] = (
            self._execute_basic if self.basic else self.bolt.execute
        )
        # Checkpoint tuples arrive on their own queue: they must get through
        # while data waits (before INITSTATE, or while a full queue holds it).
        self.control: deque[Tuple] = deque()
        self.barrier: Barrier | None = None
        self.aligning = False  # exactly-once state: hold data while a PREPARE round is open
        self._round: list[Tuple] = []

    # -- the collector the bolt sees -------------------------------------
    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        if type(anchors) is Tuple:
            self.emit_anchored(values, anchors, stream)
            return
        entry = self.streams.get(stream)
        if entry is None or len(values) != entry[1] or entry[3]:
            entry = self._stream_entry(stream, values, False)  # raises the right error
        self._emit(entry[0], entry[2], values, anchors, None)

    def emit_anchored(self, values: Sequence[Any], anchor: Tuple, stream: str = "default") -> None:
        """``emit`` anchored to one input: the hot path of every splitting or mapping bolt.

        The common case (a declared stream, acking on, an input in one tree,
        shuffle or one-field routes) is inlined here; anything else, errors
        included, takes the general path through :meth:`_emit`.
        """
        entry = self.streams.get(stream)
        root = anchor.root
        if (
            entry is None
            or len(values) != entry[1]
            or entry[3]
            or not root
            or anchor.done
            or not self.tracking
        ):
            if entry is None or len(values) != entry[1] or entry[3]:
                entry = self._stream_entry(stream, values, False)  # raises the right error
            self._emit(entry[0], entry[2], values, anchor, None)
            return
        self.emitted += 1
        origin = entry[0]
        created = 0
        for r in entry[2]:
            kind = r.kind
            if kind == _FIELDS1:
                v = values[r.key]
                i = (_xxh3(v.encode()) if type(v) is str else stable_hash(v)) % r.n
            elif kind == _SHUFFLE:
                i = r.rr
                r.rr = i + 1 if i + 1 < r.n else 0
            else:
                for i in r.choose(values, None):
                    edge = _getrandbits(64) or new_id()
                    created ^= edge
                    r.inboxes[i].append(Tuple(values, origin, None, r.task_ids[i], root, edge))
                continue
            edge = _getrandbits(64) or new_id()
            created ^= edge
            r.inboxes[i].append(Tuple(values, origin, None, r.task_ids[i], root, edge))
        anchor.ack_val ^= created

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        origin, _, routes, _ = self._stream_entry(stream, values, True)
        self._check_direct(routes, task)
        self._emit(origin, routes, values, anchors, task)

    def _emit(
        self,
        origin: Origin,
        routes: list[_Route],
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None,
        direct: int | None,
    ) -> None:
        self.emitted += 1
        if anchors is None or self.rt.acking is None:
            self.deliver_untracked(origin, routes, values, direct)
            return
        if type(anchors) is Tuple:
            # One anchor: every root it belongs to has parity 1.
            if anchors.done:
                self._anchor_done(anchors)
            ids = anchors.trees()
            if not ids:
                self.deliver_untracked(origin, routes, values, direct)
                return
            self.deliver_tracked(origin, routes, values, direct, dict.fromkeys(ids, 1), (anchors,))
            return
        if isinstance(anchors, Tuple):
            anchors = (anchors,)
        roots: dict[int, int] = {}  # root -> parity of anchors in its tree
        for a in anchors:
            if a.done:
                self._anchor_done(a)
            for root in a.trees():
                roots[root] = roots.get(root, 0) ^ 1
        if not roots:
            self.deliver_untracked(origin, routes, values, direct)
            return
        self.deliver_tracked(origin, routes, values, direct, roots, anchors)

    def _anchor_done(self, a: Tuple) -> None:
        raise ReliabilityError(
            f"bolt {self.component!r} task {self.task_index} anchored an emit to {a!r}, "
            "which it already acked or failed; emit before acking the input"
        )

    def _foreign(self, tup: Tuple, what: str) -> None:
        owner = self.rt.task_names.get(tup.owner, f"task {tup.owner}")
        raise ReliabilityError(
            f"bolt {self.component!r} task {self.task_index} tried to {what} {tup!r}, which was "
            f"delivered to {owner}; only the task that received a tuple may ack or fail it"
        )

    def ack(self, tup: Tuple) -> None:
        if tup.done or (tup.owner != self.task_id and tup.owner >= 0):
            self._misuse(tup, "ack")
        tup.done = True
        self.acked += 1
        # Acks are XOR-combined per root and sent once per drain (see
        # flush_acks): XOR is associative and commutative, so the acker sees
        # the same sums with far fewer messages.
        root = tup.root
        if root:
            buf = self.ack_buf
            buf[root] = buf.get(root, 0) ^ tup.edge ^ tup.ack_val
        elif tup.anchors:
            v = tup.ack_val
            buf = self.ack_buf
            for root, edge in tup.anchors.items():
                buf[root] = buf.get(root, 0) ^ edge ^ v

    def _misuse(self, tup: Tuple, what: str) -> None:
        """Raise the ReliabilityError for acking/failing a tuple twice or another task's."""
        if tup.owner != self.task_id and tup.owner >= 0:
            self._foreign(tup, what)
        raise ReliabilityError(
            f"bolt {self.component!r} task {self.task_index} acked or failed {tup!r} twice; "
            "ack or fail each input exactly once"
        )

    def flush_acks(self) -> None:
        buf = self.ack_buf
        acking = self.rt.acking
        if acking is not None:
            for root, xor_val in buf.items():
                acking.ack(root, xor_val)
        buf.clear()

    def fail(self, tup: Tuple) -> None:
        if tup.done or (tup.owner != self.task_id and tup.owner >= 0):
            self._misuse(tup, "fail")
        tup.done = True
        self.failed += 1
        anchors = tup.trees()
        acking = self.rt.acking
        if anchors and acking is not None:
            if self.ack_buf:
                self.flush_acks()
            for root in anchors:
                acking.fail(root)

    def reset_timeout(self, tup: Tuple) -> None:
        anchors = tup.trees()
        acking = self.rt.acking
        if anchors and acking is not None:
            for root in anchors:
                acking.reset_timeout(root)
                for spout in self.rt.spouts:
                    if root in spout.pending:
                        spout.pending.put(root, spout.pending.get(root))

    def report_error(self, error: BaseException) -> None:
        self.report(error)

    # -- the BasicBolt collector -------------------------------------------
    def _execute_basic(self, tup: Tuple) -> None:
        self._current = tup
        try:
            self.bolt.execute(tup, _BasicCollector(self, tup))  # type: ignore[call-arg]
        except FailedException:
            if not tup.done:
                self.fail(tup)
            return
        if not tup.done:
            self.ack(tup)

    # -- scheduling ---------------------------------------------------------
    def drain(self) -> bool:
        """Handle checkpoint tuples, then execute queued tuples until the inbox is
        empty or a downstream queue is full. True if anything was processed."""
        did = False
        if self.control:
            self._drain_control()
            did = True
        if self.inbox and self.ready and not (self.aligning and self._prepare_open()):
            before = self.executed
            self._drain()
            # A bolt blocked by a full downstream queue did nothing: saying so
            # lets the loop sleep (and a fake clock advance) instead of spinning.
            did = did or self.executed != before
        if self.ack_buf:
            self.flush_acks()
        return did

    @property
    def ready(self) -> bool:
        """May data tuples be executed now? (A stateful task waits for INITSTATE.)"""
        return True

    def _prepare_open(self) -> bool:
        """A PREPARE came from some upstream tasks, not all: the data queued now was
        emitted after the spouts' positions, so it must wait for the prepare."""
        current = self.barrier.current if self.barrier is not None else None
        return current is not None and current.action is Action.PREPARE

    # -- checkpoints: the forwarder (StatefulBoltTask adds the state actions) --
    def _drain_control(self) -> None:
        control = self.control
        while control:
            tup = control.popleft()
            try:
                self._on_checkpoint(tup)
            except Exception as exc:
                self.report(exc, tup)

    def _on_checkpoint(self, tup: Tuple) -> None:
        txid, action_name = tup.values
        action = Action(action_name)
        assert self.barrier is not None
        self._round.append(tup)
        if not self.barrier.arrive((tup.origin.component, tup.origin.task), action, txid):
            return
        this_round = [t for t in self._round if t.values[0] == txid and t.values[1] == action_name]
        for stale in self._round:
            if stale not in this_round and not stale.done:
                self._ack_now(stale)  # a round abandoned upstream; its tree failed already
        self._round = []
        try:
            self.checkpoint_action(action, txid)
        except Exception as exc:
            self.report(exc, f"checkpoint {action.value}({txid})")
            for t in this_round:
                self.fail(t)
            return
        self.emit([txid, action_name], this_round, CHECKPOINT_STREAM)
        for t in this_round:
            self._ack_now(t)

    def checkpoint_action(self, action: Action, txid: int) -> None:
        """What this task does when a checkpoint round completes: a plain bolt only forwards."""

    def _ack_now(self, tup: Tuple) -> None:
        """Ack straight to the acker (checkpoint tuples are never held)."""
        tup.done = True
        anchors = tup.trees()
        acking = self.rt.acking
        if anchors and acking is not None:
            v = tup.ack_val
            for root, edge in anchors.items():
                acking.ack(root, edge ^ v)

    def _drain(self) -> None:
        inbox = self.inbox
        execute = self.execute
        outs = self.out_queues
        cap = self.rt.capacity
        n = 0
        tup: Tuple | None = None
        try:
            if not outs:
                while inbox:
                    tup = inbox.popleft()
                    n += 1
                    execute(tup)
            elif len(outs) == 1:
                q = outs[0]
                while inbox and len(q) < cap:
                    tup = inbox.popleft()
                    n += 1
                    execute(tup)
            else:
                while inbox and not self.blocked():
                    tup = inbox.popleft()
                    n += 1
                    execute(tup)
        except FailedException:
            self.executed += n
            if tup is not None and not tup.done:
                self.fail(tup)
            return
        except Exception as exc:
            self.executed += n
            self.report(exc, tup)
            if tup is not None and not tup.done and self.rt.acking is not None:
                self.fail(tup)
            return
        self.executed += n


class StatefulBoltTask(BoltTask):
    """A stateful bolt's task: the transport around :class:`StatefulTaskProtocol`
    (data waits until INITSTATE, acks are held until a commit covers them)."""

    def __init__(self, rt: LocalRuntime, spec: ComponentSpec, task_index: int, task_id: int):
        super().__init__(rt, spec, task_index, task_id)
        self.protocol = StatefulTaskProtocol(self.bolt)  # type: ignore[arg-type]
        self.state: Any = None

    @property
    def ready(self) -> bool:
        return self.protocol.ready

    @property
    def held(self) -> HeldAcks:
        return self.protocol.held

    def flush_acks(self) -> None:
        self.protocol.hold(self.ack_buf)
        self.ack_buf.clear()

    def checkpoint_action(self, action: Action, txid: int) -> None:
        if self.state is None:
            self.state = self.rt.open_state(f"{self.component}-{self.task_index}")
        if self.ack_buf:
            self.flush_acks()
        release, fail = self.protocol.act(self.state, action, txid)
        acking = self.rt.acking
        assert acking is not None
        for root, xor_val in release.items():
            acking.ack(root, xor_val)
        for root in fail:
            acking.fail(root)


def _task_key(task: _Task) -> str:
    return f"{task.component}-{task.task_index}"


class _BasicCollector:
    """What a BasicBolt emits through: anchored to its current input."""

    __slots__ = ("_input", "_task")

    def __init__(self, task: BoltTask, input_tuple: Tuple) -> None:
        self._task = task
        self._input = input_tuple

    def emit(self, values: Sequence[Any], stream: str = "default") -> None:
        self._task.emit_anchored(values, self._input, stream)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default") -> None:
        self._task.emit_direct(task, values, self._input, stream)

    def report_error(self, error: BaseException) -> None:
        self._task.report(error, self._input)


class LocalRuntime:
    """Run a topology in this process.

    >>> rt = LocalRuntime(topology, config)
    >>> result = rt.run(until_idle=True)

    ``config`` is a :class:`statestream.Config` or a plain mapping of keys
    (merged over the defaults). ``clock`` is where time comes from; pass a
    :class:`statestream.testing.FakeClock` to make timeouts instant in tests.
    """

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        from .._run import as_config

        self.topology = topology
        self.config = as_config(config, topology_prefixes=(topology.name,))
        self.clock: Clock = clock or SystemClock()
        self.capacity = int(self.config["topology.executor.receive.buffer.size"])
        self.idle_sleep = self.config["topology.sleep.spout.wait.strategy.time.ms"] / 1000.0
        n_ackers = int(self.config["topology.acker.executors"])
        self.acking: _Acking | None = _Acking(self, n_ackers) if n_ackers > 0 else None
        self.errors: deque[ErrorReport] = deque(maxlen=1000)
        self.untracked_acks = 0
        self._stop = False
        self._started = False
        self._closed = False
        self._start_time = 0.0
        self.spouts: list[SpoutTask] = []
        self.bolts: list[BoltTask] = []
        self.spout_by_task: dict[int, SpoutTask] = {}
        self.tasks_of: dict[str, list[_Task]] = {}
        self._timers: list[list[Any]] = []  # [next_due, period, callback]
        self.provider: Any = None
        self._checkpoint_task: SpoutTask | None = None
        self._states: dict[str, Any] = {}
        if topology.has_stateful_bolts and self.acking is None:
            raise ConfigError(
                f"topology {topology.name!r} has stateful bolts, which need acking to know when "
                "a checkpoint has passed every bolt; set topology.acker.executors to 1 or more"
            )
        self._build()
        # Exactly-once state (DESIGN.md §4): before each PREPARE the data
        # spouts stop and every queue drains (a standstill: each bolt's state
        # then reflects exactly the tuples emitted before the spouts'
        # positions), the positions are stored with PREPARING(t), and a bolt
        # holds its data while a PREPARE round is open, so no tuple emitted
        # after the positions lands in txid t. A restart restores t and seeks
        # the spouts to t's positions: nothing is counted twice.
        self.exactly_once = (
            bool(self.config["statestream.state.exactly.once"])
            and self._checkpoint_spout is not None
        )
        self._quiescing = False
        self.data_spouts = [s for s in self.spouts if not s.system]
        if self.exactly_once:
            assert self._checkpoint_spout is not None
            self._checkpoint_spout.gated = True
            for bolt in self.bolts:
                bolt.aligning = True
            missing = [
                f"{s.component!r} ({type(s.spout).__name__})"
                for s in self.data_spouts
                if not (
                    callable(getattr(s.spout, "position", None))
                    and callable(getattr(s.spout, "seek", None))
                )
            ]
            if missing:
                raise ConfigError(
                    f"statestream.state.exactly.once is on, but spout {', '.join(missing)} "
                    "cannot rewind: give it position() and seek(position) (see FileSpout), "
                    "or turn exactly-once state off for Storm's at-least-once"
                )

    @property
    def _checkpoint_spout(self) -> CheckpointSpout | None:
        task = self._checkpoint_task
        return None if task is None else task.spout  # type: ignore[return-value]

    # -- wiring ---------------------------------------------------------------
    def conf_for(self, spec: ComponentSpec) -> Mapping[str, Any]:
        """The topology config with the component's own keys on top."""
        if not spec.config:
            return self.config
        return self.config.with_overrides(spec.config, source=f"component {spec.id!r}")

    def _build(self) -> None:
        topo = self.topology
        next_id = 0
        component_tasks: dict[str, list[int]] = {}
        for cid in topo.topological_order():
            spec = topo.components[cid]
            component_tasks[cid] = list(range(next_id, next_id + spec.parallelism))
            next_id += spec.parallelism
        for cid in topo.topological_order():
            spec = topo.components[cid]
            for i, tid in enumerate(component_tasks[cid]):
                task: _Task
                if spec.is_spout:
                    task = SpoutTask(self, spec, i, tid)
                    task.system = cid == CHECKPOINT_SPOUT
                    if task.system:
                        self._checkpoint_task = task
                    self.spouts.append(task)
                    self.spout_by_task[tid] = task
                elif spec.is_stateful:
                    task = StatefulBoltTask(self, spec, i, tid)
                    self.bolts.append(task)
                else:
                    task = BoltTask(self, spec, i, tid)
                    self.bolts.append(task)
                self.tasks_of.setdefault(cid, []).append(task)
        self.component_tasks = component_tasks
        self.task_names = {
            tid: f"{cid}[{i}]"
            for cid, tids in component_tasks.items()
            for i, tid in enumerate(tids)
        }
        outputs = {
            cid: {s: f for s, (f, _) in spec.outputs.items()}
            for cid, spec in topo.components.items()
        }
        self._output_fields = outputs
        for cid, tasks in self.tasks_of.items():
            spec = topo.components[cid]
            for task in tasks:
                self._wire(task, spec)

    def _wire(self, task: _Task, spec: ComponentSpec) -> None:
        outs: list[deque[Any]] = []
        for stream, (fields, direct) in spec.outputs.items():
            routes: list[_Route] = []
            control = stream == CHECKPOINT_STREAM
            for target, sub in self.topology.subscribers(spec.id, stream):
                queue = "control" if control else "inbox"
                inboxes = [getattr(t, queue) for t in self.tasks_of[target.id]]
                g = sub.grouping
                if g.kind == "fields":
                    kind = _FIELDS1 if len(g.fields) == 1 else _FIELDSN
                else:
                    kind = _KIND[g.kind]
                route = _Route(target, kind, inboxes)
                if kind == _FIELDS1:
                    route.key = fields.index_of(g.fields[0])
                elif kind == _FIELDSN:
                    route.key = tuple(fields.index_of(f) for f in g.fields)
                elif kind == _SHUFFLE:
                    # Start each emitter at a different task so that several
                    # emitters spread evenly from the first tuple on.
                    route.rr = task.task_index % route.n
                route.custom = g.custom
                route.task_ids = list(self.component_tasks[target.id])
                route.index_of_task = {tid: i for i, tid in enumerate(route.task_ids)}
                routes.append(route)
                if self._reaches(target.id, spec.id):
                    # A queue on a cycle back to this task is exempt from
                    # backpressure: blocking on it would deadlock the cycle
                    # (a full queue whose consumer waits, through the cycle,
                    # for this task).
                    continue
                if not control:  # checkpoints are never held back by backpressure
                    outs.extend(q for q in inboxes if all(q is not o for o in outs))
            origin = Origin(spec.id, task.task_id, task.task_index, stream, fields)
            task.streams[stream] = (origin, len(fields), routes, direct)
        task.out_queues = outs
        if isinstance(task, BoltTask):
            upstream = frozenset(
                (sub.source, tid)
                for sub in spec.inputs
                if sub.stream == CHECKPOINT_STREAM
                for tid in self.component_tasks[sub.source]
            )
            if upstream:
                task.barrier = Barrier(upstream)

    def _reaches(self, source: str, target: str) -> bool:
        """True if tuples from ``source`` can flow (through any path) to ``target``."""
        seen = {source}
        todo = [source]
        while todo:
            for nxt in self.topology.downstream(todo.pop()):
                if nxt == target:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    def _context(self, task: _Task) -> TopologyContext:
        return TopologyContext(
            self.topology.name,
            task.component,
            task.task_index,
            task.task_id,
            self.component_tasks,
            self._output_fields,
            state_opener=self.open_state,
            clock=self.clock,
        )

    # -- state ---------------------------------------------------------------------
    def open_state(self, namespace: str) -> Any:
        """The provider's state for ``namespace`` (the provider opens on first use)."""
        state = self._states.get(namespace)
        if state is None:
            if self.provider is None:
                from .._registry import open_provider

                self.provider = open_provider(
                    self.config["topology.state.provider"],
                    self.config["topology.state.provider.config"],
                )
            state = self._states[namespace] = self.provider.get_state(namespace)
        return state

    # -- errors -------------------------------------------------------------------
    def report_error(self, task: _Task, exc: BaseException, tup: Any) -> None:
        tb = "".join(traceback.format_exception(exc))
        report = ErrorReport(task.component, task.task_index, repr(tup), repr(exc), tb)
        self.errors.append(report)
        if task.errors <= 3:
            log.error(
                "%s[%d] raised %r while processing %s\n%s",
                task.component,
                task.task_index,
                exc,
                report.tuple,
                tb,
            )
        elif task.errors in (10, 100, 1000, 10000):
            log.error(
                "%s[%d] has now raised %d errors", task.component, task.task_index, task.errors
            )

    # -- lifecycle -------------------------------------------------------------
    def open(self) -> None:
        """Call ``open``/``prepare`` on every task (``run`` does it for you)."""
        if self._started:
            return
        self._started = True
        for spout in self.spouts:
            spout.spout.open(self.conf_for(spout.spec), self._context(spout), spout)
        if self.exactly_once:
            self._seek_data_spouts()
        for bolt in self.bolts:
            if bolt.basic:
                bolt.bolt.prepare(self.conf_for(bolt.spec), self._context(bolt))  # type: ignore[call-arg]
            else:
                bolt.bolt.prepare(self.conf_for(bolt.spec), self._context(bolt), bolt)  # type: ignore[call-arg]
        self._setup_timers()

    def _seek_data_spouts(self) -> None:
        """Exactly-once: rewind every data spout to the positions of the restored txid."""
        assert self._checkpoint_spout is not None
        fresh, positions = self._checkpoint_spout.recovery_positions()
        if not fresh and positions is None:
            log.warning(
                "exactly-once state: the stored checkpoint has no spout positions (it was "
                "taken without exactly-once); the spouts resume as they would without it, "
                "and exactly-once holds from the next checkpoint on"
            )
            return
        for spout in self.data_spouts:
            where = None if positions is None else positions.get(_task_key(spout))
            spout.spout.seek(where)  # type: ignore[attr-defined]

    def _setup_timers(self) -> None:
        now = self.clock.monotonic()
        conf = self.config
        if self.acking is not None and conf["topology.enable.message.timeouts"]:
            period = conf["topology.message.timeout.secs"] / (_TIMEOUT_BUCKETS - 1)
            self._timers.append([now + period, period, self._rotate_timeouts])
        by_freq: dict[float, list[BoltTask]] = {}
        for bolt in self.bolts:
            freq = self.conf_for(bolt.spec).get("topology.tick.tuple.freq.secs")
            if freq:
                by_freq.setdefault(float(freq), []).append(bolt)
        for freq, bolts in by_freq.items():
            origin = Origin(SYSTEM_COMPONENT, -1, 0, TICK_STREAM, Fields("freq"))
            self._timers.append([now + freq, freq, _TickSender(bolts, origin, freq)])
        # So that step() fires timers when a caller drives the loop itself.
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))

    def _rotate_timeouts(self) -> None:
        assert self.acking is not None
        self.acking.tick()
        for spout in self.spouts:
            spout.pending.rotate()

    def _fire_timers(self, now: float) -> float:
        due = float("inf")
        for timer in self._timers:
            if now >= timer[0]:
                timer[2]()
                # Skip missed periods instead of firing a burst after a stall.
                timer[0] = max(timer[0] + timer[1], now)
            due = min(due, timer[0])
        return due

    def stop(self) -> None:
        """Ask the run loop to stop after the current step (safe from a signal handler)."""
        self._stop = True

    def close(self) -> None:
        """Call ``close``/``cleanup`` on every task; idempotent."""
        if self._closed or not self._started:
            return
        self._closed = True
        for spout in self.spouts:
            try:
                spout.spout.close()
            except Exception as exc:
                spout.report(exc, "close()")
        for bolt in self.bolts:
            try:
                bolt.bolt.cleanup()
            except Exception as exc:
                bolt.report(exc, "cleanup()")
        if self.provider is not None:
            self.provider.close()

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop ----------------------------------------------------------------
    def step(self) -> bool:
        """One round: drain every bolt, fire due timers, poll every spout. True if anything moved."""
        busy = False
        for bolt in self.bolts:
            if (bolt.inbox or bolt.control) and bolt.drain():
                busy = True
        now = self.clock.monotonic()
        if now >= self._next_due:
            self._next_due = self._fire_timers(now)
        if self.exactly_once and not self._standstill(now):
            return busy
        for spout in self.spouts:
            if spout.poll():
                busy = True
        return busy

    def _standstill(self, now: float) -> bool:
        """Exactly-once: may the spouts be polled? False while a PREPARE is due and
        tuples are still queued; then only completions reach the data spouts."""
        cp = self._checkpoint_spout
        assert cp is not None
        if not self._quiescing:
            if not cp.coordinator.prepare_due(now * 1000.0, early=cp.early):
                return True
            self._quiescing = True
        if any(b.inbox for b in self.bolts):
            for spout in self.data_spouts:
                if spout.completions:
                    spout._drain_completions()
            return False
        # Nothing is queued: the positions mark exactly what the states hold.
        # The PREPARE goes out now, before the spouts emit anything new.
        cp.positions = {_task_key(s): s.spout.position() for s in self.data_spouts}  # type: ignore[attr-defined]
        self._quiescing = False
        assert self._checkpoint_task is not None
        self._checkpoint_task.poll()
        return True

    def in_flight(self) -> int:
        """Tuples queued or tracked but not yet complete."""
        n = sum(len(b.inbox) for b in self.bolts)
        n += sum(len(s.pending) + len(s.completions) for s in self.spouts)
        return n

    def idle(self) -> bool:
        """Every spout is exhausted and nothing is in flight."""
        return all(s.idle() for s in self.spouts if not s.system) and not any(
            b.inbox for b in self.bolts
        )

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run until stopped, until ``duration`` seconds pass, or (``until_idle``) until
        every spout is exhausted and nothing is in flight. Closes the tasks at the end."""
        self.open()
        clock = self.clock
        start = self._start_time = clock.monotonic()
        deadline = start + duration if duration is not None else None
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))
        reason = "stopped"
        try:
            while not self._stop:
                busy = self.step()
                if deadline is not None and clock.monotonic() >= deadline:
                    reason = "duration"
                    break
                if not busy:
                    if until_idle and self.idle():
                        reason = "idle"
                        break
                    if self._waiting_for_commit():
                        continue
                    clock.sleep(self.idle_sleep)
            self._finish_queued()
        finally:
            self.close()
        return RunResult(
            self.metrics(), list(self.errors), clock.monotonic() - start, reason, self.counters()
        )

    def _waiting_for_commit(self) -> bool:
        """If nothing moves but stateful tasks hold acks, ask for a checkpoint now.

        Without this a finite input would wait up to a whole checkpoint
        interval at its end, and a trickle of tuples would wait that long for
        its acks. True if a checkpoint was requested.
        """
        if self._checkpoint_spout is None or self._checkpoint_spout.coordinator.pending:
            return False
        if not any(t.held for t in self.bolts if isinstance(t, StatefulBoltTask)):
            return False
        self._checkpoint_spout.early = True
        return True

    def _finish_queued(self) -> None:
        """Process what is already queued (no new spout tuples) so that a stop
        does not strand work mid-topology; completions reach their spouts."""
        busy = True
        while busy:
            busy = False
            for bolt in self.bolts:
                if (bolt.inbox or bolt.control) and bolt.drain():
                    busy = True
        for spout in self.spouts:
            if spout.completions:
                spout._drain_completions()

    # -- observation -----------------------------------------------------------
    def counters(self) -> dict[str, int]:
        c = {
            "untracked_acks": self.untracked_acks,
            "timed_out": sum(s.timed_out for s in self.spouts),
            "pending": sum(len(s.pending) for s in self.spouts),
        }
        if self.acking is not None:
            c["acker_pending"] = self.acking.pending()
            c["acker_expired"] = self.acking.timeouts
            c["late_acks"] = sum(getattr(led, "late_acks", 0) for led in self.acking.ledgers)
        return c

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals (a consistent-enough snapshot; safe to call from another thread)."""
        out: dict[str, TaskMetrics] = {}
        for cid, tasks in self.tasks_of.items():
            m = TaskMetrics(cid, -1)
            for t in tasks:
                m.emitted += t.emitted
                m.executed += t.executed
                m.acked += t.acked
                m.failed += t.failed
                m.errors += t.errors
                inbox = getattr(t, "inbox", None)
                if inbox is not None:
                    m.queued += len(inbox)
            out[cid] = m
        return out

    def task_metrics(self) -> list[TaskMetrics]:
        out = []
        for tasks in self.tasks_of.values():
            for t in tasks:
                inbox = getattr(t, "inbox", None)
                out.append(
                    TaskMetrics(
                        t.component,
                        t.task_index,
                        t.emitted,
                        t.executed,
                        t.acked,
                        t.failed,
                        t.errors,
                        len(inbox) if inbox is not None else 0,
                    )
                )
        return out

    _next_due = float("inf")


class _TickSender:
    """Delivers a tick tuple to every task of the bolts that asked for this frequency."""

    def __init__(self, bolts: list[BoltTask], origin: Origin, freq: float) -> None:
        self.bolts = bolts
        self.origin = origin
        self.values = [freq]

    def __call__(self) -> None:
        for bolt in self.bolts:
            bolt.inbox.append(Tuple(self.values, self.origin))
