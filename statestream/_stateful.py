"""The bolt side of checkpointing, shared by every runtime.

* :func:`apply_action` is what a stateful task does for one checkpoint
  action: call the user's hook, then act on its state.
* :class:`HeldAcks` holds a stateful task's acks until the checkpoint that
  covers them commits (then they are released to the acker) or rolls back
  (then their roots are failed and replayed). It holds XOR sums per root, not
  tuples, so its size is bounded by the spout tuples in flight, not by the
  tuples processed.
* :class:`CheckpointSpout` is the system spout ``$checkpointspout`` for
  runtimes that move checkpoints as tuples (the local runtime): it wraps the
  pure :class:`~statestream._checkpoint.CheckpointCoordinator` and stores its
  phase in the state provider before each emission.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._checkpoint import Action, CheckpointCoordinator, CheckpointState, Phase, next_state
from ._components import (
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyContext,
)
from ._errors import ProtocolViolation, StateError
from ._tuple import Fields

if TYPE_CHECKING:
    from ._state import KeyValueState

__all__ = [
    "CHECKPOINT_FIELDS",
    "CHECKPOINT_SPOUT",
    "CHECKPOINT_STREAM",
    "CheckpointSpout",
    "HeldAcks",
    "StatefulTaskProtocol",
    "apply_action",
]

CHECKPOINT_SPOUT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_FIELDS = Fields("txid", "action")
CHECKPOINT_STATE_KEY = "checkpoint"
POSITIONS_KEY = "positions"


def apply_action(
    bolt: StatefulBolt, state: KeyValueState, action: Action, txid: int, initialized: bool
) -> None:
    """Carry out one checkpoint action on a stateful task: hook first, then the state.

    ``initialized`` says whether ``init_state`` has run since the last
    rollback; a PREPARE before that is refused (the checkpoint fails, and the
    coordinator recovers with ROLLBACK then INITSTATE).
    """
    if action is Action.PREPARE:
        if not initialized:
            raise ProtocolViolation(
                f"PREPARE({txid}) reached a task before INITSTATE; failing the checkpoint"
            )
        bolt.pre_prepare(txid)
        state.prepare_commit(txid)
    elif action is Action.COMMIT:
        bolt.pre_commit(txid)
        if state.prepared_txid is None and txid > state.committed_txid:
            # This state took no part in PREPARE(txid): it joined the topology
            # (or was reset) after it. Nothing of txid is owed here, but the
            # state must move to txid, or the next PREPARE would be refused
            # and the checkpoint retried forever.
            state.prepare_commit(txid)
        state.commit(txid)
    elif action is Action.ROLLBACK:
        bolt.pre_rollback()
        state.rollback()
    elif action is Action.INITSTATE:
        bolt.init_state(state)
    else:  # pragma: no cover - Action is closed
        raise ProtocolViolation(f"unknown checkpoint action {action!r}")


class HeldAcks:
    """Acks a stateful task made, held until a commit covers them.

    ``hold`` adds acks (root -> XOR value) made since the last prepare;
    ``prepare(t)`` marks them as covered by ``t``; ``commit(t)`` returns every
    ack covered by ``t`` or earlier, to send to the acker; ``rollback()``
    returns every held root, to fail.
    """

    def __init__(self) -> None:
        self.current: dict[int, int] = {}
        self.covered: dict[int, dict[int, int]] = {}

    def hold(self, acks: Mapping[int, int]) -> None:
        current = self.current
        for root, value in acks.items():
            current[root] = current.get(root, 0) ^ value

    def prepare(self, txid: int) -> None:
        if self.current:
            into = self.covered.get(txid)
            if into is None:
                # The usual case, a first prepare of txid: hand the dict over
                # instead of copying it root by root.
                self.covered[txid] = self.current
            else:  # txid prepared again (its first prepare failed): merge
                for root, value in self.current.items():
                    into[root] = into.get(root, 0) ^ value
            self.current = {}

    def commit(self, txid: int) -> dict[int, int]:
        done = [t for t in self.covered if t <= txid]
        if len(done) == 1:
            return self.covered.pop(done[0])  # the usual case: one txid covered
        released: dict[int, int] = {}
        for t in done:
            for root, value in self.covered.pop(t).items():
                released[root] = released.get(root, 0) ^ value
        return released

    def rollback(self) -> set[int]:
        roots = set(self.current)
        for acks in self.covered.values():
            roots.update(acks)
        self.current = {}
        self.covered = {}
        return roots

    def __len__(self) -> int:
        return len(self.current) + sum(len(a) for a in self.covered.values())


class StatefulTaskProtocol:
    """One stateful task's side of the checkpoint protocol, for runtimes that ack per tuple.

    ``hold`` takes the task's acks; ``act`` carries out a checkpoint action
    (hook, then state) and returns what the runtime must deliver: the acks a
    COMMIT releases, and the roots a ROLLBACK fails so their tuples are
    replayed. ``ready`` says whether data tuples may be executed: false until
    INITSTATE, and again after a ROLLBACK until the next INITSTATE.
    """

    def __init__(self, bolt: StatefulBolt) -> None:
        self.bolt = bolt
        self.held = HeldAcks()
        self.ready = False

    def hold(self, acks: Mapping[int, int]) -> None:
        self.held.hold(acks)

    def act(
        self, state: KeyValueState, action: Action, txid: int
    ) -> tuple[dict[int, int], set[int]]:
        """Returns ``(acks to release, roots to fail)``. Raises what the state raises;
        then nothing changed here and the held acks stay held."""
        apply_action(self.bolt, state, action, txid, self.ready)
        if action is Action.PREPARE:
            self.held.prepare(txid)
        elif action is Action.COMMIT:
            return self.held.commit(txid), set()
        elif action is Action.ROLLBACK:
            # Whatever these tuples did to the state is gone: replay them.
            self.ready = False
            return {}, self.held.rollback()
        else:
            self.ready = True
        return {}, set()


class CheckpointSpout(Spout):
    """``$checkpointspout``: emits PREPARE/COMMIT/ROLLBACK/INITSTATE on ``$checkpoint``.

    The runtime gives it the task's state (namespace ``$checkpointspout-0``)
    and its clock through the context. Every phase change is committed to the
    provider before the tuple that announces it is emitted.
    """

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(CHECKPOINT_STREAM, CHECKPOINT_FIELDS)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.state = context.state()
        self.clock = context.clock
        raw = self.state.get(CHECKPOINT_STATE_KEY)
        stored = CheckpointState.from_json(raw) if raw is not None else None
        interval_ms = int(conf["topology.state.checkpoint.interval.ms"])
        self.coordinator = CheckpointCoordinator(stored, interval_ms, self._save)

    positions: dict[str, Any] | None = None
    """Exactly-once state: the data spouts' positions (``"<component>-<task>"`` ->
    position) at the standstill before the next PREPARE, set by the runtime.
    Stored with PREPARING(t), in the same commit, as the positions of txid t."""

    def _save(self, cs: CheckpointState) -> None:
        self.state.put(CHECKPOINT_STATE_KEY, cs.to_json())
        if cs.phase is Phase.PREPARING and self.positions is not None:
            # Keep t-1's too: if t is rolled back, recovery restores t-1.
            stored = self.state.get(POSITIONS_KEY) or {}
            kept = {k: v for k, v in stored.items() if k == str(cs.txid - 1)}
            kept[str(cs.txid)] = self.positions
            self.state.put(POSITIONS_KEY, kept)
        self.state.commit(None)

    def recovery_positions(self) -> tuple[bool, dict[str, Any] | None]:
        """``(fresh, positions)``: whether no checkpoint was committed yet, and the
        data spouts' positions stored with the txid that recovery restores (None
        if none were stored, e.g. after runs without exactly-once state)."""
        raw = self.state.get(CHECKPOINT_STATE_KEY)
        if raw is None:
            return True, None
        restored, _ = next_state(CheckpointState.from_json(raw), True)
        if restored.txid < 0:
            return True, None  # nothing was ever committed: start from the beginning
        stored = self.state.get(POSITIONS_KEY) or {}
        return False, stored.get(str(restored.txid))

    early = False
    """Set by the runtime when all that is in flight waits for a commit:
    checkpoint now instead of after the interval."""

    gated = False
    """Exactly-once state: start a PREPARE only with :attr:`positions` given, i.e.
    only from the standstill the runtime brought about for it. (The runtime
    checks for a due prepare before it polls; without the gate, a prepare that
    fell due between that check and this poll would go out with no standstill
    and no positions.)"""

    def next_tuple(self) -> None:
        early, self.early = self.early, False
        now_ms = self.clock.monotonic() * 1000.0
        if (
            self.gated
            and self.positions is None
            and self.coordinator.prepare_due(now_ms, early=early)
        ):
            self.early = early  # still wanted, once the runtime has stopped the spouts
            return
        try:
            emission = self.coordinator.poll(now_ms, early=early)
        finally:
            # Positions are good for the standstill they were taken at only.
            self.positions = None
        if emission is not None:
            self.collector.emit(
                [emission.txid, emission.action.value],
                msg_id=(emission.action.value, emission.txid),
                stream=CHECKPOINT_STREAM,
            )

    def ack(self, msg_id: Any) -> None:
        action, txid = msg_id
        try:
            self.coordinator.on_ack(Action(action), txid, self.clock.monotonic() * 1000.0)
        except StateError as exc:
            # The next phase could not be stored: treat the round as failed so
            # the coordinator recovers from what is stored, instead of waiting
            # for an ack that has already come.
            self.collector.report_error(exc)
            self.coordinator.on_fail(Action(action), txid)

    def fail(self, msg_id: Any) -> None:
        action, txid = msg_id
        self.coordinator.on_fail(Action(action), txid)

    def exhausted(self) -> bool:
        # Checkpoints never end, and a run may stop between two of them: the
        # next start recovers from the stored phase.
        return True
