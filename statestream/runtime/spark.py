"""The Spark runtime: the same topology, one transaction per Spark job.

Imported only when ``topology.runner`` is ``spark`` (PySpark is an optional
dependency: ``pip install 'statestream[spark]'``).

How a run goes (DESIGN.md §4 and §7)::

    driver                                         executors (Python workers)
    ------                                         --------------------------
    recover from $checkpointspout-0:
      PREPARING(t) -> roll back every namespace, replay batch t from its positions
      COMMITTING(t) -> commit every namespace (idempotent), go on
    loop:
      plan: spout.plan_batch(conf, start, max)     (driver, no tuples)
      store PREPARING(t+1) + positions             (one direct commit)
      submit one job:                              read stage: spout.read_batch(conf, start, end)
                                                   one stage per bolt: partitionBy(task count),
                                                   one partition = one bolt task: fresh bolt,
                                                   rollback, init_state, execute, PREPARE(t+1)
      collect the small acks
      store COMMITTING(t+1), commit every namespace, store COMMITTED(t+1)

The checkpoint phases are those of the local runtime's checkpoint spout: the
transitions come from :func:`statestream._checkpoint.next_state`, the phase is
stored under the same key (``checkpoint``) of the same namespace, and a bolt
task acts through :func:`statestream._stateful.apply_action`. Only the
transport differs: a batch is the unit of replay, so there are no per-tuple
acks, no barriers and no ``$checkpoint`` tuples (the system components the
builder adds are ignored; the driver plays the checkpoint spout).

Routing is identical to the local runtime: fields grouping uses
:func:`statestream._routing.task_for_key`, shuffle is a round-robin over the
producer task's output that starts at its task index, global is task 0, all
replicates, direct follows the emitted task id, custom asks the grouping. A
bolt task sorts its input by (producer task, emit sequence) before executing
it, so its input order, and therefore what it emits and where, is the same on
every attempt and every replay; the tuples from one producer task arrive in
the order they were emitted, as in Storm.

The driver never reads tuples: each task puts its acknowledgement (counts
and a token naming its prepare) in front of the tuples it sends to task 0 of
its first downstream bolt, which forwards it; the last bolts' tasks output
acknowledgements only, and the driver collects those. An output that several
bolts read is cached for the batch, so no task runs twice.

A Python worker keeps the state object of the task it ran (providers
connect lazily; workers are reused): when the next batch's task for that
namespace lands on the same worker and the driver committed exactly that
object's prepare (its token), the object's read cache is still the committed
state, which spares a store read per key and batch.

Spark as a source: :meth:`SparkRuntime.feed` runs a topology whose spout is
a :class:`DataFrameSpout` over a streaming DataFrame, with ``foreachBatch``:
one micro-batch per transaction, txid = Spark's batch id (Spark's offset log
replays an unfinished batch with the same id and data), a replayed batch at
or below the committed txid skipped, and a refusal to start when the store's
txid is ahead of the checkpoint's offset log.

Lifecycle on Spark (differs from local, documented for users): a bolt task's
instance lives for one batch attempt. It is unpickled on an executor,
``prepare`` is called, then (stateful bolts) ``init_state`` with the last
committed state, ``execute`` per tuple and ``pre_prepare`` + prepare.
``pre_commit`` and ``pre_rollback`` are not called (the instance is gone when
the driver commits or rolls back). ``cleanup`` is called once per task at the
end of a run that ends normally, on the driver, on an instance that was
prepared and initialised with the committed state. A tuple failed by a bolt
(:class:`~statestream.FailedException` or ``collector.fail``) is executed
again later in the same task, up to :data:`MAX_TUPLE_FAILURES` times; what it
emitted during the failed attempt is dropped. Any other exception fails the
Spark task (Spark retries it: use a master such as ``local[2,2]``), and a job
that still fails is rolled back and replayed, up to ``attempts`` times.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import cloudpickle

from .._checkpoint import Action, CheckpointState, next_state
from .._clock import SystemClock
from .._components import BasicBolt, Bolt, Spout, StatefulBolt, TopologyContext
from .._config import Config
from .._errors import ConfigError, FailedException, RuntimeFailure, TupleError
from .._routing import custom_choose, task_for_key
from .._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM, apply_action
from .._topology import ComponentSpec, Topology
from .._tuple import Origin, Tuple, check_emit
from .local import ErrorReport, RunResult, TaskMetrics

__all__ = [
    "BATCH_ATTEMPTS_KEY",
    "BATCH_SIZE_KEY",
    "MAX_TUPLE_FAILURES",
    "REPLAY_CONTRACT",
    "DataFrameSpout",
    "SparkRuntime",
]

log = logging.getLogger("statestream")

#: Config key: the most items one spout task contributes to one batch (defaults.yaml: 50,000).
BATCH_SIZE_KEY = "statestream.spark.batch.size"
#: Config key: how many times a failed batch is rolled back and run again (defaults.yaml: 3).
BATCH_ATTEMPTS_KEY = "statestream.spark.batch.attempts"
#: A tuple failed this many times in one task attempt fails the task.
MAX_TUPLE_FAILURES = 3

#: Where the driver keeps the checkpoint phase and the batch positions.
CHECKPOINT_NAMESPACE = f"{CHECKPOINT_SPOUT}-0"
_PHASE_KEY = "checkpoint"  # the key the local runtime's CheckpointSpout uses
_POSITIONS_KEY = "positions"

REPLAY_CONTRACT = (
    "plan_batch(conf, start, max_items) -> end position or None, and "
    "read_batch(conf, start, end) -> iterable of values"
)

_SPARK_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}

#: Providers whose store executors cannot share, and the scope they are shared in.
_LOCAL_PROVIDERS: Mapping[str, str] = {"memory": "process", "sqlite": "machine"}

#: A task's acknowledgement: (component, task, executed, emitted, failed, prepare token).
_Ack = tuple[str, int, int, int, int, str | None]
_ACK = "$ack"  # first element of an acknowledgement record (no component id can be it)
_SEQ_BITS = 40  # sort key: producer task id << 40 | emit sequence


# --------------------------------------------------------------------------- config checks


def _is_local_master(master: str) -> bool:
    """True for ``local``/``local[...]``: one JVM (executor Python workers are still processes)."""
    return master == "local" or master.startswith("local[")


def check_provider(conf: Mapping[str, Any], master: str) -> None:
    """Refuse a provider that the executors of ``master`` cannot share (ConfigError)."""
    from .._registry import resolve_provider

    spec = conf["topology.state.provider"]
    name = getattr(resolve_provider(spec), "name", spec)
    scope = _LOCAL_PROVIDERS.get(name)
    if scope == "process":
        raise ConfigError(
            f"topology.state.provider is {spec!r}, which keeps state inside one Python "
            "process; on Spark every bolt task runs in a Python worker process apart from the "
            f"driver (even with spark.master {master!r}), so the state a task prepares would "
            "be invisible to the driver and lost. Use a shared store: "
            "topology.state.provider: redis (or sqlite with a local[...] master)"
        )
    if scope == "machine" and not _is_local_master(master):
        raise ConfigError(
            f"topology.state.provider is {spec!r}, a file on one machine, but spark.master "
            f"{master!r} runs executors in several processes or hosts that cannot share it "
            "safely; use topology.state.provider: redis, or a local[...] master"
        )


def ship_user_modules(topology: Topology) -> list[str]:
    """Make the modules that define the topology's classes travel by value.

    Executors import what a pickle names; a module the driver imported from
    a path of its own (a script, a test directory, ``examples/``) is not
    importable there. Modules of installed distributions (under a
    site-packages directory) and statestream's own are left alone.
    """
    shipped = []
    objs: list[Any] = []
    for spec in topology.components.values():
        objs.append(spec.obj)
        objs.extend(sub.grouping.custom for sub in spec.inputs if sub.grouping.custom is not None)
    for obj in objs:
        for cls in type(obj).__mro__:
            name = cls.__module__
            module = sys.modules.get(name)
            root = name.partition(".")[0]
            if module is None or root in ("builtins", "statestream", "statestream_providers"):
                continue
            path = getattr(module, "__file__", None) or ""
            if name == "__main__" or "site-packages" in path or "dist-packages" in path:
                continue
            if name not in shipped:
                cloudpickle.register_pickle_by_value(module)
                shipped.append(name)
    return shipped


def check_spark_conf(conf: Mapping[str, Any]) -> None:
    """Refuse Spark settings that break the one-writer-per-namespace rule."""
    speculation = conf.get("spark.speculation")
    if speculation is True or str(speculation).lower() == "true":
        raise ConfigError(
            "spark.speculation is true: a speculative copy of a bolt task would prepare "
            "the same state namespace as the original at the same time; set it to false"
        )


def has_replay_contract(spout: object) -> bool:
    return callable(getattr(spout, "plan_batch", None)) and callable(
        getattr(spout, "read_batch", None)
    )


# --------------------------------------------------------------------------- executor side

_PLANS: dict[str, _Plan] = {}
_PROVIDERS: dict[str, Any] = {}
#: (provider key, namespace) -> (token of its last prepare, the state object).
_STATE_CACHE: dict[tuple[str, str], tuple[str, Any]] = {}


def _identity(key: int) -> int:
    return key


def _addressed_to(cid: str, items: Iterable[tuple[str, int, Any]]) -> Iterator[tuple[int, Any]]:
    """``(task index, record)`` of the items addressed to component ``cid``."""
    for target, index, rec in items:
        if target == cid:
            yield index, rec


def _acks(items: Iterable[tuple[str, int, Any]]) -> Iterator[Any]:
    for target, _, ack in items:
        if target == _ACK:
            yield ack


def _provider_key(conf: Mapping[str, Any]) -> str:
    import orjson

    return orjson.dumps(
        [conf["topology.state.provider"], conf["topology.state.provider.config"]],
        option=orjson.OPT_SORT_KEYS,
    ).decode()


def _shared_provider(conf: Mapping[str, Any]) -> Any:
    """The provider of this process (Python workers are reused, so connections are too)."""
    key = _provider_key(conf)
    provider = _PROVIDERS.get(key)
    if provider is None or getattr(provider, "closed", False):
        from .._registry import open_provider

        provider = _PROVIDERS[key] = open_provider(
            conf["topology.state.provider"], conf["topology.state.provider.config"]
        )
    return provider


def fresh_state(provider: Any, namespace: str) -> Any:
    """A state of ``namespace`` that reads its txids from the store again.

    A provider hands out one cached state object per namespace, which assumes
    that object is the namespace's only writer. On Spark a namespace is
    prepared on an executor and committed by the driver, so each side drops
    the cached object and takes a new one before acting.
    """
    states = getattr(provider, "_states", None)
    if isinstance(states, dict):
        states.pop(namespace, None)
    return provider.get_state(namespace)


class _Plan:
    """What executors need, unpickled once per Python worker and run."""

    def __init__(
        self,
        topology: Topology,
        config: Config,
        component_tasks: dict[str, list[int]],
    ) -> None:
        self.topology = topology
        self.config = config
        self.component_tasks = component_tasks
        self.owner = {
            tid: (cid, index)
            for cid, tids in component_tasks.items()
            for index, tid in enumerate(tids)
        }
        # Where each component's acknowledgements go: its first downstream bolt
        # (None: to the driver).
        self.ack_to: dict[str, str | None] = {
            cid: next((d for d in topology.downstream(cid) if not d.startswith("$")), None)
            for cid in topology.components
        }
        self.output_fields = {
            cid: {s: f for s, (f, _) in spec.outputs.items()}
            for cid, spec in topology.components.items()
        }
        self._confs: dict[str, Mapping[str, Any]] = {}

    def conf_for(self, cid: str) -> Mapping[str, Any]:
        conf = self._confs.get(cid)
        if conf is None:
            spec = self.topology.components[cid]
            conf = self.config
            if spec.config:
                conf = self.config.with_overrides(spec.config, source=f"component {cid!r}")
            self._confs[cid] = conf
        return conf

    def context(self, cid: str, index: int, provider: Any = None) -> TopologyContext:
        opener = None
        if provider is not None:

            def opener(namespace: str) -> Any:
                return fresh_state(provider, namespace)

        return TopologyContext(
            self.topology.name,
            cid,
            index,
            self.component_tasks[cid][index],
            self.component_tasks,
            self.output_fields,
            state_opener=opener,
            clock=SystemClock(),
        )


def _plan(token: str, payload: Any) -> _Plan:
    plan = _PLANS.get(token)
    if plan is None:
        if len(_PLANS) > 4:
            _PLANS.clear()
        plan = _PLANS[token] = cloudpickle.loads(payload.value)
    return plan


class _Route:
    """Where one (producer task, stream)'s tuples go for one subscriber."""

    __slots__ = ("custom", "index_of_task", "key", "kind", "n", "rr", "target")

    def __init__(self, target: ComponentSpec, kind: str, producer_index: int) -> None:
        self.target = target.id
        self.kind = kind
        self.n = target.parallelism
        self.key: Any = None
        self.custom: Any = None
        self.index_of_task: dict[int, int] = {}
        # As the local runtime: each producer task starts its round-robin elsewhere.
        self.rr = producer_index % self.n

    def choose(self, values: Sequence[Any], direct: int | None) -> list[int]:
        kind = self.kind
        if kind == "fields":
            key = self.key
            if type(key) is int:
                return [task_for_key(values[key], self.n)]
            return [task_for_key([values[i] for i in key], self.n)]
        if kind in ("shuffle", "none"):
            i = self.rr
            self.rr = i + 1 if i + 1 < self.n else 0
            return [i]
        if kind == "global":
            return [0]
        if kind == "all":
            return list(range(self.n))
        if kind == "direct":
            idx = self.index_of_task.get(direct)  # type: ignore[arg-type]
            return [] if idx is None else [idx]
        return custom_choose(self.custom, values, self.n)


class _Producer:
    """One task on an executor: routes what it emits; the collector bolts see."""

    def __init__(self, plan: _Plan, cid: str, index: int) -> None:
        self.plan = plan
        self.cid = cid
        self.index = index
        self.task_id = plan.component_tasks[cid][index]
        self.base = self.task_id << _SEQ_BITS
        self.seq = 0
        self.out: list[tuple[Any, Any, Any]] = []
        self.emitted = 0
        self.failed_current = False
        self.acked = 0
        spec = plan.topology.components[cid]
        self.streams: dict[str, tuple[int, list[_Route], bool]] = {}
        self.outputs = {s: o for s, o in spec.outputs.items() if s != CHECKPOINT_STREAM}
        for stream, (fields, direct) in self.outputs.items():
            routes = []
            for target, sub in plan.topology.subscribers(cid, stream):
                if target.id.startswith("$"):
                    continue
                route = _Route(target, sub.grouping.kind, index)
                if sub.grouping.kind == "fields":
                    idx = [fields.index_of(f) for f in sub.grouping.fields]
                    route.key = idx[0] if len(idx) == 1 else tuple(idx)
                route.custom = sub.grouping.custom
                route.index_of_task = {
                    tid: i for i, tid in enumerate(plan.component_tasks[target.id])
                }
                routes.append(route)
            self.streams[stream] = (len(fields), routes, direct)

    def finish(self, ack: _Ack, forwarded: Iterable[_Ack]) -> None:
        """Send this task's ack, and those it received, on to the driver.

        Acks travel with the data: to task 0 of the first downstream bolt,
        which forwards them with its own; the tasks of the last bolts hand
        them to the driver. So the driver collects only acknowledgements and
        never reads a partition of tuples.
        """
        target = self.plan.ack_to[self.cid]
        if target is None:
            self.out.append((_ACK, 0, ack))
            self.out.extend((_ACK, 0, a) for a in forwarded)
        else:
            self.out.append((target, 0, (-1, _ACK, ack)))
            self.out.extend((target, 0, (-1, _ACK, a)) for a in forwarded)

    def _entry(self, stream: str, values: Sequence[Any], direct: bool) -> tuple[int, list[_Route]]:
        check_emit(self.cid, self.index, stream, values, self.outputs, direct)
        entry = self.streams[stream]
        return entry[0], entry[1]

    def _route(self, stream: str, values: Sequence[Any], direct: int | None) -> None:
        _, routes = self._entry(stream, values, direct is not None)
        if direct is not None and not any(direct in r.index_of_task for r in routes):
            valid = sorted(t for r in routes for t in r.index_of_task)
            raise TupleError(
                f"component {self.cid!r} emit_direct to task {direct}, which does not subscribe "
                f"to that stream (subscribed tasks: {valid}); pick one from "
                "context.component_tasks(<bolt>)"
            )
        self.emitted += 1
        rec = (self.base | self.seq, stream, tuple(values))
        self.seq += 1
        out = self.out
        for r in routes:
            for i in r.choose(values, direct):
                out.append((r.target, i, rec))

    # -- OutputCollector / BasicOutputCollector --------------------------------------
    def emit(self, values: Sequence[Any], anchors: Any = None, stream: str = "default") -> None:
        self._route(stream, values, None)

    def emit_direct(
        self, task: int, values: Sequence[Any], anchors: Any = None, stream: str = "default"
    ) -> None:
        self._route(stream, values, task)

    def ack(self, tuple: Tuple) -> None:
        self.acked += 1

    def fail(self, tuple: Tuple) -> None:
        self.failed_current = True

    def reset_timeout(self, tuple: Tuple) -> None:
        """Nothing times out inside a batch."""

    def report_error(self, error: BaseException) -> None:
        log.error("%s[%d] reported %r", self.cid, self.index, error)


class _BasicCollector:
    """A BasicBolt's collector: emit(values, stream=...) without anchors."""

    __slots__ = ("_p",)

    def __init__(self, producer: _Producer) -> None:
        self._p = producer

    def emit(self, values: Sequence[Any], stream: str = "default") -> None:
        self._p._route(stream, values, None)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default") -> None:
        self._p._route(stream, values, task)

    def report_error(self, error: BaseException) -> None:
        self._p.report_error(error)


def _sort_key(rec: tuple[Any, ...]) -> int:
    return int(rec[0])


def _read_partition(
    token: str, payload: Any, items: Iterable[tuple[str, int, str, Any, Any]]
) -> Iterator[tuple[Any, Any, Any]]:
    """The read stage: one item per spout task, ``(cid, index, kind, start, end)``.

    ``kind`` is ``"range"`` (replayable: ``read_batch(conf, start, end)``) or
    ``"records"`` (at-most-once: ``start`` holds the ``(stream, values,
    direct)`` the driver polled).
    """
    plan = _plan(token, payload)
    for cid, index, kind, start, end in items:
        producer = _Producer(plan, cid, index)
        if kind == "range":
            spout = plan.topology.instantiate(cid)
            for values in spout.read_batch(plan.conf_for(cid), start, end):
                producer._route("default", values, None)
        else:
            for stream, values, direct in start:
                producer._route(stream, values, direct)
        producer.finish((cid, index, 0, producer.emitted, 0, None), ())
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


def _run_bolt(
    token: str,
    payload: Any,
    cid: str,
    txid: int,
    valid: Mapping[str, str],
    index: int,
    items: Iterable[tuple[int, Any]],
) -> Iterator[tuple[Any, Any, Any]]:
    """One bolt task for one batch attempt (a Spark partition)."""
    plan = _plan(token, payload)
    records = [rec for _, rec in items]
    records.sort(key=_sort_key)
    # Acknowledgements forwarded from upstream tasks sort first (key -1).
    n_acks = 0
    while n_acks < len(records) and records[n_acks][0] < 0:
        n_acks += 1
    forwarded = [rec[2] for rec in records[:n_acks]]
    records = records[n_acks:]
    spec = plan.topology.components[cid]
    bolt: Bolt | BasicBolt = plan.topology.instantiate(cid)
    producer = _Producer(plan, cid, index)
    conf = plan.conf_for(cid)
    provider = _shared_provider(plan.config) if spec.is_stateful else None
    context = plan.context(cid, index, provider)
    state: Any = None
    if isinstance(bolt, BasicBolt):
        bolt.prepare(conf, context)
        basic = _BasicCollector(producer)

        def execute(tup: Tuple) -> None:
            bolt.execute(tup, basic)

    else:
        bolt.prepare(conf, context, producer)
        execute = bolt.execute  # type: ignore[assignment]
    if isinstance(bolt, StatefulBolt):
        assert provider is not None
        state = _task_state(provider, _provider_key(plan.config), f"{cid}-{index}", valid)
        state.rollback()  # a prepare left by a failed attempt of this batch
        apply_action(bolt, state, Action.INITSTATE, txid, False)
    origins: dict[tuple[int, str], Origin] = {}
    owner = plan.owner
    fields_of = plan.output_fields
    executed = failures = 0
    queue = records
    failed_counts: dict[int, int] = {}
    out = producer.out
    last_task, last_stream = -1, ""
    origin: Origin | None = None
    while queue:
        retry: list[tuple[Any, ...]] = []
        for rec in queue:
            key, stream, values = rec
            src_task = key >> _SEQ_BITS
            if src_task != last_task or stream != last_stream:
                # Input is sorted by producer task: the origin changes rarely.
                last_task, last_stream = src_task, stream
                origin = origins.get((src_task, stream))
                if origin is None:
                    src, src_index = owner[src_task]
                    origin = origins[src_task, stream] = Origin(
                        src, src_task, src_index, stream, fields_of[src][stream]
                    )
            mark, seq = len(out), producer.seq
            producer.failed_current = False
            try:
                execute(Tuple(values, origin))  # type: ignore[arg-type]
            except FailedException:
                producer.failed_current = True
            executed += 1
            if producer.failed_current:
                failures += 1
                del out[mark:]  # what the failed attempt emitted is not sent
                producer.seq = seq
                n = failed_counts[key] = failed_counts.get(key, 0) + 1
                if n >= MAX_TUPLE_FAILURES:
                    raise RuntimeFailure(
                        f"bolt {cid!r} task {index} failed the tuple {list(values)!r} from "
                        f"{origin!r} {n} times in batch {txid}"
                    )
                retry.append(rec)
        queue = retry
    prepared = None
    if state is not None:
        apply_action(bolt, state, Action.PREPARE, txid, True)  # type: ignore[arg-type]
        prepared = uuid.uuid4().hex
        _STATE_CACHE[_provider_key(plan.config), f"{cid}-{index}"] = (prepared, state)
    producer.finish((cid, index, executed, producer.emitted, failures, prepared), forwarded)
    yield from producer.out


def _rows_partition(
    token: str, payload: Any, cid: str, part: int, rows: Iterable[Any]
) -> Iterator[tuple[Any, Any, Any]]:
    """The read stage of a Spark-fed batch: one DataFrame partition as spout task 0.

    Sequence numbers start at ``part << 28`` so that the records of every
    partition sort apart and in the same order on every replay.
    """
    plan = _plan(token, payload)
    producer = _Producer(plan, cid, 0)
    producer.seq = part << 28
    columns = plan.topology.components[cid].obj.fields  # type: ignore[union-attr]
    for row in rows:
        producer._route("default", [row[c] for c in columns], None)
    producer.finish((cid, part, 0, producer.emitted, 0, None), ())
    yield from producer.out


class DataFrameSpout(Spout):
    """A spout that Spark feeds: each micro-batch of a streaming DataFrame is one transaction.

    Declares ``fields`` (column names of the DataFrame) on the default stream.
    Use it in place of a spout and start the topology with
    :meth:`SparkRuntime.feed`; the spout is never opened or polled.
    """

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = list(fields)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self.fields)

    def next_tuple(self) -> None:
        raise RuntimeFailure(
            "DataFrameSpout is fed by Spark: start the topology with SparkRuntime.feed()"
        )


def _root_cause(exc: BaseException) -> str:
    """The last line of a (possibly remote) traceback: what actually went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (causes[-1] if causes else lines[-1] if lines else repr(exc))[:500]


def spark_checkpoint_batches(location: str) -> tuple[int, int]:
    """``(last batch with offsets, last committed batch)`` in a Structured Streaming
    checkpoint on a local file system, -1 for none."""
    root = location.removeprefix("file://")

    def last(sub: str) -> int:
        try:
            names = os.listdir(os.path.join(root, sub))
        except FileNotFoundError:
            return -1
        return max((int(n) for n in names if n.isdigit()), default=-1)

    return last("offsets"), last("commits")


# --------------------------------------------------------------------------- driver side


class _PollCollector:
    """At-most-once: what a spout without the replay contract emits on the driver."""

    def __init__(self) -> None:
        self.items: list[tuple[str, list[Any], int | None]] = []
        self.msg_ids: list[Any] = []

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> None:
        self.items.append((stream, list(values), None))
        if msg_id is not None:
            self.msg_ids.append(msg_id)

    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = "default"
    ) -> None:
        self.items.append((stream, list(values), task))
        if msg_id is not None:
            self.msg_ids.append(msg_id)

    def report_error(self, error: BaseException) -> None:
        log.error("spout reported %r", error)


class _NullCollector:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        pass

    emit_direct = emit
    ack = emit
    fail = emit
    reset_timeout = emit
    report_error = emit


def _next_start(batch: Mapping[str, Any]) -> dict[str, Any]:
    """Where each spout task starts after ``batch``: its end, or its start if it read nothing."""
    ends = batch.get("end") or {}
    return {
        **(batch.get("start") or {}),
        **{key: end for key, end in ends.items() if end is not None},
    }


class SparkRuntime:
    """Run a topology on Spark: one transaction (one Spark job) per batch.

    >>> rt = SparkRuntime(topology, {"topology.state.provider": "redis"})
    >>> result = rt.run(until_idle=True)

    ``spark`` is a SparkSession to use; without one the active session is
    used, or one is built from the config's ``spark.*`` keys (and stopped at
    the end of the run). ``batch_size`` overrides
    ``statestream.spark.batch.size``.

    Exactly-once state needs every spout to implement the replay contract
    (:data:`REPLAY_CONTRACT`, see :class:`statestream.FileSpout`). A spout
    without it is refused unless the user opts into at-most-once with
    ``statestream.state.exactly.once: false`` and ``topology.acker.executors:
    0``: then the driver polls ``next_tuple`` to fill each batch, and a batch
    lost to a crash is not replayed.
    """

    #: Test hook: called as ``hook(point, txid)`` at ``"recovered"`` (the stored
    #: phase acted on), ``"prepared"`` (every task prepared, nothing committed)
    #: and ``"committed"``; raise (or kill the process) to simulate a crash.
    fault_hook: Callable[[str, int], None] | None = None

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        *,
        spark: Any = None,
        batch_size: int | None = None,
    ) -> None:
        from .._run import as_config

        self.topology = topology
        self.config = as_config(config, topology_prefixes=(topology.name,))
        self._spark = spark
        self._own_session = False
        self.batch_size = int(batch_size if batch_size is not None else self.config[BATCH_SIZE_KEY])
        if self.batch_size < 1:
            raise ConfigError(f"{BATCH_SIZE_KEY} must be a positive integer, got {self.batch_size}")
        self.attempts = int(self.config[BATCH_ATTEMPTS_KEY])
        self._stop = False
        self.errors: list[ErrorReport] = []
        self._metrics: dict[str, TaskMetrics] = {}
        self.counters: dict[str, int] = {"batches": 0, "replays": 0, "recovered": 0}
        self.provider: Any = None
        self._tokens: dict[str, str] = {}
        # component id -> global task ids, computed as the local runtime does
        # (so emit_direct task ids agree across runtimes).
        self.component_tasks: dict[str, list[int]] = {}
        next_id = 0
        for cid in topology.topological_order():
            n = topology.components[cid].parallelism
            self.component_tasks[cid] = list(range(next_id, next_id + n))
            next_id += n
        self.spouts = [s for s in topology.spouts if not s.id.startswith("$")]
        self.bolts = [
            topology.components[cid]
            for cid in topology.topological_order()
            if not cid.startswith("$") and not topology.components[cid].is_spout
        ]
        self.namespaces = [
            f"{b.id}-{i}" for b in self.bolts if b.is_stateful for i in range(b.parallelism)
        ]
        ship_user_modules(topology)
        self.at_most_once = False
        self.fed = [s.id for s in self.spouts if isinstance(s.obj, DataFrameSpout)]
        missing = [
            s.id
            for s in self.spouts
            if not has_replay_contract(s.obj) and not isinstance(s.obj, DataFrameSpout)
        ]
        if missing:
            if (
                not self.config["statestream.state.exactly.once"]
                and self.config["topology.acker.executors"] == 0
            ):
                self.at_most_once = True
            else:
                names = ", ".join(
                    f"{cid!r} ({type(topology.components[cid].obj).__name__})" for cid in missing
                )
                raise ConfigError(
                    f"spout {names} cannot replay a batch, which the spark runtime needs for "
                    f"exactly-once state; implement the replay contract ({REPLAY_CONTRACT}), "
                    "or accept at-most-once processing with statestream.state.exactly.once: "
                    "false and topology.acker.executors: 0"
                )
        self._metrics = {
            cid: TaskMetrics(cid, -1) for cid in self.component_tasks if not cid.startswith("$")
        }

    # -- session and provider ---------------------------------------------------
    @property
    def master(self) -> str:
        if self._spark is not None:
            return str(self._spark.sparkContext.master)
        return str(self.config["spark.master"])

    def _session(self) -> Any:
        if self._spark is not None:
            return self._spark
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:
            raise ConfigError(
                "the spark runtime needs PySpark: pip install 'statestream[spark]'"
            ) from exc
        active = SparkSession.getActiveSession()
        if active is not None:
            self._spark = active
            return active
        builder = SparkSession.builder.appName(f"statestream-{self.topology.name}")
        for key, value in {**_SPARK_DEFAULTS, **self.config.spark_conf}.items():
            builder = builder.config(
                key, str(value).lower() if isinstance(value, bool) else str(value)
            )
        self._spark = builder.getOrCreate()
        self._spark.sparkContext.setLogLevel("ERROR")
        self._own_session = True
        return self._spark

    def _open_provider(self) -> Any:
        if self.provider is None:
            from .._registry import open_provider

            self.provider = open_provider(
                self.config["topology.state.provider"],
                self.config["topology.state.provider.config"],
            )
        return self.provider

    # -- the checkpoint record ----------------------------------------------------
    def _load(self) -> tuple[CheckpointState, dict[str, Any]]:
        cp = fresh_state(self._open_provider(), CHECKPOINT_NAMESPACE)
        raw = cp.get(_PHASE_KEY)
        stored = CheckpointState.from_json(raw) if raw is not None else CheckpointState.initial()
        positions = cp.get(_POSITIONS_KEY) or {}
        return stored, dict(positions)

    def _save(self, state: CheckpointState, positions: Mapping[str, Any] | None = None) -> None:
        cp = self._open_provider().get_state(CHECKPOINT_NAMESPACE)
        cp.put(_PHASE_KEY, state.to_json())
        if positions is not None:
            cp.put(_POSITIONS_KEY, dict(positions))
        cp.commit(None)  # phase and positions in one atomic write

    def _each_namespace(self, action: Action, txid: int) -> None:
        provider = self._open_provider()
        if action is not Action.COMMIT:
            self._tokens = {}  # no executor's state object is current any more
        for ns in self.namespaces:
            state = fresh_state(provider, ns)
            if action is Action.COMMIT:
                state.commit(txid)
            else:
                state.rollback()

    # -- the loop -----------------------------------------------------------------
    def stop(self) -> None:
        """Stop after the current batch (safe from a signal handler)."""
        self._stop = True

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals over the committed batches of this run."""
        return {cid: TaskMetrics(**vars(m)) for cid, m in self._metrics.items()}

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run batches until stopped, ``duration`` seconds, or (``until_idle``) every
        spout is exhausted. Recovers first from the stored checkpoint phase."""
        if self.fed:
            raise ConfigError(
                f"spout {self.fed[0]!r} is a DataFrameSpout: Spark feeds it; start the topology "
                "with SparkRuntime.feed(streaming_dataframe, checkpoint=...) instead of run()"
            )
        check_provider(self.config, self.master)
        check_spark_conf(self.config.spark_conf)
        start_time = time.monotonic()
        spark = self._session()
        check_provider(self.config, self.master)  # the session's master may differ
        sc = spark.sparkContext
        token = uuid.uuid4().hex
        payload = sc.broadcast(
            cloudpickle.dumps(_Plan(self.topology, self.config, self.component_tasks))
        )
        reason = "stopped"
        clean = False
        try:
            self._check_positions()
            state, positions = self._recover()
            drivers = self._open_spouts() if self.at_most_once else {}
            interval = self.config["topology.state.checkpoint.interval.ms"] / 1000.0
            while not self._stop:
                if duration is not None and time.monotonic() - start_time >= duration:
                    reason = "duration"
                    break
                replay = self._replay
                self._replay = None
                batch: dict[str, Any] | None
                polled: dict[str, Any] | None
                if replay is not None:
                    batch, polled = replay, None
                elif self.at_most_once:
                    batch, polled = self._poll(drivers)
                else:
                    batch, polled = self._plan_batch(positions), None
                if batch is None:
                    if until_idle:
                        reason = "idle"
                        break
                    time.sleep(interval)
                    continue
                state, positions = self._transaction(
                    sc, token, payload, state, positions, batch, polled, drivers
                )
            clean = True
        finally:
            try:
                if clean:
                    self._cleanup()
                payload.unpersist()
            finally:
                if self._own_session:
                    spark.stop()
                    self._spark = None
                if self.provider is not None:
                    self.provider.close()
                    self.provider = None
        return RunResult(
            self.metrics(), list(self.errors), time.monotonic() - start_time, reason, self.counters
        )

    _replay: dict[str, Any] | None = None

    def feed(
        self,
        df: Any,
        *,
        checkpoint: str,
        available_now: bool = True,
        timeout: float | None = None,
    ) -> RunResult:
        """Run the topology over a streaming DataFrame: one micro-batch, one transaction.

        The topology's one spout must be a :class:`DataFrameSpout` whose fields
        are columns of ``df``. The transaction id is Spark's batch id, and
        ``checkpoint`` is the query's checkpoint location (a local path), whose
        offset log makes Spark replay an unfinished batch with the same id and
        data. A batch whose id is at or below the provider's committed txid
        was applied already (the driver died after committing it, before
        Spark logged it) and is skipped. Refuses to start (ConfigError) when
        the provider's txid is ahead of what the checkpoint has planned, e.g.
        a lost or foreign checkpoint: every batch would be skipped.

        ``available_now``: process what is available, then stop; otherwise run
        until :meth:`stop` or ``timeout`` seconds.
        """
        if len(self.spouts) != 1 or self.fed != [self.spouts[0].id]:
            raise ConfigError(
                "feed() needs a topology whose only spout is a DataFrameSpout (found: "
                + ", ".join(f"{s.id!r} ({type(s.obj).__name__})" for s in self.spouts)
                + ")"
            )
        cid = self.spouts[0].id
        columns = self.spouts[0].obj.fields  # type: ignore[union-attr]
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ConfigError(
                f"DataFrameSpout {cid!r} declares the fields {columns}, but the DataFrame has "
                f"no column {missing[0]!r} (columns: {df.columns})"
            )
        self._spark = df.sparkSession
        check_provider(self.config, self.master)
        start_time = time.monotonic()
        planned, _ = spark_checkpoint_batches(checkpoint)
        stored, _ = self._load()
        if stored.txid > planned:
            raise ConfigError(
                f"the state provider has transaction {stored} but the Spark checkpoint "
                f"{checkpoint!r} has planned batches only up to {planned}: the checkpoint "
                "was lost or belongs to another query, and its batches would be skipped as "
                "already applied; restore the checkpoint, or start over with a fresh store"
            )
        sc = self._spark.sparkContext
        token = uuid.uuid4().hex
        payload = sc.broadcast(
            cloudpickle.dumps(_Plan(self.topology, self.config, self.component_tasks))
        )
        current = {"state": self._recover()[0]}

        def on_batch(batch_df: Any, batch_id: int) -> None:
            state = current["state"]
            if batch_id <= state.txid:
                log.warning("batch %d was committed already; skipping its replay", batch_id)
                self.counters["skipped"] = self.counters.get("skipped", 0) + 1
                return
            if batch_id != state.txid + 1:
                raise RuntimeFailure(
                    f"Spark runs batch {batch_id} but the state provider last committed "
                    f"{state.txid}: batches {state.txid + 1}..{batch_id - 1} are missing from "
                    "the state; was the store reset under a running checkpoint?"
                )
            rows = batch_df.select(*columns).rdd
            source = rows.mapPartitionsWithIndex(partial(_rows_partition, token, payload, cid))
            current["state"], _ = self._transaction(
                sc, token, payload, state, {}, {"start": {}, "end": {}}, None, {}, source
            )

        writer = (
            df.writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", checkpoint)
            .queryName(f"statestream-{self.topology.name}-{token[:8]}")
        )
        writer = writer.trigger(availableNow=True) if available_now else writer
        query = writer.start()
        try:
            if available_now:
                query.awaitTermination(timeout)
            else:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._stop and query.isActive:
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    query.awaitTermination(0.2)
        except Exception as exc:  # StreamingQueryException and py4j errors
            raise RuntimeFailure(
                f"the streaming query failed; restart it on the same checkpoint to replay the "
                f"unfinished batch: {str(exc).splitlines()[0][:500]} ({_root_cause(exc)})"
            ) from exc
        finally:
            if query.isActive:
                query.stop()
            payload.unpersist()
        return RunResult(
            self.metrics(), list(self.errors), time.monotonic() - start_time, "fed", self.counters
        )

    def _check_positions(self) -> None:
        """Refuse a store with committed transactions but no batch positions.

        The local runtime checkpoints the same phase key without positions;
        starting the spouts from the beginning over its state would count
        everything it counted again.
        """
        stored, positions = self._load()
        if self.at_most_once or stored.txid < 0 or positions.get("txid") == stored.txid:
            return
        raise ConfigError(
            f"the state store holds checkpoint {stored} without the spark runtime's batch "
            "positions (was it written by the local runtime?); the spouts would be read from "
            "their beginning and counted into the state again. Give the spark runtime its own "
            "store (another sqlite path or redis key_prefix), or keep using the local runtime"
        )

    def _recover(self) -> tuple[CheckpointState, dict[str, Any]]:
        """Every start is a recovery (DESIGN.md §4): act on the stored phase.

        The positions record is ``{"txid", "start", "end"}`` for the batch
        ``txid`` (``end`` is where each spout task stops, None if it read
        nothing), plus ``"replay"`` (a batch rolled back by a recovery, to be
        run again from the same positions). Returns the state to go on from
        and where each spout task starts.
        """
        stored, positions = self._load()
        if positions.get("txid") != stored.txid:
            positions = {}  # nothing recorded (a fresh store, or one the local runtime wrote)
        nxt, action = next_state(stored, True)
        if action is Action.ROLLBACK:
            log.warning("spark runtime: batch %d was not committed; replaying it", stored.txid)
            self._each_namespace(Action.ROLLBACK, stored.txid)
            self.counters["recovered"] += 1
            start = dict(positions.get("start") or {})
            replay = None
            if any(end is not None for end in (positions.get("end") or {}).values()):
                replay = {"start": start, "end": positions["end"]}
            # COMMITTED(t-1), still knowing where batch t started and what it read.
            positions = {"txid": nxt.txid, "start": start, "end": {}, "replay": replay}
            self._save(nxt, positions)
        elif action is Action.COMMIT:
            self._each_namespace(Action.COMMIT, stored.txid)
            self.counters["recovered"] += 1
            self._save(nxt)
        if positions.get("replay"):
            self._replay = dict(positions["replay"])
        if self.fault_hook is not None:
            self.fault_hook("recovered", nxt.txid)
        return nxt, _next_start(positions)

    def _open_spouts(self) -> dict[tuple[str, int], tuple[Spout, _PollCollector]]:
        out = {}
        provider = self._open_provider()
        plan = _Plan(self.topology, self.config, self.component_tasks)
        for spec in self.spouts:
            for i in range(spec.parallelism):
                spout: Spout = self.topology.instantiate(spec.id)
                collector = _PollCollector()
                spout.open(plan.conf_for(spec.id), plan.context(spec.id, i, provider), collector)
                out[spec.id, i] = (spout, collector)
        return out

    def _poll(
        self, drivers: Mapping[tuple[str, int], tuple[Spout, _PollCollector]]
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        polled: dict[str, Any] = {}
        for (cid, i), (spout, collector) in drivers.items():
            collector.items = []
            collector.msg_ids = []
            while len(collector.items) < self.batch_size:
                before = len(collector.items)
                spout.next_tuple()
                if len(collector.items) == before:
                    break
            polled[f"{cid}-{i}"] = (collector.items, list(collector.msg_ids))
        if not any(items for items, _ in polled.values()) and all(
            spout.exhausted() for spout, _ in drivers.values()
        ):
            return None, None
        return {"start": {}, "end": {}}, polled

    def _plan_batch(self, positions: Mapping[str, Any]) -> dict[str, Any] | None:
        start: dict[str, Any] = {}
        end: dict[str, Any] = {}
        any_data = False
        for spec in self.spouts:
            conf = self.config
            if spec.config:
                conf = conf.with_overrides(spec.config, source=f"component {spec.id!r}")
            for i in range(spec.parallelism):
                key = f"{spec.id}-{i}"
                begin = positions.get(key)
                spout: Any = spec.obj
                stop = spout.plan_batch(conf, begin, self.batch_size)
                start[key] = begin
                end[key] = stop
                any_data = any_data or stop is not None
        return {"start": start, "end": end} if any_data else None

    def _transaction(
        self,
        sc: Any,
        token: str,
        payload: Any,
        state: CheckpointState,
        positions: dict[str, Any],
        batch: dict[str, Any],
        polled: dict[str, Any] | None,
        drivers: Mapping[tuple[str, int], tuple[Spout, _PollCollector]],
        source: Any = None,
    ) -> tuple[CheckpointState, dict[str, Any]]:
        """One batch: PREPARING (stored with positions), the job, COMMITTING, COMMITTED."""
        preparing, _ = next_state(state, False)
        txid = preparing.txid
        self._save(preparing, {"txid": txid, **batch})
        attempt = 0
        while True:
            attempt += 1
            try:
                acks = self._job(sc, token, payload, txid, batch, polled, source)
                break
            except Exception as exc:
                self.errors.append(
                    ErrorReport(
                        "$batch",
                        -1,
                        f"batch {txid} attempt {attempt}",
                        repr(exc)[:2000],
                        "".join(traceback.format_exception(exc))[-20000:],
                    )
                )
                # next_state(PREPARING, recovering) is ROLLBACK: drop every prepare.
                self._each_namespace(next_state(preparing, True)[1], txid)
                self.counters["replays"] += 1
                if attempt >= self.attempts:
                    for spout, collector in drivers.values():
                        for msg_id in collector.msg_ids:
                            spout.fail(msg_id)
                    raise RuntimeFailure(
                        f"batch {txid} failed {attempt} times and was rolled back; the last "
                        f"error: {exc!r}. The next run replays it from its stored positions"
                    ) from exc
                log.warning("batch %d failed (%r); rolled back, replaying", txid, exc)
        if self.fault_hook is not None:
            self.fault_hook("prepared", txid)
        committing, _ = next_state(preparing, False)
        self._save(committing)
        committed, action = next_state(committing, False)
        self._each_namespace(action, txid)
        self._save(committed)
        if self.fault_hook is not None:
            self.fault_hook("committed", txid)
        for spout, collector in drivers.values():
            for msg_id in collector.msg_ids:
                spout.ack(msg_id)
        self.counters["batches"] += 1
        # The prepares just committed: executors may keep using those state objects.
        self._tokens = {f"{cid}-{index}": tok for cid, index, *_, tok in acks if tok is not None}
        for cid, _index, executed, emitted, failed, _ in acks:
            m = self._metrics[cid]
            m.executed += executed
            m.emitted += emitted
            m.acked += executed - failed
            m.failed += failed
        return committed, {**positions, **_next_start(batch)}

    def _job(
        self,
        sc: Any,
        token: str,
        payload: Any,
        txid: int,
        batch: Mapping[str, Any],
        polled: Mapping[str, Any] | None,
        source: Any = None,
    ) -> list[_Ack]:
        items = []
        for spec in self.spouts:
            for i in range(spec.parallelism):
                key = f"{spec.id}-{i}"
                if polled is not None:
                    items.append((spec.id, i, "records", polled[key][0], None))
                elif batch["end"].get(key) is not None:
                    items.append((spec.id, i, "range", batch["start"].get(key), batch["end"][key]))
        persisted = []
        outs: dict[str, Any] = {}
        leaves: dict[int, Any] = {}
        consumers = {
            cid: {d for d in self.topology.downstream(cid) if not d.startswith("$")}
            for cid in self.topology.components
        }

        def keep(cids: list[str], rdd: Any) -> None:
            # An output read by several bolts is cached, else each would run
            # its tasks again; one read by none goes to the driver (acks only).
            if len(set().union(*(consumers[c] for c in cids))) > 1:
                rdd.persist()
                persisted.append(rdd)
            if any(not consumers[c] for c in cids):
                leaves[id(rdd)] = rdd

        try:
            if source is None:
                source = sc.parallelize(items, max(1, len(items))).mapPartitions(
                    partial(_read_partition, token, payload)
                )
            keep([spec.id for spec in self.spouts], source)
            for spec in self.spouts:
                outs[spec.id] = source
            for bolt in self.bolts:
                parents = list(
                    {
                        id(outs[up]): outs[up]
                        for up in self.topology.upstream(bolt.id)
                        if up in outs
                    }.values()
                )
                inputs = parents[0] if len(parents) == 1 else sc.union(parents)
                out = (
                    inputs.mapPartitions(partial(_addressed_to, bolt.id))
                    .partitionBy(bolt.parallelism, _identity)
                    .mapPartitionsWithIndex(
                        partial(_run_bolt, token, payload, bolt.id, txid, self._tokens)
                    )
                )
                keep([bolt.id], out)
                outs[bolt.id] = out
            ends = list(leaves.values())
            acks: list[_Ack] = (
                (ends[0] if len(ends) == 1 else sc.union(ends)).mapPartitions(_acks).collect()
            )
        finally:
            for rdd in persisted:
                rdd.unpersist()
        seen = {(cid, index) for cid, index, *_ in acks}
        for bolt in self.bolts:
            for i in range(bolt.parallelism):
                if (bolt.id, i) not in seen:
                    raise RuntimeFailure(
                        f"bolt {bolt.id!r} task {i} did not acknowledge batch {txid}"
                    )
        return acks

    def _cleanup(self) -> None:
        """``cleanup`` once per bolt task, on the driver, with the committed state."""
        plan = _Plan(self.topology, self.config, self.component_tasks)
        provider = self._open_provider() if self.namespaces else None
        for spec in self.bolts:
            for i in range(spec.parallelism):
                try:
                    bolt: Bolt | BasicBolt = self.topology.instantiate(spec.id)
                    context = plan.context(spec.id, i, provider)
                    if isinstance(bolt, BasicBolt):
                        bolt.prepare(plan.conf_for(spec.id), context)
                    else:
                        bolt.prepare(plan.conf_for(spec.id), context, _NullCollector())
                    if isinstance(bolt, StatefulBolt):
                        bolt.init_state(fresh_state(provider, f"{spec.id}-{i}"))
                    bolt.cleanup()
                except Exception as exc:
                    self.errors.append(
                        ErrorReport(spec.id, i, "cleanup()", repr(exc), traceback.format_exc())
                    )
