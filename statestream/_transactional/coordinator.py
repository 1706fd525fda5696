"""The transaction coordinator's protocol, as pure code.

A transactional topology processes batches: transaction ``t`` (1, 2, ...)
is one batch, emitted by the coordinator as a tuple on ``$batch`` and
committed, strictly after ``t - 1``, with a tuple on ``$commit``. Each
emission carries a fresh :class:`TransactionAttempt`; the acker tells the
coordinator whether its tuple tree completed or failed. Many batches may be
processed at once (``topology.max.spout.pending``), only one commits at a
time, in txid order.

The life of one active transaction::

    PENDING --EMIT--> PROCESSING --BATCH_ACKED--> PROCESSED --COMMIT_TURN--> COMMITTING
       ^                   |                          |                          |
       +--BATCH_FAILED-----+                          |                          +--COMMIT_ACKED--> done
       +--TIMED_OUT / EARLIER_FAILED (any phase) -----+--------------------------+
       +--COMMIT_FAILED-------------------------------------------------------+

:func:`transition` is that diagram as a table over every (phase, event);
an event that does not apply to a phase (a reply to an attempt that was
already given up, say) changes nothing. A failure of ``t`` also fails every
active transaction after ``t`` (``EARLIER_FAILED``): each is emitted again,
in txid order, so that an opaque spout, which emits from where the previous
batch ended, skips nothing.

Durable state (:class:`StoredTransactions`) is the last committed txid, the
next attempt id, and the batch metadata of the committed txid and of every
active one. The coordinator passes it to ``save`` before every emission that
depends on it, so after a crash a new coordinator emits every stored active
transaction again (same txid and metadata, new attempt id) and never skips
or repeats a committed one. A start is always a recovery: the stored active
transactions come back ``PENDING``.

:class:`TransactionCoordinator` applies the table. Time is an argument
(milliseconds on any monotonic clock) and so is the spout: ``ready`` says
whether a new batch may start and ``initialize`` gives its metadata from the
previous batch's. No threads, no I/O.

Poison batches (``statestream.retry.*``, :class:`~statestream._retry.RetryPolicy`):
a transactional batch cannot drop the tuple that fails it (a replayed
transaction must be the same batch, and commits go in txid order), so the
policy decides only *when* a failed transaction is emitted again and *when
to stop*. Each active transaction counts its consecutive failed attempts
(its own failures; not those it shares because an earlier one failed);
after its ``n``-th it is emitted again no sooner than ``policy.delay(n)``
after the failure (:func:`retry_wait_ms`), and every later transaction
waits with it, being ``PENDING`` too. Once it has failed
``max.attempts`` times the coordinator gives up (:attr:`TransactionCoordinator.given_up`)
and emits nothing more but the commits of the transactions before it
(:attr:`TransactionCoordinator.stopped` once none is under way): the runtime
stops the run, and the next run resumes after the last committed transaction. The counts are not stored: a new run
starts them at zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from .._errors import ConfigError, StateCorruptError
from .._retry import RetryPolicy

__all__ = [
    "Action",
    "Emission",
    "Event",
    "GivenUp",
    "StoredTransactions",
    "TransactionAttempt",
    "TransactionCoordinator",
    "TxPhase",
    "retry_wait_ms",
    "transition",
]


@dataclass(frozen=True, slots=True, order=True)
class TransactionAttempt:
    """Which batch a tuple belongs to: ``transaction_id`` and ``attempt_id``.

    ``transaction_id`` is 1 for the first batch and grows by one per batch;
    a replayed batch keeps it. ``attempt_id`` is new on every emission, also
    across restarts, and grows with each one, so a tuple of an older attempt
    of the same transaction is recognised and dropped. Every tuple of a
    transactional topology has the attempt as its first field.
    """

    transaction_id: int
    attempt_id: int

    def __repr__(self) -> str:
        return f"TransactionAttempt({self.transaction_id}, attempt={self.attempt_id})"


class TxPhase(StrEnum):
    """Where one active transaction stands."""

    PENDING = "PENDING"
    """To be emitted (again) with a new attempt at the next poll."""
    PROCESSING = "PROCESSING"
    """Its batch tuple is out; the tree has neither completed nor failed."""
    PROCESSED = "PROCESSED"
    """Its batch was processed everywhere; it waits for its turn to commit."""
    COMMITTING = "COMMITTING"
    """Its commit tuple is out (every earlier transaction has committed)."""
    COMMITTED = "COMMITTED"
    """Done: no longer active (only a result of :func:`transition`)."""


class Event(StrEnum):
    """What happens to one active transaction."""

    EMIT = "EMIT"
    """The coordinator is polled and it is this transaction's turn to be emitted."""
    BATCH_ACKED = "BATCH_ACKED"
    """The tree of its batch tuple completed."""
    BATCH_FAILED = "BATCH_FAILED"
    """The tree of its batch tuple failed (a bolt failed a tuple, or the acker timed it out)."""
    COMMIT_TURN = "COMMIT_TURN"
    """Every earlier transaction has committed."""
    COMMIT_ACKED = "COMMIT_ACKED"
    """The tree of its commit tuple completed: every committer has finished it."""
    COMMIT_FAILED = "COMMIT_FAILED"
    """The tree of its commit tuple failed."""
    TIMED_OUT = "TIMED_OUT"
    """Its tuple has been out longer than the timeout without a reply."""
    EARLIER_FAILED = "EARLIER_FAILED"
    """An earlier active transaction failed: this one is emitted again after it."""


class Action(StrEnum):
    """What the coordinator does on a transition."""

    NONE = "NONE"
    EMIT_BATCH = "EMIT_BATCH"
    """Emit the batch tuple with a new attempt (the metadata is stored first)."""
    EMIT_COMMIT = "EMIT_COMMIT"
    """Emit the commit tuple with the current attempt."""
    RECORD_COMMIT = "RECORD_COMMIT"
    """Store the transaction as the last committed one."""
    FAIL_LATER = "FAIL_LATER"
    """Send ``EARLIER_FAILED`` to every later active transaction."""


_P, _E, _A = TxPhase, Event, Action
_FAILURES = (_E.BATCH_FAILED, _E.COMMIT_FAILED, _E.TIMED_OUT, _E.EARLIER_FAILED)

# (phase, event) -> (next phase, action). Pairs not listed change nothing.
_TABLE: dict[tuple[TxPhase, Event], tuple[TxPhase, Action]] = {
    (_P.PENDING, _E.EMIT): (_P.PROCESSING, _A.EMIT_BATCH),
    (_P.PROCESSING, _E.BATCH_ACKED): (_P.PROCESSED, _A.NONE),
    (_P.PROCESSING, _E.BATCH_FAILED): (_P.PENDING, _A.FAIL_LATER),
    (_P.PROCESSING, _E.TIMED_OUT): (_P.PENDING, _A.FAIL_LATER),
    (_P.PROCESSING, _E.EARLIER_FAILED): (_P.PENDING, _A.NONE),
    (_P.PROCESSED, _E.COMMIT_TURN): (_P.COMMITTING, _A.EMIT_COMMIT),
    (_P.PROCESSED, _E.EARLIER_FAILED): (_P.PENDING, _A.NONE),
    (_P.COMMITTING, _E.COMMIT_ACKED): (_P.COMMITTED, _A.RECORD_COMMIT),
    (_P.COMMITTING, _E.COMMIT_FAILED): (_P.PENDING, _A.FAIL_LATER),
    (_P.COMMITTING, _E.TIMED_OUT): (_P.PENDING, _A.FAIL_LATER),
    (_P.COMMITTING, _E.EARLIER_FAILED): (_P.PENDING, _A.NONE),
}


def transition(phase: TxPhase, event: Event) -> tuple[TxPhase, Action]:
    """The table of the module docstring: ``(next phase, action)``.

    A pair the table does not list is a reply that no longer applies (an
    ack of a batch already failed, a second fail): ``(phase, NONE)``.
    ``COMMITTED`` is final.
    """
    return _TABLE.get((phase, event), (phase, _A.NONE))


def retry_wait_ms(
    policy: RetryPolicy | None, failures: int, heard_after_ms: float = 0.0
) -> float | None:
    """How long after hearing of a transaction's ``failures``-th consecutive failure
    to wait before emitting it again (ms); None: that was its last attempt, give up.

    ``heard_after_ms`` is how long after the failure itself the coordinator
    heard of it (the local runtime tells a spout of a failure once the
    policy's first delay has passed): only the rest is waited, so the
    emissions follow the policy. Without a policy: again at once, forever.
    """
    if policy is None:
        return 0.0
    if policy.gives_up(failures):
        return None
    return max(0.0, policy.delay(failures) * 1000.0 - heard_after_ms)


@dataclass(frozen=True)
class GivenUp:
    """A transaction that failed its last attempt: the run cannot go on.

    ``attempts`` is how many times in a row it failed, ``attempt`` the last
    of them and ``event`` how (``BATCH_FAILED``, ``COMMIT_FAILED``, ``TIMED_OUT``).
    """

    txid: int
    attempts: int
    attempt: TransactionAttempt
    event: Event


@dataclass(frozen=True)
class StoredTransactions:
    """The coordinator's durable state.

    ``committed`` is the last committed txid (0: none yet); ``next_attempt``
    the attempt id the next emission takes; ``metadata`` maps the committed
    txid (when there is one) and every active txid to its batch metadata.
    The active txids are exactly those above ``committed`` in ``metadata``
    and must follow it without a gap.
    """

    committed: int = 0
    next_attempt: int = 1
    metadata: Mapping[int, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        active = sorted(t for t in self.metadata if t > self.committed)
        if active != list(range(self.committed + 1, self.committed + 1 + len(active))):
            raise StateCorruptError(
                f"stored transactions are not contiguous after the committed txid "
                f"{self.committed}: active {active}"
            )

    @property
    def active(self) -> list[int]:
        """The txids begun and not committed, in order."""
        return sorted(t for t in self.metadata if t > self.committed)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (metadata keys as strings)."""
        return {
            "committed": self.committed,
            "next_attempt": self.next_attempt,
            "metadata": {str(t): m for t, m in sorted(self.metadata.items())},
        }

    @classmethod
    def from_json(cls, data: Any) -> StoredTransactions:
        """Rebuild what :meth:`to_json` wrote; :class:`StateCorruptError` if it is not that."""
        try:
            committed = data["committed"]
            next_attempt = data["next_attempt"]
            metadata = {int(t): m for t, m in data["metadata"].items()}
            if type(committed) is not int or type(next_attempt) is not int:
                raise TypeError("committed and next_attempt must be integers")
            if committed < 0 or next_attempt < 1:
                raise ValueError("committed must be >= 0 and next_attempt >= 1")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateCorruptError(
                f"stored transaction coordinator state {data!r} is not valid: {exc}; expected "
                '{"committed": 3, "next_attempt": 9, "metadata": {"3": ..., "4": ...}}'
            ) from exc
        return cls(committed, next_attempt, metadata)


class Emission(NamedTuple):
    """A tuple the coordinator sends: a batch (with its metadata) or a commit."""

    kind: str  # "batch" or "commit"
    attempt: TransactionAttempt
    metadata: Any = None
    committed: int = 0

    @property
    def msg_id(self) -> tuple[str, int, int]:
        """The message id the tuple is tracked under (JSON-ready, hashable)."""
        return (self.kind, self.attempt.transaction_id, self.attempt.attempt_id)


@dataclass
class _Active:
    phase: TxPhase
    attempt: TransactionAttempt | None = None
    sent_ms: float = 0.0
    failures: int = 0  # its own consecutive failed attempts (in this run)
    not_before_ms: float = 0.0  # not emitted again before (the retry policy's delay)


class TransactionCoordinator:
    """The coordinator's decisions, driven by polls, acks and fails.

    Call order: the spout calls :meth:`poll` from ``next_tuple`` and sends
    what it returns, each tuple tracked under :attr:`Emission.msg_id`; it
    calls :meth:`on_ack` / :meth:`on_fail` with a message id when its tree
    completes or fails.

    Guarantees:

    * At most ``max_pending`` transactions are active; a new one starts only
      when none waits to be emitted again and ``ready()`` says so.
    * Commits are emitted strictly in txid order, each only after the
      previous one was acked.
    * A failure (or a timeout: no reply within ``timeout_ms``) of ``t``
      sends every active transaction from ``t`` on back to ``PENDING``;
      they are emitted again in txid order with new attempt ids and their
      stored metadata.
    * Everything an emission depends on is passed to ``save`` before the
      emission is returned. If ``save`` raises, the exception propagates
      and the coordinator is unchanged.
    * A reply that does not match a transaction's current attempt and phase
      changes nothing and is counted in :attr:`stale_replies`.
    * With a ``retry`` policy, a transaction that failed ``n`` times in a row
      is emitted again (and every later one with it) no sooner than
      ``retry_wait_ms(retry, n, heard_after_ms)`` after :meth:`on_fail`
      (a timeout: after it is noticed, ``heard_after_ms`` not subtracted);
      once it fails its last attempt, :attr:`given_up` says so and
      :meth:`poll` sends only the commits of the transactions before it,
      until :attr:`stopped`. Without one (Spark's driver stops
      a run itself), failed transactions are emitted again at the next poll.
    """

    def __init__(
        self,
        stored: StoredTransactions | None,
        max_pending: int,
        timeout_ms: float | None,
        save: Callable[[StoredTransactions], None],
        *,
        retry: RetryPolicy | None = None,
        heard_after_ms: float = 0.0,
    ) -> None:
        if type(max_pending) is not int or max_pending < 1:
            raise ConfigError(
                f"topology.max.spout.pending must be a positive integer for a transactional "
                f"topology (the number of batches processed at once), got {max_pending!r}"
            )
        stored = stored or StoredTransactions()
        self._committed = stored.committed
        self._next_attempt = stored.next_attempt
        self._metadata: dict[int, Any] = dict(stored.metadata)
        # Every start is a recovery: whatever was active is emitted again.
        self._active: dict[int, _Active] = {t: _Active(TxPhase.PENDING) for t in stored.active}
        self._max_pending = max_pending
        self._timeout_ms = timeout_ms
        self._save = save
        self._retry = retry
        self._heard_after_ms = heard_after_ms
        self.stale_replies = 0
        #: Set once a transaction failed its last attempt (see :class:`GivenUp`).
        self.given_up: GivenUp | None = None

    # -- observation ---------------------------------------------------------------
    @property
    def committed(self) -> int:
        """The last committed txid (0: none)."""
        return self._committed

    @property
    def active(self) -> dict[int, TxPhase]:
        """Each active txid's phase, in txid order."""
        return {t: a.phase for t, a in sorted(self._active.items())}

    def attempt(self, txid: int) -> TransactionAttempt | None:
        """The current attempt of active ``txid`` (None while it waits to be emitted)."""
        a = self._active.get(txid)
        return None if a is None else a.attempt

    def stored(self) -> StoredTransactions:
        """What is (or is about to be) stored."""
        return StoredTransactions(self._committed, self._next_attempt, dict(self._metadata))

    def failures(self, txid: int) -> int:
        """How many times in a row active ``txid`` failed (0: none, or not active)."""
        a = self._active.get(txid)
        return 0 if a is None else a.failures

    @property
    def retry_at_ms(self) -> float | None:
        """When the transactions waiting to be emitted again may go (None: none waits)."""
        waits = [a.not_before_ms for a in self._active.values() if a.phase is TxPhase.PENDING]
        return max(waits) if waits else None

    @property
    def stopped(self) -> bool:
        """A transaction was given up on (:attr:`given_up`) and every one before it
        has committed or failed too: nothing more will move."""
        g = self.given_up
        return g is not None and all(
            a.phase is TxPhase.PENDING for t, a in self._active.items() if t < g.txid
        )

    def exhausted(self, ready: Callable[[], bool]) -> bool:
        """Nothing is active and the spout has no batch ready."""
        return not self._active and not ready()

    # -- driving -------------------------------------------------------------------
    def poll(
        self,
        now_ms: float,
        *,
        ready: Callable[[], bool],
        initialize: Callable[[int, Any], Any],
    ) -> list[Emission]:
        """The tuples to send now, in order.

        In turn: transactions out longer than ``timeout_ms`` time out; the
        next commit goes out if its batch is processed; every ``PENDING``
        transaction is emitted again; and if none was, and fewer than
        ``max_pending`` are active, one new transaction starts when
        ``ready()``, with ``initialize(txid, previous metadata)`` as its
        metadata (``None`` before the first). ``PENDING`` transactions wait
        for :attr:`retry_at_ms` (and no new one starts meanwhile); once
        :attr:`given_up` is set, only the commits of the transactions before
        it go out (:attr:`stopped` says when none is left under way).
        """
        out: list[Emission] = []
        self._expire(now_ms)
        given_up = self.given_up
        nxt = self._active.get(self._committed + 1)
        if nxt is not None and (given_up is None or self._committed + 1 < given_up.txid):
            phase, action = transition(nxt.phase, Event.COMMIT_TURN)
            if action is Action.EMIT_COMMIT:
                nxt.phase = phase
                nxt.sent_ms = now_ms
                assert nxt.attempt is not None
                out.append(Emission("commit", nxt.attempt, None, self._committed))
        if given_up is not None:
            return out  # only the commits of the transactions before it go out
        pending = [t for t, a in sorted(self._active.items()) if a.phase is TxPhase.PENDING]
        if pending:
            if max(self._active[t].not_before_ms for t in pending) <= now_ms:
                out.extend(self._emit(pending, now_ms, {}))
            return out
        if len(self._active) < self._max_pending and ready():
            txid = max(self._active, default=self._committed) + 1
            meta = initialize(txid, self._metadata.get(txid - 1))
            self._active[txid] = _Active(TxPhase.PENDING)
            try:
                out.extend(self._emit([txid], now_ms, {txid: meta}))
            except BaseException:
                del self._active[txid]
                raise
        return out

    def _emit(self, txids: list[int], now_ms: float, new_meta: dict[int, Any]) -> list[Emission]:
        attempt_id = self._next_attempt
        metadata = {**self._metadata, **new_meta}
        self._save(StoredTransactions(self._committed, attempt_id + len(txids), metadata))
        self._metadata = metadata
        self._next_attempt = attempt_id + len(txids)
        out = []
        for i, txid in enumerate(txids):
            a = self._active[txid]
            a.phase, _ = transition(a.phase, Event.EMIT)
            a.attempt = TransactionAttempt(txid, attempt_id + i)
            a.sent_ms = now_ms
            out.append(Emission("batch", a.attempt, metadata[txid], self._committed))
        return out

    def _expire(self, now_ms: float) -> None:
        if self._timeout_ms is None:
            return
        for txid, a in sorted(self._active.items()):
            out = a.phase in (TxPhase.PROCESSING, TxPhase.COMMITTING)
            if out and now_ms - a.sent_ms >= self._timeout_ms:
                self._apply(txid, a, Event.TIMED_OUT, now_ms, 0.0)
                return  # every later one is PENDING now

    def _apply(
        self,
        txid: int,
        a: _Active,
        event: Event,
        now_ms: float = 0.0,
        heard_after_ms: float = 0.0,
    ) -> bool:
        phase, action = transition(a.phase, event)
        if phase is a.phase and action is Action.NONE:
            self.stale_replies += 1
            return False
        if action is Action.RECORD_COMMIT:
            metadata = {t: m for t, m in self._metadata.items() if t >= txid}
            self._save(StoredTransactions(txid, self._next_attempt, metadata))
            self._metadata = metadata
            self._committed = txid
            del self._active[txid]
            return True
        if action is Action.FAIL_LATER:  # its own failure: one more attempt failed
            a.failures += 1
            wait = retry_wait_ms(self._retry, a.failures, heard_after_ms)
            if wait is None:
                assert a.attempt is not None
                self.given_up = GivenUp(txid, a.failures, a.attempt, event)
            else:
                a.not_before_ms = now_ms + wait
        a.phase = phase
        if phase is TxPhase.PENDING:
            a.attempt = None
        if action is Action.FAIL_LATER:
            for later, b in self._active.items():
                if later > txid:
                    b.phase, _ = transition(b.phase, Event.EARLIER_FAILED)
                    if b.phase is TxPhase.PENDING:
                        b.attempt = None
        return True

    def _current(self, msg_id: Any) -> tuple[str, int, _Active] | None:
        try:
            kind, txid, attempt_id = msg_id
        except (TypeError, ValueError):
            self.stale_replies += 1
            return None
        a = self._active.get(txid)
        if a is None or a.attempt is None or a.attempt.attempt_id != attempt_id:
            self.stale_replies += 1
            return None
        return kind, txid, a

    def on_ack(self, msg_id: Any) -> None:
        """The tree of ``msg_id`` (an :attr:`Emission.msg_id`) completed."""
        found = self._current(msg_id)
        if found is not None:
            kind, txid, a = found
            self._apply(txid, a, Event.BATCH_ACKED if kind == "batch" else Event.COMMIT_ACKED)

    def on_fail(self, msg_id: Any, now_ms: float = 0.0) -> None:
        """The tree of ``msg_id`` failed or timed out in the acker; we hear of it at
        ``now_ms`` (``heard_after_ms`` after the failure)."""
        found = self._current(msg_id)
        if found is not None:
            kind, txid, a = found
            event = Event.BATCH_FAILED if kind == "batch" else Event.COMMIT_FAILED
            self._apply(txid, a, event, now_ms, self._heard_after_ms)

    def __repr__(self) -> str:
        active = ", ".join(f"{t}:{p.value}" for t, p in self.active.items())
        return f"TransactionCoordinator(committed={self._committed}, active={{{active}}})"
