"""One batch's transaction, as events in and actions out (the Spark driver's decisions).

A runtime whose unit of replay is a batch (the Spark driver) runs each batch
``t`` as one transaction over every stateful namespace: ``PREPARING(t)`` is
stored with the batch's end positions, one job has every bolt task execute
its tuples and prepare ``t``, and once the job succeeded every namespace
commits; a failed job is rolled back and the batch read again. What to do
next is decided here, from what happened; the runtime only carries it out::

    event                 failures so far     actions
    READ                  -                   PREPARE, RUN_JOB
    CLAIM_LOST            -                   STOP            (another run may own the store)
    UNFIXABLE             -                   STOP            (no retry fixes it: the store
                                                               stayed away, a run-ending error;
                                                               the next start rolls back)
    JOB_SUCCEEDED         -                   COMMIT          (done)
    MESSAGES_FAILED       -                   COUNT_ERRORS, ROLLBACK, WAIT
    WAITED                -                   READ_AGAIN, PREPARE, RUN_JOB
    STOPPED               -                   (none: left uncommitted, the next run reads it)
    JOB_FAILED            n + 1 < attempts    RECORD_FAILURE, ROLLBACK, WARN_RETRY,
                                              READ_AGAIN, PREPARE, RUN_JOB
    JOB_FAILED            n + 1 = attempts    RECORD_FAILURE, ROLLBACK, FAIL_MESSAGES, GIVE_UP

``MESSAGES_FAILED``: tasks gave up on tuples of tracked spout messages (a
poison record); the retry policy (``statestream._messages``) has counted the
attempt of each, and the batch runs again once the longest delay passed,
without the messages that had their last attempt. Such a job does not count
toward ``statestream.spark.batch.attempts``: only a job that fails as a
whole (``JOB_FAILED``) does, since it says nothing of its messages.

An action that reports an event (PREPARE: ``CLAIM_LOST``; RUN_JOB; WAIT) ends
its list: the actions that follow the event replace whatever was left of it.

Pure: no I/O, no clock; :class:`BatchTransaction` keeps the count of failed
jobs between events.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["BatchTransaction", "Do", "Event"]


class Event(Enum):
    """What happened to the batch."""

    READ = "read"
    """The batch was read: its transaction starts."""
    CLAIM_LOST = "claim lost"
    """Before the prepare, the run's claim on the store was found lost."""
    UNFIXABLE = "unfixable"
    """The job failed with an error no retry fixes, or a task gave up on a
    tuple for a reason that ends the run."""
    JOB_SUCCEEDED = "job succeeded"
    """Every bolt task prepared, and no tracked message was given up on."""
    MESSAGES_FAILED = "messages failed"
    """Every task ran, but some gave up on tuples of tracked messages."""
    JOB_FAILED = "job failed"
    """The job failed as a whole (a retry may fix it)."""
    WAITED = "waited"
    """The retry policy's delay has passed."""
    STOPPED = "stopped"
    """The run was stopped, or its duration ended, while waiting."""


class Do(Enum):
    """What the runtime does next."""

    PREPARE = "prepare"
    """Check the claim, store ``PREPARING(t)`` with the batch's end positions."""
    RUN_JOB = "run job"
    """Every bolt task executes its tuples and prepares ``t``."""
    COMMIT = "commit"
    """Every namespace commits ``t``; the batch's messages are acked."""
    RECORD_FAILURE = "record failure"
    """The job's error goes to the run's errors; what the attempt did to the
    messages' books is forgotten (it says nothing of them)."""
    COUNT_ERRORS = "count errors"
    """The errors the tasks reported are recorded (the error-rate limit may stop
    the run)."""
    ROLLBACK = "rollback"
    """Count a replay; ``ROLLBACK(t)`` then ``INITSTATE`` on every namespace."""
    WARN_RETRY = "warn retry"
    """Say that the batch is read again."""
    WAIT = "wait"
    """Wait until the retry policy's delay passed (or the run stops)."""
    READ_AGAIN = "read again"
    """Read the batch again from the restored positions."""
    FAIL_MESSAGES = "fail messages"
    """Tell the spouts that the batch's messages failed."""
    GIVE_UP = "give up"
    """Stop the run: the batch failed its last attempt."""
    STOP = "stop"
    """Stop the run with the error (nothing is rolled back now: the next start does)."""


@dataclass
class BatchTransaction:
    """The decisions of one batch's transaction (see the module docstring).

    ``attempts`` is ``statestream.spark.batch.attempts``; ``failures`` counts
    the jobs of this batch that failed as a whole. :attr:`done` is set once
    nothing more is to be done (committed, stopped or given up).
    """

    attempts: int
    failures: int = 0
    done: bool = False

    def on(self, event: Event) -> list[Do]:
        """The actions that follow ``event``, in order."""
        if event is Event.READ or event is Event.WAITED:
            again = [Do.READ_AGAIN] if event is Event.WAITED else []
            return [*again, Do.PREPARE, Do.RUN_JOB]
        if event is Event.JOB_SUCCEEDED:
            self.done = True
            return [Do.COMMIT]
        if event is Event.MESSAGES_FAILED:
            return [Do.COUNT_ERRORS, Do.ROLLBACK, Do.WAIT]
        if event is Event.JOB_FAILED:
            self.failures += 1
            if self.failures >= self.attempts:
                self.done = True
                return [Do.RECORD_FAILURE, Do.ROLLBACK, Do.FAIL_MESSAGES, Do.GIVE_UP]
            return [
                Do.RECORD_FAILURE,
                Do.ROLLBACK,
                Do.WARN_RETRY,
                Do.READ_AGAIN,
                Do.PREPARE,
                Do.RUN_JOB,
            ]
        self.done = True  # CLAIM_LOST, UNFIXABLE, STOPPED
        return [] if event is Event.STOPPED else [Do.STOP]
