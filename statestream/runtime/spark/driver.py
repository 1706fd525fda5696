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

:class:`SparkRuntime` is a coordinator: it runs that loop and holds the
parts that do the work as fields, each built with what it needs (none holds
the runtime): :class:`~.sessions.SparkSessions` (the SparkSession),
:class:`~.checkpoints.DriverCheckpoints` (store, checkpoint record, recovery,
the stateful hooks), :class:`~.spouts.SpoutReader` (the data spouts on the
driver), :class:`~.batches.BatchRunner` (one batch's transaction, the retry
policy) and :class:`~.jobs.BatchJobs` (its Spark job), :class:`~.feed.Feed`
(Spark as a source), :class:`~.transactional.TransactionalDriver`
(transactional topologies). What they share, the counters, errors and
metrics, is one :class:`~.tally.RunTally`; when a run ends, one
:class:`~.tally.RunControl`. What runs in Spark tasks is in :mod:`.executor`
and :mod:`.executor_tx`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..._checkpoint_driver import CheckpointDriver
from ..._clock import Clock, SystemClock
from ..._config import Config, settings_of
from ..._deadletter import DeadLetterFile, configured_path
from ..._errors import ConfigError
from ..._exactly_once import run_mode
from ..._results import ErrorReport, RunResult, TaskMetrics, WorkerInfo
from ..._retry import RetryPolicy
from ..._runners import SparkSettings
from ..._topology import Topology
from ..._transactional.driver import TransactionalLayout
from ..._transactional.driver import layout as transactional_layout
from ..._windowed import WindowedBoltExecutor
from ..errorlog import ErrorLog
from ..metrics import MetricsBank, MetricsSnapshot, kinds_of, progress_of
from ..plan import RuntimePlan, as_config
from ..session import StoreSession
from .batches import BatchRunner
from .checkpoints import DriverCheckpoints
from .config import BATCH_SIZE_KEY, check_provider, check_spark_conf, spark_conf
from .feed import DataFrameSpout, Feed
from .jobs import BatchJobs, Job
from .sessions import ShippedModules, SparkSessions, broadcast_plan
from .spouts import Batch, SpoutReader
from .stages import JobWatch
from .status import STATUS, batch_committed, batch_started, waiting_for_input
from .tally import RunControl, RunTally
from .transactional import TransactionalDriver


class SparkRuntime:
    """Run a topology on Spark: one transaction (one Spark job) per batch.

    >>> rt = SparkRuntime(topology, {"topology.state.provider": "redis"})
    >>> result = rt.run(until_idle=True)

    ``spark`` is a SparkSession to use; without one the active session is
    used, or one is built from the config's ``spark.*`` keys (and stopped at
    the end of the run). ``batch_size`` overrides
    ``statestream.spark.batch.size``. ``clock`` is what the driver reads time
    on (a run's duration, the retry policy's delays, the idle wait, the
    metrics); the system clock by default.

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

    #: The file the run's dead letters go to (the Runtime contract).
    deadletter_path: Path

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
        self.plan = plan = RuntimePlan(topology, self.config)
        #: What the driver reads time on (see the class docstring).
        self.clock: Clock = clock or SystemClock()
        settings = settings_of(self.config)
        own = settings_of(self.config, SparkSettings)
        # The argument is the caller's (a test's) and unchecked; the key's value is validated.
        self.batch_size = (
            own.statestream_spark_batch_size if batch_size is None else int(batch_size)
        )
        if self.batch_size < 1:
            raise ConfigError(f"{BATCH_SIZE_KEY} must be a positive integer, got {self.batch_size}")
        self.attempts = own.statestream_spark_batch_attempts
        # What the plan says, under the names the runtime has always had.
        self.component_tasks = plan.component_tasks
        self.spouts = plan.data_spouts
        self.bolts = [b for b in plan.bolts if not b.id.startswith("$")]
        # Windowed bolts get the end of input in a batch of its own (_run_batches).
        self._windowed = any(isinstance(b.user_obj, WindowedBoltExecutor) for b in self.bolts)
        self.namespaces = plan.stateful_namespaces
        self.fed = [s.id for s in plan.data_spouts if isinstance(s.obj, DataFrameSpout)]
        #: The shape of a transactional topology (None for any other): the
        #: driver plays its coordinator (:class:`~.transactional.TransactionalDriver`).
        self.transactional: TransactionalLayout | None = transactional_layout(topology)
        self.at_most_once = False if self.transactional else self._at_most_once()
        #: What bolts are told through ``context.exactly_once``.
        self.exactly_once = not self.at_most_once and plan.checkpointed
        self.deadletter_path = configured_path(self.config)
        self.deadletters = deadletters = DeadLetterFile(self.deadletter_path)
        self.retry_policy = RetryPolicy.from_config(self.config)
        self._modules = ShippedModules(topology)
        self._sessions = SparkSessions(
            f"statestream-{topology.name}", self.config, spark, clock=self.clock
        )
        self._control = RunControl(self.clock)
        # Per task (component, index) of the user's components, the counts of the
        # committed batches. The run's metrics bank (runtime.metrics) is fed per
        # batch: the executors' timings with their acks, the spouts' on the driver
        # (PollCollector), the jobs' figures from Spark's status tracker (JobWatch).
        tasks = [
            (cid, i)
            for cid, ids in plan.component_tasks.items()
            if not cid.startswith("$")
            for i in range(len(ids))
        ]
        reported = {cid for cid, _ in tasks}
        bank = MetricsBank(
            topology.name,
            "spark",
            {cid: kind for cid, kind in kinds_of(topology).items() if cid in reported},
            settings.topology_stats_sample_rate,
        )
        self._tally = RunTally(bank, tasks)
        self._watch = JobWatch(bank, self.clock)
        store = StoreSession(topology, self.config, self.clock)  # provider, claim, rescale
        self._checkpoints = DriverCheckpoints(
            plan, store, self.clock, self._tally, exactly_once=self.exactly_once, fault=self._fault
        )
        # Poison tuples (statestream._messages), as on the local runtime: per
        # spout task, its message book, kept by the reader for the runtime's life.
        self._spouts = SpoutReader(
            plan,
            batch_size=self.batch_size,
            at_most_once=self.at_most_once,
            context=self._checkpoints.context,
            retry_policy=self.retry_policy,
            tally=self._tally,
            clock=self.clock,
            deadletters=deadletters,
        )
        self._batches = BatchRunner(
            plan,
            self._checkpoints,
            self._spouts.books,
            self._tally,
            self._control,
            deadletters,
            attempts=self.attempts,
            at_most_once=self.at_most_once,
            fed=self.fed,
            fault=self._fault,
        )
        self._jobs = BatchJobs(plan, self._watch, lambda: self._checkpoints.tokens)
        self._feed = Feed(
            plan,
            self._sessions,
            self._checkpoints,
            self._batches,
            self._jobs,
            self._tally,
            self._control,
            lambda sc: self._payload(sc, self.exactly_once),
        )
        self._transactions = (
            None
            if self.transactional is None
            else TransactionalDriver(
                self.transactional,
                plan,
                store,
                self._tally,
                self._control,
                self._watch,
                attempts=self.attempts,
                batch_size=self.batch_size,
                fault=self._fault,
            )
        )

    def _at_most_once(self) -> bool:
        """Whether batches are read at-most-once (a spout cannot rewind and the
        user accepted it); refuses a spout that cannot rewind otherwise
        (:func:`statestream._exactly_once.run_mode`)."""
        settings = settings_of(self.config)
        readers = {
            s.id: s.obj for s in self.plan.data_spouts if not isinstance(s.obj, DataFrameSpout)
        }
        mode = run_mode(
            "spark",
            settings.statestream_state_exactly_once,
            self.plan.checkpointed,
            readers,
            settings.topology_acker_executors,
        )
        return mode.at_most_once

    def _fault(self, point: str, txid: int) -> None:
        """The parts' way to :attr:`fault_hook`, read when called (a test sets it late)."""
        hook = self.fault_hook
        if hook is not None:
            hook(point, txid)

    def _payload(self, sc: Any, exactly_once: bool) -> Any:
        return broadcast_plan(sc, self.plan, self._modules.sources, exactly_once)

    @property
    def master(self) -> str:
        """The Spark master of the run (the session's, else ``spark.master``)."""
        return self._sessions.master

    @property
    def errors(self) -> list[ErrorReport]:
        """The run's errors so far (the live list)."""
        return self._tally.errors

    @property
    def error_log(self) -> ErrorLog:
        """Where the run's errors are recorded (into :attr:`errors`)."""
        return self._tally.error_log

    @property
    def bank(self) -> MetricsBank:
        """The run's metrics bank."""
        return self._tally.bank

    @property
    def provider(self) -> Any:
        """The topology's scoped provider while a run holds the store, else None."""
        return self._checkpoints.provider

    @property
    def checkpoints(self) -> CheckpointDriver:
        """The checkpoint coordinator over its stored record (from a run's start on)."""
        return self._checkpoints.driver

    # -- the Runtime contract ---------------------------------------------------------
    def stop(self) -> None:
        """Stop after the current batch (safe from a signal handler)."""
        self._control.stop()

    def close(self) -> None:
        """Nothing to release: :meth:`run` and :meth:`feed` stop the session they
        started, close the store and let the claim go when they end (idempotent)."""

    def counters(self) -> dict[str, int]:
        """The runtime's counters so far, a copy: ``batches`` committed, ``replays``
        (batches rolled back and run again), ``recovered`` (a start that rolled
        back or finished a stored transaction), and when they happen ``skipped``
        (fed batches committed already) and ``skipped_dead_letters``."""
        return dict(self._tally.counters)

    def worker_rows(self) -> list[WorkerInfo]:
        """``[]``: a Spark run has no worker processes of its own (Spark's are its executors)."""
        return []

    def metrics_snapshot(self) -> MetricsSnapshot:
        """The bank's view of the run: the counts of the committed batches, the
        batches' checkpoints (the Runtime contract)."""
        bank = self._tally.bank
        sources = bank.sources(
            progress_of(t.cid, t.index, t.spout) for t in list(self._spouts.tasks)
        )
        return bank.snapshot(
            self.clock.monotonic(), self.task_metrics(), self.counters(), sources=sources
        )

    def task_metrics(self) -> list[TaskMetrics]:
        """Per task, the counts over the committed batches of this run (copies); a
        spout task's ``retrying`` counts its messages that failed and are to be run
        again."""
        return self._tally.task_metrics(self._spouts.books)

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals over the committed batches of this run."""
        return self._tally.metrics(self._spouts.books)

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
        check_spark_conf(spark_conf(self.config))

    # -- the runs ---------------------------------------------------------------------
    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run batches until stopped, ``duration`` seconds (on the runtime's clock), or
        (``until_idle``) every spout is exhausted. Recovers first from the stored
        checkpoint record."""
        try:
            self.open()
            start = self._control.start(duration)
            self._tally.bank.begin(self.clock.monotonic())
            spark = self._sessions.session()
            try:
                check_provider(self.config, self.master)  # the session's master may differ
                sc = spark.sparkContext
                token = uuid.uuid4().hex
                if self._transactions is not None:
                    payload = self._payload(sc, False)
                    try:
                        reason = self._transactions.run(sc, token, payload, until_idle)
                    finally:
                        self._watch.refresh(sc)  # the last jobs' figures, as Spark ends them
                        payload.unpersist()
                else:
                    payload = self._payload(sc, self.exactly_once)
                    try:
                        reason = self._run_batches(
                            self._jobs.for_run(sc, token, payload), until_idle
                        )
                    finally:
                        self._watch.refresh(sc)  # the last batches' figures, as Spark ends them
                        payload.unpersist()
            finally:
                try:
                    self._sessions.release()
                finally:
                    self._checkpoints.close()
            return self._result(start, reason)
        finally:
            self._modules.release()

    def _run_batches(self, job: Job, until_idle: bool) -> str:
        """The loop of a run of batches (the module docstring): why it ended."""
        reason = "stopped"
        clean = False
        ended = False  # the end-of-input batch ran
        spouts = self._spouts
        first = True  # the first batch is to come (said on STATUS: quiet until it commits)
        waiting = False  # said that there is no input yet
        try:
            self._checkpoints.start(positions_needed=not self.at_most_once)
            spouts.open()
            spouts.seek(self._checkpoints.record, start=True)
            interval = settings_of(self.config).topology_state_checkpoint_interval_ms / 1000.0
            while not self._control.stopped:
                if self._control.over():
                    reason = "duration"
                    break
                batch = spouts.read()
                if not batch.size:
                    if until_idle and spouts.idle():
                        if self._windowed and not ended:
                            # One more batch, empty: its windowed bolts' tasks get the
                            # end of input, and what their windows emit commits with it.
                            ended = batch.end_of_input = True
                            first = self._run_batch(batch, job, first)
                            continue
                        reason = "idle"
                        break
                    if first and not waiting:
                        waiting = True
                        STATUS.info(waiting_for_input(interval))
                    self.clock.sleep(interval)
                    continue
                first = self._run_batch(batch, job, first)
            clean = True
        finally:
            if clean:
                self._checkpoints.cleanup()
            spouts.close()
        return reason

    def _run_batch(self, batch: Batch, job: Job, first: bool) -> bool:
        """Run ``batch``; whether the first batch is still to commit. The first one is
        said on STATUS, what it holds and when it committed: until then every count
        is 0 (a batch's tuples are counted when it commits)."""
        if not first:
            self._batches.run(batch, self._read_again, job)
            return False
        STATUS.info(batch_started(batch.records, batch.ranges, batch.end_of_input))
        began = self.clock.monotonic()
        before = self._tally.counters["batches"]
        self._batches.run(batch, self._read_again, job)
        if self._tally.counters["batches"] == before:
            return True  # stopped before it committed
        spouts = {s.id for s in self.spouts}
        acked = sum(m.acked for cid, m in self.metrics().items() if cid in spouts)
        STATUS.info(batch_committed(self.clock.monotonic() - began, acked))
        return False

    def _read_again(self, batch: Batch) -> Batch:
        again = self._spouts.read_again(batch, self._checkpoints.record)
        again.end_of_input = batch.end_of_input
        return again

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
        until :meth:`stop` or ``timeout`` seconds (Spark's, in real time).
        """
        start = self._control.start(None)
        self._feed.run(
            df,
            checkpoint=checkpoint,
            available_now=available_now,
            timeout=timeout,
            transactional=self.transactional is not None,
        )
        return self._result(start, "fed")

    def _result(self, start: float, reason: str) -> RunResult:
        now = self.clock.monotonic()
        self._tally.bank.end(now)
        return RunResult(
            self.metrics(), list(self._tally.errors), now - start, reason, self._tally.counters
        )
