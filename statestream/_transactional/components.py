"""The ordinary components a transactional topology is built from.

``TransactionalTopologyBuilder.build()`` turns a transactional topology
into a plain :class:`~statestream.Topology` of these, so a runtime runs it
as any other (it holds no transactional logic):

* :class:`TransactionalCoordinatorSpout` (``$coordinator``, one task) wraps
  the pure :class:`~statestream._transactional.coordinator.TransactionCoordinator`
  and the spout's coordinator part, stores the coordinator's state in the
  state provider before each emission, and sends batch tuples on ``$batch``
  and commit tuples on ``$commit``, each tracked by the acker.
* :class:`EmitterExecutor` (the spout's id and parallelism) gets every
  batch tuple (all grouping) and runs the spout's emitter part, each tuple
  anchored to the batch tuple and counted per target task; then it tells
  every downstream task how many it sent it (``$coord``).
* :class:`BatchBoltExecutor` wraps a batch bolt (or a basic bolt): a copy of
  the bolt per attempt, completion detected by counts
  (:class:`~statestream._transactional.completion.BatchTracker`), then
  ``finish_batch`` and its own counts downstream.

How the acker sees a transaction: the batch tuple is the root of the
processing tree. A bolt of the processing phase holds the count tuples it
got until its ``finish_batch`` has run and anchors what it emits there to
one of them, so the tree completes only when every such bolt has finished
the batch. A committer, and every bolt downstream of one (the commit phase),
acks what it gets in the processing phase at once; its ``finish_batch``
runs in the commit tree, rooted at the commit tuple, which it holds (or the
counts from its commit-phase upstream) until then. Every tuple of both
trees carries the attempt as its first value.

A batch that keeps failing (a poison tuple): the coordinator emits it again
after the retry policy's delay, and after ``statestream.retry.max.attempts``
failed attempts in a row the coordinator spout stops the run with a
:class:`~statestream.RuntimeFailure` naming the transaction and the last
error the executors noted for it (:func:`_note_failure`), since a batch
cannot skip a tuple.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from .._components import (
    BasicBolt,
    Bolt,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
)
from .._errors import ConfigError, FailedException, RuntimeFailure, TupleError
from .._retry import RetryPolicy
from .._tuple import DEFAULT_STREAM, Fields, Tuple, check_emit
from .api import (
    BatchBolt,
    BatchOutputCollector,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from .completion import BatchTracker, LogicalRoute, Router
from .coordinator import (
    Event,
    GivenUp,
    StoredTransactions,
    TransactionAttempt,
    TransactionCoordinator,
)

__all__ = [
    "BATCH_FIELDS",
    "BATCH_STREAM",
    "COMMIT_FIELDS",
    "COMMIT_STREAM",
    "COORDINATOR",
    "COORD_FIELDS",
    "COORD_STREAM",
    "BatchBoltExecutor",
    "CoordinatorStore",
    "EmitterExecutor",
    "TransactionalCoordinatorSpout",
    "adapt_spout",
    "coordinator_namespace",
    "partitions_namespace",
]

COORDINATOR = "$coordinator"
BATCH_STREAM = "$batch"
COMMIT_STREAM = "$commit"
COORD_STREAM = "$coord"
BATCH_FIELDS = Fields("attempt", "metadata", "committed")
COMMIT_FIELDS = Fields("attempt")
COORD_FIELDS = Fields("attempt", "count")


def coordinator_namespace(topology: str) -> str:
    """Where the coordinator of transactional topology ``topology`` keeps its state."""
    return f"$transactional-{topology}"


class CoordinatorStore:
    """The coordinator's :class:`StoredTransactions` in ``state`` (a KeyValueState of
    namespace :func:`coordinator_namespace`), as JSON under one key.

    The one stored format: the ``$coordinator`` spout and a runtime whose
    driver plays the coordinator (Spark) both use it, so a store one left
    behind, killed or not, is continued by the other.
    """

    KEY = "transactions"

    def __init__(self, state: Any) -> None:
        self.state = state

    def load(self) -> StoredTransactions | None:
        """What was stored last (None on a fresh store); StateCorruptError if unreadable."""
        raw = self.state.get(self.KEY)
        return StoredTransactions.from_json(raw) if raw is not None else None

    def save(self, stored: StoredTransactions) -> None:
        """Store ``stored`` durably before returning (the coordinator's ``save``)."""
        self.state.put(self.KEY, stored.to_json())
        self.state.commit()


# (topology, txid, attempt id) -> (component, "Type: text") of the error that failed
# that attempt, as a batch executor of this process saw it; what the coordinator
# spout names when it gives up. Bounded; an executor in another process (Spark)
# notes its errors where nobody reads them, which is harmless.
_FAILURES: dict[tuple[str, int, int], tuple[str, str]] = {}
_FAILURES_KEPT = 1024


def _note_failure(context: TopologyContext, attempt: Any, exc: BaseException) -> None:
    """Note that ``exc`` failed ``attempt`` at this component (the first error wins)."""
    if not isinstance(attempt, TransactionAttempt):
        return
    key = (context.topology_name, attempt.transaction_id, attempt.attempt_id)
    if key in _FAILURES:
        return
    if len(_FAILURES) >= _FAILURES_KEPT:
        del _FAILURES[next(iter(_FAILURES))]
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    _FAILURES[key] = (context.component_id, text[:500])


def _given_up_message(topology: str, g: GivenUp, committed: int, max_attempts: int) -> str:
    """What the run stops with once transaction ``g.txid`` failed its last attempt."""
    txid, attempt_id = g.attempt.transaction_id, g.attempt.attempt_id
    noted = _FAILURES.pop((topology, txid, attempt_id), None)
    if noted is not None:
        last = f"last error: {noted[1]} (in {noted[0]!r})"
    elif g.event is Event.TIMED_OUT:
        last = "last error: its tuples timed out (topology.message.timeout.secs)"
    else:
        phase = "commit" if g.event is Event.COMMIT_FAILED else "batch"
        last = f"last error: unknown (its {phase} tuple tree failed)"
    return (
        f"transactional topology {topology!r}: transaction {txid} failed {g.attempts} "
        f"time{'' if g.attempts == 1 else 's'} in a row (statestream.retry.max.attempts: {max_attempts}); {last}. "
        f"A transactional batch cannot skip a tuple (a replayed transaction must be the "
        f"same batch, and commits go in txid order), so the run stops: fix the bolt and run "
        f"again; the next run resumes after transaction {committed}, the last committed one"
    )


def partitions_namespace(topology: str, spout_id: str) -> str:
    """Where a partitioned spout's emitters keep each partition's metadata per txid."""
    return f"$transactional-{topology}-{spout_id}"


def _user_streams(obj: Any) -> dict[str, tuple[Fields, bool]]:
    declarer = OutputFieldsDeclarer()
    obj.declare_output_fields(declarer)
    return dict(declarer.streams)


# --------------------------------------------------------------------------- collector


class _Collector:
    """The :class:`BatchOutputCollector` of one attempt at one task: routes, counts, anchors."""

    __slots__ = ("_declared", "_emit_direct", "_report", "anchor", "attempt", "router", "sent")

    def __init__(
        self,
        attempt: TransactionAttempt,
        router: Router,
        declared: Mapping[str, tuple[Fields, bool]],
        collector: OutputCollector,
        anchor: Tuple | None,
    ) -> None:
        self.attempt = attempt
        self.router = router
        self._declared = declared
        self._emit_direct = collector.emit_direct
        self._report = collector.report_error
        self.anchor = anchor
        self.sent: dict[int, int] = {}

    def _check(self, stream: str, values: Sequence[Any], direct: bool) -> None:
        entry = self._declared.get(stream)
        if entry is None or len(values) != len(entry[0]) or entry[1] != direct:
            # The user declared the stream as plain or direct; the builder made
            # every data stream direct underneath, so check against the user's.
            check_emit(self.router.component, 0, stream, values, self._declared, direct)
        first = values[0] if values else None
        if first is not self.attempt and first != self.attempt:
            raise TupleError(
                f"component {self.router.component!r} emitted {list(values)!r} on stream "
                f"{stream!r}: the first value of every tuple in a transactional topology is "
                f"the batch's TransactionAttempt ({self.attempt!r}); emit [attempt, ...]"
            )

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        self._check(stream, values, False)
        sent = self.sent
        for task in self.router.targets(stream, values):
            sent[task] = sent.get(task, 0) + 1
            self._emit_direct(task, values, self.anchor, stream)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        self._check(stream, values, True)
        self.router.check_direct(stream, task)
        self.sent[task] = self.sent.get(task, 0) + 1
        self._emit_direct(task, values, self.anchor, stream)

    def report_error(self, error: BaseException) -> None:
        self._report(error)

    def send_counts(self, targets: Sequence[int]) -> None:
        """Tell every downstream task how many tuples of the attempt it got from here."""
        sent = self.sent
        for task in targets:
            self._emit_direct(task, [self.attempt, sent.get(task, 0)], self.anchor, COORD_STREAM)


class _Buffer:
    """A collector that keeps emits until :meth:`flush` (metadata is stored before they go)."""

    def __init__(self, collector: BatchOutputCollector) -> None:
        self.collector = collector
        self.items: list[tuple[int | None, Sequence[Any], str]] = []

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        self.items.append((None, values, stream))

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        self.items.append((task, values, stream))

    def report_error(self, error: BaseException) -> None:
        self.collector.report_error(error)

    def flush(self) -> None:
        collector = self.collector
        for task, values, stream in self.items:
            if task is None:
                collector.emit(values, stream)
            else:
                collector.emit_direct(task, values, stream)
        self.items = []


# --------------------------------------------------------------------------- spouts


class _PartitionStore:
    """Each partition's metadata per txid, in the state provider (keys: partition numbers).

    Kept: the metadata of the last committed txid and of every later one.
    """

    def __init__(self, state: Any) -> None:
        self.state = state

    def metas(self, partition: int) -> dict[int, Any]:
        raw = self.state.get(partition) or {}
        return {int(t): m for t, m in raw.items()}

    def latest(self, partition: int) -> Any:
        metas = self.metas(partition)
        return metas[max(metas)] if metas else None

    @staticmethod
    def before(metas: Mapping[int, Any], txid: int) -> Any:
        earlier = [t for t in metas if t < txid]
        return metas[max(earlier)] if earlier else None

    def write(self, updates: Mapping[int, Mapping[int, Any]]) -> None:
        if not updates:
            return
        for partition, metas in updates.items():
            self.state.put(partition, {str(t): m for t, m in sorted(metas.items())})
        self.state.commit()


class _PartitionedCoordinator(TransactionalSpout.Coordinator):
    def __init__(self, user: Any, store: _PartitionStore) -> None:
        self.user = user
        self.store = store

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        return int(self.user.number_of_partitions())

    def is_ready(self) -> bool:
        if not self.user.is_ready():
            return False
        n = int(self.user.number_of_partitions())
        return not all(self.user.partition_exhausted(p, self.store.latest(p)) for p in range(n))

    def close(self) -> None:
        self.user.close()


class _PartitionedEmitter(TransactionalSpout.Emitter):
    """Runs a partitioned emitter over this task's partitions (``p % tasks == index``)."""

    def __init__(
        self, user: Any, store: _PartitionStore, index: int, tasks: int, opaque: bool
    ) -> None:
        self.user = user
        self.store = store
        self.index = index
        self.tasks = tasks
        # The emitter's kind decides how replays are emitted, so a spout may pick
        # either kind when asked for its emitter (from a config key, say).
        if isinstance(user, OpaquePartitionedTransactionalSpout.Emitter):
            opaque = True
        elif isinstance(user, PartitionedTransactionalSpout.Emitter):
            opaque = False
        self.opaque = opaque
        self._cleanup = 0

    def emit_batch(
        self, attempt: TransactionAttempt, metadata: Any, collector: BatchOutputCollector
    ) -> None:
        txid = attempt.transaction_id
        buffer = _Buffer(collector)
        updates: dict[int, dict[int, Any]] = {}
        for p in range(self.index, int(metadata), self.tasks):
            metas = self.store.metas(p)
            keep = {t: m for t, m in metas.items() if t >= self._cleanup or t == max(metas)}
            if self.opaque:
                last = _PartitionStore.before(metas, txid)
                new = self.user.emit_partition_batch(attempt, buffer, p, last)
                # Later txids will be emitted again from this one's end.
                keep = {t: m for t, m in keep.items() if t < txid}
                keep[txid] = new
            elif txid in metas:
                self.user.emit_partition_batch(attempt, buffer, p, metas[txid])
            else:
                last = _PartitionStore.before(metas, txid)
                keep[txid] = self.user.emit_partition_batch_new(attempt, buffer, p, last)
            if keep != metas:
                updates[p] = keep
        # Stored before anything is emitted: a replay after a crash finds it.
        self.store.write(updates)
        buffer.flush()

    def cleanup_before(self, txid: int) -> None:
        self._cleanup = txid  # applied with the next write

    def close(self) -> None:
        self.user.close()


class _PartitionedAdapter(TransactionalSpout):
    """A (opaque) partitioned spout as a :class:`TransactionalSpout`: the coordinator's
    metadata is the number of partitions; partition metadata is stored per txid."""

    def __init__(self, spout: Any, spout_id: str, opaque: bool) -> None:
        self.spout = spout
        self.spout_id = spout_id
        self.opaque = opaque

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.spout.declare_output_fields(declarer)

    def _store(self, context: TopologyContext) -> _PartitionStore:
        return _PartitionStore(
            context.state(partitions_namespace(context.topology_name, self.spout_id))
        )

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> TransactionalSpout.Coordinator:
        return _PartitionedCoordinator(
            self.spout.get_coordinator(conf, context), self._store(context)
        )

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> TransactionalSpout.Emitter:
        return _PartitionedEmitter(
            self.spout.get_emitter(conf, context),
            self._store(context),
            context.task_index,
            context.parallelism,
            self.opaque,
        )


def adapt_spout(spout: Any, spout_id: str) -> TransactionalSpout:
    """Any of the three spout kinds as a :class:`TransactionalSpout`."""
    if isinstance(spout, TransactionalSpout):
        return spout
    if isinstance(spout, PartitionedTransactionalSpout):
        return _PartitionedAdapter(spout, spout_id, opaque=False)
    if isinstance(spout, OpaquePartitionedTransactionalSpout):
        return _PartitionedAdapter(spout, spout_id, opaque=True)
    raise TypeError(type(spout).__name__)


class TransactionalCoordinatorSpout(Spout):
    """``$coordinator``: starts, re-emits and commits transactions.

    One task. Its state (:class:`StoredTransactions`) lives in namespace
    ``$transactional-<topology>`` and is committed before each batch tuple
    goes out. Exhausted once nothing is active and the spout is not ready.

    A failed transaction is emitted again after the retry policy's delay
    (``statestream.retry.*``); the runtime calls :meth:`fail` once the
    policy's first delay has passed (each attempt is a new message id, so it
    fails once), and the coordinator waits only the rest. Once a transaction
    failed ``statestream.retry.max.attempts`` times in a row, the transactions
    before it still commit, then :meth:`next_tuple` raises
    :class:`~statestream.RuntimeFailure`.
    """

    def __init__(self, spout: TransactionalSpout) -> None:
        self.spout = spout

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(BATCH_STREAM, BATCH_FIELDS)
        declarer.declare_stream(COMMIT_STREAM, COMMIT_FIELDS)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        if int(conf["topology.acker.executors"]) < 1:
            raise ConfigError(
                f"transactional topology {context.topology_name!r} learns that a batch was "
                "processed or committed from the acker; set topology.acker.executors to 1 or more"
            )
        self.clock = context.clock
        self.store = CoordinatorStore(context.state(coordinator_namespace(context.topology_name)))
        timeout_ms = (
            float(conf["topology.message.timeout.secs"]) * 1000.0
            if conf["topology.enable.message.timeouts"]
            else None
        )
        self.retry = RetryPolicy.from_config(conf)
        self.protocol = TransactionCoordinator(
            self.store.load(),
            conf.get("topology.max.spout.pending") or 1,
            timeout_ms,
            self.store.save,
            retry=self.retry,
            heard_after_ms=self.retry.delay(1) * 1000.0,
        )
        self.coordinator = self.spout.get_coordinator(conf, context)

    def _now_ms(self) -> float:
        return self.clock.monotonic() * 1000.0

    def _stop_if_given_up(self) -> None:
        given_up = self.protocol.given_up
        if given_up is not None and self.protocol.stopped:
            raise RuntimeFailure(
                _given_up_message(
                    self.context.topology_name,
                    given_up,
                    self.protocol.committed,
                    self.retry.max_attempts,
                )
            )

    def next_tuple(self) -> None:
        self._stop_if_given_up()
        emissions = self.protocol.poll(
            self._now_ms(),
            ready=self.coordinator.is_ready,
            initialize=self.coordinator.initialize_transaction,
        )
        self._stop_if_given_up()
        emit = self.collector.emit
        for e in emissions:
            if e.kind == "batch":
                emit([e.attempt, e.metadata, e.committed], e.msg_id, BATCH_STREAM)
            else:
                emit([e.attempt], e.msg_id, COMMIT_STREAM)

    def ack(self, msg_id: Any) -> None:
        self.protocol.on_ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.protocol.on_fail(msg_id, self._now_ms())

    def dead_lettered(self, msg_id: Any) -> None:
        # With statestream.retry.max.attempts 1 the runtime gives up on the
        # attempt's tuple at once: for a transaction that is a failure (its
        # last attempt), never an ack.
        self.protocol.on_fail(msg_id, self._now_ms())

    def exhausted(self) -> bool:
        return self.protocol.exhausted(self.coordinator.is_ready)

    def close(self) -> None:
        coordinator = getattr(self, "coordinator", None)
        if coordinator is not None:
            coordinator.close()


# --------------------------------------------------------------------------- bolts


class _Executor(Bolt):
    """What the emitter and batch-bolt executors share: routing and declared streams."""

    def __init__(self, user: Any, routes: Mapping[str, Sequence[LogicalRoute]]) -> None:
        self.user = user
        self.routes = {s: list(rs) for s, rs in routes.items()}

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for stream, (fields, _) in _user_streams(self.user).items():
            declarer.declare_stream(stream, fields, direct=True)
        declarer.declare_stream(COORD_STREAM, COORD_FIELDS, direct=True)

    def component_configuration(self) -> dict[str, Any] | None:
        conf: dict[str, Any] | None = self.user.component_configuration()
        return conf

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        targets = {r.target for rs in self.routes.values() for r in rs}
        self.router = Router(
            context.component_id,
            self.routes,
            {t: context.component_tasks(t) for t in targets},
            context.task_index,
        )
        self.count_targets = self.router.downstream_tasks()
        self.declared = _user_streams(self.user)

    def _collector(self, attempt: TransactionAttempt, anchor: Tuple | None) -> _Collector:
        return _Collector(attempt, self.router, self.declared, self.collector, anchor)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.user!r})"


class EmitterExecutor(_Executor):
    """The spout's emitter part as a bolt on ``$batch``."""

    user: TransactionalSpout

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.emitter = self.user.get_emitter(conf, context)
        #: txid -> attempt id of the attempts this task emitted (see ``_remember``).
        self.finished: dict[int, int] = {}

    def execute(self, tuple: Tuple) -> None:
        attempt, metadata, committed = tuple.values
        out = self._collector(attempt, tuple)
        if committed:
            # Before emitting: a task that lives for one batch (Spark) must
            # know it when it stores its partitions' metadata.
            self.emitter.cleanup_before(committed)
        try:
            self.emitter.emit_batch(attempt, metadata, out)
        except FailedException as exc:
            _note_failure(self.context, attempt, exc)
            self.collector.fail(tuple)
            return
        except Exception as exc:
            _note_failure(self.context, attempt, exc)
            self.collector.report_error(exc)
            self.collector.fail(tuple)
            return
        out.send_counts(self.count_targets)
        self.collector.ack(tuple)
        _remember(self.finished, attempt)

    def cleanup(self) -> None:
        emitter = getattr(self, "emitter", None)
        if emitter is not None:
            emitter.close()


def _remember(finished: dict[int, int], attempt: TransactionAttempt) -> None:
    """Record that a task finished ``attempt``: what a runtime without an acker
    (Spark) asks a task at the end of a phase. Bounded as ``done`` is."""
    finished[attempt.transaction_id] = attempt.attempt_id
    if len(finished) > 4096:
        for old in sorted(finished)[:2048]:
            del finished[old]


class _Batch:
    """One attempt at one batch-bolt task."""

    __slots__ = ("attempt", "bolt", "held", "out", "tracker")

    def __init__(self, attempt: TransactionAttempt, tracker: BatchTracker, out: _Collector) -> None:
        self.attempt = attempt
        self.tracker = tracker
        self.out = out
        self.bolt: Any = None
        self.held: list[Tuple] = []


class BatchBoltExecutor(_Executor):
    """A batch bolt (or basic bolt) with count-based completion (Storm's CoordinatedBolt).

    ``sources`` maps each upstream component to whether it belongs to the
    commit phase; ``committer`` makes ``finish_batch`` wait for the commit
    tuple; ``commit_phase`` is true for a committer and for every bolt
    downstream of one (see the module docstring for what each holds).
    """

    def __init__(
        self,
        bolt: BatchBolt[Any] | BasicBolt,
        routes: Mapping[str, Sequence[LogicalRoute]],
        *,
        sources: Mapping[str, bool],
        committer: bool,
        commit_phase: bool,
    ) -> None:
        super().__init__(bolt, routes)
        self.sources = dict(sources)
        self.committer = committer
        self.commit_phase = commit_phase

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.upstream = sum(len(context.component_tasks(s)) for s in self.sources)
        self.hold_from = frozenset(
            t
            for s, commit_phase in self.sources.items()
            if commit_phase or not self.commit_phase
            for t in context.component_tasks(s)
        )
        self.basic = isinstance(self.user, BasicBolt)
        if self.basic:
            self.user.prepare(conf, context)
        else:
            # Copied, not pickled: a class shipped by value would carry its
            # module's globals along (a connection a committer opened, say).
            self._prototype = copy.deepcopy(self.user)
        self.batches: dict[int, _Batch] = {}
        # txid -> the newest attempt finished or failed here: older tuples are stale.
        self.done: dict[int, int] = {}
        #: txid -> attempt id of the attempts whose batch this task finished
        #: (``finish_batch`` ran and the counts went out); see ``_remember``.
        self.finished: dict[int, int] = {}

    def _batch(self, attempt: TransactionAttempt) -> _Batch | None:
        txid, aid = attempt.transaction_id, attempt.attempt_id
        b = self.batches.get(txid)
        if b is not None:
            current = b.attempt.attempt_id
            if aid == current:
                return b
            if aid < current:
                return None
            self._abandon(b)  # superseded by a newer attempt
        if self.done.get(txid, 0) >= aid:
            return None
        b = _Batch(
            attempt,
            BatchTracker(self.upstream, self.committer),
            self._collector(attempt, None),
        )
        if self.basic:
            b.bolt = self.user
        else:
            b.bolt = copy.deepcopy(self._prototype)
            b.bolt.prepare(self.conf, self.context, b.out, attempt)
        self.batches[txid] = b
        return b

    def execute(self, tuple: Tuple) -> None:
        attempt = tuple.values[0]
        try:
            b = self._batch(attempt)
        except Exception as exc:  # the bolt's prepare raised
            _note_failure(self.context, attempt, exc)
            self.collector.report_error(exc)
            self.collector.fail(tuple)
            return
        if b is None:
            self.collector.fail(tuple)  # a tuple of an attempt given up on
            return
        stream = tuple.origin.stream
        if stream == COORD_STREAM:
            b.tracker.report(tuple.origin.task, tuple.values[1])
            if tuple.origin.task in self.hold_from:
                b.held.append(tuple)
            else:
                self.collector.ack(tuple)
        elif stream == COMMIT_STREAM:
            b.tracker.commit()
            b.held.append(tuple)
        else:
            b.tracker.data()
            b.out.anchor = tuple
            try:
                if self.basic:
                    b.bolt.execute(tuple, b.out)
                else:
                    b.bolt.execute(tuple)
            except FailedException as exc:
                _note_failure(self.context, b.attempt, exc)
                self._fail(b, tuple)
                return
            except Exception as exc:
                _note_failure(self.context, b.attempt, exc)
                self.collector.report_error(exc)
                self._fail(b, tuple)
                return
            self.collector.ack(tuple)
        if b.tracker.complete:
            self._finish(b)

    def _finish(self, b: _Batch) -> None:
        b.out.anchor = b.held[0] if b.held else None
        try:
            if not self.basic:
                b.bolt.finish_batch()
        except FailedException as exc:
            _note_failure(self.context, b.attempt, exc)
            self._fail(b, None)
            return
        except Exception as exc:
            _note_failure(self.context, b.attempt, exc)
            self.collector.report_error(exc)
            self._fail(b, None)
            return
        b.out.send_counts(self.count_targets)
        for t in b.held:
            self.collector.ack(t)
        _remember(self.finished, b.attempt)
        self._retire(b)

    def _fail(self, b: _Batch, tuple: Tuple | None) -> None:
        if tuple is not None:
            self.collector.fail(tuple)
        self._abandon(b)

    def _abandon(self, b: _Batch) -> None:
        for t in b.held:
            self.collector.fail(t)
        b.held = []
        self._retire(b)

    def _retire(self, b: _Batch) -> None:
        txid = b.attempt.transaction_id
        self.batches.pop(txid, None)
        self.done[txid] = b.attempt.attempt_id
        if len(self.done) > 4096:
            for old in sorted(self.done)[:2048]:
                del self.done[old]

    def cleanup(self) -> None:
        if self.basic:
            self.user.cleanup()
