"""The Spark runtime's driver: :class:`SparkRuntime`, one transaction (one Spark job) per batch.

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

The parts: :mod:`.base` (session, store, checkpoint record, recovery),
:mod:`.spouts` (the data spouts on the driver), :mod:`.batches` (one batch's
transaction and job, the retry policy), :mod:`.feed` (Spark as a source),
:mod:`.transactional` (transactional topologies); what runs in Spark tasks
is in :mod:`.executor` and :mod:`.executor_tx`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle

from ..._checkpoint_driver import CheckpointDriver
from ..._clock import Clock, SystemClock
from ..._components import (
    BasicBolt,
    Bolt,
    StatefulBolt,
    task_namespace,
)
from ..._config import Config, settings_of
from ..._deadletter import (
    DeadLetterFile,
    configured_path,
)
from ..._errors import ConfigError
from ..._exactly_once import run_mode
from ..._messages import MessageBook
from ..._results import ErrorReport, RunResult, TaskMetrics, WorkerInfo
from ..._retry import (
    FailureRate,
    RetryPolicy,
)
from ..._topology import Topology
from ..._transactional.driver import TransactionalLayout
from ..._transactional.driver import layout as transactional_layout
from ..errorlog import ErrorLog, error_report
from ..metrics import MetricsBank, MetricsSnapshot, kinds_of, progress_of
from ..plan import RuntimePlan, as_config
from ..session import StoreSession
from .base import NullCollector
from .config import (
    BATCH_SIZE_KEY,
    check_provider,
    check_spark_conf,
    ship_user_modules,
)
from .feed import DataFrameSpout, FeedDriver
from .shared import fresh_state, user_bolt
from .spouts import SpoutTask, idle
from .stages import JobWatch
from .transactional import TransactionalDriver, TxJob


class SparkRuntime(FeedDriver, TransactionalDriver):
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
        self.topology = topology
        self.config: Config = as_config(config, topology_prefixes=(topology.name,))
        self.plan = RuntimePlan(topology, self.config)
        #: What the retry policy's delays are measured and waited on.
        self.clock: Clock = clock or SystemClock()
        self._spark = spark
        self._own_session = False
        settings = settings_of(self.config)
        # The argument is the caller's (a test's) and unchecked; the key's value is validated.
        self.batch_size = (
            settings.statestream_spark_batch_size if batch_size is None else int(batch_size)
        )
        if self.batch_size < 1:
            raise ConfigError(f"{BATCH_SIZE_KEY} must be a positive integer, got {self.batch_size}")
        self.attempts = settings.statestream_spark_batch_attempts
        self._stop = False
        self._deadline: float | None = None  # run(duration=...) ends then (time.monotonic)
        self.errors: list[ErrorReport] = []
        # Reports into self.errors; the driver logs none of them itself.
        self.error_log = ErrorLog(logging.getLogger("statestream"), self.errors)
        self._counters: dict[str, int] = {"batches": 0, "replays": 0, "recovered": 0}
        self._store = StoreSession(topology, self.config, self.clock)  # provider, claim, rescale
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
        # Per task (component, index): the counts of the committed batches.
        self._metrics = {
            (cid, i): TaskMetrics(cid, i)
            for cid, tasks in self.component_tasks.items()
            if not cid.startswith("$")
            for i in range(len(tasks))
        }
        # The run's metrics bank (runtime.metrics), fed per batch: the executors'
        # timings with their acks, the spouts' on the driver (PollCollector), the
        # jobs' figures from Spark's status tracker (JobWatch).
        self.bank = MetricsBank(
            topology.name,
            "spark",
            {cid: kind for cid, kind in kinds_of(topology).items() if (cid, 0) in self._metrics},
            settings.topology_stats_sample_rate,
        )
        self._watch = JobWatch(self.bank, self.clock)
        self._checkpoints: CheckpointDriver | None = None
        self._spout_tasks: list[SpoutTask] = []
        self._driver_bolts: dict[str, StatefulBolt] = {}
        self._tx_jobs: list[TxJob] = []
        self._tx_failures: dict[int, int] = {}
        # Poison tuples (statestream._messages), as on the local runtime: per
        # spout task namespace, its message book (kept for the run, in memory
        # only: failed messages, settled ones, dead letters fed back by
        # `statestream deadletter replay`) and where the given-up ones go.
        self.retry_policy = RetryPolicy.from_config(self.config)
        self._books: dict[str, MessageBook] = {}
        # The error-rate limit per bolt task, and what each has executed so far.
        self._failure_rates: dict[tuple[str, int], tuple[FailureRate, int]] = {}
        self.deadletter_path = configured_path(self.config)
        self.deadletters = DeadLetterFile(self.deadletter_path)

    def _at_most_once(self) -> bool:
        """Whether batches are read at-most-once (a spout cannot rewind and the
        user accepted it); refuses a spout that cannot rewind otherwise
        (:func:`statestream._exactly_once.run_mode`)."""
        settings = settings_of(self.config)
        readers = {s.id: s.obj for s in self.spouts if not isinstance(s.obj, DataFrameSpout)}
        mode = run_mode(
            "spark",
            settings.statestream_state_exactly_once,
            self.plan.checkpointed,
            readers,
            settings.topology_acker_executors,
        )
        return mode.at_most_once

    # -- the loop -----------------------------------------------------------------
    def stop(self) -> None:
        """Stop after the current batch (safe from a signal handler)."""
        self._stop = True

    def close(self) -> None:
        """Nothing to release: :meth:`run` and :meth:`feed` stop the session they
        started, close the store and let the claim go when they end (idempotent)."""

    def counters(self) -> dict[str, int]:
        """The runtime's counters so far, a copy: ``batches`` committed, ``replays``
        (batches rolled back and run again), ``recovered`` (a start that rolled
        back or finished a stored transaction), and when they happen ``skipped``
        (fed batches committed already) and ``skipped_dead_letters``."""
        return dict(self._counters)

    def worker_rows(self) -> list[WorkerInfo]:
        """``[]``: a Spark run has no worker processes of its own (Spark's are its executors)."""
        return []

    def metrics_snapshot(self) -> MetricsSnapshot:
        """The bank's view of the run: the counts of the committed batches, the
        batches' checkpoints (the Runtime contract)."""
        sources = self.bank.sources(
            progress_of(t.cid, t.index, t.spout) for t in list(self._spout_tasks)
        )
        return self.bank.snapshot(
            self.clock.monotonic(), self.task_metrics(), self.counters(), sources=sources
        )

    def task_metrics(self) -> list[TaskMetrics]:
        """Per task, the counts over the committed batches of this run (copies); a
        spout task's ``retrying`` counts its messages that failed and are to be run
        again."""
        out = []
        for (cid, index), m in list(self._metrics.items()):
            copy = TaskMetrics(**vars(m))
            book = self._books.get(task_namespace(cid, index)) if index >= 0 else None
            if book is not None:
                copy.retrying = len(book.failures)
            out.append(copy)
        return out

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals over the committed batches of this run."""
        out = {cid: TaskMetrics(cid, -1) for cid, _ in self._metrics}
        for m in self.task_metrics():
            out[m.component].add(m)
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
        self.bank.begin(self.clock.monotonic())
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
            interval = settings_of(self.config).topology_state_checkpoint_interval_ms / 1000.0
            while not self._stop:
                if duration is not None and time.monotonic() - start_time >= duration:
                    reason = "duration"
                    break
                batch = self._read_batch()
                if not batch.size:
                    if until_idle and all(map(idle, self._spout_tasks)):
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
                self._watch.refresh(sc)  # the last batches' figures, as Spark ends them
                payload.unpersist()
            finally:
                self._release(spark)
        return self._result(start_time, reason)

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
                        bolt = user_bolt(self.topology, spec.id)
                        context = self._context(spec.id, i)
                        if isinstance(bolt, BasicBolt):
                            bolt.prepare(self.plan.conf_for(spec.id), context)
                        else:
                            bolt.prepare(self.plan.conf_for(spec.id), context, NullCollector())
                    if isinstance(bolt, StatefulBolt):
                        bolt.init_state(fresh_state(provider, namespace))
                    bolt.cleanup()
                except Exception as exc:
                    self.errors.append(error_report(spec.id, i, exc, "cleanup()"))
