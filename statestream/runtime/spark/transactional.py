"""Transactional topologies on Spark: the driver plays the coordinator.

It drives the pure
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

How many transactions a processing job takes is :func:`job_size`'s: one for
the first job, then up to twice the last job's, at most
``topology.max.spout.pending`` and what ``statestream.spark.batch.size`` lets
each emitter task carry. Not ``topology.max.spout.pending`` at once: the
driver opens and stores every transaction of a job before the job runs, and
each then commits in a job of its own, so ``config/local.yaml``'s 10,000 (a
bound on tuples in flight for ordinary topologies) had the first job wait for
10,000 transactions to be opened, then 10,000 commit jobs, and counted
nothing for minutes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..._config import settings_of
from ..._errors import RuntimeFailure
from ..._results import ErrorReport
from ..._text import count
from ..._transactional.components import (
    BATCH_STREAM,
    COMMIT_STREAM,
    COORDINATOR,
    CoordinatorStore,
    coordinator_namespace,
)
from ..._transactional.coordinator import Emission as TxEmission
from ..._transactional.coordinator import TransactionAttempt, TransactionCoordinator, TxPhase
from ..._transactional.driver import TransactionalLayout, settle
from ..errorlog import TRACEBACK_LIMIT, error_report
from ..plan import RuntimePlan
from ..session import StoreSession
from .checkpoints import FaultHook
from .executor_tx import run_tx_task, tx_commit_input, tx_source
from .shared import ReadThrough, addressed_to, fresh_state, identity, only_acks, root_cause
from .stages import JobWatch
from .status import STATUS, transaction_committed, transactions_started
from .tally import RunControl, RunTally

log = logging.getLogger("statestream")


def job_size(pending: int, last: int, carried: int, batch_size: int, emitters: int) -> int:
    """How many transactions the next processing job takes at most.

    ``pending`` is ``topology.max.spout.pending``; ``last``, how many the last
    processing job took (0 before the first); ``carried``, the most tuples the
    emitters emitted for one transaction so far in the run (0: none known);
    ``batch_size``, ``statestream.spark.batch.size`` (the most tuples one spout
    task, here an emitter task, puts into one job); ``emitters``, the
    emitter's task count.

    The first job takes one transaction, each next one up to twice the last:
    the driver learns only from a job whether the source has ended (the
    emitters store where each partition stands), so a job opened wider than
    the data commits empty transactions, one Spark job each. No job takes
    more than fit ``batch_size`` tuples per emitter task.
    """
    size = min(pending, max(1, 2 * last))
    if carried:
        size = min(size, max(1, batch_size * emitters // carried))
    return size


@dataclass
class TxJob:
    """A processing job whose outputs are kept until its attempts commit or fail."""

    stages: list[Any]
    attempts: list[TransactionAttempt]

    def release(self) -> None:
        for rdd in self.stages:
            rdd.unpersist()
        self.stages = []


class TransactionalDriver:
    """The driver of a transactional topology (see the module docstring).

    Built with the topology's ``layout``, the plan, the topology's store (claimed
    by :meth:`run`, closed by the caller), the run's tally and control, the
    ``watch`` of its jobs, ``attempts`` (``statestream.spark.batch.attempts``),
    ``batch_size`` (``statestream.spark.batch.size``, see :func:`job_size`)
    and the ``fault`` hook (``"recovered"``, ``"prepared"``, ``"committed"``).
    """

    def __init__(
        self,
        layout: TransactionalLayout,
        plan: RuntimePlan,
        store: StoreSession,
        tally: RunTally,
        control: RunControl,
        watch: JobWatch,
        *,
        attempts: int,
        batch_size: int,
        fault: FaultHook,
    ) -> None:
        self._tx = layout
        self._plan = plan
        self._topology = plan.topology
        self._store = store
        self._tally = tally
        self._control = control
        self._clock = control.clock
        self._watch = watch
        self._attempts = attempts
        self._batch_size = batch_size
        self._fault = fault
        self._jobs: list[TxJob] = []
        # For job_size: how many transactions the last processing job took, and the
        # most tuples the emitters emitted for one transaction in this run.
        self._last_job = 0
        self._carried = 0
        self._failures: dict[int, int] = {}  # per txid, its failed attempts in this run
        # When the first processing job started (said on STATUS, as its first commit).
        self._first_job_at: float | None = None

    def run(self, sc: Any, token: str, payload: Any, until_idle: bool) -> str:
        """Run a transactional topology until stopped, the run's duration is over or
        (``until_idle``) the spout has nothing more: why it ended.

        The loop polls the pure :class:`TransactionCoordinator` (whose state
        is stored, before every emission, where the ``$coordinator`` spout of
        the local runtime stores it). Batch emissions are gathered up to
        :func:`job_size` and processed by one Spark job
        (:meth:`_tx_process`); a commit emission is carried out by a job of
        its own (:meth:`_tx_commit`), one txid at a time, so commits go
        strictly in txid order. No new batch starts while a processed one
        waits for its commit, so the batches of one processing job commit
        back to back.
        """
        tx = self._tx
        reason = "stopped"
        spout_coordinator: Any = None
        clean = False
        try:
            protocol, spout_coordinator = self._tx_open(tx)
            self._fault("recovered", protocol.committed)

            def ready() -> bool:
                if any(p is TxPhase.PROCESSED for p in protocol.active.values()):
                    return False  # commit what is processed first
                if len(batches) >= self._job_size():
                    return False  # the next job is full: run it first
                return bool(spout_coordinator.is_ready())

            interval = settings_of(self._plan.config).topology_state_checkpoint_interval_ms / 1000.0
            batches: list[TxEmission] = []
            while not self._control.stopped:
                if self._control.over():
                    reason = "duration"
                    break
                # A lost lease: another run may own the state now; before the poll,
                # which may store a new transaction's metadata.
                self._store.check()
                emissions = protocol.poll(
                    self._clock.monotonic() * 1000.0,
                    ready=ready,
                    initialize=spout_coordinator.initialize_transaction,
                )
                for e in emissions:
                    if e.kind == "commit":
                        self._tx_commit(sc, token, payload, tx, protocol, e)
                    else:
                        batches.append(e)
                if any(e.kind == "batch" for e in emissions):
                    continue  # more may start, up to job_size()
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
                self._clock.sleep(interval)
            clean = True
        finally:
            self._tx_close(tx, spout_coordinator, clean)
        return reason

    def _tx_open(self, tx: TransactionalLayout) -> tuple[TransactionCoordinator, Any]:
        """Claim the store, load the coordinator's stored state, and open the spout's
        coordinator part: the protocol and that part."""
        provider = self._store.open(rescale=False)
        self._store.check()  # the claim, before the coordinator's state is read
        store = CoordinatorStore(fresh_state(provider, coordinator_namespace(self._topology.name)))
        protocol = TransactionCoordinator(
            store.load(),
            self._max_pending(),
            None,  # a job returns or fails; nothing of it can time out unheard
            store.save,
        )
        if protocol.active:
            self._tally.count("recovered")
            log.warning(
                "spark runtime: transactions %s were active when the last run ended; "
                "emitting them again",
                list(protocol.active),
            )
        context = self._plan.context(
            COORDINATOR,
            0,
            state_opener=partial(ReadThrough, provider),
            clock=self._clock,
        )
        spout_coordinator = tx.spout.get_coordinator(self._plan.conf_for(COORDINATOR), context)
        return protocol, spout_coordinator

    def _max_pending(self) -> int:
        """How many transactions are active at most (``topology.max.spout.pending``)."""
        return settings_of(self._plan.config).topology_max_spout_pending or 1

    def _job_size(self) -> int:
        """How many transactions the next processing job takes at most (:func:`job_size`)."""
        emitters = self._topology.components[self._tx.emitter].parallelism
        return job_size(
            self._max_pending(), self._last_job, self._carried, self._batch_size, emitters
        )

    def _tx_close(self, tx: TransactionalLayout, spout_coordinator: Any, clean: bool) -> None:
        """The end of a transactional run: the kept jobs released, the spout's
        coordinator part closed (its error reported after a clean run only)."""
        for job in self._jobs:
            job.release()
        self._jobs = []
        if spout_coordinator is not None:
            try:
                spout_coordinator.close()
            except Exception as exc:
                if clean:
                    self._tally.report(tx.emitter, -1, exc, "coordinator close()")

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
                    id(outs[up]): outs[up] for up in self._topology.upstream(cid) if up in outs
                }.values()
            )
            inputs = parents[0] if len(parents) == 1 else sc.union(parents)
            out = (
                inputs.mapPartitions(partial(addressed_to, cid))
                .partitionBy(self._topology.components[cid].parallelism, identity)
                .mapPartitionsWithIndex(partial(run_tx_task, token, payload, cid))
            )
            out.persist(StorageLevel.MEMORY_AND_DISK)
            outs[cid] = out
            built.append(out)
        return built

    def _tx_reports(
        self, sc: Any, stages: list[Any], cids: Sequence[str], txid: int
    ) -> dict[Any, Any]:
        """Collect the tasks' reports (nothing else) and add them to the metrics; the
        job's figures go to the bank as transaction ``txid``'s (the first of a
        processing job's)."""
        reports = []
        if stages:
            with self._watch.batch(sc, txid):
                reports = sc.union(stages).mapPartitions(only_acks).collect()
        out = {}
        for cid, index, finished, executed, emitted, failed, errors, timing in reports:
            out[cid, index] = finished
            if timing is not None:
                self._tally.bank.timing(cid, index).add(timing)
            m = self._tally.task(cid, index)
            m.executed += executed
            m.emitted += emitted
            m.acked += executed - failed
            m.failed += failed
            m.errors += len(errors)
            self._tally.errors.extend(ErrorReport(cid, index, *error) for error in errors)
        missing = [
            f"{cid}[{i}]"
            for cid in cids
            for i in range(self._topology.components[cid].parallelism)
            if (cid, i) not in out
        ]
        if missing:
            raise RuntimeFailure(f"tasks {', '.join(missing)} sent no report")
        return out

    def _emitted(self) -> int:
        """The tuples the emitter's tasks emitted in this run so far (count tuples too)."""
        tally, emitter = self._tally, self._tx.emitter
        return sum(tally.task(emitter, i).emitted for _, i in self._tasks([emitter]))

    def _tasks(self, cids: Sequence[str]) -> list[tuple[str, int]]:
        return [(c, i) for c in cids for i in range(self._topology.components[c].parallelism)]

    def _tx_job_failed(self, what: str, exc: BaseException) -> None:
        self._tally.errors.append(error_report("$batch", -1, exc, what, TRACEBACK_LIMIT))
        log.warning("spark runtime: %s failed (%s)", what, root_cause(exc))

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
        if self._first_job_at is None:  # until then every count is 0: say what runs
            ids = [a.transaction_id for a in attempts]
            STATUS.info(transactions_started(len(ids), min(ids), max(ids), self._max_pending()))
            self._first_job_at = self._clock.monotonic()
        self._last_job = len(attempts)
        emitted = self._emitted()
        records = [(BATCH_STREAM, [e.attempt, e.metadata, e.committed]) for e in batches]
        source = sc.parallelize([records], 1).mapPartitions(partial(tx_source, token, payload))
        stages: list[Any] = []
        try:
            stages = self._tx_stages(sc, token, payload, tx.processing, {COORDINATOR: source})
            first = min(a.transaction_id for a in attempts)
            reports = self._tx_reports(sc, stages, tx.processing, first)
            processed = settle(attempts, self._tasks(tx.processing), reports)
            per_tx = -(-(self._emitted() - emitted) // len(attempts))
            self._carried = max(self._carried, per_tx)
        except Exception as exc:
            txids = ", ".join(str(a.transaction_id) for a in attempts)
            self._tx_job_failed(f"processing job of transactions {txids}", exc)
            processed = {a.transaction_id: False for a in attempts}
        job = TxJob(stages, attempts)
        self._jobs.append(job)
        for e in sorted(batches, key=lambda e: e.attempt):
            txid = e.attempt.transaction_id
            if processed[txid]:
                protocol.on_ack(e.msg_id)
                self._fault("prepared", txid)
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
        job = next((j for j in self._jobs if attempt in j.attempts), None)
        if job is None:
            raise RuntimeFailure(f"no processing job holds {attempt!r}, whose commit is due")
        ok = True
        if tx.commit:
            commit = [(COMMIT_STREAM, [attempt])]
            source = sc.parallelize([commit], 1).mapPartitions(partial(tx_source, token, payload))
            kept = sc.union(job.stages).mapPartitions(
                partial(tx_commit_input, frozenset(tx.commit), attempt)
            )
            base = sc.union([kept, source])
            outs = {cid: base for cid in self._topology.components if cid not in tx.commit}
            stages: list[Any] = []
            try:
                stages = self._tx_stages(sc, token, payload, tx.commit, outs)
                reports = self._tx_reports(sc, stages, tx.commit, txid)
                ok = settle([attempt], self._tasks(tx.commit), reports)[txid]
            except Exception as exc:
                self._tx_job_failed(f"commit job of transaction {txid}", exc)
                ok = False
            finally:
                for rdd in stages:
                    rdd.unpersist()
        if ok:
            protocol.on_ack(emission.msg_id)  # stores txid as the last committed one
            self._failures.pop(txid, None)
            self._tally.count("batches")
            if self._tally.counters["batches"] == 1 and self._first_job_at is not None:
                took = self._clock.monotonic() - self._first_job_at
                STATUS.info(transaction_committed(txid, took))
            self._fault("committed", txid)
        else:
            self._tx_failed(txid, "commit")
            protocol.on_fail(emission.msg_id)
        self._tx_release(protocol)

    def _tx_failed(self, txid: int, phase: str) -> None:
        """Count a failure of ``txid``; give up after ``statestream.spark.batch.attempts``."""
        self._tally.count("replays")
        n = self._failures[txid] = self._failures.get(txid, 0) + 1
        if n >= self._attempts:
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
        for job in self._jobs:
            if live.intersection(job.attempts):
                keep.append(job)
            else:
                job.release()
        self._jobs = keep
