"""The message book of one spout task: what a runtime does with its messages.

Every runtime asks one :class:`MessageBook` per spout task (kept for the
whole run, across rewinds) what to do when a message fails, falls due, is
emitted again or fed back; the book answers, and the runtime does the I/O
(the dead-letter file, the spout's callbacks, the emit)::

    runtime event                          the book                      the runtime then
    -------------------------------------- ----------------------------- -----------------------------
    a message's tree failed / timed out    failed() -> Outcome           retry: nothing yet (due()),
                                                                         or write outcome.record then
                                                                         gave_up(), or mark
                                                                         outcome.replay dead again;
                                                                         tell_spout: dead_lettered
    a scheduling round                     due(now) -> Due               Spout.fail each of Due.fail
    a cut while messages are held          release_held() -> ids         Spout.fail each
    the spout emits a message              skips(id, values)             not delivered if True;
                                                                         take_settles() -> ids to tell
                                                                         Spout.dead_lettered
    a dead letter is fed back              feed(record)                  emits book.replays first,
                                           replay_emitted / replay_done  marks it replayed when acked
    a rewind / a job rolled back           rewound(), requeue(ids)
    a cut / a commit with no failure       passed_cut()

Retry verdicts and the counting rule are :class:`~statestream._retry.Retries`';
records and their lifecycle are :mod:`statestream._deadletter`'s. The
runtime keeps the fast checks of its emit path on the book's own containers
(``book.settled``, ``book.failures``: empty in a run without failures).

Pure: no threads, no I/O; time is an input. Table-tested in
``tests/unit/test_message_book.py``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ._deadletter import REPLAY, DeadLetter, DeadLetterFile, Replay, Settled
from ._retry import Retries, RetryPolicy, Verdict, VerdictKind

__all__ = ["Cause", "Due", "MessageBook", "Outcome"]


@dataclass(frozen=True)
class Cause:
    """Who failed a message and why: the component, the exception if one is at
    hand, else a text (an exception that crossed a process boundary, a timeout)
    and its type's name (``Failed`` when None)."""

    component: str
    exc: BaseException | None = None
    text: str | None = None
    error_type: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What to do about a message that failed (:meth:`MessageBook.failed`).

    At most one of :attr:`record` and :attr:`replay` is set, and only when the
    verdict gives up on the message."""

    verdict: Verdict
    msg_id: Any
    values: Sequence[Any]
    cause: Cause
    record: DeadLetter | None = None
    """Given up on: write this record durably (``DeadLetterFile.give_up``), then
    :meth:`MessageBook.gave_up` (a record not written leaves it unsettled)."""
    replay: Replay | None = None
    """A dead letter fed back and given up on again: mark its record dead again
    (``DeadLetterFile.replay_given_up`` with :attr:`cause` and the failures)."""
    tell_spout: bool = False
    """After the record: tell the spout ``Spout.dead_lettered(msg_id)`` now
    (at-least-once; with a rewind it hears of it when it emits the message again)."""

    @property
    def gives_up(self) -> bool:
        return self.verdict.kind is VerdictKind.GIVE_UP


class Due(NamedTuple):
    """What fell due in a scheduling round (:meth:`MessageBook.due`)."""

    fail: list[Any]
    """Message ids to hand back to the spout (``Spout.fail``), in the order they fell due."""
    requeued: int
    """Dead letters fed back that went back on the replay queue."""


class MessageBook:
    """One spout task's failed, settled and fed-back messages (see the module docstring).

    ``topology``, ``spout`` and ``task`` (the task's index) name the task in
    the records it gives up on. Containers the runtime reads directly:
    :attr:`retries` (its :attr:`failures` is the emit path's test),
    :attr:`settled`, :attr:`replays` (fed back, to emit first, in order) and
    :attr:`replaying` (fed back and emitted, neither acked nor given up on).
    """

    def __init__(self, topology: str, spout: str, task: int, policy: RetryPolicy) -> None:
        self.topology = topology
        self.spout = spout
        self.task = task
        self.retries = Retries(policy)
        self.failures = self.retries.failures  # the same dict
        self.settled = Settled()
        self.settles: deque[Any] = deque()  # emitted again, settled: to tell dead_lettered
        self.replays: deque[Replay] = deque()
        self.replaying: set[Replay] = set()

    # -- failures -------------------------------------------------------------------
    def failed(
        self,
        msg_id: Any,
        values: Sequence[Any],
        stream: str,
        cause: Cause,
        now: float,
        *,
        rewinds: bool,
    ) -> Outcome:
        """``msg_id`` (emitted with ``values`` on ``stream``) failed at ``now``.

        ``rewinds``: the runtime goes back to its last checkpoint instead of
        handing the message back (exactly-once state, a Spark batch): the
        failure counts one attempt (:meth:`Retries.attempt_failed`). Else it is
        scheduled for its retry (:meth:`due`)."""
        retries = self.retries
        verdict = retries.attempt_failed(msg_id, now) if rewinds else retries.failed(msg_id, now)
        if verdict.kind is not VerdictKind.GIVE_UP:
            return Outcome(verdict, msg_id, values, cause)
        if type(msg_id) is Replay:
            self.replaying.discard(msg_id)
            return Outcome(verdict, msg_id, values, cause, replay=msg_id)
        record = DeadLetter.of(
            self.topology,
            self.spout,
            self.task,
            msg_id,
            values,
            cause.component,
            cause.exc,
            verdict.failures,
            cause.text,
            stream=stream,
            error_type=cause.error_type,
        )
        return Outcome(verdict, msg_id, values, cause, record=record, tell_spout=not rewinds)

    def gave_up(self, outcome: Outcome) -> None:
        """``outcome.record`` is written: the message is settled, so that it is not
        delivered again when the spout emits it (:meth:`skips`)."""
        self.settled.add(outcome.msg_id, outcome.values)

    def carry_out(self, outcome: Outcome, deadletters: DeadLetterFile) -> bool:
        """Do what :meth:`failed` said of a message given up on, the same on every
        runtime: write its record durably, then settle it; or, a dead letter fed
        back and given up on again, mark its record dead again (no second
        record). True if the message was dead-lettered (a runtime counts it);
        False if the outcome gives nothing up (a retry is due)."""
        if outcome.record is not None:
            deadletters.give_up(outcome.record)
            self.gave_up(outcome)  # the message read again is skipped
            return True
        if outcome.replay is not None:
            cause = outcome.cause
            deadletters.replay_given_up(
                outcome.replay.record,
                cause.component,
                cause.exc,
                cause.text,
                outcome.verdict.failures,
                error_type=cause.error_type,
            )
            return True
        return False

    # -- emitting -------------------------------------------------------------------
    def skips(self, msg_id: Any, values: Sequence[Any]) -> bool:
        """True if this very message (id and values) was given up on in this run: it
        is not delivered, and the spout is to be told it is settled (:meth:`take_settles`)."""
        if not self.settled.holds(msg_id, values):
            return False
        self.settles.append(msg_id)
        return True

    def take_settles(self) -> list[Any]:
        """The message ids :meth:`skips` skipped since the last call, in order: tell
        each ``Spout.dead_lettered``."""
        out = list(self.settles)
        self.settles.clear()
        return out

    # -- the retry schedule ---------------------------------------------------------------
    def due(self, now: float) -> Due:
        """The retries whose delay has passed by ``now``: the spout's messages to
        hand back, a fed-back dead letter back on the replay queue."""
        return self._hand_back(self.retries.due(now))

    def release_held(self) -> list[Any]:
        """Exactly-once, at a cut: the messages held for their retry, to hand back to
        the spout (``Spout.fail``) so that its position holds them; fed-back
        ones go back on the replay queue."""
        return self._hand_back(self.retries.clear_schedule()).fail

    def _hand_back(self, msg_ids: list[Any]) -> Due:
        fail = []
        requeued = 0
        for msg_id in msg_ids:
            if type(msg_id) is Replay:
                self.replays.append(msg_id)
                requeued += 1
            else:
                fail.append(msg_id)
        return Due(fail, requeued)

    # -- dead letters fed back -----------------------------------------------------------
    def feed(self, record: DeadLetter) -> None:
        """A dead letter of this task marked for replay: emit it (before what the
        spout reads) as a message the spout never hears of."""
        self.replays.append(Replay(record))

    def replay_emitted(self, rid: Replay) -> None:
        """``rid`` went out, tracked: in flight until :meth:`replay_done` or given up on."""
        self.replaying.add(rid)

    def replay_done(self, rid: Replay) -> None:
        """``rid`` went through: mark its record replayed (``DeadLetterFile.replayed``)."""
        self.replaying.discard(rid)

    def requeue(self, msg_ids: Iterable[Any]) -> None:
        """The fed-back dead letters among ``msg_ids`` (a batch rolled back) that are
        still to replay go back in front of the queue, in their order."""
        again = [m for m in msg_ids if type(m) is Replay and m.record.status == REPLAY]
        self.replays.extendleft(reversed(again))

    # -- attempts (a rewind, a cut) -------------------------------------------------------
    def rewound(self, complete: bool = False, *, reopen: bool = False) -> None:
        """The attempt under way ended with a rewind (:meth:`Retries.rewound`;
        ``complete``: nothing was left in flight).

        ``reopen``: the spouts are opened anew (the local runtime): the dead
        letters fed back and in flight go out again first, and the settled
        messages skipped since the last poll are not told (the new spout
        instances hear of them when they emit them)."""
        if reopen:
            self.replays.extendleft(self.replaying)
            self.replaying.clear()
        self.retries.rewound(complete=complete)
        if reopen:
            self.settles.clear()

    def passed_cut(self) -> None:
        """A cut or a commit passed with no failure pending (:meth:`Retries.passed_cut`)."""
        self.retries.passed_cut()
