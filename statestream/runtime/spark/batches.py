"""One batch through the checkpoint protocol: PREPARE, the job, COMMIT.

The job itself (a read stage, one stage per bolt) is :mod:`.jobs`'; the
:class:`BatchRunner` runs it as one transaction of the checkpoint record.
A job in which tasks gave up on tuples is one failed attempt of the spout
messages those tuples belong to, under the retry policy of the local runtime
(:mod:`statestream._retry`)::

    job of batch t ── a task gave up on message m ──> ROLLBACK(t); m counts a failure
          ^                                              |
          |            failures < max.attempts ──────────┤── wait delay(failures)
          |            failures = max.attempts ──────────┘── m to the dead-letter file
          └──── seek back, read batch t again (m skipped, Spout.dead_lettered(m)) ──┘

A job that fails as a whole says nothing of its messages: it is rolled back
and read again, up to ``statestream.spark.batch.attempts`` times.

What follows what (commit, roll back and wait, read again, give up, stop) is
decided by :class:`~statestream._batch_transaction.BatchTransaction` from
the events of the batch; :meth:`BatchRunner.run` carries out its actions.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from ..._batch_transaction import BatchTransaction, Do, Event
from ..._components import task_namespace
from ..._config import Config
from ..._deadletter import DeadLetter, DeadLetterFile, Replay
from ..._errors import RuntimeFailure, StateLockedError
from ..._messages import Cause, MessageBook
from ..._picklable import run_ending
from ..._results import ErrorReport
from ..._retry import (
    FailureRate,
    cannot_fix_in,
    too_many_failures,
)
from ..._text import count, cut_message
from ..errorlog import TRACEBACK_LIMIT, error_report
from ..plan import RuntimePlan
from .checkpoints import DriverCheckpoints, FaultHook
from .jobs import Job
from .shared import Ack
from .spouts import Batch
from .tally import RunControl, RunTally, acked_by_commit

log = logging.getLogger("statestream")


def refuse_lost(acks: Iterable[Ack], txid: int) -> None:
    """A batch Spark fed has no spout to retry or settle a message with: a tuple its
    tasks gave up on fails the batch (run again, up to ``statestream.spark.batch.attempts``)."""
    for ack in acks:
        index, lost = ack[1], ack[7]
        for _, component, error_type, error in lost[:1]:
            raise RuntimeFailure(
                f"bolt {component!r} task {index} gave up on a tuple of fed batch {txid} "
                f"({error_type}: {error[:500]}); a fed row cannot be dead-lettered"
            )


def run_ending_in(acks: list[Ack]) -> BaseException | None:
    """The error that stops the run, if a task gave up on a tuple for a reason that
    ends it (statestream._picklable)."""
    for ack in acks:
        for _, _, error_type, error in ack[7]:
            fatal = run_ending(error_type, error)
            if fatal is not None:
                return fatal
    return None


@dataclass
class BatchRun:
    """One batch's transaction as the driver carries it out: what the actions of
    :class:`~statestream._batch_transaction.BatchTransaction` act on."""

    batch: Batch
    read_again: Callable[[Batch], Batch]
    txid: int = -1
    acks: list[Ack] = field(default_factory=list)
    error: BaseException | None = None
    """The last job's failure, or the error that stops the run."""
    cause: BaseException | None = None
    """What the error that stops the run was found in (raised as its cause)."""
    failures: int = 0
    """The jobs of the batch that failed as a whole so far."""
    resume_at: float = 0.0
    """When the batch may run again after its messages failed (the runtime's clock)."""
    started: float = 0.0
    """When the current attempt started (the metrics bank's checkpoint of the batch)."""


class BatchRunner:
    """The driver's batch transaction (see the module docstring).

    Built with what a transaction touches: the run's checkpoints (prepare,
    commit, abort), the spout tasks' message books (the retry policy's
    bookkeeping), the tally and the run's control (a stop ends a wait), the
    dead-letter file, ``attempts`` (``statestream.spark.batch.attempts``),
    ``at_most_once`` (a failed message is not retried: its spout cannot
    rewind), ``fed`` (the spouts Spark feeds, whose read stage acks per
    DataFrame partition), the config (each bolt task's error-rate limit) and
    the ``fault`` hook (``"prepared"``, ``"committed"``).
    """

    def __init__(
        self,
        plan: RuntimePlan,
        checkpoints: DriverCheckpoints,
        books: Mapping[str, MessageBook],
        tally: RunTally,
        control: RunControl,
        deadletters: DeadLetterFile,
        *,
        attempts: int,
        at_most_once: bool,
        fed: Iterable[str] = (),
        fault: FaultHook,
    ) -> None:
        self._plan = plan
        self._checkpoints = checkpoints
        self._books = books
        self._tally = tally
        self._control = control
        self._clock = control.clock
        self._deadletters = deadletters
        self._attempts = attempts
        self._at_most_once = at_most_once
        self._fed = frozenset(fed)
        self._spout_ids = frozenset(s.id for s in plan.data_spouts)
        self._config: Config = plan.config
        self._fault = fault
        # The error-rate limit per bolt task, and what each has executed so far.
        self._failure_rates: dict[tuple[str, int], tuple[FailureRate, int]] = {}

    def run(self, batch: Batch, read_again: Callable[[Batch], Batch], job: Job) -> None:
        """One batch through the coordinator: PREPARE (stored with the batch's end
        positions), the ``job``, COMMIT; a failed job rolls back, and the batch
        ``read_again`` runs again.

        What comes next is decided by the pure
        :class:`~statestream._batch_transaction.BatchTransaction` from what
        happened; this only carries its actions out. A job in which tasks gave
        up on tuples of tracked messages (a poison record) is an attempt of
        those messages: it is rolled back, each one counts a failure under the
        retry policy (:meth:`_failed_messages`), and the batch is read again
        and run once the policy's delay has passed, without the messages that
        had their last attempt. Returns without a commit if the run is stopped
        (or its duration ends) while it waits.
        """
        decide = BatchTransaction(self._attempts)
        run = BatchRun(batch, read_again)
        todo = deque(decide.on(Event.READ))
        while todo:
            do = todo.popleft()
            event = self._run_job(run, job) if do is Do.RUN_JOB else self._actions[do](self, run)
            if event is not None:
                # What follows an event replaces what was left: a PREPARE that
                # finds the claim lost must not be followed by its job.
                todo = deque(decide.on(event))
                run.failures = decide.failures

    def _run_job(self, run: BatchRun, job: Job) -> Event:
        """Every bolt task executes its tuples and prepares the txid: how it went."""
        try:
            run.acks = job(run.txid, run.batch)
            if run.batch.source is not None or run.batch.ranges:
                # Records the executors read have no message on the driver to
                # retry or dead-letter: a tuple given up on fails the batch.
                refuse_lost(run.acks, run.txid)
        except Exception as exc:
            now = self._clock.monotonic()
            self._tally.bank.checkpoint_done(run.txid, run.started, run.started, now, ok=False)
            stop = cannot_fix_in(exc)  # e.g. the store stayed away: a new attempt would too
            if stop is not None:
                run.error, run.cause = stop, exc
                return Event.UNFIXABLE
            run.error = exc
            return Event.JOB_FAILED
        fatal = run_ending_in(run.acks)
        if fatal is not None:
            run.error = fatal  # the prepares are rolled back at the next start
            return Event.UNFIXABLE
        resume_at = self._failed_messages(run.batch, run.acks)
        if resume_at is None:
            self._write_dead_tuples(run.acks)
            return Event.JOB_SUCCEEDED
        run.resume_at = resume_at
        return Event.MESSAGES_FAILED

    def _prepare(self, run: BatchRun) -> Event | None:
        """Store ``PREPARING(t)`` with the batch's end positions (its txid in ``run``),
        unless the run's claim on the store was lost."""
        run.started = self._clock.monotonic()
        try:
            self._checkpoints.check_claim()  # a lost lease: another run may own the state now
        except StateLockedError as exc:
            run.error = exc
            return Event.CLAIM_LOST
        run.txid = self._checkpoints.prepare(run.batch.positions)
        return None

    def _record_failure(self, run: BatchRun) -> None:
        """A job that failed as a whole: its error in the run's errors; it tells nothing
        of the messages, so what their books noted of the attempt is forgotten."""
        exc = run.error
        assert exc is not None
        what = f"batch {run.txid} attempt {run.failures}"
        self._tally.errors.append(error_report("$batch", -1, exc, what, TRACEBACK_LIMIT))
        for book in self._books.values():
            book.rewound()

    def _rollback(self, run: BatchRun) -> None:
        """ROLLBACK(t) (pre_rollback first), then INITSTATE, on every namespace."""
        self._tally.count("replays")
        self._checkpoints.abort(run.txid)

    def _warn_retry(self, run: BatchRun) -> None:
        log.warning("batch %d failed (%r); rolled back, reading it again", run.txid, run.error)

    def _wait(self, run: BatchRun) -> Event:
        return Event.WAITED if self._control.wait_until(run.resume_at) else Event.STOPPED

    def _reread(self, run: BatchRun) -> None:
        run.batch = run.read_again(run.batch)

    def _fail_messages(self, run: BatchRun) -> None:
        """The batch's messages failed (a dead letter fed back stays marked: the next
        run feeds it again)."""
        for task, msg_ids in run.batch.msg_ids:
            for msg_id in msg_ids:
                if msg_id is not None and type(msg_id) is not Replay:
                    task.spout.fail(msg_id)

    def _give_up(self, run: BatchRun) -> None:
        raise RuntimeFailure(
            f"batch {run.txid} failed {count(run.failures, 'time')} and was rolled back; the "
            f"last error: {run.error!r}. The next run reads it again from the stored positions"
        ) from run.error

    def _stop_run(self, run: BatchRun) -> None:
        assert run.error is not None
        if run.cause is not None:
            raise run.error from run.cause
        raise run.error

    def _commit_run(self, run: BatchRun) -> None:
        prepared = self._clock.monotonic()
        self._commit(run.txid, run.batch, run.acks)
        prepares = {task_namespace(a[0], a[1]): a[9] for a in run.acks if a[9] is not None}
        self._tally.bank.checkpoint_done(
            run.txid,
            run.started,
            prepared,
            self._clock.monotonic(),
            keys_changed={ns: keys for ns, (keys, _) in prepares.items()},
            state_size={ns: size for ns, (_, size) in prepares.items()},
        )

    def _count_run_errors(self, run: BatchRun) -> None:
        self._count_errors(run.acks)

    #: How each action but RUN_JOB is carried out (an event, or None to go on).
    _actions: ClassVar[dict[Do, Callable[[BatchRunner, BatchRun], Event | None]]] = {
        Do.PREPARE: _prepare,
        Do.COMMIT: _commit_run,
        Do.RECORD_FAILURE: _record_failure,
        Do.COUNT_ERRORS: _count_run_errors,
        Do.ROLLBACK: _rollback,
        Do.WARN_RETRY: _warn_retry,
        Do.WAIT: _wait,
        Do.READ_AGAIN: _reread,
        Do.FAIL_MESSAGES: _fail_messages,
        Do.GIVE_UP: _give_up,
        Do.STOP: _stop_run,
    }

    def _commit(self, txid: int, batch: Batch, acks: list[Ack]) -> None:
        """Every task prepared ``txid``: COMMIT it, ack the batch's messages, count it."""
        self._fault("prepared", txid)
        # COMMITTING(txid) stored, every namespace commits, COMMITTED(txid) stored;
        # the prepares just committed: executors may keep using those state objects.
        tokens = {task_namespace(ack[0], ack[1]): ack[5] for ack in acks if ack[5] is not None}
        self._checkpoints.commit(txid, tokens)
        self._fault("committed", txid)
        replayed = []
        for task, msg_ids in batch.msg_ids:
            for msg_id in msg_ids:
                if type(msg_id) is Replay:
                    replayed.append(msg_id.record)
                elif msg_id is not None:
                    self._tally.task(task.cid, task.index).acked += 1  # as a spout counts on local
                    task.spout.ack(msg_id)
        if replayed:
            # After the commit, as the local runtime marks one once its tree is
            # acked: a crash in between feeds it back to the next run again.
            self._deadletters.replayed(replayed)
        self._tell_committed(batch)
        for book in self._books.values():
            book.passed_cut()  # what went through in the batch is forgotten
        self._tally.count("batches")
        bank = self._tally.bank
        read: dict[tuple[str, int], int] = {}  # per spout task, what its read stages emitted
        for cid, index, executed, emitted, failed, _p, _e, _l, timing, _k, _d in acks:
            # A fed batch's read stage acks per DataFrame partition: its one task's.
            task_index = 0 if cid in self._fed else index
            m = self._tally.task(cid, task_index)
            m.executed += executed
            m.emitted += emitted
            m.acked += executed - failed
            m.failed += failed
            if cid in self._spout_ids:
                read[cid, task_index] = read.get((cid, task_index), 0) + emitted
            if timing is not None:  # the task's sampled execute latency
                bank.timing(cid, index).add(timing)
        on_driver = {task: len(records) for task, records in batch.records.items()}
        for (cid, index), n in acked_by_commit(read, on_driver).items():
            self._tally.task(cid, index).acked += n
        batch.completed(bank, self._clock.monotonic())
        self._count_errors(acks)

    def _tell_committed(self, batch: Batch) -> None:
        """A partitioned spout task's records were read on the executors: no ack tells
        it they are done, so it hears the position the commit made its own
        (statestream.PartitionedSource's ``committed``). An error is reported,
        never the run's: the commit stands."""
        positions = batch.positions or {}
        for task, _ in batch.msg_ids:
            committed = getattr(task.spout, "committed", None)
            if task.partitioned and callable(committed) and task.namespace in positions:
                try:
                    committed(positions[task.namespace])
                except Exception as exc:
                    self._tally.report(task.cid, task.index, exc, "committed()")

    def _count_errors(self, acks: list[Ack]) -> None:
        """Record the errors the tasks of a job reported (a job that committed, or
        one run again for its failed messages), and stop the run if a task's
        error-rate limit tripped (statestream._retry.FailureRate)."""
        now = self._clock.monotonic()
        for cid, index, executed, _e, failed, _p, errors, lost, _t, _k, _d in acks:
            m = self._tally.task(cid, index)
            m.errors += len(errors)
            self._tally.errors.extend(ErrorReport(cid, index, *error) for error in errors)
            for _, _, error_type, error in lost[-1:]:
                m.last_error = cut_message(f"{error_type}: {error}")
                m.last_error_at = now
            if not lost:
                continue
            rate, before = self._failure_rates.get((cid, index)) or (
                FailureRate.from_config(self._config),
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
                raise too_many_failures(cid, index, reason, self._tally.errors)

    def _failed_messages(self, batch: Batch, acks: list[Ack]) -> float | None:
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
        for ack in acks:
            for root, component, error_type, error in ack[7]:
                lost.setdefault(root, (component, error_type, error))
        if not lost:
            return None
        now = self._clock.monotonic()
        resume_at: float | None = None
        for root, (component, error_type, error) in lost.items():
            found = None if self._at_most_once else batch.message(self._plan, root)
            if found is None or found[2] is None:
                log.warning(
                    "%s gave up on an untracked tuple (%s: %s); it is not replayed",
                    component,
                    error_type,
                    cut_message(error),
                )
                continue
            task, (stream, values, _), msg_id = found
            book = task.book
            outcome = book.failed(
                msg_id, values, stream, Cause(component, None, error, error_type), now, rewinds=True
            )
            m = self._tally.task(task.cid, task.index)
            m.failed += 1
            resume_at = now if resume_at is None else resume_at
            if book.carry_out(outcome, self._deadletters):
                m.dead_lettered += 1  # the batch read again skips it
            elif outcome.verdict.at is not None:
                resume_at = max(resume_at, outcome.verdict.at)
        if resume_at is not None:
            for book in self._books.values():
                book.rewound(complete=True)  # a job runs every tuple it holds
        return resume_at

    def _write_dead_tuples(self, acks: list[Ack]) -> None:
        """Write the tuples the tasks dead-lettered themselves (exactly-once, failed
        ``statestream.retry.max.attempts`` times where they failed), durably, before
        the batch commits: a batch run again after a crash writes the same records,
        which the file does not take twice (their ids are the batch's)."""
        topology = self._plan.topology.name
        for cid, index, *_, dead in acks:
            for msg_id, source, stream, values, error_type, error, attempts in dead:
                record = DeadLetter.of(
                    topology,
                    cid,
                    index,
                    msg_id,
                    values,
                    cid,
                    None,
                    attempts,
                    error,
                    stream=stream,
                    error_type=error_type,
                    at=cid,
                    source=source,
                )
                self._deadletters.give_up(record)
                self._tally.task(cid, index).dead_lettered += 1
