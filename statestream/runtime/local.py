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

import contextlib
import gc
import logging
import os
import random
import signal
import sys
import traceback
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, final

import xxhash
from mypy_extensions import i64

from .._acker import AckerLedger, Outcome, acker_task_for
from .._clock import Clock, SystemClock
from .._components import Bolt, Spout, TopologyContext, task_namespace
from .._deadletter import (
    DeadLetter,
    DeadLetterFile,
    Replay,
    Settled,
    default_path,
    fits_stream,
)
from .._errors import (
    ConfigError,
    FailedException,
    PrepareRefused,
    ReliabilityError,
    RuntimeFailure,
    SimulatedCrash,
    StateLockedError,
    StatestreamError,
    TupleError,
    caused_by,
)
from .._exactly_once import (
    CheckpointRecord,
    Standstill,
    StandstillStep,
    check_position,
    resolve_exactly_once,
)
from .._executors import CheckpointTupleForwarder, NativeCollector
from .._picklable import unpicklable
from .._rescale import LAYOUT_NAMESPACE, rescale_state
from .._results import ErrorReport, RunResult, TaskMetrics
from .._resume import SpoutRef, acked_positions, plan_resume
from .._retry import (
    FailureRate,
    Retries,
    RetryPolicy,
    VerdictKind,
    msg_id_key_fast,
    retry_cannot_fix,
    too_many_failures,
)
from .._rotating import RotatingMap
from .._routing import custom_choose, stable_hash
from .._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM, CheckpointSpout, RefusedPrepares
from .._text import cut_message, cut_value, error_line
from .._topology import ComponentSpec, Topology
from .._tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Origin, Tuple, check_emit
from .plan import RuntimePlan, as_config

__all__ = ["ErrorReport", "LocalRuntime", "RunResult", "TaskMetrics"]

log = logging.getLogger("statestream")

# Module constants are Final: the compiled core then inlines them instead of
# looking each one up in the module's dict on every use.
_xxh3: Final = xxhash.xxh3_64_intdigest
_getrandbits: Final = random.getrandbits
_EDGE_BITS: Final = 62
_EDGE_MASK: Final = (1 << _EDGE_BITS) - 1
_ROOT_BIT: Final = 1 << _EDGE_BITS  # set in every root id (see next_root)
_I64_MAX: Final = (1 << 63) - 1
#: In a RemoteInbox group's lane: the group's values are a one-field stream's, unwrapped.
FLAT: Final = 2

# Route kinds, as small ints so the emit loop compares cheaply.
_SHUFFLE: Final = 0
_FIELDS1: Final = 1
_FIELDSN: Final = 2
_GLOBAL: Final = 3
_ALL: Final = 4
_DIRECT: Final = 5
_CUSTOM: Final = 6
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
_TIMEOUT_BUCKETS: Final = 3
_ROUTE_MEMO: Final = 50_000  # str values a route remembers the target of (a few MB at most)
_SPOUT_BATCH: Final = 64
_COMPLETIONS_PER_POLL: Final = 1024


@final
class _Stream:
    """What a task emits on one output stream: its origin, arity, routes and kind.

    A native class, not a tuple: the compiled core reads a field directly,
    where it unpacks and type-checks a whole tuple at each subscript.
    """

    __slots__ = ("arity", "direct", "origin", "routes")

    def __init__(self, origin: Origin, arity: int, routes: list[_Route], direct: bool) -> None:
        self.origin = origin
        self.arity = arity
        self.routes = routes
        self.direct = direct


class _Route:
    """One subscriber (component) of one (task, stream): where its tuples go."""

    __slots__ = (
        "custom",
        "field",
        "index_of_task",
        "key",
        "kind",
        "memo",
        "n",
        "puts",
        "remote",
        "remotes",
        "rr",
        "target",
        "task_ids",
    )

    def __init__(self, target: ComponentSpec, grouping_kind: int, inboxes: list[deque[Any]]):
        self.target = target.id
        self.kind = grouping_kind
        # Each inbox's bound append (the route needs nothing else of them):
        # deque is not a compiled type, so calling ``inboxes[i].append`` would
        # look the method up on every tuple.
        self.puts: list[Callable[[Any], None]] = [q.append for q in inboxes]
        # The inboxes of tasks in other workers (topology.workers) take the
        # tuple's parts: a Tuple made only to be taken apart costs as much as
        # the rest of its crossing.
        self.remotes: list[RemoteInbox | None] = [
            q if isinstance(q, RemoteInbox) else None for q in inboxes
        ]
        self.remote = any(q is not None for q in self.remotes)
        self.n = len(inboxes)
        self.key: Any = None
        self.field = 0  # the key of a one-field grouping, typed: a list index in C
        self.rr = 0
        self.custom: Any = None
        self.index_of_task: dict[int, int] = {}
        self.task_ids: list[int] = []
        # One-field grouping: target index by str value, so a hot key is
        # hashed once (a dict lookup instead of an encode and an xxh3).
        self.memo: dict[str, int] = {}

    def value_index(self, values: Sequence[Any]) -> int:
        """The target index of a one-field grouping (stable_hash of the field's
        value, as Storm's fields grouping, so every runtime and every restart agrees)."""
        # Not useless: in the compiled core the narrowed branch indexes a list
        # (what emits almost always pass) directly, the other through a call.
        v = values[self.field] if isinstance(values, list) else values[self.field]  # noqa: RUF034
        if type(v) is str:
            memo = self.memo
            i = memo.get(v, -1)
            if i < 0:
                i = _xxh3(v.encode()) % self.n
                if len(memo) < _ROUTE_MEMO:
                    memo[v] = i
            return i
        return stable_hash(v) % self.n

    def choose(self, values: Sequence[Any], direct_task: int | None) -> list[int]:
        """Target task indexes for one tuple (the general, slower path)."""
        kind = self.kind
        if kind == _FIELDS1:
            return [self.value_index(values)]
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


class _Task(NativeCollector):
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
        self.last_error = ""
        self.last_error_at = 0.0
        self.tracking = rt.acking is not None  # acking on: anchored tuples get edge ids
        self.streams: dict[str, _Stream] = {}
        # streams["default"], read without a dict lookup by the emits that name
        # no stream (nearly all of them): about 100 instructions per emit.
        self.default_stream: _Stream | None = None
        self.out_queues: list[deque[Any]] = []

    @property
    def namespace(self) -> str:
        """This task's state namespace (also the key of its stored spout position)."""
        return task_namespace(self.component, self.task_index)

    def metrics(self) -> TaskMetrics:
        inbox = getattr(self, "inbox", None)
        return TaskMetrics(
            self.component,
            self.task_index,
            self.emitted,
            self.executed,
            self.acked,
            self.failed,
            self.errors,
            len(inbox) if inbox is not None else 0,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
        )

    def blocked(self) -> bool:
        cap = self.rt.capacity
        return any(len(q) >= cap for q in self.out_queues)

    def report(self, exc: BaseException, tup: Any = None) -> None:
        self.errors += 1
        self.last_error = error_line(exc)
        self.last_error_at = self.rt.clock.monotonic()
        self.rt.report_error(self, exc, tup)

    def _stream_entry(self, stream: str, values: Sequence[Any], direct: bool) -> _Stream:
        check_emit(self.component, self.task_index, stream, values, self.spec.outputs, direct)
        entry = self.streams[stream]
        if entry.arity < 0:
            # This task's first tuple on the stream: it must pickle, as with
            # topology.workers > 1 or on Spark (statestream._picklable). The
            # arity set here opens the emits' fast paths, so later tuples
            # cost nothing more.
            error = unpicklable(self.component, self.task_index, stream, values)
            if error is not None:
                if self.rt.fatal is None:
                    self.rt.fatal = error  # stops the run even if user code catches it
                self.rt.stop()
                raise error
            entry.arity = len(values)
        return entry

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
                r.puts[r.value_index(values)](Tuple(values, origin))
            elif kind == _SHUFFLE:
                i = r.rr
                r.rr = i + 1 if i + 1 < r.n else 0
                r.puts[i](Tuple(values, origin))
            else:
                puts = r.puts
                for i in r.choose(values, direct):
                    puts[i](Tuple(values, origin))

    def deliver_spout(
        self,
        origin: Origin,
        routes: list[_Route],
        values: Sequence[Any],
        direct: int | None,
        root: int,
    ) -> int:
        """Deliver a new tree's root tuple, one per target task with a fresh edge id.

        Returns the XOR of the edge ids created (the ledger's initial value).
        """
        rt = self.rt
        created = 0
        for r in routes:
            kind = r.kind
            # The two common groupings inline; the rest through choose().
            if kind == _FIELDS1:
                targets: Sequence[int] = (r.value_index(values),)
            elif kind == _SHUFFLE:
                i = r.rr
                r.rr = i + 1 if i + 1 < r.n else 0
                targets = (i,)
            else:
                targets = r.choose(values, direct)
            puts = r.puts
            for i in targets:
                if r.remote:
                    remote = r.remotes[i]
                    if remote is not None:  # a task of another worker
                        created ^= remote.add_drawn(values, origin, root)
                        continue
                edge = rt.next_edge()
                created ^= edge
                puts[i](Tuple(values, origin, None, r.task_ids[i], root, edge))
        return created

    def deliver_anchored(
        self,
        origin: Origin,
        routes: list[_Route],
        values: Sequence[Any],
        direct: int | None,
        anchors: Sequence[Tuple],
    ) -> None:
        """Deliver a tuple anchored to ``anchors`` (the general path).

        As in Storm, each anchor gets a fresh edge id per delivered tuple: the
        anchor's ack value takes it, and the new tuple's id in every tree of
        that anchor is the XOR of its anchors' edges there. Two anchors in one
        tree therefore give the new tuple a non-zero id in that tree (one
        shared edge would cancel out and leave it untracked).
        """
        rt = self.rt
        for r in routes:
            puts = r.puts
            for i in r.choose(values, direct):
                ids: dict[int, int] = {}
                for a in anchors:
                    edge = rt.next_edge()
                    a.ack_val ^= edge
                    for root in a.trees():
                        ids[root] = ids.get(root, 0) ^ edge
                if len(ids) == 1:
                    ((root, edge),) = ids.items()
                    tup = Tuple(values, origin, None, r.task_ids[i], root, edge)
                else:
                    tup = Tuple(values, origin, ids, r.task_ids[i])
                puts[i](tup)


# Unsigned 64-bit words for ids: "L" where a C long has 64 bits (LP64: Linux,
# macOS), since CPython 3.11 converts an int of more than one digit to an
# unsigned long with a loop over its digits but to an unsigned long long
# through _PyLong_AsByteArray, at twice the cost.
_ID_CODE: Final = "L" if array("L").itemsize == 8 else "Q"


def pack_ids(ids: list[int]) -> Any:
    """Ids as unsigned 64-bit words in this machine's byte order (marshal would
    write each int 15 bits at a time); as they are if one does not fit."""
    try:
        return array(_ID_CODE, ids).tobytes()
    except OverflowError:
        return ids


def next_edge_of(x: i64) -> i64:
    """The state after ``x`` of the edge generator (LocalRuntime.next_edge), which
    is also the edge drawn: xorshift steps that keep 62 bits, nonzero from nonzero."""
    x ^= (x << 13) & _EDGE_MASK
    x ^= x >> 7
    x ^= (x << 17) & _EDGE_MASK
    return x


def unpack_ids(ids: Any) -> list[int]:
    """The ids :func:`pack_ids` packed."""
    if type(ids) is not bytes:
        return ids  # type: ignore[no-any-return]
    words = array(_ID_CODE)
    words.frombytes(ids)
    return words.tolist()


class RemoteInbox:
    """The inbox (or control lane) of a task in another worker, as a route sees it
    (``topology.workers``, :mod:`statestream.runtime.workers`).

    ``append`` adds the tuple to the frame for that worker, in columns: a
    group per run of tuples from one (source task, stream), ``(target, lane,
    source task, stream, values, edges, roots, anchors)``, where ``edges``
    holds each tuple's edge and ``roots`` their roots as runs, a root and
    the index of the first tuple with it (the words of one line share it),
    so that a frame holds a few lists rather than a record per tuple (the
    link sends both as 64-bit words). A group of tuples whose edges this
    queue drew (``add_drawn``, what spouts and anchored emits use) holds in
    place of ``edges`` one int, the state of the queue's generator before
    the first of them. Groups keep the order of appends to this queue. A
    multi-anchored tuple is a group of its own.
    On a one-field stream ``values`` holds the values themselves, not a
    list of one per tuple, and ``lane`` has bit ``FLAT`` set: a list per
    tuple cost more to encode and decode than the rest of the tuple.
    ``len``, what backpressure compares with the capacity, is the task's
    inbox length in the last status of its worker plus what was sent to it
    in the ``flying`` rounds that status cannot show, beyond ``slack``
    (``topology.transfer.buffer.size``): counting every tuple in flight
    against the receive buffer would hold each round to a fraction of it.
    """

    def __init__(
        self,
        out: list[Any],
        task_id: int,
        control: bool,
        slack: int = 0,
        flying: int = 3,
        seed: int = 1,
    ) -> None:
        self.out = out
        self.task_id = task_id
        self.lane = 1 if control else 0
        self.slack = slack
        self.remote_len = 0
        self.sent = 0  # this round
        # what was sent in each of the flying - 1 rounds before, and their sum
        self.before: deque[int] = deque([0] * (flying - 1))
        self.sent_before = 0
        self.origin: Origin | None = None  # of the group being filled
        self.flat = False  # the group's stream has one field
        self.values: list[Any] = []
        self.edges: list[int] = []
        self.roots: list[int] = []  # root, first index, root, first index, ...
        self.root = -1  # of the last run
        # The edges this queue draws itself (add_drawn): a group of them
        # crosses as the generator's state before its first one.
        self.edge_state: i64 = seed & _EDGE_MASK or 1
        self.drawn = False  # the group being filled holds drawn edges

    def next_round(self) -> None:
        """The frame went out: the next append starts a new group."""
        before = self.before
        if before:
            self.sent_before += self.sent - before.popleft()
            before.append(self.sent)
        self.sent = 0
        self.origin = None

    def clear(self) -> None:
        self.sent = self.sent_before = 0
        for i in range(len(self.before)):
            self.before[i] = 0
        self.origin = None

    def append(self, tup: Tuple) -> None:
        if tup.anchors is not None:
            values: Any = tup.values
            o = tup.origin
            self.sent += 1
            self.out.append(
                (self.task_id, self.lane, o.task, o.stream, [list(values)], [], [], tup.anchors)
            )
            self.origin = None
            return
        self.add(tup.values, tup.origin, tup.root, tup.edge)

    def add(self, values: Sequence[Any], o: Origin, root: int, edge: int) -> None:
        """Append a tuple in one tree (or none) by its parts."""
        if o is not self.origin or self.drawn:
            self._group(o, False)
        self.edges.append(edge)
        self._put(values, root)

    def add_drawn(self, values: Sequence[Any], o: Origin, root: int) -> int:
        """Append a tuple of the tree ``root`` with an edge drawn here, and return
        the edge: a group of drawn edges crosses as one int, the generator's
        state before them, from which the receiver draws the same edges
        (LocalRuntime.deliver_remote), where a list of edges cost a boxed int
        per tuple on each side and a conversion each way."""
        if o is not self.origin or not self.drawn:
            self._group(o, True)
        x = next_edge_of(self.edge_state)
        self.edge_state = x
        self._put(values, root)
        return int(x)

    def _group(self, o: Origin, drawn: bool) -> None:
        """Start a group: tuples of ``o`` with edges drawn here, or given."""
        self.origin = o
        self.drawn = drawn
        self.flat = len(o.fields) == 1
        self.values = []
        self.edges = []
        self.roots = []
        self.root = -1
        self.out.append(
            (
                self.task_id,
                self.lane | FLAT if self.flat else self.lane,
                o.task,
                o.stream,
                self.values,
                int(self.edge_state) if drawn else self.edges,
                self.roots,
                None,
            )
        )

    def _put(self, values: Sequence[Any], root: int) -> None:
        self.sent += 1
        if root != self.root:
            self.root = root
            self.roots.append(root)
            self.roots.append(len(self.values))
        # emit checked the arity: a one-field stream's values have one item
        if not self.flat:
            self.values.append(values if type(values) is list else list(values))
        elif isinstance(values, list):
            self.values.append(values[0])  # compiled: a direct read of the list's item
        else:
            self.values.append(values[0])  # any other sequence: the generic lookup

    def __len__(self) -> int:
        flying = self.sent + self.sent_before - self.slack
        return self.remote_len + flying if flying > 0 else self.remote_len

    def __bool__(self) -> bool:
        return False  # never drained in this worker


class _Acking:
    """The runtime's side of the acker: routes messages to ledgers, outcomes to spouts."""

    def __init__(self, rt: LocalRuntime, n_ackers: int) -> None:
        self.rt = rt
        self.ledgers = [AckerLedger(_TIMEOUT_BUCKETS) for _ in range(n_ackers)]
        self.n = n_ackers
        self.timeouts = 0
        # With several workers (statestream.runtime.workers) an acker task
        # lives in one of them: the others put their messages for it in the
        # frame to its worker, and its outcomes go to the spout's worker.
        link = rt.link
        self.link: Any = link
        self.workers = 1 if link is None else int(link.workers)
        self.remote = [link is not None and not link.owns_acker(i) for i in range(n_ackers)]
        self.any_remote = any(self.remote)
        self.out_acks: list[list[Any]] = [] if link is None else link.ack_lists()
        self.out_pairs: list[list[int]] = [] if link is None else link.ack_pair_lists()
        self.out_completions: list[list[Any]] = [] if link is None else link.completion_lists()
        # One acker, in this process (the default): every root goes to it,
        # without the modulo of a 64-bit root and the routing per message.
        self.only: AckerLedger | None = (
            self.ledgers[0] if n_ackers == 1 and not self.any_remote else None
        )

    def _route(self, outcome: Outcome | None) -> None:
        if outcome is None:
            return
        spout = self.rt.spout_by_task.get(outcome.spout_task)
        ok = outcome.kind == "ack"
        if spout is not None:
            spout.complete((outcome.root, ok))
        elif self.link is not None:
            self.out_completions[outcome.spout_task % self.workers].append(
                (outcome.spout_task, outcome.root, ok)
            )
            if not ok:
                self.link.forward_cause(outcome.spout_task % self.workers, outcome.root)

    def _send(self, i: int, op: int, root: int, a: int, b: int) -> None:
        """An init (op 0), fail (2) or timeout reset (3) for acker ``i`` of another
        worker; acks, the bulk, go as words (``ack``, ``receive_acks``)."""
        self.out_acks[i % self.workers].append((i, op, root, a, b))

    def init(self, root: int, spout_task: int, ack_val: int) -> None:
        only = self.only
        if only is not None:
            self._route(only.init(root, spout_task, ack_val))
            return
        i = acker_task_for(root, self.n)
        if self.any_remote and self.remote[i]:
            self._send(i, 0, root, spout_task, ack_val)
            return
        self._route(self.ledgers[i].init(root, spout_task, ack_val))

    def ack(self, root: int, xor_val: int) -> None:
        only = self.only
        if only is not None:
            outcome = only.ack(root, xor_val)
        else:
            i = acker_task_for(root, self.n)
            if self.any_remote and self.remote[i]:
                pairs = self.out_pairs[i % self.workers]
                pairs.append(root)
                pairs.append(xor_val)
                return
            outcome = self.ledgers[i].ack(root, xor_val)
        if outcome is not None:
            self._route(outcome)

    def fail(self, root: int) -> None:
        i = acker_task_for(root, self.n)
        if self.any_remote and self.remote[i]:
            self._send(i, 2, root, 0, 0)
            # The spout's worker writes why in a dead-letter record.
            self.link.forward_cause(i % self.workers, root)
            return
        self._route(self.ledgers[i].fail(root))

    def reset_timeout(self, root: int) -> None:
        i = acker_task_for(root, self.n)
        if self.any_remote and self.remote[i]:
            self._send(i, 3, root, 0, 0)
            return
        self.ledgers[i].reset_timeout(root)

    def receive(self, messages: list[Any]) -> None:
        """Messages for this worker's ackers from another worker (see ``_send``)."""
        ledgers = self.ledgers
        for i, op, root, a, b in messages:
            if op == 0:
                self._route(ledgers[i].init(root, a, b))
            elif op == 2:
                self._route(ledgers[i].fail(root))
            else:
                ledgers[i].reset_timeout(root)

    def receive_acks(self, pairs: list[int]) -> None:
        """Acks for this worker's ackers from another worker: root and XOR in turn."""
        ledgers = self.ledgers
        n = self.n
        for k in range(0, len(pairs), 2):
            root = pairs[k]
            outcome = ledgers[acker_task_for(root, n)].ack(root, pairs[k + 1])
            if outcome is not None:
                self._route(outcome)

    def tick(self) -> None:
        # Expired ledger entries are dropped; the spout's own pending map
        # fails the message (it must, since a lost ledger cannot time out).
        for ledger in self.ledgers:
            self.timeouts += len(ledger.tick())

    def pending(self) -> int:
        return sum(len(ledger) for ledger in self.ledgers)


class SpoutTask(_Task):
    """Runs one spout task: polls ``next_tuple``, tracks its message ids.

    A failed or timed-out message goes through the retry policy
    (:mod:`statestream._retry`): handed back with ``Spout.fail`` once its
    delay has passed, or, after its last attempt, written to the dead-letter
    file and settled with ``Spout.dead_lettered``. With exactly-once state a
    failure rewinds the topology instead (:meth:`LocalRuntime._rewind`), and
    counts as an attempt of the message that caused it.
    """

    def __init__(self, rt: LocalRuntime, spec: ComponentSpec, task_index: int, task_id: int):
        super().__init__(rt, spec, task_index, task_id)
        self.spout: Spout = rt.topology.instantiate(spec.id)
        self.system = spec.id == CHECKPOINT_SPOUT  # the checkpoint spout: not a data source
        self.completions: deque[tuple[int, bool]] = deque()
        # Its bound append (the acker's outcomes arrive through it): deque is
        # not a compiled type, so calling ``completions.append`` would look
        # the method up by name.
        self.complete: Callable[[tuple[int, bool]], None] = self.completions.append
        # root -> (msg_id, values, origin): what a dead-letter record names.
        self.pending: RotatingMap[int, Any] = RotatingMap(_TIMEOUT_BUCKETS, self._expired)
        self.max_pending: int | None = rt.conf_for(spec).get("topology.max.spout.pending")
        self.timed_out = 0
        self.dead_lettered = 0
        # Emits not delivered: held for a retry (exactly-once) or settled. The
        # standstill counts them, so that a replay is cut where its attempt was.
        self.held = 0
        # Kept by the runtime per task namespace, so that they outlive a rewind.
        self.retries: Retries = rt.retries_for(self.namespace)
        self.failures = self.retries.failures  # the same dict: a cheap test at emit
        self.settled: Settled = rt.settled_for(self.namespace)
        self.settles: deque[Any] = deque()  # message ids to tell dead_lettered() at the next poll
        self.replays: deque[Replay] = rt.replays_for(self.namespace)

    def metrics(self) -> TaskMetrics:
        m = super().metrics()
        if not self.system:
            # Exactly-once hands nothing back: what waits is each failed message
            # until the topology has replayed it through a commit.
            retries = self.retries
            m.retrying = len(retries.failures) if self.rt.exactly_once else retries.waiting
        m.dead_lettered = self.dead_lettered
        return m

    # -- the collector the spout sees ------------------------------------
    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> None:
        entry = self.default_stream if stream == "default" else self.streams.get(stream)
        if entry is None or len(values) != entry.arity or entry.direct:
            entry = self._stream_entry(stream, values, False)  # raises the right error
        self._emit(entry.origin, entry.routes, values, msg_id, None)

    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = "default"
    ) -> None:
        entry = self._stream_entry(stream, values, True)
        origin, routes = entry.origin, entry.routes
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
        acking = self.rt.acking
        if msg_id is None:
            self.emitted += 1
            self.deliver_untracked(origin, routes, values, direct)
        elif acking is None:
            # At-most-once: nothing is tracked, the spout hears "ack" at once.
            self.emitted += 1
            self.deliver_untracked(origin, routes, values, direct)
            self.completions.append((msg_id, True))
            self.rt.untracked_acks += 1
        else:
            if self.settled and self._settled_already(msg_id, values):
                return
            standstill = self.rt.standstill
            if (
                self.failures
                and standstill is not None
                and self.retries.hold(msg_id, self.rt.clock.monotonic(), standstill.replaying)
            ):
                # Failed before, its retry not due: replayed without it (see
                # statestream._retry); the schedule hands it back to the spout.
                self.held += 1
                return
            self.emitted += 1
            root = self.rt.draw_root()
            self.pending.put_new(root, (msg_id, values, origin))  # a fresh root
            acking.init(
                root, self.task_id, self.deliver_spout(origin, routes, values, direct, root)
            )

    def _settled_already(self, msg_id: Any, values: Sequence[Any]) -> bool:
        """True if the dead-letter file holds this very message: it is not delivered,
        and the spout is told it is settled at the next poll."""
        if not self.settled.holds(msg_id, values):
            return False
        self.settles.append(msg_id)
        self.rt.skipped_settled += 1
        self.held += 1  # emitted, not delivered: the standstill counts it still
        return True

    # -- failures -------------------------------------------------------------
    def _expired(self, root: int, entry: Any) -> None:
        self.timed_out += 1
        timeout = self.rt.config["topology.message.timeout.secs"]
        self.rt.fail_causes.pop(root, None)
        self._failed(
            entry, ("(timeout)", None, f"tuple tree not completed within {timeout} s (timed out)")
        )

    def _failed(self, entry: Any, cause: Any) -> None:
        """A message's tree failed or timed out. ``entry`` is its pending entry
        (message id, values, origin), ``cause`` who failed it, the exception,
        and a text for when there is none."""
        msg_id = entry[0]
        self.failed += 1
        rt = self.rt
        standstill = rt.standstill
        if self.system:
            if standstill is not None:
                standstill.fail()
            else:
                self._call_fail(msg_id)
            return
        now = rt.clock.monotonic()
        if standstill is not None:
            # Exactly-once: no Storm-style replay, the topology goes back to
            # its last committed checkpoint instead. Every message failing
            # before that rewind counts an attempt (Retries.attempt_failed).
            verdict = self.retries.attempt_failed(msg_id, now)
            if verdict.kind is VerdictKind.GIVE_UP:
                # The rewind replays without it (settled, see _settled_already).
                self._dead_letter(entry, cause, verdict.failures)
            standstill.tuple_failed()
            return
        verdict = self.retries.failed(msg_id, now)
        if verdict.kind is VerdictKind.GIVE_UP:
            self._dead_letter(entry, cause, verdict.failures)
            if type(msg_id) is not Replay:
                self._call_dead_lettered(msg_id)

    def _dead_letter(self, entry: Any, cause: Any, attempts: int) -> None:
        msg_id, values, origin = entry
        component, exc, text = cause
        if type(msg_id) is Replay:
            self.rt.replay_given_up(msg_id, component, exc, text, attempts)
            self.dead_lettered += 1
            return
        record = DeadLetter.of(
            self.rt.topology.name,
            self.component,
            self.task_index,
            msg_id,
            values,
            component,
            exc,
            attempts,
            text,
            stream=origin.stream if origin is not None else "default",
        )
        self.rt.write_dead_letter(record)
        self.dead_lettered += 1
        self.settled.add(msg_id, values)

    def release_held(self) -> None:
        """Exactly-once, at a cut: hand every message held for its retry back to the
        spout (``fail``), so that the position it gives holds them (see
        statestream.Rewindable); it emits them again after the cut."""
        for msg_id in self.retries.clear_schedule():
            if type(msg_id) is Replay:
                self.replays.append(msg_id)
            else:
                self._call_fail(msg_id)

    def _call_fail(self, msg_id: Any) -> None:
        try:
            self.spout.fail(msg_id)
        except Exception as exc:
            self.report(exc, f"fail({msg_id!r})")

    def _call_dead_lettered(self, msg_id: Any) -> None:
        try:
            self.spout.dead_lettered(msg_id)
        except Exception as exc:
            self.report(exc, f"dead_lettered({msg_id!r})")

    # -- scheduling ---------------------------------------------------------
    def _drain_completions(self, most: int = 0) -> None:
        """Deliver the completions (acks and fails) of this spout's tuples: all of
        them, or the ``most`` oldest."""
        completions = self.completions
        spout = self.spout
        untracked = self.rt.acking is None
        failures = self.retries.failures
        replaying = bool(self.rt.replaying)
        left = len(completions) - most if 0 < most < len(completions) else 0
        pop = completions.popleft  # bound once: deque is not a compiled type
        while len(completions) > left:
            key, ok = pop()
            msg_id: Any
            entry: Any = (key, (), None)
            if untracked:
                msg_id = key
            else:
                entry = self.pending.pop(key, _MISSING)
                if entry is _MISSING:
                    continue  # already timed out and failed
                msg_id = entry[0]
            if ok:
                if replaying and type(msg_id) is Replay:
                    self.rt.replay_acked(msg_id)
                    continue
                self.acked += 1
                if failures:
                    failures.pop(msg_id_key_fast(msg_id), None)
                try:
                    spout.ack(msg_id)
                except Exception as exc:
                    self.report(exc, f"ack({msg_id!r})")
            else:
                cause = self.rt.fail_causes.pop(key, None) or ("(unknown)", None, None)
                self._failed(entry, cause)

    def _due(self) -> bool:
        """Deliver what the retry policy and the dead-letter file decided: retries
        whose delay has passed (``fail``), settled messages (``dead_lettered``)."""
        busy = False
        retries = self.retries
        standstill = self.rt.standstill
        if retries.heap and (standstill is None or not standstill.replaying):
            due = retries.due(self.rt.clock.monotonic())
            for msg_id in due:
                if type(msg_id) is Replay:
                    self.replays.append(msg_id)
                else:
                    self._call_fail(msg_id)
            busy = bool(due)
        settles = self.settles
        while settles:
            self._call_dead_lettered(settles.popleft())
            busy = True
        return busy

    def poll(self, limit: int = _SPOUT_BATCH) -> bool:
        """Deliver completions and due retries, then call ``next_tuple`` (at most
        ``limit`` times) while there is room."""
        busy = bool(self.completions)
        if busy:
            # A commit releases the acks of a whole checkpoint interval at
            # once: spread their completions over the next polls, so that no
            # step (and, with topology.workers, no peer waiting for this
            # worker's frame) stalls on tens of thousands of them.
            self._drain_completions(_COMPLETIONS_PER_POLL)
        if self.settles or self.retries.heap:
            busy = self._due() or busy
        max_pending = self.max_pending
        if self.replays:
            busy = self.rt.emit_replays(self, limit) or busy
        next_tuple = self.spout.next_tuple
        start = self.emitted
        for _ in range(limit):
            if max_pending is not None and len(self.pending) >= max_pending:
                break
            if self.out_queues and self.blocked():
                break
            before = self.emitted
            try:
                next_tuple()
            except RuntimeFailure:
                raise
            except Exception as exc:
                self.report(exc, "next_tuple()")
                break
            if self.emitted == before and not self.settles:
                break
        return busy or self.emitted != start

    def idle(self) -> bool:
        return (
            not self.completions
            and not len(self.pending)
            and not self.retries.waiting
            and not self.settles
            and not self.replays
            and self.spout.exhausted()
        )


_MISSING: Final = object()

# Test-only: kill this process right before or after a dead letter is written
# ("before-write" / "after-write"), to test that the message is then in the
# file once or retried after the restart.
_KILL_AT = os.environ.get("SSTREAM_TEST_DEADLETTER_KILL")


@contextlib.contextmanager
def _naming(task: _Task, method: str) -> Iterator[None]:
    """Let a user's exception out of ``method`` as a RuntimeFailure naming the task;
    our own errors already name what is wrong."""
    try:
        yield
    except StatestreamError:
        raise
    except Exception as exc:
        raise caused_by(
            RuntimeFailure(
                f"component {task.component!r} task {task.task_index}: {method} raised "
                f"{error_line(exc)}"
            ),
            exc,
        ) from exc


def _error_signature(task: _Task, exc: BaseException) -> tuple[str, int, str, Any]:
    """What makes two errors "the same": task, type, and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    where = tuple((f.filename, f.lineno) for f in frames[-3:])
    return (task.component, task.task_index, type(exc).__name__, where)


# A run allocates a tuple object or two per tuple, nearly all short-lived:
# with CPython's default young-generation threshold (700) the collector runs
# every few hundred tuples and walks the live ones each time.
_GC_YOUNG: Final = 50_000

# Seconds between two looks at a claim of the store that can lapse (a lease):
# well within a lease's life, and a timer, so nothing per tuple.
_CLAIM_CHECK_S: Final = 1.0


def _tune_gc() -> tuple[tuple[int, int, int], bool]:
    """Collect less often during a run: what was allocated before it (the
    topology, a loaded state) moves to the permanent generation and is not
    walked again, and the young generation is collected every _GC_YOUNG
    allocations. Returns what _restore_gc puts back. A process that froze
    objects itself (a pre-forking server) keeps its own freeze untouched."""
    before = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(max(before[0], _GC_YOUNG), before[1], before[2])
    return before, freeze


def _restore_gc(saved: tuple[tuple[int, int, int], bool]) -> None:
    before, froze = saved
    gc.set_threshold(*before)
    if froze:
        gc.unfreeze()


def _is_power_of_ten(n: int) -> bool:
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


class BoltTask(_Task):
    """Runs one bolt task: drains its inbox through ``execute``; its collector."""

    def __init__(self, rt: LocalRuntime, spec: ComponentSpec, task_index: int, task_id: int):
        super().__init__(rt, spec, task_index, task_id)
        self.inbox: deque[Tuple] = deque()
        # The bolt as built: the user's bolt inside the executors of its
        # protocols (statestream._executors); this task only calls execute.
        self.executor: Bolt = rt.topology.instantiate(spec.id)
        self.execute: Callable[[Tuple], None] = self.executor.execute
        self.pausable = isinstance(self.executor, CheckpointTupleForwarder)
        self.execute_data: Callable[[Tuple], None] = (
            self.executor.data_entry() if self.pausable else self.execute
        )
        self.last_root = 0  # the tree of the latest ack, whose XOR is in last_val
        self.last_val = 0
        self.holding = False  # hold_acks(): acks stay in `held` for take_acks()
        self.held: list[tuple[int, int]] = []  # (root, XOR) pairs kept while holding
        # Checkpoint tuples take a priority lane: they must get through while
        # data waits (before INITSTATE, or while a full queue holds it).
        self.control: deque[Tuple] = deque()

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
        entry = self.default_stream if stream == "default" else self.streams.get(stream)
        if entry is None or len(values) != entry.arity or entry.direct:
            entry = self._stream_entry(stream, values, False)  # raises the right error
        self._emit(entry.origin, entry.routes, values, anchors, None)

    def emit_anchored(self, values: Sequence[Any], anchor: Tuple, stream: str = "default") -> None:
        """``emit`` anchored to one input: the hot path of every splitting or mapping bolt.

        The common case (a declared stream, acking on, an input in one tree,
        shuffle or one-field routes) is inlined here; anything else, errors
        included, takes the general path through :meth:`_emit`.
        """
        entry = self.default_stream if stream == "default" else self.streams.get(stream)
        root = anchor.root
        if (
            entry is None
            or len(values) != entry.arity
            or entry.direct
            or not root
            or anchor.done
            or not self.tracking
        ):
            if entry is None or len(values) != entry.arity or entry.direct:
                entry = self._stream_entry(stream, values, False)  # raises the right error
            self._emit(entry.origin, entry.routes, values, anchor, None)
            return
        self.emitted += 1
        routes = entry.routes
        if not routes:
            return  # a stream nobody subscribes to (a last bolt's): no tuple, no edge
        origin = entry.origin
        rt = self.rt
        created = 0
        for r in routes:
            kind = r.kind
            if kind == _FIELDS1:
                i = r.value_index(values)
            elif kind == _SHUFFLE:
                i = r.rr
                r.rr = i + 1 if i + 1 < r.n else 0
            else:
                for i in r.choose(values, None):
                    edge = rt.next_edge()
                    created ^= edge
                    r.puts[i](Tuple(values, origin, None, r.task_ids[i], root, edge))
                continue
            if r.remote:
                remote = r.remotes[i]
                if remote is not None:
                    created ^= remote.add_drawn(values, origin, root)
                    continue
            edge = rt.next_edge()
            created ^= edge
            r.puts[i](Tuple(values, origin, None, r.task_ids[i], root, edge))
        anchor.ack_val ^= created

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        entry = self._stream_entry(stream, values, True)
        origin, routes = entry.origin, entry.routes
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
        if isinstance(anchors, Tuple):
            anchors = (anchors,)
        tracked = False
        for a in anchors:
            if a.done:
                self._anchor_done(a)
            tracked = tracked or bool(a.root or a.anchors)
        if not tracked:
            self.deliver_untracked(origin, routes, values, direct)
            return
        self.deliver_anchored(origin, routes, values, direct, anchors)

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
        # Consecutive inputs often share a tree (the words of one line): their
        # acks are XOR-combined into one message (XOR is associative and
        # commutative, so the acker sees the same sums), sent when an input
        # of another tree comes (_fold_ack) or the drain ends.
        root = tup.root
        if root:
            if root == self.last_root:
                self.last_val ^= tup.edge ^ tup.ack_val
            else:
                if self.last_root:
                    self._fold_ack()
                self.last_root = root
                self.last_val = tup.edge ^ tup.ack_val
        elif tup.anchors:
            self._fold_ack()
            v = tup.ack_val
            for root, edge in tup.anchors.items():
                self._send_ack(root, edge ^ v)

    def _misuse(self, tup: Tuple, what: str) -> None:
        """Raise the ReliabilityError for acking/failing a tuple twice or another task's."""
        if tup.owner != self.task_id and tup.owner >= 0:
            self._foreign(tup, what)
        raise ReliabilityError(
            f"bolt {self.component!r} task {self.task_index} acked or failed {tup!r} twice; "
            "ack or fail each input exactly once"
        )

    def _fold_ack(self) -> None:
        """Send the current tree's combined ack (see ack), or keep it while holding."""
        root = self.last_root
        if root:
            self.last_root = 0
            self._send_ack(root, self.last_val)

    def _send_ack(self, root: int, xor_val: int) -> None:
        if self.holding:
            self.held.append((root, xor_val))  # the executor takes them at its next checkpoint
            return
        acking = self.rt.acking
        if acking is not None:
            acking.ack(root, xor_val)

    def flush_acks(self) -> None:
        self._fold_ack()

    def awaits_checkpoint(self) -> bool:
        """True if this task holds acks that no checkpoint covers yet: in
        ``held``, or already handed to its executor's protocol, where
        StatefulBoltExecutor puts them when it handles a checkpoint tuple (acks
        of data executed between a PREPARE and its COMMIT stay there,
        uncovered, after the COMMIT). Checked when nothing moves, to ask for a
        checkpoint then (LocalRuntime._waiting_for_commit, the workers'
        statuses) rather than wait out the interval. Acks a PREPARE covered
        wait for that checkpoint, under way."""
        if not self.holding:
            return False
        if self.held or self.last_root:
            return True
        protocol = getattr(self.executor, "protocol", None)
        return protocol is not None and bool(protocol.held.current)

    # -- the acker transport the executors use (statestream._executors.ExecutorCollector)
    def hold_acks(self) -> None:
        self.holding = True

    def take_acks(self) -> list[tuple[int, int]]:
        self._fold_ack()
        taken, self.held = self.held, []
        return taken

    def send_acks(self, acks: Iterable[tuple[int, int]]) -> None:
        acking = self.rt.acking
        if acking is not None:
            for root, xor_val in acks:
                acking.ack(root, xor_val)

    def fail_roots(self, roots: Iterable[int]) -> None:
        acking = self.rt.acking
        if acking is not None:
            causes = self.rt.fail_causes
            for root in roots:
                causes.setdefault(root, (self.component, None, "rolled back with its checkpoint"))
                acking.fail(root)

    def fail(self, tup: Tuple) -> None:
        if tup.done or (tup.owner != self.task_id and tup.owner >= 0):
            self._misuse(tup, "fail")
        tup.done = True
        self.failed += 1
        anchors = tup.trees()
        acking = self.rt.acking
        if anchors and acking is not None:
            self._fold_ack()  # this task's acks before its fail
            # Called from an except clause (a bolt that raised, FailedException),
            # the exception being handled is why: the dead-letter record says so.
            cause = (self.component, sys.exc_info()[1], "failed by collector.fail()")
            self.rt.note_failure(anchors, cause)
            self.rt.failure_rate(self).failed(tup.values, self.rt.clock.monotonic())
            for root in anchors:
                acking.fail(root)

    def reset_timeout(self, tup: Tuple) -> None:
        anchors = tup.trees()
        acking = self.rt.acking
        if anchors and acking is not None:
            rt = self.rt
            for root in anchors:
                acking.reset_timeout(root)
                rt.touch_root(root)
            if rt.link is not None:  # the spout task may be in another worker
                rt.link.touch(list(anchors))

    def report_error(self, error: BaseException) -> None:
        self.report(error)

    # -- scheduling ---------------------------------------------------------
    def drain(self) -> bool:
        """Execute checkpoint tuples, then queued data until the inbox is empty or a
        downstream queue is full. True if anything was processed."""
        did = False
        if self.control:
            self._drain_control()
            did = True
        if self.inbox and not (self.pausable and self.executor.paused):  # type: ignore[attr-defined]
            before = self.executed
            failed = self.failed
            self._drain()
            if self.failed != failed:
                self.rt.judge_failures(self, before)
            # A bolt blocked by a full downstream queue did nothing: saying so
            # lets the loop sleep (and a fake clock advance) instead of spinning.
            did = did or self.executed != before
        if self.last_root:
            self._fold_ack()
        return did

    def _drain_control(self) -> None:
        control = self.control
        execute = self.execute
        # Checkpoint tuples are the protocol's traffic, not the user's data: what
        # handling them emits, acks or fails is taken back out of the task's
        # counts here, where they are handled (they are rare), so the data paths
        # stay as they are. Only checkpoints run in here: a paused task's data
        # waits in its inbox, never in the executor's buffer.
        emitted, acked, failed = self.emitted, self.acked, self.failed
        while control:
            tup = control.popleft()
            try:
                execute(tup)
            except Exception as exc:
                self.report(exc, tup)
                if not tup.done:
                    self.fail(tup)
        self.emitted, self.acked, self.failed = emitted, acked, failed

    def _drain(self) -> None:
        inbox = self.inbox
        # The inbox holds data only (checkpoints take the control lane) and
        # drain() calls this only while the executor is not paused.
        execute = self.execute_data
        pop = inbox.popleft  # bound once: deque is not a compiled type
        outs = self.out_queues
        cap = self.rt.capacity
        n = 0
        tup: Tuple | None = None
        try:
            if not outs:
                while inbox:
                    tup = pop()
                    n += 1
                    execute(tup)
            elif len(outs) == 1:
                q = outs[0]
                while inbox and len(q) < cap:
                    tup = pop()
                    n += 1
                    execute(tup)
            else:
                while inbox and not self.blocked():
                    tup = pop()
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
        *,
        owned: Iterable[int] | None = None,
        link: Any = None,
    ) -> None:
        self.topology = topology
        self.config = as_config(config, topology_prefixes=(topology.name,))
        self.plan = RuntimePlan(topology, self.config)
        self.clock: Clock = clock or SystemClock()
        # Where tuple ids come from (a test may set its own new_root; None
        # means next_root, or _local_root in a worker): an edge has 62 bits, so that
        # XORs of edges stay small ints, which the compiled core handles
        # unboxed (2**-62 per ack is still no chance of a false completion).
        self.new_root: Callable[[], int] | None = None
        self._local_ackers: list[int] = []  # see use_local_roots
        self.randbits: Callable[[int], int] = _getrandbits
        self._edge_state: i64 = _getrandbits(_EDGE_BITS) or 1  # see next_edge
        #: Called after every step of run(): where a test looks at the queues.
        self.after_step: Callable[[], None] | None = None
        self.capacity = int(self.config["topology.executor.receive.buffer.size"])
        self.idle_sleep = self.config["topology.sleep.spout.wait.strategy.time.ms"] / 1000.0
        self.n_ackers = int(self.config["topology.acker.executors"])
        # Several workers (statestream.runtime.workers): this process runs the
        # tasks in ``owned`` and reaches the others through ``link``.
        self.link: Any = link
        self.owned: frozenset[int] | None = None if owned is None else frozenset(owned)
        self.errors: deque[ErrorReport] = deque(maxlen=1000)
        self.untracked_acks = 0
        self.rewinds = 0
        self._stop = False
        self._started = False
        self._closed = False
        self._start_time = 0.0
        self._timers: list[list[Any]] = []  # [next_due, period, callback]
        self.provider: Any = None
        # This run's hold on its topology's scope of the store (_open_provider).
        from .._registry import RunClaim

        self._claim: Any = RunClaim()
        # PREPAREs the states refused (outlive a rewind), and the error that
        # stops the run once one namespace refuses again (_note_refusal).
        self.refused_prepares = RefusedPrepares()
        self.fatal: BaseException | None = None
        self._states: dict[str, Any] = {}
        # Counts of the tasks a rewind replaced, so metrics cover the whole run.
        self._past: dict[tuple[str, int], TaskMetrics] = {}
        self._past_counters: dict[str, int] = {}
        # Poison tuples (statestream._retry, statestream._deadletter): per spout
        # task namespace, its failed messages, the messages the dead-letter file
        # settles, and dead letters fed back by `statestream deadletter replay`;
        # all outlive a rewind. fail_causes: root -> (component, exception,
        # text) of the failure the acker is about to report.
        self.retry_policy = RetryPolicy.from_config(self.config)
        path = self.config["statestream.deadletter.path"]
        self.deadletter_path = (
            Path(path)
            if path
            else default_path(
                self.config["topology.state.provider"],
                self.config["topology.state.provider.config"],
            )
        )
        self.deadletters = DeadLetterFile(self.deadletter_path)
        self._retries: dict[str, Retries] = {}
        self._failure_rates: dict[tuple[str, int], FailureRate] = {}  # per bolt task
        self._settled: dict[str, Settled] = {}
        self._replays: dict[str, deque[Replay]] = {}
        self.replaying: set[Replay] = set()  # fed back and emitted, not yet acked or given up
        self._deadletters_loaded = False
        self.fail_causes: dict[int, Any] = {}
        # --until-idle diagnosis (_explain_wait): what moved, since when, last said
        self._wait_check_at = 0.0
        self._wait_moved: tuple[Any, ...] = ()
        self._quiet_since = 0.0
        self._wait_said_at = float("-inf")
        self.skipped_settled = 0
        self._error_seen: dict[Any, int] = {}  # error signature -> times reported
        if topology.has_stateful_bolts and self.n_ackers == 0:
            raise ConfigError(
                f"topology {topology.name!r} has stateful bolts, which need acking to know when "
                "a checkpoint has passed every bolt; set topology.acker.executors to 1 or more"
            )
        # Exactly-once state (statestream._exactly_once): a standstill before
        # each PREPARE gives the cut, the spouts' positions are stored with it,
        # and any failure within the run goes back to the last commit.
        on, note = resolve_exactly_once(
            self.config["statestream.state.exactly.once"],
            self.plan.checkpointed,
            {spec.id: spec.obj for spec in self.plan.data_spouts},
        )
        if note:
            log.warning("%s", note)
        self.exactly_once = on
        self.standstill: Standstill | None = Standstill() if on else None
        self._build()

    def _build(self) -> None:
        """Make every task and its routes (at start, and again after a rewind)."""
        self.acking: _Acking | None = _Acking(self, self.n_ackers) if self.n_ackers > 0 else None
        self.spouts: list[SpoutTask] = []
        self.bolts: list[BoltTask] = []
        self.spout_by_task: dict[int, SpoutTask] = {}
        self.tasks_of: dict[str, list[_Task]] = {}
        self._checkpoint_task: SpoutTask | None = None
        plan = self.plan
        owned = self.owned
        self.task_by_id: dict[int, _Task] = {}
        self.bolt_by_id: dict[int, BoltTask] = {}
        for cid, tids in plan.component_tasks.items():
            spec = self.topology.components[cid]
            for i, tid in enumerate(tids):
                if owned is not None and tid not in owned:
                    continue
                task: _Task
                if spec.is_spout:
                    task = SpoutTask(self, spec, i, tid)
                    if task.system:
                        self._checkpoint_task = task
                    self.spouts.append(task)
                    self.spout_by_task[tid] = task
                else:
                    bolt = BoltTask(self, spec, i, tid)
                    self.bolts.append(bolt)
                    self.bolt_by_id[tid] = bolt
                    task = bolt
                self.tasks_of.setdefault(cid, []).append(task)
                self.task_by_id[tid] = task
        self.component_tasks = plan.component_tasks
        self.task_names = plan.task_names
        self.data_spouts = [s for s in self.spouts if not s.system]
        for cid, tasks in self.tasks_of.items():
            spec = self.topology.components[cid]
            for task in tasks:
                self._wire(task, spec)

    @property
    def _checkpoint_spout(self) -> CheckpointSpout | None:
        task = self._checkpoint_task
        return None if task is None else task.spout  # type: ignore[return-value]

    # -- ids ----------------------------------------------------------------------
    def next_edge(self) -> int:
        """A random, nonzero edge id of _EDGE_BITS bits.

        An xorshift generator seeded from ``randbits``: a few machine
        instructions per edge in the compiled core instead of a call. Its
        steps are bijections of the 62-bit state that keep only the low 62
        bits of each shift (what wraps in a compiled i64 and what the mask
        keeps in Python agree), so the same code gives the same ids on both
        cores, and a nonzero state never reaches 0. A test that sets its own
        ``randbits`` gets its ids one by one, in its order.
        """
        if self.randbits is not _getrandbits:
            return self.randbits(_EDGE_BITS) or 1
        # next_edge_of's steps, inlined: the compiled core does not inline a
        # call, and the call cost about 13 instructions a word in the word count
        x: i64 = self._edge_state
        x ^= (x << 13) & _EDGE_MASK
        x ^= x >> 7
        x ^= (x << 17) & _EDGE_MASK
        self._edge_state = x
        return int(x)

    def draw_root(self) -> int:
        """The root id of a new tree: from ``new_root`` if a test set one, else
        from :meth:`next_root` (a direct call), with a residue of this
        worker's ackers if the workers runtime set them (:meth:`use_local_roots`)."""
        new_root = self.new_root
        if new_root is not None:
            return new_root()
        if self._local_ackers:
            return self._local_root()
        return self.next_root()

    def use_local_roots(self, ackers: list[int]) -> None:
        """Give new trees a root whose acker task (``root % n_ackers``) is one of
        ``ackers``, this worker's: a tree's init and outcome then stay in the
        spout's own worker, and only the acks of other workers' bolts cross."""
        self._local_ackers = ackers

    def _local_root(self) -> int:
        # next_root's id with its residue modulo n replaced by one of this
        # worker's ackers (chosen by the next digits), in i64: a root is below 2**63
        x: i64 = self.next_edge()
        r: i64 = x | _ROOT_BIT
        n: i64 = self.n_ackers
        ackers = self._local_ackers
        k: i64 = len(ackers)
        base: i64 = r - r % n
        m: i64 = ackers[(r // n) % k]
        if base > _I64_MAX - m:  # keep it below 2**63, with the same residue
            base -= n
        return int(base + m)

    def next_root(self) -> int:
        """A new root id: 62 bits of next_edge's generator with bit 62 set.

        Roots and edges come from one generator, so they never repeat within
        its period (2**62 - 1) and the bit keeps roots apart from edges. A
        few machine instructions where ``random.getrandbits(64)`` cost a call.
        """
        x: i64 = self.next_edge()
        return int(x | _ROOT_BIT)

    # -- wiring ---------------------------------------------------------------
    def conf_for(self, spec: ComponentSpec) -> Mapping[str, Any]:
        """The topology config with the component's own keys on top."""
        return self.plan.conf_for(spec.id)

    def _wire(self, task: _Task, spec: ComponentSpec) -> None:
        outs: list[deque[Any]] = []
        for stream, (_, direct) in spec.outputs.items():
            routes: list[_Route] = []
            control = stream == CHECKPOINT_STREAM
            for rs in self.plan.routes(spec.id, stream):
                target = self.topology.components[rs.target]
                queue = "control" if control else "inbox"
                if rs.kind == "fields":
                    kind = _FIELDS1 if isinstance(rs.key, int) else _FIELDSN
                else:
                    kind = _KIND[rs.kind]
                task_ids = list(rs.task_ids)
                if kind == _SHUFFLE and not control and self.link is not None:
                    task_ids = self.link.shuffle_targets(
                        self.plan.component_tasks[spec.id], task_ids
                    )
                # The checkpoint spout's own hop takes as many rounds within a
                # worker as across (see workers._DelayedControl).
                delay = control and spec.id == CHECKPOINT_SPOUT and self.link is not None
                inboxes = [self._queue(tid, queue, delay) for tid in task_ids]
                route = _Route(target, kind, inboxes)
                route.key = rs.key
                if isinstance(rs.key, int):
                    route.field = rs.key
                if kind == _SHUFFLE:
                    # Start each emitter at a different task so that several
                    # emitters spread evenly from the first tuple on.
                    route.rr = task.task_index % route.n
                route.custom = rs.custom
                route.task_ids = task_ids
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
            origin = Origin(
                spec.id,
                task.task_id,
                task.task_index,
                stream,
                self.plan.output_fields[spec.id][stream],
            )
            # Arity -1 until the first emit: that one takes the checked path.
            task.streams[stream] = _Stream(origin, -1, routes, direct)
            if stream == "default":
                task.default_stream = task.streams[stream]
        task.out_queues = outs

    def deliver_remote(
        self, groups: list[Any], completions: list[Any], origins: dict[Any, Origin]
    ) -> None:
        """Put the tuples (the groups :class:`RemoteInbox` makes) and spout
        completions another worker sent into this worker's queues. A tracked
        tuple belongs to the task it is delivered to, as on one process."""
        bolts = self.bolt_by_id
        for target, lane, src, stream, group, wire_edges, wire_roots, anchors in groups:
            origin = origins[(src, stream)]
            bolt = bolts[target]
            q = bolt.control if lane & 1 else bolt.inbox
            values: list[Any] = group
            if anchors is not None:  # a group of its own, never FLAT (RemoteInbox.append)
                q.append(Tuple(values[0], origin, anchors, target))
                continue
            # drawn edges (RemoteInbox.add_drawn): drawn again from their state
            drawn = type(wire_edges) is int
            state: i64 = wire_edges if drawn else 0
            edges: list[int] = [] if drawn else unpack_ids(wire_edges)
            roots: list[int] = unpack_ids(wire_roots)
            flat = bool(lane & FLAT)
            # built first and handed over in one extend: deque is not a compiled
            # type, so each append would be a method call
            batch: list[Tuple] = []
            runs = len(roots)
            for k in range(0, runs, 2):
                root = roots[k]
                owner = target if root else -1
                end = roots[k + 3] if k + 2 < runs else len(values)
                for i in range(roots[k + 1], end):
                    # a one-field value in a 1-tuple: one allocation, a list takes two
                    v: Any = (values[i],) if flat else values[i]
                    if drawn:
                        state = next_edge_of(state)
                        edge = int(state)
                    else:
                        edge = edges[i]
                    batch.append(Tuple(v, origin, None, owner, root, edge))
            q.extend(batch)
        spouts = self.spout_by_task
        for spout_task, root, ok in completions:
            spouts[spout_task].completions.append((root, ok))

    def touch_root(self, root: int) -> None:
        """Restart the spout-side timeout of the tree ``root`` (reset_timeout)."""
        for spout in self.spouts:
            if root in spout.pending:
                spout.pending.put(root, spout.pending.get(root))

    def _queue(self, task_id: int, lane: str, delay: bool = False) -> Any:
        """The ``inbox`` or ``control`` queue of a task: its own (``delay``: the
        link's delayed control lane to it), or, for a task of another worker, the
        link's queue that sends to it."""
        task = self.task_by_id.get(task_id)
        if task is not None:
            if delay and isinstance(task, BoltTask):
                return self.link.local_control(task_id, task.control)
            return getattr(task, lane)
        return self.link.queue(task_id, lane == "control")

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
        return self.plan.context(
            task.component,
            task.task_index,
            state_opener=self.open_state,
            clock=self.clock,
            exactly_once=self.exactly_once,
        )

    # -- state ---------------------------------------------------------------------
    def open_state(self, namespace: str) -> Any:
        """The provider's state for ``namespace`` (the provider opens on first use)."""
        state = self._states.get(namespace)
        if state is None:
            state = self._states[namespace] = self._open_provider().get_state(namespace)
        return state

    def _open_provider(self) -> Any:
        """The provider of this topology's state (it connects on first use).

        The first one of a run claims the topology's scope of the store
        first, before anything reads or writes it (``BackendStateProvider.claim``;
        the claim is held until :meth:`close`). Only the process that owns
        the run claims: a worker runs with a link, under a supervisor that
        holds the claim for it. Raises StateLockedError if another run
        holds it."""
        if self.provider is None:
            from .._outage import guard_store
            from .._registry import open_provider

            provider = open_provider(
                self.config["topology.state.provider"],
                self.config["topology.state.provider.config"],
                scope=self.topology.name,
            )
            guard_store(provider, self.config, self.clock)
            if self.link is None:
                try:
                    self._claim.take(provider, self.topology.name, self.config)
                except BaseException:
                    provider.close()
                    raise
            self.provider = provider
        return self.provider

    # -- poison tuples: retries and the dead-letter file ---------------------------
    def retries_for(self, namespace: str) -> Retries:
        """The failed messages of the spout task ``namespace`` (kept across rewinds)."""
        r = self._retries.get(namespace)
        if r is None:
            r = self._retries[namespace] = Retries(self.retry_policy)
        return r

    def failure_rate(self, task: BoltTask) -> FailureRate:
        """The error-rate limit of a bolt task (kept across rewinds)."""
        key = (task.component, task.task_index)
        rate = self._failure_rates.get(key)
        if rate is None:
            rate = self._failure_rates[key] = FailureRate.from_config(self.config)
        return rate

    def judge_failures(self, task: BoltTask, executed_before: int) -> None:
        """After a batch in which ``task`` failed tuples: stop the run if the
        error-rate limit tripped (statestream._retry.FailureRate)."""
        past = self._past.get((task.component, task.task_index))
        base = past.executed if past is not None else 0
        reason = self.failure_rate(task).judge(
            self.clock.monotonic(), base + executed_before, base + task.executed
        )
        if reason is None or self.fatal is not None:
            return
        self.fatal = too_many_failures(task.component, task.task_index, reason, self.errors)
        self._stop = True

    def settled_for(self, namespace: str) -> Settled:
        """The messages of ``namespace`` dead-lettered in this run: not delivered
        again when the spout emits them (a rewind of exactly-once state replays them)."""
        return self._settled.setdefault(namespace, Settled())

    def replays_for(self, namespace: str) -> deque[Replay]:
        """Dead letters of ``namespace`` fed back for this run, not yet emitted."""
        return self._replays.setdefault(namespace, deque())

    def _load_deadletters(self) -> None:
        """Read the dead-letter file once per run: the messages of this topology
        marked for replay are fed back.

        The file's other messages are not skipped when a spout emits them
        again: message ids repeat across runs (a file spout's line numbers, a
        new input, a fresh store), and skipping a message because an unrelated
        run gave up on an identical one would lose it silently. A message given
        up on just before a crash is therefore retried after the restart, and
        not written twice (:meth:`DeadLetterFile.append`)."""
        if self._deadletters_loaded:
            return
        self._deadletters_loaded = True
        spouts = {s.namespace for s in self.data_spouts}
        for r in self.deadletters.marked_for_replay(self.topology.name, spouts):
            self.replays_for(r.namespace).append(Replay(r))

    def note_failure(self, roots: Iterable[int], cause: Any) -> None:
        """A bolt failed these trees: remember why, for a dead-letter record."""
        causes = self.fail_causes
        if len(causes) > 65536:
            # Causes whose tree had failed before (its spout heard it already)
            # are never collected; forget the oldest.
            for key in list(causes)[:32768]:
                del causes[key]
        for root in roots:
            causes[root] = cause

    def write_dead_letter(self, record: DeadLetter) -> None:
        """Write ``record`` to the dead-letter file, durably, before the message is settled."""
        if _KILL_AT == "before-write":
            os.kill(os.getpid(), signal.SIGKILL)
        self.deadletters.give_up(record)
        if _KILL_AT == "after-write":
            os.kill(os.getpid(), signal.SIGKILL)

    def emit_replays(self, task: SpoutTask, limit: int) -> bool:
        """Emit up to ``limit`` dead letters fed back for ``task``; True if any went out."""
        replays = task.replays
        n = 0
        while replays and n < limit:
            if task.max_pending is not None and len(task.pending) >= task.max_pending:
                break
            if task.out_queues and task.blocked():
                break
            rid = replays.popleft()
            record = rid.record
            entry = task.streams.get(record.stream)
            if entry is None:
                fits_stream(record, None, False)  # says why in the log
                continue
            if not fits_stream(record, len(entry.origin.fields), entry.direct):
                continue
            n += 1
            task.emitted += 1
            origin, routes = entry.origin, entry.routes
            if self.acking is None:
                task.deliver_untracked(origin, routes, record.values, None)
                self.replay_acked(rid)
                continue
            self.replaying.add(rid)
            root = self.draw_root()
            task.pending.put_new(root, (rid, record.values, origin))  # a fresh root
            self.acking.init(
                root, task.task_id, task.deliver_spout(origin, routes, record.values, None, root)
            )
        return n > 0

    def replay_acked(self, rid: Replay) -> None:
        """A fed-back dead letter went through: mark it replayed in the file."""
        self.replaying.discard(rid)
        self.deadletters.replayed([rid.record])

    def replay_given_up(
        self, rid: Replay, component: str, exc: BaseException | None, text: str, attempts: int
    ) -> None:
        """A fed-back dead letter failed to its last attempt again: back to ``dead``."""
        self.replaying.discard(rid)
        self.deadletters.replay_given_up(rid.record, component, exc, text, attempts)

    # -- errors -------------------------------------------------------------------
    def report_error(self, task: _Task, exc: BaseException, tup: Any) -> None:
        tb = "".join(traceback.format_exception(exc))
        # The tuple is a value (a whole read buffer must not fill the log); the
        # error keeps its message's end, where a message says what to do.
        report = ErrorReport(
            task.component, task.task_index, cut_value(repr(tup)), cut_message(repr(exc)), tb
        )
        self.errors.append(report)
        if retry_cannot_fix(exc):
            # The store stayed away past its bound (statestream._outage), an
            # emit that cannot be pickled (statestream._picklable), a value the
            # store cannot encode: not this task's failure to retry, but the
            # run's end, said in one line.
            if self.fatal is None:
                self.fatal = exc
            self._stop = True
            return
        # A given error (the same task, type and place) shows its traceback
        # once; repeats are counted, logged at 10, 100, 1000... and at the end.
        sig = _error_signature(task, exc)
        seen = self._error_seen[sig] = self._error_seen.get(sig, 0) + 1
        if seen == 1:
            log.error(
                "%s[%d] raised %s while processing %s\n%s",
                task.component,
                task.task_index,
                report.error,
                report.tuple,
                tb,
            )
        elif _is_power_of_ten(seen):
            log.error(
                "%s[%d] raised %s again: %d times so far (traceback above)",
                task.component,
                task.task_index,
                type(exc).__name__,
                seen,
            )
        if isinstance(exc, PrepareRefused):
            self._note_refusal(task, exc)

    def _note_refusal(self, task: _Task, exc: PrepareRefused) -> None:
        """A state refused a PREPARE: the second time for one namespace, the run
        stops (:class:`RefusedPrepares`); :meth:`run` raises :attr:`fatal`."""
        from .._registry import SCOPE_SEPARATOR

        namespace = self.topology.name + SCOPE_SEPARATOR + task.namespace
        if not self.refused_prepares.refused(namespace) or self.fatal is not None:
            return
        provider = self.provider
        store = (
            repr(getattr(provider, "provider", provider))
            if provider is not None
            else f"topology.state.provider: {self.config['topology.state.provider']}"
        )
        self.fatal = RefusedPrepares.fatal(namespace, self.topology.name, store, exc)
        self._stop = True

    def _log_repeats(self) -> None:
        for (component, task_index, type_name, _), seen in self._error_seen.items():
            if seen > 1 and not _is_power_of_ten(seen):
                log.error(
                    "%s[%d] raised %s %d times in all (traceback above)",
                    component,
                    task_index,
                    type_name,
                    seen,
                )
        self._error_seen.clear()

    # -- lifecycle -------------------------------------------------------------
    def open(self) -> None:
        """Call ``open``/``prepare`` on every task (``run`` does it for you)."""
        if self._started:
            return
        had_claim = self._claim.asked
        if self.topology.has_stateful_bolts and self.link is None:
            # The claim of the store, first: refused, it leaves the runtime
            # unopened (close() has nothing to do).
            self._open_provider()
        self._started = True
        try:
            self._open_tasks()
        except BaseException:
            if not had_claim:  # a failed rewind keeps it: the run's close() lets it go
                self._claim.release()
            raise

    def _open_tasks(self) -> None:
        if self.topology.has_stateful_bolts and self.link is None:
            # Before any task reads its state: a bolt whose parallelism
            # changed since the last run gets its keys re-partitioned. (With
            # several workers their supervisor does it, once, before they start.)
            self.open_state(LAYOUT_NAMESPACE)
            rescale_state(self.provider, self.topology)
        for spout in self.spouts:
            with _naming(spout, "open()"):
                spout.spout.open(self.conf_for(spout.spec), self._context(spout), spout)
        if self.plan.checkpointed:
            self._seek_data_spouts()
        self._load_deadletters()
        for bolt in self.bolts:
            with _naming(bolt, "prepare()"):
                bolt.executor.prepare(self.conf_for(bolt.spec), self._context(bolt), bolt)
        self._setup_timers()

    def _seek_data_spouts(self) -> None:
        """Seek every data spout to where the restored checkpoint says (statestream._resume):
        exactly-once, the positions of its cut; at-least-once, its acked positions,
        which the checkpoint spout stores with each PREPARE from then on."""
        cp = self._checkpoint_spout
        if cp is not None:
            record = cp.record
        else:
            # The checkpoint spout runs in another worker: the stored record
            # gives the same restore point (it is where recovery ends).
            record = CheckpointRecord.load(self.open_state(task_namespace(CHECKPOINT_SPOUT, 0)))
        refs = self.spout_refs()
        plan = plan_resume(record, self.exactly_once, refs)
        if self.rewinds == 0:  # at start; a rewind says so itself
            if plan.warning and (self.link is None or self.link.index == 0):  # once
                log.warning("%s", plan.warning)
            for line in plan.lines:
                log.warning("%s", line)
        for spout in self.data_spouts:
            if spout.namespace in plan.seeks:
                spout.spout.seek(plan.seeks[spout.namespace])  # type: ignore[attr-defined]
        if cp is not None and not self.exactly_once:
            cp.acked_positions = lambda: acked_positions(refs)

    def store_acked_positions(self) -> None:
        """At-least-once, at the clean end of a run: the checkpoint spout stores where
        the data spouts were acked, so that a rerun does not read it again."""
        cp = self._checkpoint_spout
        if cp is None or cp.acked_positions is None:
            return
        try:
            cp.store_acked()
        except Exception as exc:  # nothing is lost: the rerun reads from the last prepare's
            log.warning(
                "could not store where the spouts were acked (%s); the next run reads "
                "again from the positions of the last checkpoint",
                exc,
            )

    def spout_refs(self) -> list[SpoutRef]:
        """This process's data spout tasks, as statestream._resume sees them."""
        return [
            SpoutRef(s.namespace, s.component, s.task_index, s.spec.parallelism, s.spout)
            for s in self.data_spouts
        ]

    def _rewind(self) -> None:
        """Exactly-once: go back to the last committed checkpoint within the run.

        As Flink restarts from its last checkpoint: the spouts are closed
        (their sources are released), the bolts are dropped as a crash would
        drop them (``cleanup`` is for the end of a run), the provider is
        closed without committing anything, and new tasks open and recover
        from the store as at a start; the spouts seek to the positions of
        the restored checkpoint, so nothing is counted twice.
        """
        assert self.standstill is not None
        self.rewinds += 1
        # Finish the attempt first: what is queued runs (no spout is polled,
        # so no tuple and no checkpoint tuple is emitted), so that every
        # message emitted in it has failed (an attempt of its own) or gone
        # through (its count forgotten; see statestream._retry). Acks
        # delivered to a data spout belong to committed trees (a fed-back
        # dead letter among them is done). Not the checkpoint spout's: an ack
        # of the PREPARE in flight would store COMMITTING and commit a cut
        # this failure undoes.
        self._finish_queued(self.data_spouts)
        complete = not any(b.inbox or b.control for b in self.bolts)  # none paused
        # What was emitted and not acked is replayed: the sources seek back,
        # and the dead letters fed back go out again.
        for rid in self.replaying:
            self.replays_for(rid.record.namespace).appendleft(rid)
        self.replaying.clear()
        self.fail_causes.clear()
        for retries in self._retries.values():
            retries.rewound(complete=complete)
        for spout in self.spouts:
            spout.settles.clear()  # the new instances hear of them when they emit them
        self._release_spouts()
        for tasks in self.tasks_of.values():
            for t in tasks:
                m = t.metrics()
                past = self._past.setdefault(
                    (t.component, t.task_index), TaskMetrics(t.component, t.task_index)
                )
                m.queued = m.retrying = 0
                past.add(m)
        for key, value in self._live_counters().items():
            if key in ("timed_out", "acker_expired", "late_acks"):
                self._past_counters[key] = self._past_counters.get(key, 0) + value
        self._timers = []
        self._states = {}
        provider, self.provider = self.provider, None
        if provider is not None:
            provider.close()
        self.standstill.on_rewind()
        self._build()
        self._started = False
        self.open()
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))
        if self.link is None or self.link.index == 0:  # every worker rewinds: one line
            log.warning(
                "exactly-once state: a tuple or checkpoint failed; went back to the last "
                "committed checkpoint (rewind %d)",
                self.rewinds,
            )

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
        if self._claim.can_lapse:
            self._timers.append([now + _CLAIM_CHECK_S, _CLAIM_CHECK_S, self._check_claim])
        # So that step() fires timers when a caller drives the loop itself.
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))

    def _check_claim(self) -> None:
        """Stop the run once its claim of the store is lost (a lease taken over, or
        lapsed while the store could not be reached): another run may be writing
        this topology's state, and two would undo each other's checkpoints.
        :meth:`run` raises :attr:`fatal`; what was committed stays."""
        if self.fatal is None and self._claim.lost is not None:
            try:
                self._claim.check()
            except StateLockedError as exc:
                self.fatal = exc
                self._stop = True

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

    def _release_spouts(self) -> None:
        for spout in self.spouts:
            try:
                spout.spout.close()
            except Exception as exc:
                spout.report(exc, "close()")

    def _abandon(self) -> None:
        """Die as a process would, as far as one process can: bolts are dropped
        without ``cleanup`` and nothing is committed; the spouts are closed only
        to release their sources (an open file, say) and the store's connection
        is dropped, which the operating system would do for a dead process."""
        self._closed = True
        self._release_spouts()
        if self.provider is not None:
            self.provider.close()
        self._claim.release()  # as a dead process's lock goes with it

    def close(self) -> None:
        """Call ``close``/``cleanup`` on every task; idempotent."""
        if self._closed or not self._started:
            return
        self._closed = True
        try:
            self._release_spouts()
            for bolt in self.bolts:
                try:
                    bolt.executor.cleanup()
                except Exception as exc:
                    bolt.report(exc, "cleanup()")
            if self.provider is not None:
                self.provider.close()
        finally:
            self._claim.release()

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
        standstill = self.standstill
        if standstill is None:
            for spout in self.spouts:
                if spout.poll():
                    busy = True
            return busy
        if standstill.rewind:
            self._rewind()
            return True
        return self._step_spouts(standstill) or busy

    def _step_spouts(self, standstill: Standstill) -> bool:
        """Exactly-once: poll the spouts as the standstill decides."""
        cp = self._checkpoint_spout
        assert cp is not None
        queued = any(b.inbox or b.control for b in self.bolts)
        decision = standstill.step(
            cp.prepare_due(), queued, cp.committed_txid, cp.coordinator.pending is not None
        )
        if decision is StandstillStep.CUT:
            # A failure of a tuple before the cut undoes it: hear of them first.
            for s in self.data_spouts:
                if s.completions:
                    s._drain_completions()
            if standstill.rewind or standstill.failed:
                standstill.rewind = True
                return True
            standstill.on_cut()
            for s in self.data_spouts:
                s.retries.passed_cut()
                s.release_held()
            # Nothing is queued: the positions mark exactly what the states hold.
            positions = {
                s.namespace: check_position(s.component, s.spout.position())  # type: ignore[attr-defined]
                for s in self.data_spouts
            }
            cp.request_early()
            cp.start_prepare(positions)
        busy = False
        offered = 0
        for spout in self.spouts:
            if decision is StandstillStep.DRAIN and not spout.system:
                if spout.completions:
                    spout._drain_completions()
                    busy = True
                continue
            if spout.system:
                busy = spout.poll() or busy
                continue
            emitted = spout.emitted + spout.held
            if spout.poll(standstill.allowance(_SPOUT_BATCH)):
                busy = True
            offered += spout.emitted + spout.held - emitted
        standstill.emitted += offered
        if decision is StandstillStep.POLL and not (offered or queued) and standstill.ends_early():
            cp.request_early()
        return busy

    def in_flight(self) -> int:
        """Tuples queued or tracked but not yet complete."""
        n = sum(len(b.inbox) for b in self.bolts)
        n += sum(len(s.pending) + len(s.completions) for s in self.spouts)
        return n

    def idle(self) -> bool:
        """Every spout is exhausted and nothing is in flight."""
        return all(s.idle() for s in self.data_spouts) and not any(b.inbox for b in self.bolts)

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run until stopped, until ``duration`` seconds pass, or (``until_idle``) until
        every spout is exhausted and nothing is in flight. Closes the tasks at the end."""
        self.open()
        clock = self.clock
        start = self._start_time = clock.monotonic()
        deadline = start + duration if duration is not None else None
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))
        reason = "stopped"
        gc_before = _tune_gc()
        try:
            while not self._stop:
                busy = self.step()
                if self.after_step is not None:
                    self.after_step()
                if deadline is not None and clock.monotonic() >= deadline:
                    reason = "duration"
                    break
                if not busy:
                    if until_idle:
                        if self.idle():
                            reason = "idle"
                            break
                        self._explain_wait()
                    if self._waiting_for_commit():
                        continue
                    clock.sleep(self.idle_sleep)
            if self.fatal is not None:
                raise self.fatal
            self._finish_queued()
            self.store_acked_positions()
        except SimulatedCrash:
            self._abandon()
            raise
        finally:
            _restore_gc(gc_before)
            self.close()
            self._log_repeats()
        return RunResult(
            self.metrics(), list(self.errors), clock.monotonic() - start, reason, self.counters()
        )

    def _explain_wait(self) -> None:
        """``until_idle``: once no data has moved for a message timeout, say why the
        run is not done (then again every timeout), instead of waiting in silence."""
        now = self.clock.monotonic()
        if now < self._wait_check_at:
            return
        self._wait_check_at = now + 1.0
        moved = tuple((s.emitted, s.acked, s.failed, s.retries.waiting) for s in self.data_spouts)
        if moved != self._wait_moved:
            self._wait_moved, self._quiet_since = moved, now
            return
        timeout = float(self.config["topology.message.timeout.secs"])
        if now - self._quiet_since < timeout or now - self._wait_said_at < timeout:
            return
        self._wait_said_at = now
        log.warning(
            "%s: --until-idle has seen no progress for %.0f s and is not done: %s",
            self.topology.name,
            now - self._quiet_since,
            "; ".join(self.waiting_for()) or "nothing known holds it (a bug: please report)",
        )

    def waiting_for(self) -> list[str]:
        """Why the run is not idle: the spouts not exhausted, the tuple trees and
        retries they wait for, the bolts holding input."""
        reasons = []
        for s in self.data_spouts:
            name = f"spout {s.component!r}" + (
                f" task {s.task_index}" if s.spec.parallelism > 1 else ""
            )
            try:
                exhausted = s.spout.exhausted()
            except Exception:  # reported where it is called for idleness
                exhausted = False
            if not exhausted:
                reasons.append(
                    f"{name} has not reported exhausted() (emitted {s.emitted:,}, "
                    f"acked {s.acked:,}); a finite spout must return True once it is done"
                )
            if len(s.pending):
                reasons.append(f"{name} waits for {len(s.pending):,} tuple trees to complete")
            failing = s.retries.failures
            if failing:
                worst = sorted(failing.items(), key=lambda kv: -kv[1])[:5]
                ids = ", ".join(f"{k!r} ({n} failures)" for k, n in worst)
                reasons.append(f"{name} has messages failing again and again: {ids}")
        for b in self.bolts:
            if b.inbox:
                reasons.append(
                    f"bolt {b.component!r} task {b.task_index} has {len(b.inbox):,} tuples queued"
                )
            if b.held:
                trees = len({root for root, _ in b.held})
                reasons.append(
                    f"bolt {b.component!r} task {b.task_index} holds acks of {trees:,} "
                    "tuple trees until its next commit"
                )
        return reasons

    def _waiting_for_commit(self) -> bool:
        """If nothing moves but stateful tasks hold acks, ask for a checkpoint now.

        Without this a finite input would wait up to a whole checkpoint
        interval at its end, and a trickle of tuples would wait that long for
        its acks. True if a checkpoint was requested.
        """
        cp = self._checkpoint_spout
        if cp is None or cp.coordinator.pending:
            return False
        if not any(t.awaits_checkpoint() for t in self.bolts):
            return False
        cp.request_early()
        return True

    def _finish_queued(self, spouts: Sequence[SpoutTask] | None = None) -> None:
        """Process what is already queued (no new spout tuples) so that a stop
        does not strand work mid-topology; completions reach their spouts (or
        only ``spouts``)."""
        busy = True
        while busy:
            busy = False
            for bolt in self.bolts:
                if (bolt.inbox or bolt.control) and bolt.drain():
                    busy = True
        for spout in self.spouts if spouts is None else spouts:
            if spout.completions:
                spout._drain_completions()

    # -- observation -----------------------------------------------------------
    def counters(self) -> dict[str, int]:
        c = self._live_counters()
        for key, value in self._past_counters.items():
            c[key] = c.get(key, 0) + value
        c["dead_lettered"] = sum(m.dead_lettered for m in self.task_metrics())
        if self.exactly_once:
            c["rewinds"] = self.rewinds
        return c

    def _live_counters(self) -> dict[str, int]:
        """The counters of the tasks built last (a rewind builds new ones)."""
        c = {
            "untracked_acks": self.untracked_acks,
            "timed_out": sum(s.timed_out for s in self.spouts),
            "pending": sum(len(s.pending) for s in self.spouts),
            "retrying": sum(s.retries.waiting for s in self.data_spouts),
            "skipped_dead_letters": self.skipped_settled,
        }
        if self.acking is not None:
            c["acker_pending"] = self.acking.pending()
            c["acker_expired"] = self.acking.timeouts
            c["late_acks"] = sum(getattr(led, "late_acks", 0) for led in self.acking.ledgers)
        return c

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals (a consistent-enough snapshot; safe to call from another thread)."""
        out: dict[str, TaskMetrics] = {}
        for m in self.task_metrics():
            out.setdefault(m.component, TaskMetrics(m.component, -1)).add(m)
        return out

    def task_metrics(self) -> list[TaskMetrics]:
        out = []
        for tasks in list(self.tasks_of.values()):
            for t in tasks:
                m = t.metrics()
                past = self._past.get((t.component, t.task_index))
                if past is not None:
                    m.add(past)
                out.append(m)
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
