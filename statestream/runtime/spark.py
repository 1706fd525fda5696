"""The Spark runtime: the same topology, one transaction per Spark job.

Imported only when ``topology.runner`` is ``spark`` (PySpark is an optional
dependency: ``pip install 'statestream[spark]'``).

How a run goes::

    driver                                          executors (Python workers)
    ------                                          --------------------------
    load the CheckpointRecord ($checkpointspout-0), build the CheckpointCoordinator
    recovery: poll the coordinator, act on every stateful namespace for each
      emission (ROLLBACK / COMMIT / INITSTATE), on_ack, until it has recovered
    open each data spout task once, seek() it to the restored positions
    loop:
      read batch t: next_tuple() until batch.size tuples or nothing more;
        position() is where batch t ends
      poll(early=True) -> PREPARE(t): PREPARING(t) is stored with those positions
      submit one job:                               read stage: the records the driver read
                                                    one stage per bolt: partitionBy(task count),
                                                    one partition = one bolt task: fresh bolt,
                                                    rollback, init_state, execute, PREPARE(t)
      collect the small acks; on_ack
      poll -> COMMIT(t): every namespace commits (pre_commit first); on_ack
      ack the spouts' msg_ids
    a failed job: on_fail, the coordinator's recovery (ROLLBACK, INITSTATE),
      seek the spouts back to the restored positions, read the batch again

The checkpoint protocol is the one of the local runtime's checkpoint spout:
the driver drives the same :class:`~statestream._checkpoint.CheckpointCoordinator`
and stores the same :class:`~statestream._exactly_once.CheckpointRecord`
(phase, and for ``PREPARING(t)`` the data spouts' positions at the end of
batch ``t``), so a store one runtime left behind, killed or not, is finished
exactly by the other. Only the transport differs: a batch is the unit of
replay, so there are no per-tuple acks, no barriers and no ``$checkpoint``
tuples (the system components the builder adds are ignored; the driver plays
the checkpoint spout).

Spouts follow the one rewind contract (:class:`~statestream.Rewindable`):
the driver opens each data spout task once, seeks it, and reads every batch
from it; the records travel to the executors inside the job. A spout that
cannot rewind cannot replay a batch: it is refused, whatever
``statestream.state.exactly.once`` says (``auto`` too, which on the local
runtime falls back to at-least-once), unless the user accepts at-most-once
with ``topology.acker.executors: 0`` (and exactly-once auto or false).

Task ids, namespaces, per-component configs, routes and contexts come from a
:class:`~statestream.runtime.plan.RuntimePlan`, as on the local runtime.
Routing is identical too: fields grouping uses
:func:`statestream._routing.task_for_key`, shuffle is a round-robin over the
producer task's output that starts at its task index, global is task 0, all
replicates, direct follows the emitted task id, custom asks the grouping. A
bolt task sorts its input by (producer task, emit sequence) before executing
it, so its input order, and therefore what it emits and where, is the same on
every attempt and every replay; the tuples from one producer task arrive in
the order they were emitted, as in Storm.

The driver collects no tuples: each task puts its acknowledgement (counts
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
replays an unfinished batch with the same id and data, so no spout positions
are stored), a replayed batch at or below the committed txid skipped, and a
refusal to start when the store's txid is ahead of the checkpoint's offset
log. Its phases go through the same coordinator and record.

Transactional topologies (``TransactionalTopologyBuilder``): the driver plays
the coordinator. It drives the pure
:class:`~statestream._transactional.coordinator.TransactionCoordinator`,
storing its state where, and as, the local runtime's ``$coordinator`` spout
does (so a store either runtime left behind is continued by the other), and
asks the spout's coordinator part (on the driver) whether a batch is ready::

    driver                                          executors
    ------                                          ---------
    poll: up to max.spout.pending batch tuples      processing job: the batch tuples go to
      (metadata stored before each)                 every emitter task (emit_batch), then
                                                    each processing-phase batch bolt is a
                                                    stage; outputs for commit-phase bolts
                                                    stay persisted
    settle the tasks' reports: on_ack / on_fail
    poll: the commit tuple of the next txid         commit job: the committers (and what is
                                                    downstream of them) get that
                                                    transaction's persisted input and the
                                                    commit tuple
    settle: on_ack (the commit is recorded) / on_fail; the next commit, then new batches

A task is the component the builder made (emitter, or batch bolt with
count-based completion), fresh for each job, and reports which attempts it
finished (:func:`statestream._transactional.driver.settle`). Commits run one
txid per job, so strictly in order; a failure in either phase fails the
transaction and every later active one, which are emitted again.

Lifecycle on Spark (differs from local, documented for users). A bolt task's
*executing* instance lives for one batch attempt: it is unpickled on an
executor, ``prepare`` is called, then (stateful bolts) ``init_state`` with
the last committed state, ``execute`` per tuple and ``pre_prepare(t)`` +
prepare. The hooks that follow the job run on the driver: for each stateful
task the driver keeps one instance for the run, prepared with the task's
context and config (its collector drops what it emits) and given
``init_state`` with the committed state at every recovery's ``INITSTATE``;
it calls ``pre_commit(t)`` on it just before committing the task's namespace
and ``pre_rollback()`` just before rolling it back. So the hooks run in
Storm's order (``pre_prepare(t)`` before ``pre_commit(t)``; ``pre_rollback``
on a failed batch), but ``pre_commit``/``pre_rollback`` see the driver's
instance, not the fields the executing instance set: use them for effects
outside the state (publish, notify, commit an external sink), not to read
what ``execute`` accumulated in memory. (The alternative, keeping executing
instances in the Python worker next to ``_STATE_CACHE`` and calling the hooks
in a small commit job, costs one more Spark job per batch and still needs a
fallback instance when the task lands on another worker.) ``cleanup`` is
called once per task at the end of a run that ends normally, on the driver,
on an instance initialised with the committed state.

Failures and poison tuples. A tuple failed by a bolt
(:class:`~statestream.FailedException` or ``collector.fail``) is executed
again later in the same task, up to :data:`MAX_TUPLE_FAILURES` times; what it
emitted during the failed attempt is dropped, and (exactly-once) what it put
in the state undone. Any other exception fails the Spark task, which Spark
runs again (use a master such as ``local[2,2]``); on Spark's last try of the
task it fails that tuple only. A tuple still failing is given up on for the
job, and the task reports the spout messages it belongs to (its roots: every
record carries them, from the spout's record through anchored and
``BasicBolt`` emits). The job is then one failed attempt of each of those
messages, under the retry policy of the local runtime
(:mod:`statestream._retry`, ``statestream.retry.*``, delays on the runtime's
clock)::

    job of batch t ── a task gave up on message m ──> ROLLBACK(t); m counts a failure
          ^                                              |
          |            failures < max.attempts ──────────┤── wait delay(failures)
          |            failures = max.attempts ──────────┘── m to the dead-letter file
          └──── seek back, read batch t again (m skipped, Spout.dead_lettered(m)) ──┘

Every other message of the job went through, and its failures are forgotten
(the counting rule of :mod:`statestream._retry`); a committed batch forgets
its messages' failures. Spark has one mode for this: a batch is replayed
whole, whatever ``statestream.state.exactly.once`` says, so what a
dead-lettered message did is never committed. A tuple no message tracks (an
unanchored emit, a spout emit without a message id) is lost when given up
on, as on the local runtime; in a batch Spark fed (:meth:`SparkRuntime.feed`)
it fails the batch instead, which has no spout to settle it with. A job that
fails as a whole (an executor lost, a prepare that raised) says nothing of
its messages: it is rolled back and read again, up to
``statestream.spark.batch.attempts`` times. Failure counts live in the
driver's memory for the run: a restarted driver gives a poison message
``max.attempts`` attempts again (never loses it, never writes it twice).

Dead letters fed back (``statestream deadletter replay``, status ``replay``)
go into the first batches of the next run, ahead of what their spout task
reads, as the local runtime emits them: the spout never hears of them, they
are counted and retried as any message of a batch (read again with it after a
rollback), marked ``replayed`` in the file once their batch committed, and
``dead`` again (the record rewritten, not a second one) once they had their
last attempt. As on the local runtime, a driver killed between the commit and
that mark feeds the message back once more in the next run.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import sysconfig
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import cloudpickle

from .._checkpoint import Action, CheckpointCoordinator, CheckpointState, Emission, Phase
from .._clock import Clock, SystemClock
from .._components import (
    BasicBolt,
    Bolt,
    Spout,
    StatefulBolt,
    TopologyContext,
    task_namespace,
)
from .._config import Config
from .._deadletter import (
    REPLAY,
    DeadLetter,
    DeadLetterFile,
    Replay,
    Settled,
    configured_path,
    fits_stream,
)
from .._errors import ConfigError, FailedException, RuntimeFailure, TupleError
from .._exactly_once import CheckpointRecord, can_rewind, check_position, resolve_exactly_once
from .._outage import guard_store
from .._picklable import check_first, run_ending
from .._registry import RunClaim
from .._rescale import rescale_state
from .._results import ErrorReport, RunResult, TaskMetrics
from .._resume import SpoutRef, plan_resume
from .._retry import (
    FailureRate,
    Retries,
    RetryPolicy,
    VerdictKind,
    cannot_fix_in,
    retry_cannot_fix,
    too_many_failures,
)
from .._routing import custom_choose, task_for_key
from .._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM, apply_action
from .._text import count, cut_message
from .._topology import Topology
from .._transactional.components import (
    BATCH_STREAM,
    COMMIT_STREAM,
    COORDINATOR,
    CoordinatorStore,
    coordinator_namespace,
)
from .._transactional.coordinator import Emission as TxEmission
from .._transactional.coordinator import TransactionAttempt, TransactionCoordinator, TxPhase
from .._transactional.driver import TransactionalLayout, settle
from .._transactional.driver import layout as transactional_layout
from .._tuple import Fields, Origin, Tuple, check_emit
from .plan import RouteSpec, RuntimePlan

try:
    from .._executors import unwrap as _unwrap
except ImportError:  # pragma: no cover - before build() wrapped bolts in executors

    def _unwrap(obj: Any) -> Any:
        return obj


__all__ = [
    "BATCH_ATTEMPTS_KEY",
    "BATCH_SIZE_KEY",
    "MAX_TUPLE_FAILURES",
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

#: Where the driver keeps the checkpoint record (as the local checkpoint spout does).
CHECKPOINT_NAMESPACE = task_namespace(CHECKPOINT_SPOUT, 0)

_SPARK_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}

#: An error a task reported for one tuple: (the tuple's repr, the error's repr, traceback).
_Error = tuple[str, str, str]
#: A tuple a task gave up on in this job, for one of its spout messages: (root, the
#: component that failed it, the error's type, its message). Root 0: a tuple no
#: spout message tracks (an unanchored emit).
_Lost = tuple[int, str, str, str]
#: A task's acknowledgement: (component, task, executed, emitted, failed, prepare token,
#: errors, lost).
_Ack = tuple[str, int, int, int, int, str | None, list[_Error], list[_Lost]]
_ACK = "$ack"  # first element of an acknowledgement record (no component id can be it)
_SEQ_BITS = 40  # sort key: producer task id << 40 | emit sequence


# --------------------------------------------------------------------------- config checks


def _is_local_master(master: str) -> bool:
    """True for ``local``/``local[...]``: one JVM (executor Python workers are still processes)."""
    return master == "local" or master.startswith("local[")


def check_provider(conf: Mapping[str, Any], master: str) -> None:
    """Refuse a provider that the executors of ``master`` cannot share (ConfigError).

    The provider declares how far it can be shared (``sharing``: ``process``,
    ``machine`` or ``network``); see :func:`statestream._registry.provider_sharing`.
    """
    from .._registry import provider_sharing

    spec = conf["topology.state.provider"]
    scope = provider_sharing(spec)
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
            f"topology.state.provider is {spec!r}, a store on one machine, but spark.master "
            f"{master!r} runs executors in several processes or hosts that cannot share it "
            "safely; use topology.state.provider: redis, or a local[...] master"
        )


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def _user_objects(obj: Any, depth: int = 4) -> Iterator[Any]:
    """``obj``, and the objects statestream's own components hold (the user's
    batch bolt inside the executor a transactional builder made, the user's
    spout inside the coordinator, custom groupings in routes)."""
    yield obj
    if depth == 0 or type(obj).__module__.partition(".")[0] != "statestream":
        return
    values: Iterable[Any]
    if isinstance(obj, dict):
        values = obj.values()
    elif isinstance(obj, (list, tuple)):
        values = obj
    else:
        values = getattr(obj, "__dict__", {}).values()
    for value in values:
        if value is not None and not isinstance(value, (str, bytes, int, float, bool)):
            yield from _user_objects(value, depth - 1)


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
        objs.extend(_user_objects(_unwrap(spec.obj)))
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
            if path.startswith(_STDLIB):
                continue  # typing (Generic), abc and friends: every Python has them
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


# --------------------------------------------------------------------------- executor side

_SHIPPED: dict[str, _Shipped] = {}
_PROVIDERS: dict[str, Any] = {}
#: (provider key, namespace) -> (token of its last prepare, the state object).
_STATE_CACHE: dict[tuple[str, str], tuple[str, Any]] = {}


def _user_bolt(topology: Topology, cid: str) -> Any:
    """A fresh copy of the user's bolt ``cid`` for one task.

    ``build()`` wraps bolts in the executors of the local runtime's per-tuple
    protocols (barriers, held acks); a batch is the unit of the checkpoint
    protocol here, and this runtime runs it itself on the bare bolt.
    """
    return _unwrap(topology.instantiate(cid))


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


def _store_key(plan: RuntimePlan) -> str:
    """One topology's state in one store: two topologies on one store never share it."""
    return f"{plan.topology.name}\0{_provider_key(plan.config)}"


def _shared_provider(conf: Mapping[str, Any], scope: str) -> Any:
    """The provider of this process for topology ``scope`` (Python workers are reused,
    so connections are too)."""
    key = f"{scope}\0{_provider_key(conf)}"
    provider = _PROVIDERS.get(key)
    if provider is None or getattr(provider, "closed", False):
        from .._registry import open_provider

        provider = _PROVIDERS[key] = open_provider(
            conf["topology.state.provider"], conf["topology.state.provider.config"], scope=scope
        )
        guard_store(provider, conf, SystemClock())  # a prepare rides out an outage here too
    return provider


def fresh_state(provider: Any, namespace: str) -> Any:
    """A state of ``namespace`` that reads its txids from the store again.

    A provider hands out one cached state object per namespace, which assumes
    that object is the namespace's only writer. On Spark a namespace is
    prepared on an executor and committed by the driver, so each side drops
    the cached object and takes a new one before acting.
    """
    from .._registry import ScopedProvider

    inner, stored_as = provider, namespace
    while isinstance(inner, ScopedProvider):
        # The wrapped provider caches its states under the scoped name.
        stored_as = inner._prefix + stored_as
        inner = inner.provider
    states = getattr(inner, "_states", None)
    if isinstance(states, dict):
        states.pop(stored_as, None)
    return provider.get_state(namespace)


class _ReadThrough:
    """A namespace the executors write and the driver only reads: every call
    reads the store afresh (a cached state object would keep what it read
    first). The driver's transactional spout coordinator reads the
    partitions' metadata, which the emitters store, through it."""

    def __init__(self, provider: Any, namespace: str) -> None:
        self._provider = provider
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(fresh_state(self._provider, self._namespace), name)

    def __iter__(self) -> Iterator[Any]:
        return iter(fresh_state(self._provider, self._namespace))

    def __contains__(self, key: object) -> bool:
        return key in fresh_state(self._provider, self._namespace)


def _opener(provider: Any) -> Callable[[str], Any] | None:
    if provider is None:
        return None

    def opener(namespace: str) -> Any:
        return fresh_state(provider, namespace)

    return opener


class _Shipped:
    """What executors need, unpickled once per Python worker: the plan and where acks go."""

    def __init__(self, plan: RuntimePlan, exactly_once: bool, task_tries: int = 1) -> None:
        self.plan = plan
        self.exactly_once = exactly_once
        #: How many times Spark runs a task before it fails the job
        #: (:func:`_task_tries`): a bolt that raises fails the Spark task before
        #: the last try, and only its tuple on the last (:func:`_run_bolt`).
        self.task_tries = task_tries
        topology = plan.topology
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
            state_opener=_opener(provider),
            clock=SystemClock(),
            exactly_once=self.exactly_once,
        )


def _shipped(token: str, payload: Any) -> _Shipped:
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


class _Route:
    """Where one (producer task, stream)'s tuples go for one subscriber."""

    __slots__ = ("custom", "index_of_task", "key", "kind", "n", "rr", "target")

    def __init__(self, spec: RouteSpec, producer_index: int) -> None:
        self.target = spec.target
        self.kind = spec.kind
        self.n = len(spec.task_ids)
        self.key: Any = spec.key
        self.custom: Any = spec.custom
        self.index_of_task: dict[int, int] = {tid: i for i, tid in enumerate(spec.task_ids)}
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

    def __init__(self, shipped: _Shipped, cid: str, index: int) -> None:
        plan = shipped.plan
        self.shipped = shipped
        self.cid = cid
        self.index = index
        self.task_id = plan.component_tasks[cid][index]
        self.base = self.task_id << _SEQ_BITS
        self.seq = 0
        self.out: list[tuple[Any, Any, Any]] = []
        #: The tuple being executed and its roots (what a BasicBolt's emits anchor to).
        self.current: Tuple | None = None
        self.roots: tuple[int, ...] = ()
        self.emitted = 0
        self.failed_current = False
        self.acked = 0
        #: Where report_error keeps errors for the driver (None: logged only).
        self.errors: list[_Error] | None = None
        spec = plan.topology.components[cid]
        self.streams: dict[str, tuple[int, list[_Route], bool]] = {}
        self.outputs = {s: o for s, o in spec.outputs.items() if s != CHECKPOINT_STREAM}
        self.checked: set[str] = set()  # streams whose first tuple pickled (_picklable)
        for stream, (fields, direct) in self.outputs.items():
            routes = [
                _Route(route, index)
                for route in plan.routes(cid, stream)
                if not route.target.startswith("$")
            ]
            self.streams[stream] = (len(fields), routes, direct)

    def finish(self, ack: _Ack, forwarded: Iterable[_Ack]) -> None:
        """Send this task's ack, and those it received, on to the driver.

        Acks travel with the data: to task 0 of the first downstream bolt,
        which forwards them with its own; the tasks of the last bolts hand
        them to the driver. So the driver collects only acknowledgements and
        never reads a partition of tuples.
        """
        target = self.shipped.ack_to[self.cid]
        if target is None:
            self.out.append((_ACK, 0, ack))
            self.out.extend((_ACK, 0, a) for a in forwarded)
        else:
            self.out.append((target, 0, (-1, _ACK, ack)))
            self.out.extend((target, 0, (-1, _ACK, a)) for a in forwarded)

    def _entry(self, stream: str, values: Sequence[Any], direct: bool) -> tuple[int, list[_Route]]:
        check_emit(self.cid, self.index, stream, values, self.outputs, direct)
        if stream not in self.checked:
            check_first(self.cid, self.index, stream, values)
            self.checked.add(stream)
        entry = self.streams[stream]
        return entry[0], entry[1]

    def _route(
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
        self._route(stream, values, None, self._anchored(anchors))

    def emit_direct(
        self, task: int, values: Sequence[Any], anchors: Any = None, stream: str = "default"
    ) -> None:
        self._route(stream, values, task, self._anchored(anchors))

    def ack(self, tuple: Tuple) -> None:
        self.acked += 1

    def fail(self, tuple: Tuple) -> None:
        self.failed_current = True

    def reset_timeout(self, tuple: Tuple) -> None:
        """Nothing times out inside a batch."""

    def report_error(self, error: BaseException) -> None:
        if self.errors is not None:
            tb = "".join(traceback.format_exception(error))[-20000:]
            self.errors.append((f"{self.cid}[{self.index}]", repr(error), tb))
        log.error("%s[%d] reported %r", self.cid, self.index, error)


class _BasicCollector:
    """A BasicBolt's collector: emit(values, stream=...) without anchors."""

    __slots__ = ("_p",)

    def __init__(self, producer: _Producer) -> None:
        self._p = producer

    def emit(self, values: Sequence[Any], stream: str = "default") -> None:
        self._p._route(stream, values, None, self._p.roots)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default") -> None:
        self._p._route(stream, values, task, self._p.roots)

    def report_error(self, error: BaseException) -> None:
        self._p.report_error(error)


def _sort_key(rec: tuple[Any, ...]) -> int:
    return int(rec[0])


def _read_partition(
    token: str, payload: Any, items: Iterable[tuple[str, int, Sequence[Any]]]
) -> Iterator[tuple[Any, Any, Any]]:
    """The read stage: one item per spout task, ``(cid, index, records)``, where
    ``records`` are the ``(stream, values, direct task)`` the driver read from it."""
    shipped = _shipped(token, payload)
    for cid, index, records in items:
        producer = _Producer(shipped, cid, index)
        for stream, values, direct in records:
            producer._route(stream, values, direct)
        producer.finish((cid, index, 0, producer.emitted, 0, None, [], []), ())
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


_ABSENT = object()


class _TupleJournal:
    """The state a stateful bolt sees on Spark: its own, with the changes of the
    tuple being executed journaled so that a failed tuple leaves no effect.

    In exactly-once mode a failed tuple must not count: the local runtime goes
    back to the last checkpoint; here the tuple is executed again within its
    batch, so the puts and deletes its failed attempt made are undone first
    (what the bolt keeps in its own fields is its business, as ``pre_rollback``
    is on the local runtime).
    """

    def __init__(self, state: Any) -> None:
        self._state = state
        self._before: dict[Any, Any] = {}

    def begin(self) -> None:
        self._before.clear()

    def undo(self) -> None:
        state = self._state
        for key, value in self._before.items():
            if value is _ABSENT:
                state.delete(key)
            else:
                state.put(key, value)
        self._before.clear()

    def _remember(self, key: Any) -> None:
        if key not in self._before:
            self._before[key] = self._state.get(key, _ABSENT)

    def put(self, key: Any, value: Any) -> None:
        self._remember(key)
        self._state.put(key, value)

    def delete(self, key: Any) -> Any:
        self._remember(key)
        return self._state.delete(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._state)

    def __contains__(self, key: object) -> bool:
        return key in self._state


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
    shipped = _shipped(token, payload)
    plan = shipped.plan
    records = [rec for _, rec in items]
    records.sort(key=_sort_key)
    # Acknowledgements forwarded from upstream tasks sort first (key -1).
    n_acks = 0
    while n_acks < len(records) and records[n_acks][0] < 0:
        n_acks += 1
    forwarded = [rec[2] for rec in records[:n_acks]]
    records = records[n_acks:]
    spec = plan.topology.components[cid]
    bolt: Bolt | BasicBolt = _user_bolt(plan.topology, cid)
    producer = _Producer(shipped, cid, index)
    conf = plan.conf_for(cid)
    provider = _shared_provider(plan.config, plan.topology.name) if spec.is_stateful else None
    context = shipped.context(cid, index, provider)
    state: Any = None
    journal: _TupleJournal | None = None
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
        namespace = task_namespace(cid, index)
        state = _task_state(provider, _store_key(plan), namespace, valid)
        state.rollback()  # a prepare left by a failed attempt of this batch
        journal = _TupleJournal(state) if shipped.exactly_once else None
        apply_action(bolt, state if journal is None else journal, Action.INITSTATE, txid, False)
    origins: dict[tuple[int, str], Origin] = {}
    owner = plan.owner
    fields_of = plan.output_fields
    executed = failures = 0
    errors: list[_Error] = []
    lost: list[_Lost] = []
    last_try = _last_try(shipped.task_tries)
    queue = records
    failed_counts: dict[int, int] = {}
    out = producer.out
    last_task, last_stream = -1, ""
    origin: Origin | None = None
    while queue:
        retry: list[tuple[Any, ...]] = []
        for rec in queue:
            key, stream, values, roots = rec
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
            if journal is not None:
                journal.begin()
            # The tuple carries its spout messages (its roots) as a tracked
            # tuple does on the local runtime, so that anchoring to it works.
            if len(roots) == 1:
                tup = Tuple(values, origin, root=roots[0])  # type: ignore[arg-type]
            else:
                tup = Tuple(values, origin, dict.fromkeys(roots, 0) or None)  # type: ignore[arg-type]
            producer.current, producer.roots = tup, roots
            cause: tuple[str, str] | None = None
            again = True
            try:
                execute(tup)
            except FailedException as exc:
                producer.failed_current = True
                cause = (type(exc).__name__, str(exc)[:2000])
            except TupleError as exc:
                # A wrong emit (arity, stream, direct task): reported for this
                # tuple, which fails and is executed again, as on the local
                # runtime.
                producer.failed_current = True
                cause = (type(exc).__name__, str(exc)[:2000])
                errors.append(
                    (repr(tup), repr(exc), "".join(traceback.format_exception(exc))[-20000:])
                )
            except RuntimeFailure as exc:
                # The run's end (an emit that cannot be pickled, say), not this
                # tuple's: given up at once, and the driver stops with it.
                producer.failed_current = True
                again = False
                cause = (type(exc).__name__, str(exc)[:2000])
            except Exception as exc:
                # A bolt that raises: before Spark's last try of this task the
                # Spark task fails (Spark runs it again, a lost executor looks
                # the same); on the last, only this tuple does, and its
                # messages go through the retry policy (the driver's).
                if not last_try or retry_cannot_fix(exc):
                    raise  # a bug no retry fixes fails the job: the driver stops
                producer.failed_current = True
                again = False
                cause = (type(exc).__name__, str(exc)[:2000])
                errors.append(
                    (repr(tup), repr(exc), "".join(traceback.format_exception(exc))[-20000:])
                )
            executed += 1
            if producer.failed_current:
                failures += 1
                if journal is not None:
                    journal.undo()  # nor is what it changed in the state kept
                del out[mark:]  # what the failed attempt emitted is not sent
                producer.seq = seq
                n = failed_counts[key] = failed_counts.get(key, 0) + 1
                if again and n < MAX_TUPLE_FAILURES:
                    retry.append(rec)
                    continue
                # Given up in this job: the driver counts an attempt of each
                # of its messages and runs the batch again (or without them).
                error_type, error = cause or ("Failed", "failed by collector.fail()")
                lost.extend((root, cid, error_type, error) for root in roots or (0,))
        queue = retry
    producer.current, producer.roots = None, ()
    prepared = None
    if state is not None:
        apply_action(bolt, state, Action.PREPARE, txid, True)  # type: ignore[arg-type]
        prepared = uuid.uuid4().hex
        _STATE_CACHE[_store_key(plan), task_namespace(cid, index)] = (prepared, state)
    producer.finish(
        (cid, index, executed, producer.emitted, failures, prepared, errors, lost), forwarded
    )
    yield from producer.out


def _last_try(tries: int) -> bool:
    """Whether the Spark task running this is Spark's last try of it (True outside Spark)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - executors have PySpark
        return True
    context = TaskContext.get()
    return context is None or context.attemptNumber() + 1 >= tries


def _task_tries(sc: Any) -> int:
    """How many times Spark runs a failing task before it fails the job: ``F`` of a
    ``local[N,F]`` master, 1 for ``local``/``local[N]``, else ``spark.task.maxFailures``."""
    master = str(sc.master)
    if master.startswith("local["):
        _, _, tries = master[len("local[") : -1].partition(",")
        return int(tries) if tries.strip().isdigit() else 1
    if master == "local":
        return 1
    return int(sc.getConf().get("spark.task.maxFailures", "4"))


def _rows_partition(
    token: str, payload: Any, cid: str, part: int, rows: Iterable[Any]
) -> Iterator[tuple[Any, Any, Any]]:
    """The read stage of a Spark-fed batch: one DataFrame partition as spout task 0.

    Sequence numbers start at ``part << 28`` so that the records of every
    partition sort apart and in the same order on every replay.
    """
    shipped = _shipped(token, payload)
    producer = _Producer(shipped, cid, 0)
    producer.seq = part << 28
    columns = shipped.plan.topology.components[cid].obj.fields  # type: ignore[union-attr]
    for row in rows:
        producer._route("default", [row[c] for c in columns], None)
    producer.finish((cid, part, 0, producer.emitted, 0, None, [], []), ())
    yield from producer.out


# --------------------------------------------------------------------------- transactional


def _tx_source(
    token: str, payload: Any, parts: Iterable[list[tuple[str, list[Any]]]]
) -> Iterator[tuple[Any, Any, Any]]:
    """The coordinator's tuples of one job (batch tuples, or one commit tuple),
    routed as task 0 of ``$coordinator`` routes them on the local runtime."""
    shipped = _shipped(token, payload)
    producer = _Producer(shipped, COORDINATOR, 0)
    for records in parts:
        for stream, values in records:
            producer._route(stream, values, None)
    yield from producer.out


def _run_tx_task(
    token: str, payload: Any, cid: str, index: int, items: Iterable[tuple[int, Any]]
) -> Iterator[tuple[Any, Any, Any]]:
    """One task of a transactional topology for one job (a Spark partition).

    The task is the component the builder made (an emitter, or a batch bolt
    wrapped for count-based completion), fresh for the job; its input is
    sorted by (producer task, emit sequence), so each producer's count tuple
    follows its data, as on the local runtime. It ends with its report:
    which attempts it finished (:func:`statestream._transactional.driver.settle`
    reads them), counts and errors.
    """
    shipped = _shipped(token, payload)
    plan = shipped.plan
    records = sorted((rec for _, rec in items), key=_sort_key)
    # Copied, not unpickled from a fresh pickle: user classes travel by value,
    # and pickling one again here would take its module's globals as they are
    # in this worker now (a connection a committer opened in an earlier job).
    task: Any = copy.deepcopy(plan.topology.components[cid].obj)
    producer = _Producer(shipped, cid, index)
    errors: list[_Error] = []
    producer.errors = errors

    def open_state(namespace: str) -> Any:
        # A fresh object: another worker may have written the namespace since.
        return fresh_state(_shared_provider(plan.config, plan.topology.name), namespace)

    context = plan.context(cid, index, state_opener=open_state, clock=SystemClock())
    task.prepare(plan.conf_for(cid), context, producer)
    origins: dict[tuple[int, str], Origin] = {}
    failed = 0
    try:
        for key, stream, values, _roots in records:
            src_task = key >> _SEQ_BITS
            origin = origins.get((src_task, stream))
            if origin is None:
                src, src_index = plan.owner[src_task]
                origin = origins[src_task, stream] = Origin(
                    src, src_task, src_index, stream, plan.output_fields[src][stream]
                )
            producer.failed_current = False
            # The task catches what the user's code raises and fails the
            # attempt; anything else is a fault of this Spark task.
            task.execute(Tuple(values, origin))
            failed += producer.failed_current
    finally:
        task.cleanup()
    yield from producer.out
    yield (
        _ACK,
        0,
        (cid, index, dict(task.finished), len(records), producer.emitted, failed, errors),
    )


def _tx_commit_input(
    targets: frozenset[str], attempt: Any, items: Iterable[tuple[str, int, Any]]
) -> Iterator[tuple[str, int, Any]]:
    """What the processing job sent the commit-phase bolts for ``attempt``."""
    for item in items:
        if item[0] in targets and item[2][2][0] == attempt:
            yield item


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


def _refuse_lost(acks: Iterable[_Ack], txid: int) -> None:
    """A batch Spark fed has no spout to retry or settle a message with: a tuple its
    tasks gave up on fails the batch (run again, up to ``statestream.spark.batch.attempts``)."""
    for _, index, *_, lost in acks:
        for _, component, error_type, error in lost[:1]:
            raise RuntimeFailure(
                f"bolt {component!r} task {index} gave up on a tuple of fed batch {txid} "
                f"({error_type}: {error[:500]}); a fed row cannot be dead-lettered"
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
    """What a spout task emits on the driver while a batch is read."""

    def __init__(
        self,
        cid: str,
        index: int,
        outputs: Mapping[str, tuple[Fields, bool]],
        report: Callable[[BaseException, Any], None],
    ) -> None:
        self.cid = cid
        self.index = index
        self.outputs = outputs
        self.report = report
        self.items: list[tuple[str, list[Any], int | None]] = []
        self.msg_ids: list[Any] = []
        """The message id of each item (None: untracked)."""
        self.checked: set[str] = set()
        """The streams whose first tuple pickled (statestream._picklable)."""
        self.settled = Settled()
        """The messages of this task given up on in this run: not read into a batch."""
        self.settles: list[Any] = []
        """Message ids emitted again since the last ``dead_lettered`` calls, skipped."""

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> None:
        # Checked here, as the local runtime checks it in the spout's emit: the
        # error belongs to next_tuple(), not to the job that would route it.
        check_emit(self.cid, self.index, stream, values, self.outputs, False)
        self._add(stream, values, None, msg_id)

    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = "default"
    ) -> None:
        check_emit(self.cid, self.index, stream, values, self.outputs, True)
        self._add(stream, values, task, msg_id)

    def _add(self, stream: str, values: Sequence[Any], direct: int | None, msg_id: Any) -> None:
        if stream not in self.checked:
            check_first(self.cid, self.index, stream, values)
            self.checked.add(stream)
        if msg_id is not None and self.settled and self.settled.holds(msg_id, values):
            self.settles.append(msg_id)
            return
        self.items.append((stream, list(values), direct))
        self.msg_ids.append(msg_id)

    def report_error(self, error: BaseException) -> None:
        self.report(error, None)


class _NullCollector:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        pass

    emit_direct = emit
    ack = emit
    fail = emit
    reset_timeout = emit
    report_error = emit


@dataclass
class _SpoutTask:
    """One data spout task, opened once on the driver for the run."""

    cid: str
    index: int
    namespace: str
    spout: Spout
    collector: _PollCollector


@dataclass
class _Batch:
    """One batch as the driver holds it until it commits."""

    records: dict[tuple[str, int], list[tuple[str, list[Any], int | None]]] = field(
        default_factory=dict
    )
    """Per spout task, what it emitted: ``(stream, values, direct task)``."""
    positions: dict[str, Any] | None = None
    """Where each spout task stands after the batch (stored with ``PREPARING(t)``)."""
    msg_ids: list[tuple[_SpoutTask, list[Any]]] = field(default_factory=list)
    """Per spout task, the message id of each of its records (None: untracked), to
    ack once the batch commits."""
    source: Any = None
    """A Spark-fed batch: the RDD of its read stage (no records, no positions)."""

    @property
    def size(self) -> int:
        return sum(len(records) for records in self.records.values())

    def message(
        self, plan: RuntimePlan, root: int
    ) -> tuple[_SpoutTask, tuple[str, list[Any], int | None], Any] | None:
        """The spout task, record and message id a root of the batch names (its read
        stage gave record ``i`` of task ``t`` the key ``t << 40 | i``, the root
        ``key + 1``); None for a root that names none (0, a fed batch)."""
        if root <= 0:
            return None
        key = root - 1
        owner = plan.owner.get(key >> _SEQ_BITS)
        seq = key & ((1 << _SEQ_BITS) - 1)
        for task, ids in self.msg_ids:
            if (task.cid, task.index) == owner and seq < len(ids):
                return task, self.records[owner][seq], ids[seq]
        return None


class SparkRuntime:
    """Run a topology on Spark: one transaction (one Spark job) per batch.

    >>> rt = SparkRuntime(topology, {"topology.state.provider": "redis"})
    >>> result = rt.run(until_idle=True)

    ``spark`` is a SparkSession to use; without one the active session is
    used, or one is built from the config's ``spark.*`` keys (and stopped at
    the end of the run). ``batch_size`` overrides
    ``statestream.spark.batch.size``.

    Every data spout must be :class:`~statestream.Rewindable` (``position()``
    and ``seek()``, see :class:`statestream.FileSpout`): a failed or
    unfinished batch is read again from the positions of the last committed
    checkpoint. A spout without them is refused (with
    ``statestream.state.exactly.once`` auto or false too: Spark has no
    at-least-once mode to fall back to) unless the user opts into
    at-most-once with ``topology.acker.executors: 0`` (and exactly-once auto
    or false): then a failed batch is run again with the records already
    read, and a batch lost to a crash is not replayed.
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
        clock: Clock | None = None,
    ) -> None:
        from .._run import as_config

        self.topology = topology
        self.config: Config = as_config(config, topology_prefixes=(topology.name,))
        self.plan = RuntimePlan(topology, self.config)
        #: What the retry policy's delays are measured and waited on.
        self.clock: Clock = clock or SystemClock()
        self._spark = spark
        self._own_session = False
        self.batch_size = int(batch_size if batch_size is not None else self.config[BATCH_SIZE_KEY])
        if self.batch_size < 1:
            raise ConfigError(f"{BATCH_SIZE_KEY} must be a positive integer, got {self.batch_size}")
        self.attempts = int(self.config[BATCH_ATTEMPTS_KEY])
        self._stop = False
        self._deadline: float | None = None  # run(duration=...) ends then (time.monotonic)
        self.errors: list[ErrorReport] = []
        self.counters: dict[str, int] = {"batches": 0, "replays": 0, "recovered": 0}
        self.provider: Any = None
        self._claim = RunClaim()  # the run's hold on its scope of the store (_claim_store)
        self._tokens: dict[str, str] = {}
        self.component_tasks = self.plan.component_tasks
        self.spouts = self.plan.data_spouts
        self.bolts = [b for b in self.plan.bolts if not b.id.startswith("$")]
        self.namespaces = self.plan.stateful_namespaces
        self._sources: dict[str, tuple[str, str]] = {}
        already = set(cloudpickle.list_registry_pickle_by_value())
        shipped = ship_user_modules(topology)
        #: Modules this runtime made travel by value, to be let go after the run.
        self._by_value = [name for name in shipped if name not in already]
        for name in shipped:
            path = getattr(sys.modules.get(name), "__file__", None)
            if path and path.endswith(".py") and os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    self._sources[name] = (path, f.read())
        self.fed = [s.id for s in self.spouts if isinstance(s.obj, DataFrameSpout)]
        #: The shape of a transactional topology (None for any other): the
        #: driver plays its coordinator (see :meth:`_run_transactional`).
        self.transactional: TransactionalLayout | None = transactional_layout(topology)
        self.at_most_once = False if self.transactional else self._at_most_once()
        #: What bolts are told through ``context.exactly_once``.
        self.exactly_once = not self.at_most_once and self.plan.checkpointed
        self._metrics = {
            cid: TaskMetrics(cid, -1) for cid in self.component_tasks if not cid.startswith("$")
        }
        self._record = CheckpointRecord(CheckpointState.initial())
        self._coordinator: CheckpointCoordinator | None = None
        self._cut: dict[str, Any] | None = None
        self._spout_tasks: list[_SpoutTask] = []
        self._driver_bolts: dict[str, StatefulBolt] = {}
        self._tx_jobs: list[_TxJob] = []
        self._tx_failures: dict[int, int] = {}
        # Poison tuples (statestream._retry, statestream._deadletter), as on the
        # local runtime: per spout task namespace, its failed messages (kept for
        # the run, in memory only) and where the given-up ones go.
        self.retry_policy = RetryPolicy.from_config(self.config)
        self._retries: dict[str, Retries] = {}
        # The error-rate limit per bolt task, and what each has executed so far.
        self._failure_rates: dict[tuple[str, int], tuple[FailureRate, int]] = {}
        self.deadletter_path = configured_path(self.config)
        self.deadletters = DeadLetterFile(self.deadletter_path)
        #: Per spout task namespace, the dead letters fed back for this run
        #: (``statestream deadletter replay``) and not in a batch under way.
        self._replays: dict[str, deque[Replay]] = {}

    def _at_most_once(self) -> bool:
        """Whether batches are read at-most-once (a spout cannot rewind and the
        user accepted it); refuses a spout that cannot rewind otherwise."""
        readers = {s.id: s.obj for s in self.spouts if not isinstance(s.obj, DataFrameSpout)}
        setting = self.config["statestream.state.exactly.once"]
        cannot = [cid for cid, obj in readers.items() if not can_rewind(obj)]
        try:
            # A batch is the unit of replay whether or not a bolt is stateful,
            # so the decision is taken as for a stateful topology.
            on, _ = resolve_exactly_once(setting, True, readers)
        except ConfigError:
            on = False  # true, and a spout cannot rewind: refused below
        if on or not cannot:
            return False
        if setting is not True and self.config["topology.acker.executors"] == 0:
            return True  # at-most-once, as asked (auto asks for no more than is possible)
        names = ", ".join(f"{cid!r} ({type(readers[cid]).__name__})" for cid in cannot)
        if setting is True:
            why = "statestream.state.exactly.once is true"
        else:
            why = (
                f"statestream.state.exactly.once is {str(setting).lower()}, which on the local "
                "runtime gives Storm's at-least-once, but the spark runtime has no at-least-once "
                "mode"
            )
        raise ConfigError(
            f"spout {names} cannot rewind (no position()/seek()), and the spark runtime reads "
            f"a failed or unfinished batch again by seeking its spouts back ({why}). Implement "
            "statestream.Rewindable (position() and seek(position), see FileSpout), or accept "
            "at-most-once processing with topology.acker.executors: 0 (and "
            "statestream.state.exactly.once auto or false)"
        )

    def _payload(self, sc: Any, exactly_once: bool) -> Any:
        """The broadcast executors unpickle once per worker: the plan, and the
        sources of the user modules it travels with (see :func:`_loads`)."""
        data = cloudpickle.dumps(_Shipped(self.plan, exactly_once, _task_tries(sc)))
        return sc.broadcast((self._sources, data))

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
                scope=self.topology.name,
            )
            guard_store(self.provider, self.config, self.clock)
        return self.provider

    def _claim_store(self) -> None:
        """Claim this topology's scope of the store for the run, on the driver, before
        the checkpoint record is read (``BackendStateProvider.claim``; executors
        never claim). Held until :meth:`_close_provider`. Raises
        StateLockedError if another run holds it."""
        self._claim.take(self._open_provider(), self.topology.name, self.config)

    def _close_provider(self) -> None:
        """The end of a run: close the store and let the claim go."""
        try:
            if self.provider is not None:
                self.provider.close()
                self.provider = None
        finally:
            self._claim.release()

    def _context(self, cid: str, index: int) -> TopologyContext:
        return self.plan.context(
            cid,
            index,
            state_opener=_opener(self._open_provider()),
            clock=self.clock,  # the driver's tasks (spouts, hooks) read the runtime's clock
            exactly_once=self.exactly_once,
        )

    # -- the checkpoint record and the coordinator ----------------------------------
    def _load(self) -> CheckpointRecord:
        return CheckpointRecord.load(fresh_state(self._open_provider(), CHECKPOINT_NAMESPACE))

    def _save(self, state: CheckpointState) -> None:
        """The coordinator's ``save``: store the record moved to ``state``.

        ``PREPARING(t)`` is stored with the cut of batch ``t`` (the data
        spouts' positions at its end) in the same commit.
        """
        positions = self._cut if state.phase is Phase.PREPARING else None
        record = self._record.advance(state, positions)
        record.save(self._open_provider().get_state(CHECKPOINT_NAMESPACE))
        self._record = record

    @property
    def coordinator(self) -> CheckpointCoordinator:
        if self._coordinator is None:
            raise RuntimeFailure("the spark runtime has not started its checkpoints")
        return self._coordinator

    @staticmethod
    def _now_ms() -> float:
        return time.monotonic() * 1000.0

    def _start_checkpoints(self, *, positions_needed: bool) -> None:
        """Load the record, check it can be continued, and recover from it.

        Every start is a recovery: the coordinator rolls back a
        prepare that may not have finished, finishes a decided commit, and
        ends with ``INITSTATE``.
        """
        self._claim_store()
        if self.topology.has_stateful_bolts:
            # Before any job: a bolt whose parallelism changed since the last
            # run gets its keys re-partitioned (statestream._rescale).
            rescale_state(self._open_provider(), self.topology)
        record = self._load()
        txid, positions = record.restore_point()
        # Acked positions (a local at-least-once run's) are resumed from, with a
        # warning (statestream._resume): nothing is lost, a little counted twice.
        if positions_needed and txid >= 0 and positions is None and txid not in record.acked:
            raise ConfigError(
                f"the state store holds checkpoint {record.state} (a recovery restores txid "
                f"{txid}) but no spout positions for it: it was written without exactly-once "
                "state (the local runtime with statestream.state.exactly.once: false, or a fed "
                "or at-most-once spark run), so the spouts would be read from their beginning "
                "and counted into the state again. Finish it with the runtime and settings that "
                "wrote it, or give this run a fresh store (another sqlite path or redis key_prefix)"
            )
        self._record = record
        interval_ms = int(self.config["topology.state.checkpoint.interval.ms"])
        self._coordinator = CheckpointCoordinator(record.state, interval_ms, self._save)
        self._open_driver_bolts()
        if self._recover():
            self.counters["recovered"] += 1
        if self.fault_hook is not None:
            self.fault_hook("recovered", self.coordinator.state.txid)

    def _recover(self) -> bool:
        """Run the coordinator's recovery to its end; True if it rolled back or committed."""
        coordinator = self.coordinator
        acted = False
        while coordinator.recovering:
            emission = coordinator.poll(self._now_ms())
            if emission is None:
                raise RuntimeFailure(f"the checkpoint coordinator is stuck: {coordinator!r}")
            if emission.action is not Action.INITSTATE:
                log.warning(
                    "spark runtime: recovery %s(%d) on every stateful task",
                    emission.action.value,
                    emission.txid,
                )
                acted = True
            self._act(emission)
            coordinator.on_ack(emission.action, emission.txid, self._now_ms())
        return acted

    def _act(self, emission: Emission) -> None:
        """Carry out ``ROLLBACK``/``COMMIT``/``INITSTATE`` on every stateful namespace.

        The hook runs first, on the driver's instance of the task
        (``pre_rollback()``, ``pre_commit(t)``; ``init_state`` for
        ``INITSTATE``), then the state acts through a state object that reads
        its txids from the store (the executors prepared it).
        """
        action, txid = emission
        if action is Action.PREPARE:
            raise RuntimeFailure("PREPARE is carried out by the job's tasks, not by the driver")
        if action is not Action.COMMIT:
            self._tokens = {}  # no executor's state object is current any more
        provider = self._open_provider()
        for namespace in self.namespaces:
            state = fresh_state(provider, namespace)
            apply_action(
                self._driver_bolts[namespace], state, action, txid, action is not Action.INITSTATE
            )

    def _open_driver_bolts(self) -> None:
        """One instance per stateful task, on the driver, for its pre_commit/pre_rollback."""
        if self._driver_bolts:
            return
        for spec in self.bolts:
            if not spec.is_stateful:
                continue
            for i in range(spec.parallelism):
                bolt: StatefulBolt = _user_bolt(self.topology, spec.id)
                bolt.prepare(
                    self.plan.conf_for(spec.id), self._context(spec.id, i), _NullCollector()
                )
                self._driver_bolts[task_namespace(spec.id, i)] = bolt

    def _report(self, cid: str, index: int, exc: BaseException, what: Any) -> None:
        """Record an error of a component on the driver (a spout's, say)."""
        self._metrics[cid].errors += 1
        self.errors.append(
            ErrorReport(cid, index, repr(what), repr(exc), "".join(traceback.format_exception(exc)))
        )

    # -- the spouts -------------------------------------------------------------------
    def _open_spouts(self) -> None:
        for spec in self.spouts:
            for i in range(spec.parallelism):
                spout: Spout = self.topology.instantiate(spec.id)
                outputs = {s: o for s, o in spec.outputs.items() if s != CHECKPOINT_STREAM}
                collector = _PollCollector(spec.id, i, outputs, partial(self._report, spec.id, i))
                spout.open(self.plan.conf_for(spec.id), self._context(spec.id, i), collector)
                namespace = task_namespace(spec.id, i)
                self._spout_tasks.append(_SpoutTask(spec.id, i, namespace, spout, collector))
                self._retries.setdefault(namespace, Retries(self.retry_policy))
        self._load_replays()

    def _load_replays(self) -> None:
        """The dead letters of this topology marked for replay, fed back as on the local
        runtime: each goes into a batch of its spout task (the spout never hears of
        it), is tracked as any message, and is marked ``replayed`` once its batch
        committed, or ``dead`` again once it failed to its last attempt."""
        outputs = {
            task_namespace(spec.id, i): spec.outputs
            for spec in self.spouts
            for i in range(spec.parallelism)
        }
        for record in self.deadletters.marked_for_replay(self.topology.name, outputs):
            declared = outputs[record.namespace].get(record.stream)
            fields = None if declared is None else len(declared[0])
            if fits_stream(record, fields, declared is not None and declared[1]):
                self._replays.setdefault(record.namespace, deque()).append(Replay(record))

    def _seek(self, *, start: bool = False) -> None:
        """Rewind every data spout to the positions of the checkpoint recovery restored
        (from the beginning on a fresh store); at ``start`` say where each resumes."""
        refs = [
            SpoutRef(t.namespace, t.cid, t.index, len(self.component_tasks[t.cid]), t.spout)
            for t in self._spout_tasks
        ]
        plan = plan_resume(self._record, not self.at_most_once, refs)
        if start:
            for line in ([plan.warning] if plan.warning else []) + plan.lines:
                log.warning("%s", line)
        if self.at_most_once:
            return
        for task in self._spout_tasks:
            if task.namespace in plan.seeks:
                task.spout.seek(plan.seeks[task.namespace])  # type: ignore[attr-defined]

    def _read_batch(self) -> _Batch:
        """Fill a batch: ``next_tuple`` on each spout task until it has emitted
        ``batch_size`` tuples or emits nothing more; then its ``position()``."""
        batch = _Batch()
        for task in self._spout_tasks:
            collector = task.collector
            collector.items = []
            collector.msg_ids = []
            next_tuple = task.spout.next_tuple
            items = collector.items
            replays = self._replays.get(task.namespace)
            while replays and len(items) < self.batch_size:
                rid = replays.popleft()  # dead letters fed back first, then the spout's
                items.append((rid.record.stream, list(rid.record.values), None))
                collector.msg_ids.append(rid)
            skipped = 0
            while len(items) < self.batch_size and skipped < self.batch_size:
                before = len(items)
                try:
                    next_tuple()
                except RuntimeFailure:
                    raise  # the run's end, as on local
                except Exception as exc:  # reported; the spout keeps going (as on local)
                    self._report(task.cid, task.index, exc, "next_tuple()")
                    break
                if collector.settles:
                    skipped += len(collector.settles)
                    self._settle(task)  # it emitted a dead letter: skipped, told
                elif len(items) == before:
                    break
            batch.records[task.cid, task.index] = items
            batch.msg_ids.append((task, collector.msg_ids))
            retries = self._retries[task.namespace]
            if retries.failures:
                for msg_id in collector.msg_ids:
                    if msg_id is not None:
                        retries.emitted_again(msg_id)
        if not self.at_most_once:
            batch.positions = {
                task.namespace: check_position(task.cid, task.spout.position())  # type: ignore[attr-defined]
                for task in self._spout_tasks
            }
        return batch

    def _settle(self, task: _SpoutTask) -> None:
        """Tell ``task``'s spout that the dead letters it just emitted again are settled."""
        settles, task.collector.settles = task.collector.settles, []
        self.counters["skipped_dead_letters"] = self.counters.get("skipped_dead_letters", 0) + len(
            settles
        )
        for msg_id in settles:
            try:
                task.spout.dead_lettered(msg_id)
            except Exception as exc:
                self._report(task.cid, task.index, exc, f"dead_lettered({msg_id!r})")

    def _read_again(self, batch: _Batch) -> _Batch:
        """The batch after a rollback: read again from the restored positions, with
        the dead letters fed back it held (but those given up on again)."""
        if self.at_most_once:
            return batch  # the spouts cannot rewind: run the same records again
        self._requeue_replays(batch)
        self._seek()
        return self._read_batch()

    def _requeue_replays(self, batch: _Batch) -> None:
        """Put the dead letters fed back in ``batch`` that are still to replay back in
        front of their task's queue, in their order."""
        for task, msg_ids in batch.msg_ids:
            again = [m for m in msg_ids if type(m) is Replay and m.record.status == REPLAY]
            if again:
                self._replays.setdefault(task.namespace, deque()).extendleft(reversed(again))

    def _close_spouts(self) -> None:
        tasks, self._spout_tasks = self._spout_tasks, []
        for task in tasks:
            try:
                task.spout.close()
            except Exception as exc:
                self.errors.append(
                    ErrorReport(task.cid, task.index, "close()", repr(exc), traceback.format_exc())
                )

    # -- the loop -----------------------------------------------------------------
    def stop(self) -> None:
        """Stop after the current batch (safe from a signal handler)."""
        self._stop = True

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals over the committed batches of this run; a spout's
        ``retrying`` counts its messages that failed and are to be run again."""
        out = {cid: TaskMetrics(**vars(m)) for cid, m in self._metrics.items()}
        for spec in self.spouts:
            for i in range(spec.parallelism):
                retries = self._retries.get(task_namespace(spec.id, i))
                if retries is not None:
                    out[spec.id].retrying += len(retries.failures)
        return out

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run batches until stopped, ``duration`` seconds, or (``until_idle``) every
        spout is exhausted. Recovers first from the stored checkpoint record."""
        try:
            return self._run(until_idle, duration)
        finally:
            # Shipping by value is process-wide in cloudpickle: left on, it would
            # make every later copy of these classes in this process (a local
            # runtime's per-task copies, say) copy their module's globals too.
            for name in self._by_value:
                module = sys.modules.get(name)
                if module is not None:
                    cloudpickle.unregister_pickle_by_value(module)
            self._by_value = []

    def open(self) -> None:
        """Refuse now what :meth:`run` would refuse before it starts (a fed spout, a
        provider the master cannot share, bad ``spark.*`` settings), so that a
        caller can say the run started only once it may. The tasks themselves
        open in :meth:`run`, on the driver and in each job."""
        if self.fed:
            raise ConfigError(
                f"spout {self.fed[0]!r} is a DataFrameSpout: Spark feeds it; start the topology "
                "with SparkRuntime.feed(streaming_dataframe, checkpoint=...) instead of run()"
            )
        check_provider(self.config, self.master)
        check_spark_conf(self.config.spark_conf)

    def _run(self, until_idle: bool, duration: float | None) -> RunResult:
        self.open()
        if self.transactional is not None:
            return self._run_transactional(self.transactional, until_idle, duration)
        start_time = time.monotonic()
        self._deadline = None if duration is None else start_time + duration
        spark = self._session()
        check_provider(self.config, self.master)  # the session's master may differ
        sc = spark.sparkContext
        token = uuid.uuid4().hex
        payload = self._payload(sc, self.exactly_once)
        reason = "stopped"
        clean = False
        try:
            self._start_checkpoints(positions_needed=not self.at_most_once)
            self._open_spouts()
            self._seek(start=True)
            interval = self.config["topology.state.checkpoint.interval.ms"] / 1000.0
            while not self._stop:
                if duration is not None and time.monotonic() - start_time >= duration:
                    reason = "duration"
                    break
                batch = self._read_batch()
                if not batch.size:
                    if until_idle and all(t.spout.exhausted() for t in self._spout_tasks):
                        reason = "idle"
                        break
                    time.sleep(interval)
                    continue
                self._transaction(sc, token, payload, batch, self._read_again)
            clean = True
        finally:
            try:
                if clean:
                    self._cleanup()
                self._close_spouts()
                payload.unpersist()
            finally:
                self._release(spark)
        return self._result(start_time, reason)

    def _release(self, spark: Any) -> None:
        """The end of every run: stop a session this runtime started, close the store."""
        try:
            if self._own_session:
                spark.stop()
                self._spark = None
        finally:
            self._close_provider()

    def _result(self, start_time: float, reason: str) -> RunResult:
        return RunResult(
            self.metrics(), list(self.errors), time.monotonic() - start_time, reason, self.counters
        )

    def _transaction(
        self,
        sc: Any,
        token: str,
        payload: Any,
        batch: _Batch,
        read_again: Callable[[_Batch], _Batch],
    ) -> None:
        """One batch through the coordinator: PREPARE (stored with the batch's end
        positions), the job, COMMIT; a failed job rolls back and runs again.

        A job in which tasks gave up on tuples of tracked messages (a poison
        record) is an attempt of those messages: it is rolled back, each one
        counts a failure under the retry policy (:meth:`_failed_messages`), and
        the batch is read again and run once the policy's delay has passed,
        without the messages that had their last attempt. Returns without a
        commit if the run is stopped (or its duration ends) while it waits.
        """
        coordinator = self.coordinator
        failures = 0
        while True:
            self._claim.check()  # a lost lease: another run may own the state now
            self._cut = batch.positions
            try:
                emission = coordinator.poll(self._now_ms(), early=True)
            finally:
                self._cut = None
            if emission is None or emission.action is not Action.PREPARE:
                raise RuntimeFailure(
                    f"the checkpoint coordinator gave {emission} where a PREPARE was due "
                    f"({coordinator!r})"
                )
            txid = emission.txid
            try:
                acks = self._job(sc, token, payload, txid, batch)
                if batch.source is not None:
                    _refuse_lost(acks, txid)
            except Exception as exc:
                stop = cannot_fix_in(exc)
                if stop is not None:  # e.g. the store stayed away: a new attempt would too
                    raise stop from exc
                failures += 1
                self.errors.append(
                    ErrorReport(
                        "$batch",
                        -1,
                        f"batch {txid} attempt {failures}",
                        repr(exc)[:2000],
                        "".join(traceback.format_exception(exc))[-20000:],
                    )
                )
                self.counters["replays"] += 1
                for retries in self._retries.values():
                    retries.rewound()  # the job's failure tells nothing of the messages
                coordinator.on_fail(Action.PREPARE, txid)
                self._recover()  # ROLLBACK(txid) (pre_rollback first), then INITSTATE
                if failures >= self.attempts:
                    # A dead letter fed back stays marked: the next run feeds it again.
                    for task, msg_ids in batch.msg_ids:
                        for msg_id in msg_ids:
                            if msg_id is not None and type(msg_id) is not Replay:
                                task.spout.fail(msg_id)
                    raise RuntimeFailure(
                        f"batch {txid} failed {count(failures, 'time')} and was rolled back; the last "
                        f"error: {exc!r}. The next run reads it again from the stored positions"
                    ) from exc
                log.warning("batch %d failed (%r); rolled back, reading it again", txid, exc)
                batch = read_again(batch)
                continue
            for *_, lost in acks:
                for _, _, error_type, error in lost:
                    fatal = run_ending(error_type, error)
                    if fatal is not None:
                        raise fatal  # the prepares are rolled back at the next start
            resume_at = self._failed_messages(batch, acks)
            if resume_at is None:
                break
            self._count_errors(acks)
            self.counters["replays"] += 1
            coordinator.on_fail(Action.PREPARE, txid)
            self._recover()
            if not self._wait_until(resume_at):
                return  # stopped: the batch is rolled back, the next run reads it again
            batch = read_again(batch)
        if self.fault_hook is not None:
            self.fault_hook("prepared", txid)
        coordinator.on_ack(Action.PREPARE, txid, self._now_ms())  # stores COMMITTING(txid)
        emission = coordinator.poll(self._now_ms())
        if emission != Emission(Action.COMMIT, txid):
            raise RuntimeFailure(
                f"the checkpoint coordinator gave {emission} where COMMIT({txid}) was due"
            )
        self._act(emission)
        coordinator.on_ack(Action.COMMIT, txid, self._now_ms())  # stores COMMITTED(txid)
        if self.fault_hook is not None:
            self.fault_hook("committed", txid)
        replayed = []
        for task, msg_ids in batch.msg_ids:
            for msg_id in msg_ids:
                if type(msg_id) is Replay:
                    replayed.append(msg_id.record)
                elif msg_id is not None:
                    self._metrics[task.cid].acked += 1  # a spout counts its acks, as on local
                    task.spout.ack(msg_id)
        if replayed:
            # After the commit, as the local runtime marks one once its tree is
            # acked: a crash in between feeds it back to the next run again.
            self.deadletters.replayed(replayed)
        for retries in self._retries.values():
            retries.passed_cut()  # what went through in the batch is forgotten
        self.counters["batches"] += 1
        # The prepares just committed: executors may keep using those state objects.
        self._tokens = {
            task_namespace(cid, index): tok
            for cid, index, _x, _e, _f, tok, _errors, _lost in acks
            if tok is not None
        }
        for cid, _, executed, emitted, failed, *_ in acks:
            m = self._metrics[cid]
            m.executed += executed
            m.emitted += emitted
            m.acked += executed - failed
            m.failed += failed
        self._count_errors(acks)

    def _count_errors(self, acks: list[_Ack]) -> None:
        """Record the errors the tasks of a job reported (a job that committed, or
        one run again for its failed messages), and stop the run if a task's
        error-rate limit tripped (statestream._retry.FailureRate)."""
        now = self.clock.monotonic()
        for cid, index, executed, _e, failed, _p, errors, lost in acks:
            m = self._metrics[cid]
            m.errors += len(errors)
            self.errors.extend(ErrorReport(cid, index, *error) for error in errors)
            for _, _, error_type, error in lost[-1:]:
                m.last_error = cut_message(f"{error_type}: {error}")
                m.last_error_at = now
            if not lost:
                continue
            rate, before = self._failure_rates.get((cid, index)) or (
                FailureRate.from_config(self.config),
                0,
            )
            # A tuple is executed up to MAX_TUPLE_FAILURES times within a job
            # before it is lost: each lost tuple counts once, as one attempt.
            after = before + executed - (failed - len(lost))
            self._failure_rates[cid, index] = (rate, after)
            for root, *_ in lost:
                rate.failed(root, now)
            reason = rate.judge(now, before, after)
            if reason is not None:
                raise too_many_failures(cid, index, reason, self.errors)

    def _failed_messages(self, batch: _Batch, acks: list[_Ack]) -> float | None:
        """Apply the retry policy to the messages the job's tasks gave up on.

        The job was one attempt of every message of the batch (see the counting
        rule of :mod:`statestream._retry`): each message a task gave up on
        counts a failure, and those that had their last one are dead-lettered
        (the batch read again skips them); every other one went through, and
        is forgotten. Returns when the batch may run again, or None when no
        tracked message failed: then the job commits, and a tuple no message
        tracks (an unanchored emit, a spout's emit without a message id) is
        lost, as Storm and the local runtime lose it.
        """
        lost: dict[int, tuple[str, str, str]] = {}
        for *_, ack_lost in acks:
            for root, component, error_type, error in ack_lost:
                lost.setdefault(root, (component, error_type, error))
        if not lost:
            return None
        now = self.clock.monotonic()
        resume_at: float | None = None
        for root, (component, error_type, error) in lost.items():
            found = None if self.at_most_once else batch.message(self.plan, root)
            if found is None or found[2] is None:
                log.warning(
                    "%s gave up on an untracked tuple (%s: %s); it is not replayed",
                    component,
                    error_type,
                    cut_message(error),
                )
                continue
            task, (stream, values, _), msg_id = found
            verdict = self._retries[task.namespace].attempt_failed(msg_id, now)
            self._metrics[task.cid].failed += 1
            resume_at = now if resume_at is None else resume_at
            if verdict.kind is VerdictKind.GIVE_UP and type(msg_id) is Replay:
                # Fed back and given up on again: dead again, not a second record.
                self.deadletters.replay_given_up(
                    msg_id.record, component, None, error, verdict.failures, error_type=error_type
                )
                self._metrics[task.cid].dead_lettered += 1
            elif verdict.kind is VerdictKind.GIVE_UP:
                record = DeadLetter.of(
                    self.topology.name,
                    task.cid,
                    task.index,
                    msg_id,
                    values,
                    component,
                    None,
                    verdict.failures,
                    error,
                    stream=stream,
                    error_type=error_type,
                )
                self.deadletters.give_up(record)
                task.collector.settled.add(msg_id, values)
                self._metrics[task.cid].dead_lettered += 1
            elif verdict.at is not None:
                resume_at = max(resume_at, verdict.at)
        if resume_at is not None:
            for retries in self._retries.values():
                retries.rewound(complete=True)  # a job runs every tuple it holds
        return resume_at

    def _wait_until(self, when: float) -> bool:
        """Wait on the runtime's clock until ``when``; False if the run was stopped
        or its duration is over meanwhile."""
        while not self._stop:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                return False
            left = when - self.clock.monotonic()
            if left <= 0:
                return True
            self.clock.sleep(min(left, 0.1))
        return False

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
        if self.transactional is not None:
            raise ConfigError(
                f"topology {self.topology.name!r} is transactional: its coordinator decides the "
                "batches, so it runs with run(), not feed()"
            )
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
        self._claim_store()
        try:
            stored = self._load().state
            if stored.txid > planned:
                raise ConfigError(
                    f"the state provider has transaction {stored} but the Spark checkpoint "
                    f"{checkpoint!r} has planned batches only up to {planned}: the checkpoint "
                    "was lost or belongs to another query, and its batches would be skipped as "
                    "already applied; restore the checkpoint, or start over with a fresh store"
                )
            sc = self._spark.sparkContext
            token = uuid.uuid4().hex
            payload = self._payload(sc, self.exactly_once)
        except BaseException:
            self._close_provider()
            raise
        query = None
        try:
            # Spark's offset log replays batches: no spout positions are stored.
            self._start_checkpoints(positions_needed=False)

            def on_batch(batch_df: Any, batch_id: int) -> None:
                state = self.coordinator.state
                if batch_id <= state.txid:
                    log.warning("batch %d was committed already; skipping its replay", batch_id)
                    self.counters["skipped"] = self.counters.get("skipped", 0) + 1
                    return
                if batch_id != state.txid + 1:
                    raise RuntimeFailure(
                        f"Spark runs batch {batch_id} but the state provider last committed "
                        f"{state.txid}: batches {state.txid + 1}..{batch_id - 1} are missing "
                        "from the state; was the store reset under a running checkpoint?"
                    )
                rows = batch_df.select(*columns).rdd
                source = rows.mapPartitionsWithIndex(partial(_rows_partition, token, payload, cid))
                self._transaction(sc, token, payload, _Batch(source=source), _same_batch)

            writer = (
                df.writeStream.foreachBatch(on_batch)
                .option("checkpointLocation", checkpoint)
                .queryName(f"statestream-{self.topology.name}-{token[:8]}")
            )
            writer = writer.trigger(availableNow=True) if available_now else writer
            query = writer.start()
            if available_now:
                query.awaitTermination(timeout)
            else:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._stop and query.isActive:
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    query.awaitTermination(0.2)
        except ConfigError:
            raise
        except Exception as exc:  # StreamingQueryException and py4j errors
            raise RuntimeFailure(
                f"the streaming query failed; restart it on the same checkpoint to replay the "
                f"unfinished batch: {str(exc).splitlines()[0][:500]} ({_root_cause(exc)})"
            ) from exc
        finally:
            try:
                if query is not None and query.isActive:
                    query.stop()
                payload.unpersist()
            finally:
                self._close_provider()
        return self._result(start_time, "fed")

    def _job(self, sc: Any, token: str, payload: Any, txid: int, batch: _Batch) -> list[_Ack]:
        """Run batch ``txid``: every bolt task executes its tuples and prepares ``txid``."""
        source = batch.source
        items = [
            (cid, index, records) for (cid, index), records in batch.records.items() if records
        ]
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
        """``cleanup`` once per bolt task, on the driver, with the committed state.

        A stateful task's driver instance (the one its hooks ran on) is given
        the committed state again first; other bolts get a fresh instance.
        """
        provider = self._open_provider() if self.namespaces else None
        for spec in self.bolts:
            for i in range(spec.parallelism):
                try:
                    namespace = task_namespace(spec.id, i)
                    bolt: Bolt | BasicBolt | None = self._driver_bolts.get(namespace)
                    if bolt is None:
                        bolt = _user_bolt(self.topology, spec.id)
                        context = self._context(spec.id, i)
                        if isinstance(bolt, BasicBolt):
                            bolt.prepare(self.plan.conf_for(spec.id), context)
                        else:
                            bolt.prepare(self.plan.conf_for(spec.id), context, _NullCollector())
                    if isinstance(bolt, StatefulBolt):
                        bolt.init_state(fresh_state(provider, namespace))
                    bolt.cleanup()
                except Exception as exc:
                    self.errors.append(
                        ErrorReport(spec.id, i, "cleanup()", repr(exc), traceback.format_exc())
                    )

    # -- transactional topologies -------------------------------------------------------
    def _run_transactional(
        self, tx: TransactionalLayout, until_idle: bool, duration: float | None
    ) -> RunResult:
        """Run a transactional topology: the driver plays the coordinator.

        The loop polls the pure :class:`TransactionCoordinator` (whose state
        is stored, before every emission, where the ``$coordinator`` spout of
        the local runtime stores it). Batch emissions are gathered up to
        ``topology.max.spout.pending`` and processed by one Spark job
        (:meth:`_tx_process`); a commit emission is carried out by a job of
        its own (:meth:`_tx_commit`), one txid at a time, so commits go
        strictly in txid order. No new batch starts while a processed one
        waits for its commit, so the batches of one processing job commit
        back to back.
        """
        start_time = time.monotonic()
        spark = self._session()
        check_provider(self.config, self.master)  # the session's master may differ
        sc = spark.sparkContext
        token = uuid.uuid4().hex
        payload = self._payload(sc, False)
        reason = "stopped"
        spout_coordinator: Any = None
        clean = False
        try:
            self._claim_store()
            provider = self._open_provider()
            store = CoordinatorStore(
                fresh_state(provider, coordinator_namespace(self.topology.name))
            )
            protocol = TransactionCoordinator(
                store.load(),
                self.config.get("topology.max.spout.pending") or 1,
                None,  # a job returns or fails; nothing of it can time out unheard
                store.save,
            )
            if protocol.active:
                self.counters["recovered"] += 1
                log.warning(
                    "spark runtime: transactions %s were active when the last run ended; "
                    "emitting them again",
                    list(protocol.active),
                )
            context = self.plan.context(
                COORDINATOR,
                0,
                state_opener=partial(_ReadThrough, provider),
                clock=SystemClock(),
            )
            spout_coordinator = tx.spout.get_coordinator(self.plan.conf_for(COORDINATOR), context)
            if self.fault_hook is not None:
                self.fault_hook("recovered", protocol.committed)

            def ready() -> bool:
                if any(p is TxPhase.PROCESSED for p in protocol.active.values()):
                    return False  # commit what is processed first
                return bool(spout_coordinator.is_ready())

            interval = self.config["topology.state.checkpoint.interval.ms"] / 1000.0
            batches: list[TxEmission] = []
            while not self._stop:
                if duration is not None and time.monotonic() - start_time >= duration:
                    reason = "duration"
                    break
                # A lost lease: another run may own the state now; before the poll,
                # which may store a new transaction's metadata.
                self._claim.check()
                emissions = protocol.poll(
                    self._now_ms(),
                    ready=ready,
                    initialize=spout_coordinator.initialize_transaction,
                )
                for e in emissions:
                    if e.kind == "commit":
                        self._tx_commit(sc, token, payload, tx, protocol, e)
                    else:
                        batches.append(e)
                if any(e.kind == "batch" for e in emissions):
                    continue  # more may start, up to max.spout.pending
                if batches:
                    # A failed commit sends later transactions back to PENDING.
                    current = [
                        b
                        for b in batches
                        if protocol.attempt(b.attempt.transaction_id) == b.attempt
                    ]
                    batches = []
                    if current:
                        self._tx_process(sc, token, payload, tx, protocol, current)
                    continue
                if emissions:
                    continue
                # Nothing is active (it would have been emitted) and the spout is not ready.
                if until_idle:
                    reason = "idle"
                    break
                time.sleep(interval)
            clean = True
        finally:
            try:
                for job in self._tx_jobs:
                    job.release()
                self._tx_jobs = []
                if spout_coordinator is not None:
                    try:
                        spout_coordinator.close()
                    except Exception as exc:
                        if clean:
                            self._report(tx.emitter, -1, exc, "coordinator close()")
                payload.unpersist()
            finally:
                self._release(spark)
        return self._result(start_time, reason)

    def _tx_stages(
        self, sc: Any, token: str, payload: Any, cids: Sequence[str], outs: dict[str, Any]
    ) -> list[Any]:
        """One stage per component of ``cids`` (in topological order): its input
        is what every upstream stage in ``outs`` addressed to it, one partition
        per task; each output is persisted, as several stages and the driver's
        collect read it."""
        from pyspark import StorageLevel

        built = []
        for cid in cids:
            parents = list(
                {
                    id(outs[up]): outs[up] for up in self.topology.upstream(cid) if up in outs
                }.values()
            )
            inputs = parents[0] if len(parents) == 1 else sc.union(parents)
            out = (
                inputs.mapPartitions(partial(_addressed_to, cid))
                .partitionBy(self.topology.components[cid].parallelism, _identity)
                .mapPartitionsWithIndex(partial(_run_tx_task, token, payload, cid))
            )
            out.persist(StorageLevel.MEMORY_AND_DISK)
            outs[cid] = out
            built.append(out)
        return built

    def _tx_reports(self, sc: Any, stages: list[Any], cids: Sequence[str]) -> dict[Any, Any]:
        """Collect the tasks' reports (nothing else) and add them to the metrics."""
        reports = sc.union(stages).mapPartitions(_acks).collect() if stages else []
        out = {}
        for cid, index, finished, executed, emitted, failed, errors in reports:
            out[cid, index] = finished
            m = self._metrics[cid]
            m.executed += executed
            m.emitted += emitted
            m.acked += executed - failed
            m.failed += failed
            m.errors += len(errors)
            self.errors.extend(ErrorReport(cid, index, *error) for error in errors)
        missing = [
            f"{cid}[{i}]"
            for cid in cids
            for i in range(self.topology.components[cid].parallelism)
            if (cid, i) not in out
        ]
        if missing:
            raise RuntimeFailure(f"tasks {', '.join(missing)} sent no report")
        return out

    def _tasks(self, cids: Sequence[str]) -> list[tuple[str, int]]:
        return [(c, i) for c in cids for i in range(self.topology.components[c].parallelism)]

    def _tx_job_failed(self, what: str, exc: BaseException) -> None:
        self.errors.append(
            ErrorReport(
                "$batch",
                -1,
                what,
                repr(exc)[:2000],
                "".join(traceback.format_exception(exc))[-20000:],
            )
        )
        log.warning("spark runtime: %s failed (%s)", what, _root_cause(exc))

    def _tx_process(
        self,
        sc: Any,
        token: str,
        payload: Any,
        tx: TransactionalLayout,
        protocol: TransactionCoordinator,
        batches: list[TxEmission],
    ) -> None:
        """The processing phase of ``batches``, one Spark job: the coordinator's batch
        tuples go to every emitter task, then each processing-phase bolt is a stage.
        What the job sends to commit-phase bolts stays persisted for their commit."""
        attempts = [e.attempt for e in batches]
        records = [(BATCH_STREAM, [e.attempt, e.metadata, e.committed]) for e in batches]
        source = sc.parallelize([records], 1).mapPartitions(partial(_tx_source, token, payload))
        stages: list[Any] = []
        try:
            stages = self._tx_stages(sc, token, payload, tx.processing, {COORDINATOR: source})
            reports = self._tx_reports(sc, stages, tx.processing)
            processed = settle(attempts, self._tasks(tx.processing), reports)
        except Exception as exc:
            txids = ", ".join(str(a.transaction_id) for a in attempts)
            self._tx_job_failed(f"processing job of transactions {txids}", exc)
            processed = {a.transaction_id: False for a in attempts}
        job = _TxJob(stages, attempts)
        self._tx_jobs.append(job)
        for e in sorted(batches, key=lambda e: e.attempt):
            txid = e.attempt.transaction_id
            if processed[txid]:
                protocol.on_ack(e.msg_id)
                if self.fault_hook is not None:
                    self.fault_hook("prepared", txid)
            else:
                # Every later one goes back to PENDING with it: emitted again after it.
                self._tx_failed(txid, "processing")
                protocol.on_fail(e.msg_id)
        self._tx_release(protocol)

    def _tx_commit(
        self,
        sc: Any,
        token: str,
        payload: Any,
        tx: TransactionalLayout,
        protocol: TransactionCoordinator,
        emission: TxEmission,
    ) -> None:
        """The commit phase of one transaction, one Spark job: the commit-phase bolts
        get what the processing job sent them and the commit tuple (committers)."""
        attempt = emission.attempt
        txid = attempt.transaction_id
        job = next((j for j in self._tx_jobs if attempt in j.attempts), None)
        if job is None:
            raise RuntimeFailure(f"no processing job holds {attempt!r}, whose commit is due")
        ok = True
        if tx.commit:
            commit = [(COMMIT_STREAM, [attempt])]
            source = sc.parallelize([commit], 1).mapPartitions(partial(_tx_source, token, payload))
            kept = sc.union(job.stages).mapPartitions(
                partial(_tx_commit_input, frozenset(tx.commit), attempt)
            )
            base = sc.union([kept, source])
            outs = {cid: base for cid in self.topology.components if cid not in tx.commit}
            stages: list[Any] = []
            try:
                stages = self._tx_stages(sc, token, payload, tx.commit, outs)
                reports = self._tx_reports(sc, stages, tx.commit)
                ok = settle([attempt], self._tasks(tx.commit), reports)[txid]
            except Exception as exc:
                self._tx_job_failed(f"commit job of transaction {txid}", exc)
                ok = False
            finally:
                for rdd in stages:
                    rdd.unpersist()
        if ok:
            protocol.on_ack(emission.msg_id)  # stores txid as the last committed one
            self._tx_failures.pop(txid, None)
            self.counters["batches"] += 1
            if self.fault_hook is not None:
                self.fault_hook("committed", txid)
        else:
            self._tx_failed(txid, "commit")
            protocol.on_fail(emission.msg_id)
        self._tx_release(protocol)

    def _tx_failed(self, txid: int, phase: str) -> None:
        """Count a failure of ``txid``; give up after ``statestream.spark.batch.attempts``."""
        self.counters["replays"] += 1
        n = self._tx_failures[txid] = self._tx_failures.get(txid, 0) + 1
        if n >= self.attempts:
            raise RuntimeFailure(
                f"transaction {txid} failed {count(n, 'time')} (the last time in its {phase} phase); "
                "the next run emits it again from its stored metadata"
            )
        log.warning("transaction %d failed in its %s phase; emitting it again", txid, phase)

    def _tx_release(self, protocol: TransactionCoordinator) -> None:
        """Unpersist the processing jobs none of whose attempts waits for its commit."""
        live = {
            protocol.attempt(t)
            for t, phase in protocol.active.items()
            if phase in (TxPhase.PROCESSED, TxPhase.COMMITTING)
        }
        keep = []
        for job in self._tx_jobs:
            if live.intersection(job.attempts):
                keep.append(job)
            else:
                job.release()
        self._tx_jobs = keep


@dataclass
class _TxJob:
    """A processing job whose outputs are kept until its attempts commit or fail."""

    stages: list[Any]
    attempts: list[TransactionAttempt]

    def release(self) -> None:
        for rdd in self.stages:
            rdd.unpersist()
        self.stages = []


def _same_batch(batch: _Batch) -> _Batch:
    """A Spark-fed batch after a rollback: the same source again (Spark's data is fixed)."""
    return batch
