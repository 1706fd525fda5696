"""The checkpoint driver: the coordinator over its stored record, for every runtime.

:class:`~statestream._checkpoint.CheckpointCoordinator` decides which
checkpoint action comes next; :class:`CheckpointDriver` adds what every
runtime does around it, once: it loads the
:class:`~statestream._exactly_once.CheckpointRecord` (phase and spout
positions, namespace ``$checkpointspout-0``), stores the record moved to
each new phase before the action that follows it goes out, and stores with
``PREPARING(t)`` the data spouts' positions at the cut of ``t`` (exactly-once)
or their acked positions (at-least-once; these also with the txid a recovery
restores, at every phase stored, so that those of ``t`` are taken again once
the commit of ``t`` released the acks it held).

Two sides, one record:

* **asynchronous**, for a runtime that moves checkpoints as tuples (the
  local runtime's ``$checkpointspout``): :meth:`poll` /
  :meth:`poll_prepare` give the tuple to emit, :meth:`on_ack` /
  :meth:`on_fail` take the answer when its tree completes or fails;
* **synchronous**, for a runtime whose unit of replay is a batch (the Spark
  driver), where the runtime itself carries out each action on every
  stateful namespace::

      recover(act)            stored PREPARING(t):  act(ROLLBACK t), save COMMITTED(t-1),
                                                    act(INITSTATE t-1)
                              stored COMMITTING(t): act(COMMIT t), save COMMITTED(t),
                                                    act(INITSTATE t)
                              stored COMMITTED(t):  act(INITSTATE t)
      t = prepare(positions)  save PREPARING(t) with positions (the job then prepares t)
      commit(t, act)          save COMMITTING(t), act(COMMIT t), save COMMITTED(t)
      abort(t)                nothing saved (PREPARING(t) says it); recover(act) rolls back

If a save raises, nothing is acted on and the call can be repeated; if an
action raises, the stored phase is where the next start recovers from.

Pure: no threads, no I/O beyond the state object it is given; time is an
argument (a callable giving milliseconds on any monotonic origin).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._checkpoint import Action, CheckpointCoordinator, CheckpointState, Emission, Phase
from ._errors import RuntimeFailure
from ._exactly_once import CheckpointRecord

if TYPE_CHECKING:
    from ._state import KeyValueState

__all__ = ["CheckpointDriver"]


class CheckpointDriver:
    """The checkpoint coordinator and its stored record (see the module docstring).

    ``state`` gives the key-value state of the record's namespace each time
    a record is stored (a runtime may reopen its store within a run);
    ``interval_ms`` is ``topology.state.checkpoint.interval.ms``; ``now_ms``
    is the runtime's clock in milliseconds. ``record`` is the record as
    loaded, if the caller loaded it (else it is loaded from ``state()``).
    """

    __slots__ = ("_now_ms", "_positions", "_state", "acked_positions", "coordinator", "record")

    def __init__(
        self,
        state: Callable[[], KeyValueState],
        interval_ms: int,
        now_ms: Callable[[], float],
        record: CheckpointRecord | None = None,
    ) -> None:
        self._state = state
        self._now_ms = now_ms
        #: The record as last stored (or loaded).
        self.record = CheckpointRecord.load(state()) if record is None else record
        self.coordinator = CheckpointCoordinator(self.record.state, interval_ms, self._save)
        #: At-least-once: the data spouts' acked positions (namespace -> position),
        #: stored with a ``PREPARING(t)`` that has no cut. Set by the runtime.
        self.acked_positions: Callable[[], Mapping[str, Any]] | None = None
        self._positions: Mapping[str, Any] | None = None

    def _save(self, cs: CheckpointState) -> None:
        """The coordinator's ``save``: store the record moved to ``cs``."""
        preparing = cs.phase is Phase.PREPARING
        positions = self._positions if preparing else None
        acked = None
        if positions is None and self.acked_positions is not None:
            # Every message below these was acked, so its effects are in a
            # checkpoint committed before: safe to resume from at t.
            acked = self.acked_positions()
        record = self.record.advance(cs, positions, acked if preparing else None)
        if acked is not None:
            # And with the txid a recovery from this record restores: the acks
            # a commit releases are heard after it, so those stored with
            # PREPARING(t) lag one checkpoint; refreshed at every save, a run
            # stopped after COMMITTED(t) resumes where the commit of t acked.
            record = record.with_acked(acked)
        record.save(self._state())
        self.record = record

    # -- what is stored ---------------------------------------------------------------
    @property
    def state(self) -> CheckpointState:
        """The phase last stored (or loaded)."""
        return self.coordinator.state

    @property
    def committed_txid(self) -> int:
        """The last txid committed everywhere (as stored)."""
        cs = self.record.state
        return cs.txid if cs.phase is Phase.COMMITTED else cs.txid - 1

    @property
    def recovering(self) -> bool:
        return self.coordinator.recovering

    @property
    def pending(self) -> Emission | None:
        """The action in flight, if any."""
        return self.coordinator.pending

    def restore_point(self) -> tuple[int, Mapping[str, Any] | None]:
        """``(txid, positions)`` that recovery restores: the data spouts seek there."""
        return self.record.restore_point()

    def store_acked(self) -> None:
        """At-least-once, at the clean end of a run: store the acked positions now
        (:meth:`CheckpointRecord.with_acked`), so that a rerun after a finished
        input reads nothing; a crash keeps those of the last prepare."""
        if self.acked_positions is None:
            return
        record = self.record.with_acked(self.acked_positions())
        if record is not self.record:
            record.save(self._state())
            self.record = record

    # -- the asynchronous side: checkpoints as tuples ---------------------------------
    def now_ms(self) -> float:
        """The runtime's clock, in milliseconds."""
        return self._now_ms()

    def poll(self, *, early: bool = False, now_ms: float | None = None) -> Emission | None:
        """The checkpoint tuple to emit now, if any (``CheckpointCoordinator.poll``).

        ``now_ms`` (default: the clock now) lets a caller ask :meth:`prepare_due`
        and poll at one instant, so that a PREPARE cannot fall due in between.
        """
        return self.coordinator.poll(self._now_ms() if now_ms is None else now_ms, early=early)

    def prepare_due(self, *, early: bool = False, now_ms: float | None = None) -> bool:
        """Would :meth:`poll` start ``PREPARE(t+1)`` now?"""
        return self.coordinator.prepare_due(
            self._now_ms() if now_ms is None else now_ms, early=early
        )

    def poll_prepare(
        self,
        positions: Mapping[str, Any] | None,
        *,
        early: bool = False,
        now_ms: float | None = None,
    ) -> Emission | None:
        """:meth:`poll`, storing ``positions`` (the cut) with a ``PREPARING(t)`` it starts."""
        self._positions = positions
        try:
            return self.poll(early=early, now_ms=now_ms)
        finally:
            self._positions = None

    def on_ack(self, action: Action, txid: int) -> None:
        """Every bolt acked ``(action, txid)``: store the next phase (may raise)."""
        self.coordinator.on_ack(action, txid, self._now_ms())

    def on_fail(self, action: Action, txid: int) -> None:
        """``(action, txid)`` failed somewhere: recover from the stored phase."""
        self.coordinator.on_fail(action, txid)

    # -- the synchronous side: the runtime acts on every namespace ----------------------
    def recover(self, act: Callable[[Emission], None]) -> bool:
        """Run the recovery to its end, calling ``act`` for each action in turn.

        True if it rolled back or committed (a stored transaction was acted on).
        """
        acted = False
        while self.coordinator.recovering:
            emission = self.poll()
            if emission is None:
                raise RuntimeFailure(f"the checkpoint coordinator is stuck: {self.coordinator!r}")
            act(emission)
            acted = acted or emission.action is not Action.INITSTATE
            self.on_ack(emission.action, emission.txid)
        return acted

    def prepare(self, positions: Mapping[str, Any] | None) -> int:
        """Start the next transaction: ``PREPARING(t)`` stored with ``positions``; ``t``.

        The runtime then has every stateful task prepare ``t``, and calls
        :meth:`commit` once all did, or :meth:`abort`.
        """
        emission = self.poll_prepare(positions, early=True)
        if emission is None or emission.action is not Action.PREPARE:
            raise RuntimeFailure(
                f"the checkpoint coordinator gave {emission} where a PREPARE was due "
                f"({self.coordinator!r})"
            )
        return emission.txid

    def commit(self, txid: int, act: Callable[[Emission], None]) -> None:
        """Every task prepared ``txid``: store ``COMMITTING``, ``act(COMMIT)``, store
        ``COMMITTED``."""
        if self.coordinator.pending != Emission(Action.PREPARE, txid):
            raise RuntimeFailure(
                f"COMMIT({txid}) asked for, but {self.coordinator.pending} is in flight "
                f"({self.coordinator!r})"
            )
        self.on_ack(Action.PREPARE, txid)  # stores COMMITTING(txid)
        emission = self.poll()
        if emission != Emission(Action.COMMIT, txid):
            raise RuntimeFailure(
                f"the checkpoint coordinator gave {emission} where COMMIT({txid}) was due"
            )
        act(emission)
        self.on_ack(Action.COMMIT, txid)  # stores COMMITTED(txid)

    def abort(self, txid: int) -> None:
        """The transaction ``txid`` failed: :meth:`recover` rolls it back next."""
        self.on_fail(Action.PREPARE, txid)

    def __repr__(self) -> str:
        return f"CheckpointDriver({self.coordinator!r}, record={self.record.state})"
