"""One batch through the checkpoint protocol: PREPARE, the job, COMMIT.

The job of batch ``t`` (:meth:`BatchDriver._job`) is a read stage and one
stage per bolt (``partitionBy`` the bolt's task count, one partition = one
bolt task). The driver collects no tuples: each task puts its
acknowledgement in front of the tuples it sends to task 0 of its first
downstream bolt, which forwards it; the last bolts' tasks output
acknowledgements only, and the driver collects those. An output that several
bolts read is cached for the batch, so no task runs twice.

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
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from ..._components import (
    task_namespace,
)
from ..._deadletter import Replay
from ..._errors import RuntimeFailure
from ..._messages import Cause
from ..._picklable import run_ending
from ..._results import ErrorReport
from ..._retry import (
    FailureRate,
    cannot_fix_in,
    too_many_failures,
)
from ..._text import count, cut_message
from .executor import read_partition, run_bolt
from .shared import Ack, addressed_to, identity, only_acks
from .spouts import Batch, SpoutDriver

log = logging.getLogger("statestream")


def refuse_lost(acks: Iterable[Ack], txid: int) -> None:
    """A batch Spark fed has no spout to retry or settle a message with: a tuple its
    tasks gave up on fails the batch (run again, up to ``statestream.spark.batch.attempts``)."""
    for _, index, *_, lost in acks:
        for _, component, error_type, error in lost[:1]:
            raise RuntimeFailure(
                f"bolt {component!r} task {index} gave up on a tuple of fed batch {txid} "
                f"({error_type}: {error[:500]}); a fed row cannot be dead-lettered"
            )


def _raise_run_ending(acks: list[Ack]) -> None:
    """Stop the run on a tuple given up on for a reason that ends it (statestream._picklable)."""
    for *_, lost in acks:
        for _, _, error_type, error in lost:
            fatal = run_ending(error_type, error)
            if fatal is not None:
                raise fatal  # the prepares are rolled back at the next start


class BatchDriver(SpoutDriver):
    """The driver's batch transaction and its job (see the module docstring)."""

    def _transaction(
        self,
        sc: Any,
        token: str,
        payload: Any,
        batch: Batch,
        read_again: Callable[[Batch], Batch],
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
        failures = 0
        while True:
            started = self.clock.monotonic()  # the metrics bank's checkpoint of the batch
            txid = self._prepare(batch)
            try:
                acks = self._job(sc, token, payload, txid, batch)
                if batch.source is not None:
                    refuse_lost(acks, txid)
            except Exception as exc:
                self.bank.checkpoint_done(txid, started, started, self.clock.monotonic(), ok=False)
                failures += 1
                self._job_failed(exc, txid, failures, batch)
                batch = read_again(batch)
                continue
            _raise_run_ending(acks)
            resume_at = self._failed_messages(batch, acks)
            if resume_at is None:
                break
            self._count_errors(acks)
            self._counters["replays"] += 1
            self.checkpoints.abort(txid)
            self._recover()
            if not self._wait_until(resume_at):
                return  # stopped: the batch is rolled back, the next run reads it again
            batch = read_again(batch)
        prepared = self.clock.monotonic()
        self._commit(txid, batch, acks)
        self.bank.checkpoint_done(txid, started, prepared, self.clock.monotonic())

    def _prepare(self, batch: Batch) -> int:
        """Poll the coordinator for batch's PREPARE (``PREPARING(t)`` is stored with
        the batch's end positions); its txid."""
        self._store.check()  # a lost lease: another run may own the state now
        return self.checkpoints.prepare(batch.positions)

    def _job_failed(self, exc: Exception, txid: int, failures: int, batch: Batch) -> None:
        """A job that failed as a whole (its ``failures``-th attempt): rolled back, and
        the run stopped once the batch had its ``statestream.spark.batch.attempts``."""
        stop = cannot_fix_in(exc)
        if stop is not None:  # e.g. the store stayed away: a new attempt would too
            raise stop from exc
        self.errors.append(
            ErrorReport(
                "$batch",
                -1,
                f"batch {txid} attempt {failures}",
                repr(exc)[:2000],
                "".join(traceback.format_exception(exc))[-20000:],
            )
        )
        self._counters["replays"] += 1
        for book in self._books.values():
            book.rewound()  # the job's failure tells nothing of the messages
        self.checkpoints.abort(txid)
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

    def _commit(self, txid: int, batch: Batch, acks: list[Ack]) -> None:
        """Every task prepared ``txid``: COMMIT it, ack the batch's messages, count it."""
        if self.fault_hook is not None:
            self.fault_hook("prepared", txid)
        # COMMITTING(txid) stored, every namespace commits, COMMITTED(txid) stored.
        self.checkpoints.commit(txid, self._act)
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
        for book in self._books.values():
            book.passed_cut()  # what went through in the batch is forgotten
        self._counters["batches"] += 1
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

    def _count_errors(self, acks: list[Ack]) -> None:
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
            book = task.book
            outcome = book.failed(
                msg_id, values, stream, Cause(component, None, error, error_type), now, rewinds=True
            )
            self._metrics[task.cid].failed += 1
            resume_at = now if resume_at is None else resume_at
            if outcome.replay is not None:
                # Fed back and given up on again: dead again, not a second record.
                self.deadletters.replay_given_up(
                    outcome.replay.record,
                    component,
                    None,
                    error,
                    outcome.verdict.failures,
                    error_type=error_type,
                )
                self._metrics[task.cid].dead_lettered += 1
            elif outcome.record is not None:
                self.deadletters.give_up(outcome.record)
                book.gave_up(outcome)  # the batch read again skips it
                self._metrics[task.cid].dead_lettered += 1
            elif outcome.verdict.at is not None:
                resume_at = max(resume_at, outcome.verdict.at)
        if resume_at is not None:
            for book in self._books.values():
                book.rewound(complete=True)  # a job runs every tuple it holds
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

    def _job(self, sc: Any, token: str, payload: Any, txid: int, batch: Batch) -> list[Ack]:
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
                    partial(read_partition, token, payload)
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
                    inputs.mapPartitions(partial(addressed_to, bolt.id))
                    .partitionBy(bolt.parallelism, identity)
                    .mapPartitionsWithIndex(
                        partial(run_bolt, token, payload, bolt.id, txid, self._tokens)
                    )
                )
                keep([bolt.id], out)
                outs[bolt.id] = out
            ends = list(leaves.values())
            acks: list[Ack] = (
                (ends[0] if len(ends) == 1 else sc.union(ends)).mapPartitions(only_acks).collect()
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
