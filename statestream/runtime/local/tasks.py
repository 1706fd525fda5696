"""What every task of the local runtime shares: identity, counters, output
streams and their routes, and the delivery fast paths of an emit."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import xxhash

from ..._components import task_namespace
from ..._errors import TupleError
from ..._executors import NativeCollector
from ..._picklable import unpicklable
from ..._results import TaskMetrics
from ..._routing import custom_choose, stable_hash
from ..._text import error_line
from ..._topology import ComponentSpec
from ..._tuple import Origin, Tuple, check_emit
from ..metrics import TaskTiming
from .acking import RemoteInbox

if TYPE_CHECKING:
    from .host import TaskHost


_xxh3: Final = xxhash.xxh3_64_intdigest

# Route kinds, as small ints so the emit loop compares cheaply.
SHUFFLE: Final = 0
FIELDS1: Final = 1
FIELDSN: Final = 2
GLOBAL: Final = 3
ALL: Final = 4
DIRECT: Final = 5
CUSTOM: Final = 6
KIND = {
    "shuffle": SHUFFLE,
    "none": SHUFFLE,
    "global": GLOBAL,
    "all": ALL,
    "direct": DIRECT,
    "custom": CUSTOM,
}

_ROUTE_MEMO: Final = 50_000  # str values a route remembers the target of (a few MB at most)


@final
class Stream:
    """What a task emits on one output stream: its origin, arity, routes and kind.

    A native class, not a tuple: the compiled core reads a field directly,
    where it unpacks and type-checks a whole tuple at each subscript.
    """

    __slots__ = ("arity", "direct", "origin", "routes")

    def __init__(self, origin: Origin, arity: int, routes: list[Route], direct: bool) -> None:
        self.origin = origin
        self.arity = arity
        self.routes = routes
        self.direct = direct


class Route:
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
        if kind == FIELDS1:
            return [self.value_index(values)]
        if kind == FIELDSN:
            return [stable_hash([values[i] for i in self.key]) % self.n]
        if kind == SHUFFLE:
            i = self.rr
            self.rr = i + 1 if i + 1 < self.n else 0
            return [i]
        if kind == GLOBAL:
            return [0]
        if kind == ALL:
            return list(range(self.n))
        if kind == DIRECT:
            idx = self.index_of_task.get(direct_task)  # type: ignore[arg-type]
            return [] if idx is None else [idx]
        return custom_choose(self.custom, values, self.n)


class Task(NativeCollector):
    """State common to every task: identity, counters, routes out."""

    def __init__(self, rt: TaskHost, spec: ComponentSpec, task_index: int, task_id: int):
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
        # Sampled timing (runtime.metrics): one in sample_every drains (a bolt)
        # or emits (a spout) is timed into the bank's record of this task, so a
        # tuple costs a countdown, never a clock read.
        self.timing: TaskTiming = rt.bank.timing(spec.id, task_index)
        self.sample_every = rt.bank.every
        self.sample_in = rt.bank.first_sample
        self.tracking = rt.acking is not None  # acking on: anchored tuples get edge ids
        self.streams: dict[str, Stream] = {}
        # streams["default"], read without a dict lookup by the emits that name
        # no stream (nearly all of them): about 100 instructions per emit.
        self.default_stream: Stream | None = None
        self.out_queues: list[deque[Any]] = []
        # Every queue a data emit of this task can reach (out_queues leaves out
        # those on a cycle back to it): what a retry in place takes back.
        self.emit_queues: list[Any] = []

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

    def _stream_entry(self, stream: str, values: Sequence[Any], direct: bool) -> Stream:
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

    def _check_direct(self, routes: list[Route], task: int) -> None:
        if not any(task in r.index_of_task for r in routes):
            valid = sorted(t for r in routes for t in r.index_of_task)
            raise TupleError(
                f"component {self.component!r} emit_direct to task {task}, which does not "
                f"subscribe to that stream (subscribed tasks: {valid}); pick one from "
                "context.component_tasks(<bolt>)"
            )

    def deliver_untracked(
        self, origin: Origin, routes: list[Route], values: Sequence[Any], direct: int | None
    ) -> None:
        # The hot path. One tuple object per target task, never shared: a
        # receiving task marks its input ``done`` when it acks it, so a shared
        # object would make the second receiver's ack look like a double ack.
        for r in routes:
            kind = r.kind
            if kind == FIELDS1:
                r.puts[r.value_index(values)](Tuple(values, origin))
            elif kind == SHUFFLE:
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
        routes: list[Route],
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
            if kind == FIELDS1:
                targets: Sequence[int] = (r.value_index(values),)
            elif kind == SHUFFLE:
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
        routes: list[Route],
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
