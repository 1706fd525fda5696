"""What runs inside Spark tasks: a bolt task for one batch attempt, and the read stages.

Executors unpickle the plan once per Python worker (:func:`shipped_plan`,
a broadcast holding the pickle and the sources of the user's modules), run
each task as a :class:`Producer` that routes what the task emits
(:class:`~statestream._routing.RouteChoice`, the choice every runtime
makes), and end each task's output with its acknowledgement, which travels
with the data to the driver (:meth:`Producer.finish`).

A Python worker keeps the state object of the task it ran (providers
connect lazily; workers are reused): when the next batch's task for that
namespace lands on the same worker and the driver committed exactly that
object's prepare (its token), the object's read cache is still the committed
state, which spares a store read per key and batch (:func:`_task_state`).

A tuple failed by a bolt (:class:`~statestream.FailedException` or
``collector.fail``) is executed again later in the same task, up to
:data:`~statestream.runtime.spark.config.MAX_TUPLE_FAILURES` times; what it
emitted during the failed attempt is dropped, and (exactly-once) what it put
in the state undone (:class:`~statestream._journal.TupleJournal`). Any other
exception fails the Spark task before Spark's last try of it, and only its
tuple on the last; a tuple still failing is reported to the driver with its
roots (the spout messages it belongs to).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import cloudpickle

from ..._checkpoint import Action
from ..._clock import SystemClock
from ..._components import (
    BasicBolt,
    Bolt,
    StatefulBolt,
    TopologyContext,
    task_namespace,
)
from ..._config import settings_of
from ..._errors import FailedException, RuntimeFailure, TupleError
from ..._executors import BasicBoltExecutor
from ..._journal import TupleJournal
from ..._kvstate import StoredKeyValueState
from ..._picklable import check_first
from ..._retry import RetryPolicy, retry_cannot_fix
from ..._routing import RouteChoice
from ..._stateful import CHECKPOINT_STREAM, apply_action
from ..._tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Origin, Tuple, check_emit
from ..._windowed import END_OF_INPUT_STREAM, WindowedBoltExecutor
from ..errorlog import TRACEBACK_LIMIT, error_parts
from ..metrics import TaskTiming, sampling
from ..plan import RuntimePlan
from ..session import open_store
from .config import MAX_TUPLE_FAILURES
from .shared import (
    ACK,
    SEQ_BITS,
    Ack,
    DeadTuple,
    Lost,
    ReportedError,
    fresh_state,
    provider_key,
    sort_key,
    state_opener,
    store_key,
    user_bolt,
)

log = logging.getLogger("statestream")

_SHIPPED: dict[str, Shipped] = {}
_PROVIDERS: dict[str, Any] = {}
#: (provider key, namespace) -> (token of its last prepare, the state object).
_STATE_CACHE: dict[tuple[str, str], tuple[str, Any]] = {}


def shared_provider(conf: Mapping[str, Any], scope: str) -> Any:
    """The provider of this process for topology ``scope`` (Python workers are reused,
    so connections are too)."""
    key = f"{scope}\0{provider_key(conf)}"
    provider = _PROVIDERS.get(key)
    if provider is None or getattr(provider, "closed", False):
        # A prepare rides out an outage here too (the store's outage guard).
        provider = _PROVIDERS[key] = open_store(conf, scope, SystemClock())
    return provider


class Shipped:
    """What executors need, unpickled once per Python worker: the plan and where acks go."""

    def __init__(self, plan: RuntimePlan, exactly_once: bool, task_tries: int = 1) -> None:
        self.plan = plan
        self.exactly_once = exactly_once
        #: How many times Spark runs a task before it fails the job
        #: (:func:`task_tries`): a bolt that raises fails the Spark task before
        #: the last try, and only its tuple on the last (:func:`run_bolt`).
        self.task_tries = task_tries
        topology = plan.topology
        #: The sampled execute latency (runtime.metrics): one tuple in ``every`` is
        #: timed; each bolt task's countdown goes on from batch to batch while this
        #: Python worker runs it (``countdown``: (component, task) -> what is left).
        self.every, self.first_sample = sampling(
            settings_of(plan.config).topology_stats_sample_rate
        )
        self.countdown: dict[tuple[str, int], int] = {}
        # Where each component's acknowledgements go: its first downstream bolt
        # (None: to the driver).
        self.ack_to: dict[str, str | None] = {
            cid: next((d for d in topology.downstream(cid) if not d.startswith("$")), None)
            for cid in topology.components
        }

    def context(self, cid: str, index: int, provider: Any = None) -> TopologyContext:
        return self.plan.context(
            cid,
            index,
            state_opener=state_opener(provider),
            clock=SystemClock(),
            exactly_once=self.exactly_once,
        )


def shipped_plan(token: str, payload: Any) -> Shipped:
    shipped = _SHIPPED.get(token)
    if shipped is None:
        if len(_SHIPPED) > 4:
            _SHIPPED.clear()
        sources, data = payload.value
        shipped = _SHIPPED[token] = _loads(data, sources)
    return shipped


def _loads(data: bytes, sources: Mapping[str, tuple[str, str]]) -> Any:
    """Unpickle ``data``; a shipped user module it names by reference is made
    importable from its source first.

    User modules travel by value, but an object pickle cannot copy (a
    ``functools.cache`` wrapper, say) is pickled by its module's name, which
    an executor cannot import: a module loaded from a path (``examples/``).
    """
    tried: set[str] = set()
    while True:
        try:
            return cloudpickle.loads(data)
        except ModuleNotFoundError as exc:
            name = exc.name or ""
            if name not in sources or name in tried:
                raise
            tried.add(name)
            _import_source(name, *sources[name])


def _import_source(name: str, path: str, source: str) -> None:
    import importlib.util

    spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    sys.modules[name] = module
    folder = os.path.dirname(path)
    if folder and os.path.isdir(folder) and folder not in sys.path:
        sys.path.append(folder)  # its siblings, as the driver imported them
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise


class Producer:
    """One task on an executor: routes what it emits; the collector bolts see."""

    def __init__(self, shipped: Shipped, cid: str, index: int) -> None:
        plan = shipped.plan
        self.shipped = shipped
        self.cid = cid
        self.index = index
        self.task_id = plan.component_tasks[cid][index]
        self.base = self.task_id << SEQ_BITS
        self.seq = 0
        self.out: list[tuple[Any, Any, Any]] = []
        #: The tuple being executed and its roots (what a BasicBolt's emits anchor to).
        self.current: Tuple | None = None
        self.roots: tuple[int, ...] = ()
        self.emitted = 0
        self.failed_current = False
        #: Why the current tuple was failed through :meth:`fail`, if it says.
        self.fail_cause: tuple[str, str] | None = None
        self.acked = 0
        #: Where report_error keeps errors for the driver (None: logged only).
        self.errors: list[ReportedError] | None = None
        spec = plan.topology.components[cid]
        self.streams: dict[str, tuple[int, list[RouteChoice], bool]] = {}
        self.outputs = {s: o for s, o in spec.outputs.items() if s != CHECKPOINT_STREAM}
        self.checked: set[str] = set()  # streams whose first tuple pickled (_picklable)
        for stream, (fields, direct) in self.outputs.items():
            routes = [
                RouteChoice(
                    route.target, route.kind, route.key, route.custom, route.task_ids, index
                )
                for route in plan.routes(cid, stream)
                if not route.target.startswith("$")
            ]
            self.streams[stream] = (len(fields), routes, direct)

    def finish(self, ack: Ack, forwarded: Iterable[Ack]) -> None:
        """Send this task's ack, and those it received, on to the driver.

        Acks travel with the data: to task 0 of the first downstream bolt,
        which forwards them with its own; the tasks of the last bolts hand
        them to the driver. So the driver collects only acknowledgements and
        never reads a partition of tuples.
        """
        target = self.shipped.ack_to[self.cid]
        if target is None:
            self.out.append((ACK, 0, ack))
            self.out.extend((ACK, 0, a) for a in forwarded)
        else:
            self.out.append((target, 0, (-1, ACK, ack)))
            self.out.extend((target, 0, (-1, ACK, a)) for a in forwarded)

    def _entry(
        self, stream: str, values: Sequence[Any], direct: bool
    ) -> tuple[int, list[RouteChoice]]:
        check_emit(self.cid, self.index, stream, values, self.outputs, direct)
        if stream not in self.checked:
            check_first(self.cid, self.index, stream, values)
            self.checked.add(stream)
        entry = self.streams[stream]
        return entry[0], entry[1]

    def route(
        self,
        stream: str,
        values: Sequence[Any],
        direct: int | None,
        roots: tuple[int, ...] | None = None,
    ) -> None:
        """Send one tuple on. ``roots``: the spout messages it belongs to (its
        anchors' roots); None for a spout's own tuple, which is its own root."""
        _, routes = self._entry(stream, values, direct is not None)
        if direct is not None and not any(direct in r.index_of_task for r in routes):
            valid = sorted(t for r in routes for t in r.index_of_task)
            raise TupleError(
                f"component {self.cid!r} emit_direct to task {direct}, which does not subscribe "
                f"to that stream (subscribed tasks: {valid}); pick one from "
                "context.component_tasks(<bolt>)"
            )
        self.emitted += 1
        key = self.base | self.seq
        rec = (key, stream, tuple(values), (key + 1,) if roots is None else roots)
        self.seq += 1
        out = self.out
        for r in routes:
            for i in r.choose(values, direct):
                out.append((r.target, i, rec))

    def _anchored(self, anchors: Any) -> tuple[int, ...]:
        """The roots of ``anchors`` (a tuple, several, or None: unanchored, untracked)."""
        if anchors is None:
            return ()
        if anchors is self.current:
            return self.roots
        if isinstance(anchors, Tuple):
            return tuple(anchors.trees())
        roots: dict[int, int] = {}
        for anchor in anchors:
            roots.update(anchor.trees())
        return tuple(roots)

    # -- OutputCollector / BasicOutputCollector --------------------------------------
    def emit(self, values: Sequence[Any], anchors: Any = None, stream: str = "default") -> None:
        self.route(stream, values, None, self._anchored(anchors))

    def emit_direct(
        self, task: int, values: Sequence[Any], anchors: Any = None, stream: str = "default"
    ) -> None:
        self.route(stream, values, task, self._anchored(anchors))

    def ack(self, tuple: Tuple) -> None:
        self.acked += 1

    def fail(self, tuple: Tuple) -> None:
        self.failed_current = True
        # Called from an except clause (BasicBoltExecutor fails its input on a
        # FailedException), the exception being handled is why, as on the
        # local runtime: the dead-letter record says so.
        exc = sys.exc_info()[1]
        if isinstance(exc, FailedException):
            self.fail_cause = (type(exc).__name__, str(exc)[:2000])

    def reset_timeout(self, tuple: Tuple) -> None:
        """Nothing times out inside a batch."""

    def report_error(self, error: BaseException) -> None:
        if self.errors is not None:
            self.errors.append(error_parts(error, f"{self.cid}[{self.index}]", TRACEBACK_LIMIT))
        log.error("%s[%d] reported %r", self.cid, self.index, error)


def read_partition(
    token: str, payload: Any, items: Iterable[tuple[str, int, Sequence[Any]]]
) -> Iterator[tuple[Any, Any, Any]]:
    """The read stage: one item per spout task, ``(cid, index, records)``, where
    ``records`` are the ``(stream, values, direct task)`` the driver read from it."""
    shipped = shipped_plan(token, payload)
    for cid, index, records in items:
        producer = Producer(shipped, cid, index)
        for stream, values, direct in records:
            producer.route(stream, values, direct)
        producer.finish((cid, index, 0, producer.emitted, 0, None, [], [], None, None, []), ())
        yield from producer.out


def _task_state(provider: Any, pkey: str, namespace: str, valid: Mapping[str, str]) -> Any:
    """The state a stateful task starts from: this process's copy if it is current.

    A state object keeps every value it read or wrote, so reusing it spares
    the store one read per key and batch. It is current when the prepare it
    made last is the one the driver committed (``valid`` maps each namespace
    to the token of its committed prepare); then committing it again is a
    no-op in the store that turns its prepared values into committed ones.
    Anything else (another worker ran the task since, a rollback, a new
    run) reads from the store afresh.
    """
    entry = _STATE_CACHE.pop((pkey, namespace), None)
    if entry is not None and valid.get(namespace) == entry[0]:
        state = entry[1]
        prepared = state.prepared_txid
        if prepared is not None:
            state.commit(prepared)
        return state
    return fresh_state(provider, namespace)


def run_bolt(
    token: str,
    payload: Any,
    cid: str,
    txid: int,
    valid: Mapping[str, str],
    index: int,
    items: Iterable[tuple[int, Any]],
    end_of_input: bool = False,
) -> Iterator[tuple[Any, Any, Any]]:
    """One bolt task for one batch attempt (a Spark partition); ``end_of_input``: the
    batch after the last of a bounded run (a windowed bolt's windows all fire)."""
    shipped = shipped_plan(token, payload)
    records = [rec for _, rec in items]
    records.sort(key=sort_key)
    # Acknowledgements forwarded from upstream tasks sort first (key -1).
    n_acks = 0
    while n_acks < len(records) and records[n_acks][0] < 0:
        n_acks += 1
    forwarded = [rec[2] for rec in records[:n_acks]]
    task = BoltTask(shipped, cid, index, txid, valid)
    task.execute_all(records[n_acks:])
    task.tick()
    if end_of_input and isinstance(task.bolt, WindowedBoltExecutor):
        task.system_tuple(END_OF_INPUT_STREAM, [])
    yield from task.finish(forwarded)


def _cause(exc: BaseException) -> tuple[str, str]:
    return (type(exc).__name__, str(exc)[:2000])


def _reported(tup: Tuple, exc: BaseException) -> ReportedError:
    return error_parts(exc, repr(tup), TRACEBACK_LIMIT)


#: The failure-count key of a batch's tick tuple (no record's sequence number).
_TICK_KEY = -(1 << 62)


class BoltTask:
    """One bolt task on an executor for one batch attempt.

    A fresh copy of the user's bolt (a BasicBolt runs inside
    :class:`~statestream._executors.BasicBoltExecutor`, which anchors its
    emits and fails its input on a FailedException, as on the local
    runtime), its state as the driver committed it, and its input executed
    in order; a failed tuple is executed again after the others, up to
    :data:`~statestream.runtime.spark.config.MAX_TUPLE_FAILURES` times,
    and then given up on for the job (:attr:`lost`, with its roots).
    """

    def __init__(
        self, shipped: Shipped, cid: str, index: int, txid: int, valid: Mapping[str, str]
    ) -> None:
        plan = self.plan = shipped.plan
        self.cid, self.index, self.txid = cid, index, txid
        spec = plan.topology.components[cid]
        bolt: Bolt | BasicBolt = user_bolt(plan.topology, cid)
        if isinstance(bolt, BasicBolt):
            bolt = BasicBoltExecutor(bolt)
        self.bolt: Bolt = bolt
        self.producer = producer = Producer(shipped, cid, index)
        conf = plan.conf_for(cid)
        provider = shared_provider(plan.config, plan.topology.name) if spec.is_stateful else None
        context = shipped.context(cid, index, provider)
        self.state: Any = None
        self.journal: TupleJournal | None = None
        bolt.prepare(conf, context, producer)
        if isinstance(bolt, StatefulBolt):
            assert provider is not None
            namespace = task_namespace(cid, index)
            state = self.state = _task_state(provider, store_key(plan), namespace, valid)
            state.rollback()  # a prepare left by a failed attempt of this batch
            journal = self.journal = TupleJournal(state) if shipped.exactly_once else None
            apply_action(bolt, state if journal is None else journal, Action.INITSTATE, txid, False)
        self.origins: dict[tuple[int, str], Origin] = {}
        self.executed = self.failures = 0
        self.errors: list[ReportedError] = []
        self.lost: list[Lost] = []
        self.dead: list[DeadTuple] = []
        # Exactly-once: a tuple is executed up to statestream.retry.max.attempts
        # times here, then dead-lettered itself (as on the local runtime);
        # otherwise MAX_TUPLE_FAILURES times, then its messages go through the
        # driver's retry policy.
        attempts = RetryPolicy.from_config(plan.config).max_attempts
        self.dead_letters_here = shipped.exactly_once and attempts > 0
        self.max_failures = attempts if self.dead_letters_here else MAX_TUPLE_FAILURES
        self.last_try = _last_try(shipped.task_tries)
        self.failed_counts: dict[int, int] = {}
        self.shipped = shipped
        self.timing = TaskTiming(cid, index)

    def _origin(self, src_task: int, stream: str) -> Origin:
        origin = self.origins.get((src_task, stream))
        if origin is None:
            plan = self.plan
            src, src_index = plan.owner[src_task]
            origin = self.origins[src_task, stream] = Origin(
                src, src_task, src_index, stream, plan.output_fields[src][stream]
            )
        return origin

    def execute_all(self, records: list[tuple[Any, ...]]) -> None:
        """Execute ``records`` in order; the failed ones again, until each went
        through or was given up on."""
        queue = records
        last_task, last_stream = -1, ""
        origin: Origin | None = None
        # The sampled execute latency, counted down as the local tasks count their
        # drains down (runtime.metrics.sampling): a tuple costs a countdown, one
        # in ``every`` two clock reads.
        shipped, key = self.shipped, (self.cid, self.index)
        sample_in = shipped.countdown.get(key, shipped.first_sample)
        every, timing, clock = shipped.every, self.timing, time.perf_counter
        while queue:
            retry: list[tuple[Any, ...]] = []
            for rec in queue:
                src_task, stream = rec[0] >> SEQ_BITS, rec[1]
                if src_task != last_task or stream != last_stream:
                    # Input is sorted by producer task: the origin changes rarely.
                    last_task, last_stream = src_task, stream
                    origin = self._origin(src_task, stream)
                assert origin is not None
                sample_in -= 1
                if sample_in:
                    again = self._execute(rec, origin)
                else:
                    sample_in = every
                    start = clock()
                    again = self._execute(rec, origin)
                    timing.timed(1, clock() - start)
                if again:
                    retry.append(rec)
            queue = retry
        shipped.countdown[key] = sample_in
        self.producer.current, self.producer.roots = None, ()

    def tick(self) -> None:
        """Spark has no timers: a bolt that asks for tick tuples
        (``topology.tick.tuple.freq.secs``) gets one at the end of each batch's
        input, so that time moves at batch boundaries (a windowed bolt's
        processing-time windows and watermark, statestream._windowed)."""
        freq = settings_of(self.plan.conf_for(self.cid)).topology_tick_tuple_freq_secs
        if freq:
            self.system_tuple(TICK_STREAM, [freq], Fields("freq"))

    def system_tuple(self, stream: str, values: list[Any], fields: Fields | None = None) -> None:
        """Execute a tuple of the runtime's own (a tick, the end of input); a failed
        one runs again, as a tuple would."""
        origin = Origin(SYSTEM_COMPONENT, -1, 0, stream, fields or Fields())
        rec = (_TICK_KEY, stream, values, ())
        while self._execute(rec, origin):
            pass

    def _execute(self, rec: tuple[Any, ...], origin: Origin) -> bool:
        """Execute one record; True if it failed and is to be executed again."""
        key, _, values, roots = rec
        producer = self.producer
        out = producer.out
        mark, seq = len(out), producer.seq
        producer.failed_current = False
        producer.fail_cause = None
        journal = self.journal
        if journal is not None:
            journal.begin()
        # The tuple carries its spout messages (its roots) as a tracked
        # tuple does on the local runtime, so that anchoring to it works.
        if len(roots) == 1:
            tup = Tuple(values, origin, root=roots[0])
        else:
            tup = Tuple(values, origin, dict.fromkeys(roots, 0) or None)
        producer.current, producer.roots = tup, roots
        cause, again = self._call(tup)
        self.executed += 1
        if not producer.failed_current:
            return False
        self.failures += 1
        if journal is not None:
            journal.undo()  # nor is what it changed in the state kept
        del out[mark:]  # what the failed attempt emitted is not sent
        producer.seq = seq
        n = self.failed_counts[key] = self.failed_counts.get(key, 0) + 1
        if again and n < self.max_failures:
            return True
        error_type, error = cause or producer.fail_cause or ("Failed", "failed by collector.fail()")
        if again and self.dead_letters_here:
            # Exactly-once, as the local runtime: the tuple failed its attempts
            # itself, its effects undone; it is dead-lettered alone (the driver
            # writes it before the commit) and the batch goes on without it.
            msg_id = f"{self.cid}-{self.index}:{self.txid}:{key}"
            self.dead.append(
                (msg_id, origin.component, origin.stream, list(values), error_type, error, n)
            )
            return False
        # Given up in this job: the driver counts an attempt of each
        # of its messages and runs the batch again (or without them).
        self.lost.extend((root, self.cid, error_type, error) for root in roots or (0,))
        return False

    def _call(self, tup: Tuple) -> tuple[tuple[str, str] | None, bool]:
        """``execute`` one tuple: (why it failed, if an exception says; whether it
        may be executed again if it failed)."""
        producer = self.producer
        try:
            self.bolt.execute(tup)
        except FailedException as exc:
            producer.failed_current = True
            return _cause(exc), True
        except TupleError as exc:
            # A wrong emit (arity, stream, direct task): reported for this
            # tuple, which fails and is executed again, as on the local
            # runtime.
            producer.failed_current = True
            self.errors.append(_reported(tup, exc))
            return _cause(exc), True
        except RuntimeFailure as exc:
            # The run's end (an emit that cannot be pickled, say), not this
            # tuple's: given up at once, and the driver stops with it.
            producer.failed_current = True
            return _cause(exc), False
        except Exception as exc:
            # A bolt that raises: before Spark's last try of this task the
            # Spark task fails (Spark runs it again, a lost executor looks
            # the same); on the last, only this tuple does, and its
            # messages go through the retry policy (the driver's).
            if not self.last_try or retry_cannot_fix(exc):
                raise  # a bug no retry fixes fails the job: the driver stops
            producer.failed_current = True
            self.errors.append(_reported(tup, exc))
            return _cause(exc), False
        return None, True

    def finish(self, forwarded: list[Ack]) -> list[tuple[Any, Any, Any]]:
        """Prepare the batch's txid (a stateful task) and end the output with the
        task's acknowledgement, and those forwarded to it."""
        cid, index, producer = self.cid, self.index, self.producer
        prepared = keys = None
        if self.state is not None:
            apply_action(self.bolt, self.state, Action.PREPARE, self.txid, True)  # type: ignore[arg-type]
            prepared = uuid.uuid4().hex
            # What the commit changes, keys and bytes (StoredKeyValueState's; the
            # checkpoint's keys_changed and state_size, as on the local runtime).
            if isinstance(self.state, StoredKeyValueState):
                keys = (self.state.prepared_keys, self.state.prepared_bytes)
            _STATE_CACHE[store_key(self.plan), task_namespace(cid, index)] = (prepared, self.state)
        ack = (
            cid,
            index,
            self.executed,
            producer.emitted,
            self.failures,
            prepared,
            self.errors,
            self.lost,
            self.timing if self.timing.samples else None,
            keys,
            self.dead,
        )
        producer.finish(ack, forwarded)
        return producer.out


def _last_try(tries: int) -> bool:
    """Whether the Spark task running this is Spark's last try of it (True outside Spark)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - executors have PySpark
        return True
    context = TaskContext.get()
    return context is None or context.attemptNumber() + 1 >= tries


def rows_partition(
    token: str, payload: Any, cid: str, part: int, rows: Iterable[Any]
) -> Iterator[tuple[Any, Any, Any]]:
    """The read stage of a Spark-fed batch: one DataFrame partition as spout task 0.

    Sequence numbers start at ``part << 28`` so that the records of every
    partition sort apart and in the same order on every replay.
    """
    shipped = shipped_plan(token, payload)
    producer = Producer(shipped, cid, 0)
    producer.seq = part << 28
    columns = shipped.plan.topology.components[cid].obj.fields  # type: ignore[union-attr]
    for row in rows:
        producer.route("default", [row[c] for c in columns], None)
    producer.finish((cid, part, 0, producer.emitted, 0, None, [], [], None, None, []), ())
    yield from producer.out


#: A partitioned spout task opened once per Python worker: (token, cid, index) -> spout.
_SOURCES: dict[tuple[str, str, int], Any] = {}


class _NoEmits:
    """The collector of a spout opened only to read ranges: it emits nothing."""

    def emit(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeFailure("a partitioned spout emits through read(), not its collector")

    emit_direct = emit

    def report_error(self, error: BaseException) -> None:
        log.error("%r", error)


def _source(shipped: Shipped, token: str, cid: str, index: int) -> Any:
    key = (token, cid, index)
    spout = _SOURCES.get(key)
    if spout is None:
        if len(_SOURCES) > 64:
            _SOURCES.clear()
        spout = shipped.plan.topology.instantiate(cid)
        spout.open(shipped.plan.conf_for(cid), shipped.context(cid, index), _NoEmits())
        _SOURCES[key] = spout
    return spout


def read_ranges(
    token: str, payload: Any, items: Iterable[tuple[str, int, int, Any]]
) -> Iterator[tuple[Any, Any, Any]]:
    """The read stage of a partitioned source (statestream._partitioned): one item per
    range, ``(cid, task index, k, range)``; its records are read here, on the
    executor, by the spout task's ``read``. Sequence numbers start at
    ``k << 28`` so that the records of every range sort apart and in the same
    order on every replay (``k`` 0 is what the driver read for the task)."""
    shipped = shipped_plan(token, payload)
    for cid, index, k, r in items:
        spout = _source(shipped, token, cid, index)
        producer = Producer(shipped, cid, index)
        producer.seq = k << 28
        out = producer.out
        for values in spout.read(r.partition, r.start, r.end):
            producer.route("default", values, None)
            if len(out) >= 4096:  # streamed on: a range may be far larger than memory
                yield from out
                out.clear()
        producer.finish((cid, index, 0, producer.emitted, 0, None, [], [], None, None, []), ())
        yield from producer.out
