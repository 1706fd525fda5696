"""The checkpoint protocol, as pure code: the spout's state machine and the bolt's barrier.

The checkpoint spout (one task, ``$checkpointspout``) drives a three-phase
commit across every stateful bolt. Its durable state is a
:class:`CheckpointState` ``(txid, phase)`` kept in namespace
``$checkpointspout-0``. From the stored state and whether it is
recovering, :func:`next_state` gives the action to broadcast and the state
that holds once every bolt has acked that action::

    stored           normal: next / emits           recovering: next / emits
    PREPARING(t)     COMMITTING(t)  / PREPARE  t    COMMITTED(t-1) / ROLLBACK  t
    COMMITTING(t)    COMMITTED(t)   / COMMIT   t    COMMITTED(t)   / COMMIT    t
    COMMITTED(t)     PREPARING(t+1) / PREPARE  t+1  COMMITTED(t)   / INITSTATE t

Normal cycle::

    COMMITTED(t) --interval--> save PREPARING(t+1), emit PREPARE(t+1)
                 --acked-----> save COMMITTING(t+1), emit COMMIT(t+1)
                 --acked-----> save COMMITTED(t+1)

Every start is a recovery. A fresh store reads as ``COMMITTED(-1)``, so the
first emission ever is ``INITSTATE(-1)``. Recovery rolls back a prepare that
may not have reached every bolt, finishes a commit that had been decided,
and ends with ``INITSTATE``, which lets the bolts start processing.

:class:`CheckpointCoordinator` is the spout's logic with time as an argument;
the runtime's spout task wraps it, persists what it passes to ``save`` and
sends what ``poll`` returns. :class:`Barrier` is the bolt side: it says when a
checkpoint tuple has arrived from every upstream task.

Pure: no threads, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from statestream._errors import ConfigError, ProtocolViolation, StateCorruptError

__all__ = [
    "Action",
    "Barrier",
    "CheckpointCoordinator",
    "CheckpointState",
    "Emission",
    "Phase",
    "emission",
    "next_state",
]


class Phase(StrEnum):
    """Where the last transaction stands, as stored by the checkpoint spout."""

    COMMITTED = "COMMITTED"
    """Transaction ``txid`` is committed everywhere (``-1``: nothing ever was)."""
    PREPARING = "PREPARING"
    """``PREPARE(txid)`` was sent; some bolts may not have prepared."""
    COMMITTING = "COMMITTING"
    """Every bolt prepared ``txid``; the commit is decided and must be finished."""


class Action(StrEnum):
    """What a checkpoint tuple asks every bolt to do."""

    PREPARE = "PREPARE"
    """Prepare (stage) the state changes since the last commit as ``txid``."""
    COMMIT = "COMMIT"
    """Commit the prepared ``txid``; idempotent, recovery may send it twice."""
    ROLLBACK = "ROLLBACK"
    """Drop anything prepared and return to the last committed state."""
    INITSTATE = "INITSTATE"
    """Load the committed state and start processing data tuples."""


@dataclass(frozen=True, slots=True)
class CheckpointState:
    """The checkpoint spout's durable ``(txid, phase)``.

    ``txid`` is ``-1`` only in phase ``COMMITTED`` (nothing committed yet);
    a transaction being prepared or committed has ``txid >= 0``.
    """

    txid: int
    phase: Phase

    def __post_init__(self) -> None:
        if not isinstance(self.phase, Phase):
            raise TypeError(f"CheckpointState.phase must be a Phase, got {self.phase!r}")
        if type(self.txid) is not int:  # bool is an int subclass and is not a txid
            raise TypeError(f"CheckpointState.txid must be an int, got {self.txid!r}")
        lowest = -1 if self.phase is Phase.COMMITTED else 0
        if self.txid < lowest:
            raise ValueError(
                f"CheckpointState({self.txid}, {self.phase.value}): txid must be >= {lowest} "
                f"in phase {self.phase.value}"
            )

    @classmethod
    def initial(cls) -> CheckpointState:
        """The state of a store that has never been written: ``COMMITTED(-1)``."""
        return cls(-1, Phase.COMMITTED)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, e.g. ``{"txid": 4, "phase": "COMMITTED"}``."""
        return {"txid": self.txid, "phase": self.phase.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckpointState:
        """Rebuild a state written by :meth:`to_json`.

        Raises :class:`StateCorruptError` (never returns a default) if the
        stored value is not a valid state: a corrupt spout state must stop
        the topology rather than silently restart from ``COMMITTED(-1)``.
        """
        try:
            txid = data["txid"]
            phase = Phase(data["phase"])
            return cls(txid, phase)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateCorruptError(
                f"stored checkpoint state {data!r} is not valid: {exc}; expected e.g. "
                '{"txid": 4, "phase": "COMMITTED"} (phases: '
                + ", ".join(p.value for p in Phase)
                + ")"
            ) from exc

    def __str__(self) -> str:
        return f"{self.phase.value}({self.txid})"


class Emission(NamedTuple):
    """A checkpoint tuple to broadcast on ``$checkpoint``: ``action`` for ``txid``."""

    action: Action
    txid: int


# The table of the module docstring: (phase, recovering) -> (txid delta of the
# next state, next phase, action, txid delta of the emission).
_TABLE: dict[tuple[Phase, bool], tuple[int, Phase, Action, int]] = {
    (Phase.PREPARING, False): (0, Phase.COMMITTING, Action.PREPARE, 0),
    (Phase.PREPARING, True): (-1, Phase.COMMITTED, Action.ROLLBACK, 0),
    (Phase.COMMITTING, False): (0, Phase.COMMITTED, Action.COMMIT, 0),
    (Phase.COMMITTING, True): (0, Phase.COMMITTED, Action.COMMIT, 0),
    (Phase.COMMITTED, False): (1, Phase.PREPARING, Action.PREPARE, 1),
    (Phase.COMMITTED, True): (0, Phase.COMMITTED, Action.INITSTATE, 0),
}


def next_state(state: CheckpointState, recovering: bool) -> tuple[CheckpointState, Action]:
    """Apply the table of the module docstring to ``state``.

    Returns ``(next, action)``. For ``COMMITTED`` when not recovering,
    ``next`` (``PREPARING(t+1)``) is saved *before* the ``PREPARE`` is sent;
    in every other row ``action`` is sent from ``state`` and ``next`` is
    saved once the action is acked. :func:`emission` gives the txid the
    action carries. ``COMMITTED(t)`` recovering maps to itself: the
    ``INITSTATE`` ack ends the recovery without a new state.
    """
    delta, phase, action, _ = _TABLE[state.phase, recovering]
    nxt = (
        state
        if (delta == 0 and phase is state.phase)
        else CheckpointState(state.txid + delta, phase)
    )
    return nxt, action


def emission(state: CheckpointState, recovering: bool) -> Emission:
    """The checkpoint tuple the spout sends for ``state``: the action of
    :func:`next_state` with its txid (``t + 1`` for ``PREPARE`` out of
    ``COMMITTED(t)``, ``t`` in every other row)."""
    _, _, action, delta = _TABLE[state.phase, recovering]
    return Emission(action, state.txid + delta)


class CheckpointCoordinator:
    """The checkpoint spout's decisions, driven by polls, acks and fails.

    Call order: the spout task calls :meth:`poll` from its ``next_tuple``
    with the current time in milliseconds (any monotonic origin), sends the
    returned :class:`Emission` as a tracked tuple, and calls :meth:`on_ack`
    or :meth:`on_fail` with that emission's ``(action, txid)`` when the tuple
    tree completes, fails or times out.

    Guarantees:

    * At most one emission is in flight (:attr:`pending`); ``poll`` returns
      ``None`` until it is acked or failed.
    * Every state change is passed to ``save`` before the emission it
      leads to is returned. If ``save`` raises, the exception propagates and
      the coordinator is unchanged, so the call can be retried.
    * Every start is a recovery: recovery actions are emitted at once, the
      next after each ack, and ``INITSTATE`` ends the recovery.
    * In normal operation ``PREPARE(t+1)`` is emitted once ``interval_ms``
      have passed since the last cycle completed or the recovery ended (so
      a slow commit never makes checkpoints back-to-back; Storm instead
      measures from the start of the previous prepare). Its ack leads at once
      to ``COMMIT(t+1)``, whose ack completes the cycle.
    * Any fail starts a recovery, as in Storm: a failed ``PREPARE(t)`` leads
      to ``ROLLBACK(t)``; a failed ``COMMIT(t)`` is re-sent, followed by
      ``INITSTATE(t)`` for bolts that restarted; a failed ``ROLLBACK`` or
      ``INITSTATE`` is re-sent.
    * An ack or fail that does not match the emission in flight (a stale
      or duplicate reply) changes nothing and is counted in
      :attr:`stale_replies`.
    """

    __slots__ = (
        "_completed_ms",
        "_interval_ms",
        "_pending",
        "_recovering",
        "_save",
        "_state",
        "stale_replies",
    )

    def __init__(
        self,
        stored: CheckpointState | None,
        interval_ms: int,
        save: Callable[[CheckpointState], None],
    ) -> None:
        """``stored`` is the state read from the store (``None`` for a fresh store).

        ``interval_ms`` is ``topology.state.checkpoint.interval.ms``; ``save``
        must durably store the state it is given before returning.
        """
        if (
            isinstance(interval_ms, bool)
            or not isinstance(interval_ms, (int, float))
            or interval_ms < 0
        ):
            raise ConfigError(
                f"topology.state.checkpoint.interval.ms must be a number >= 0, got {interval_ms!r}"
            )
        self._state = CheckpointState.initial() if stored is None else stored
        self._interval_ms = interval_ms
        self._save = save
        self._recovering = True
        self._pending: Emission | None = None
        # When the last cycle completed (or the recovery ended). None: it just
        # did and the time is not known yet; the next poll supplies it.
        self._completed_ms: float | None = None
        self.stale_replies: int = 0

    @property
    def state(self) -> CheckpointState:
        """The last state passed to ``save`` (or the stored one, before any)."""
        return self._state

    @property
    def recovering(self) -> bool:
        """True from the start until ``INITSTATE`` is acked, and again after any fail."""
        return self._recovering

    @property
    def pending(self) -> Emission | None:
        """The emission in flight, if any."""
        return self._pending

    def poll(self, now_ms: float, *, early: bool = False) -> Emission | None:
        """Return the checkpoint tuple to emit now, or ``None``.

        ``now_ms`` must not go backwards between calls. ``early`` starts the
        next checkpoint without waiting for the interval (a runtime asks for
        this when everything in flight is only waiting for a commit).
        """
        if self._pending is not None:
            return None
        state = self._state
        if self._recovering:
            self._pending = emission(state, True)
            return self._pending
        if state.phase is Phase.COMMITTED:
            if self._completed_ms is None:
                self._completed_ms = now_ms
            if now_ms - self._completed_ms < self._interval_ms and not early:
                return None
            # Save PREPARING(t+1) first: after a crash, recovery must know a
            # prepare may have reached some bolts, and roll it back.
            nxt, _ = next_state(state, False)
            self._save(nxt)
            self._state = nxt
        # PREPARING or COMMITTING: send its action at once (the COMMIT that
        # follows an acked PREPARE does not wait for the interval).
        self._pending = emission(self._state, False)
        return self._pending

    def prepare_due(self, now_ms: float, *, early: bool = False) -> bool:
        """Would :meth:`poll` start ``PREPARE(t+1)`` now?

        Asked by a runtime that must first bring its sources to a standstill
        (exactly-once state): it stops the data spouts, lets what is queued
        drain, and only then polls. Like ``poll``, the first call after a
        completed cycle supplies the time it completed.
        """
        if self._pending is not None or self._recovering:
            return False
        if self._state.phase is not Phase.COMMITTED:
            return False
        if self._completed_ms is None:
            self._completed_ms = now_ms
        return early or now_ms - self._completed_ms >= self._interval_ms

    def on_ack(self, action: Action, txid: int, now_ms: float | None = None) -> None:
        """Every bolt acked the emission ``(action, txid)``.

        ``now_ms``, if given, is when; it times the next ``PREPARE`` when this
        ack completes a cycle or a recovery. Without it the next
        :meth:`poll` supplies the time.
        """
        if not self._matches(action, txid):
            return
        state = self._state
        nxt, _ = next_state(state, self._recovering)
        if nxt != state:
            self._save(nxt)  # may raise: nothing has changed yet
            self._state = nxt
        elif self._recovering:
            # INITSTATE acked: COMMITTED(t) maps to itself, recovery is over.
            self._recovering = False
        self._pending = None
        if not self._recovering and nxt.phase is Phase.COMMITTED:
            self._completed_ms = now_ms

    def on_fail(self, action: Action, txid: int) -> None:
        """The emission ``(action, txid)`` failed or timed out somewhere: recover.

        Nothing is saved: the stored phase already says what recovery must
        do (``ROLLBACK`` for a prepare, ``COMMIT`` for a decided commit).
        """
        if not self._matches(action, txid):
            return
        self._recovering = True
        self._pending = None

    def _matches(self, action: Action, txid: int) -> bool:
        pending = self._pending
        if pending is None or pending.action != action or pending.txid != txid:
            self.stale_replies += 1
            return False
        return True

    def __repr__(self) -> str:
        return (
            f"CheckpointCoordinator(state={self._state}, recovering={self._recovering}, "
            f"pending={self._pending})"
        )


Source = tuple[str, int]
"""An upstream task: ``(component id, task index)``."""


class Barrier:
    """For one bolt task: has every upstream task delivered checkpoint ``(action, txid)``?

    A checkpoint tuple reaches a bolt once from each upstream task (the
    all grouping on ``$checkpoint``). The bolt must act on it only when it
    has it from all of them, so that its state covers the same prefix of
    every input. :meth:`arrive` returns ``True`` exactly once per complete
    round, on the arrival that completes it; the barrier then starts empty,
    so a re-sent checkpoint (a failed ``COMMIT`` is re-sent with the same
    txid) forms a new round.

    **A newer (action, txid) supersedes an incomplete round.** The
    checkpoint spout has at most one checkpoint in flight and sends another
    only after the previous one was acked (so its round completed here) or
    failed/timed out. A round still incomplete when a different checkpoint
    arrives therefore belongs to a checkpoint the spout has given up on: it
    is stale and must never fire, because acting on it later would, for
    instance, prepare a transaction that recovery has already rolled back.

    The barrier keeps, per source, the last checkpoint that source delivered,
    and a round for ``(action, txid)`` is complete when every source's last
    delivery is that checkpoint. This assumes what the runtimes guarantee:
    tuples from one upstream task arrive in the order they were sent. Under
    that assumption it is the brief's "a new checkpoint resets the round"
    rule, made robust to one more case: a straggler of the stale round
    (from a slow upstream task) arriving after the new round began only
    replaces that source's own older delivery; it does not wipe out what
    the other sources already delivered for the new round, which would
    stall the new round until it timed out and was re-sent.
    """

    __slots__ = ("_count", "_current", "_latest", "_upstream")

    def __init__(self, upstream: frozenset[Source]) -> None:
        if not upstream:
            raise ValueError(
                "Barrier needs at least one upstream (component, task); a bolt receives "
                "checkpoint tuples from the checkpoint spout or from its upstream bolts"
            )
        self._upstream = frozenset(upstream)
        # Per source, the last checkpoint it delivered since the last firing.
        self._latest: dict[Source, Emission] = {}
        # The checkpoint of the most recent arrival, and how many sources'
        # last delivery it is (kept incrementally: arrive() is O(1) unless
        # the checkpoint changes).
        self._current: Emission | None = None
        self._count = 0

    @property
    def upstream(self) -> frozenset[Source]:
        """The sources a round must hear from."""
        return self._upstream

    @property
    def current(self) -> Emission | None:
        """The ``(action, txid)`` of the incomplete round, if one is open."""
        return self._current

    @property
    def arrived(self) -> frozenset[Source]:
        """The sources whose last delivery is the current round's checkpoint."""
        current = self._current
        return frozenset(src for src, key in self._latest.items() if key == current)

    def arrive(self, source: Source, action: Action, txid: int) -> bool:
        """Record that ``source`` delivered ``(action, txid)``; True if that completes the round.

        A source delivering the same checkpoint twice in one round counts
        once. Raises :class:`ProtocolViolation` for a source that is not
        upstream (a wiring bug that would otherwise stall or break the
        barrier).
        """
        if source not in self._upstream:
            known = ", ".join(f"{c}[{t}]" for c, t in sorted(self._upstream))
            raise ProtocolViolation(
                f"checkpoint {Action(action).value}({txid}) from {source[0]}[{source[1]}], "
                f"which is not upstream of this task (upstream: {known})"
            )
        key = Emission(action, txid)
        previous = self._latest.get(source)
        self._latest[source] = key
        if key != self._current:
            self._current = key
            self._count = sum(1 for k in self._latest.values() if k == key)
        elif previous != key:
            self._count += 1
        if self._count < len(self._upstream):
            return False
        self.reset()
        return True

    def reset(self) -> None:
        """Forget every delivery not yet part of a complete round (e.g. when the task restarts)."""
        self._latest.clear()
        self._current = None
        self._count = 0

    def __repr__(self) -> str:
        return f"Barrier(current={self._current}, arrived={self._count}/{len(self._upstream)})"
