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
* :class:`RefusedPrepares` decides when a PREPARE refused by a state's stored
  txids (:class:`~statestream._errors.PrepareRefused`) stops the run: the
  safety net for stores that cannot be claimed for one run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._checkpoint import Action, CheckpointCoordinator
from ._checkpoint_driver import CheckpointDriver
from ._components import (
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyContext,
)
from ._config import settings_of
from ._errors import PrepareRefused, ProtocolViolation, RuntimeFailure
from ._tuple import Fields

if TYPE_CHECKING:
    from ._exactly_once import CheckpointRecord
    from ._state import KeyValueState

__all__ = [
    "CHECKPOINT_FIELDS",
    "CHECKPOINT_SPOUT",
    "CHECKPOINT_STREAM",
    "CheckpointSpout",
    "HeldAcks",
    "OverlapsCommits",
    "RefusedPrepares",
    "StatefulTaskProtocol",
    "apply_action",
]

CHECKPOINT_SPOUT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_FIELDS = Fields("txid", "action")


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
        try:
            state.prepare_commit(txid)
        except PrepareRefused:
            raise
        except ProtocolViolation as exc:
            # The state's stored txids refuse it: marked, for RefusedPrepares.
            raise PrepareRefused(str(exc)) from exc
    elif action is Action.COMMIT:
        bolt.pre_commit(txid)
        if state.prepared_txid is None and txid > state.committed_txid:
            # This state took no part in PREPARE(txid): it joined the topology
            # (or was reset) after it. Nothing of txid is owed here, but the
            # state must move to txid, or the next PREPARE would be refused
            # and the checkpoint retried forever.
            state.prepare_commit(txid)
        state.commit(txid)
        bolt.post_commit(txid, state)
    elif action is Action.ROLLBACK:
        bolt.pre_rollback()
        state.rollback()
    elif action is Action.INITSTATE:
        bolt.init_state(state)
    else:  # pragma: no cover - Action is closed
        raise ProtocolViolation(f"unknown checkpoint action {action!r}")


class RefusedPrepares:
    """When a refused PREPARE stops the run: the second refusal of one namespace.

    A state refuses ``PREPARE(t)`` (:class:`~statestream._errors.PrepareRefused`)
    when its stored txids do not allow ``t``: ``t`` is committed already, or
    another txid is prepared. One run alone never gets there; the checkpoint
    fails, and the run recovers (exactly-once: a rewind to the last
    committed checkpoint; at-least-once: ROLLBACK, then INITSTATE) before the
    next PREPARE reaches the namespace. If that namespace refuses again,
    something outside the run keeps moving its txids, most likely another
    run of the topology on the same store (a provider that cannot claim its
    scope, see ``BackendStateProvider.claim``), and retrying would loop
    forever: the run stops.

    Pure: the runtime calls :meth:`refused` with each refusal its tasks
    report; the instance lives as long as the run (across rewinds).
    """

    def __init__(self) -> None:
        self.count: dict[str, int] = {}  # namespace -> refusals in this run

    def refused(self, namespace: str) -> bool:
        """Note a refusal of ``namespace``; True if the run must stop (it refused before)."""
        n = self.count[namespace] = self.count.get(namespace, 0) + 1
        return n > 1

    @staticmethod
    def fatal(namespace: str, topology: str, store: str, cause: BaseException) -> RuntimeFailure:
        """The error that stops the run: names the namespace, the cause and the fix."""
        error = RuntimeFailure(
            f"state {namespace!r} refused a checkpoint's PREPARE again after the run went "
            f"back to its last committed checkpoint ({cause}); something else is moving its "
            f"txids, most likely another run of topology {topology!r} writing the same store "
            f"({store}). The run stops rather than retry forever: stop the other run, or run "
            "this one under another topology name or store"
        )
        error.__cause__ = cause
        return error


#: An ack as a task sends it to the acker: (root, XOR value).
Ack = tuple[int, int]


class HeldAcks:
    """Acks a stateful task made, held until a commit covers them.

    ``hold`` adds acks, ``(root, XOR value)`` pairs, made since the last
    prepare; ``prepare(t)`` marks them as covered by ``t``; ``commit(t)``
    returns every ack covered by ``t`` or earlier, to send to the acker;
    ``rollback()`` returns every held root, to fail. A root may come in
    several pairs: XOR being associative, the acker adds them up, so they
    are kept as made rather than combined here.
    """

    def __init__(self) -> None:
        self.current: list[Ack] = []
        self.covered: dict[int, list[Ack]] = {}

    def hold(self, acks: Iterable[Ack]) -> None:
        self.current.extend(acks)

    def prepare(self, txid: int) -> None:
        if self.current:
            into = self.covered.get(txid)
            if into is None:
                self.covered[txid] = self.current
            else:  # txid prepared again (its first prepare failed)
                into.extend(self.current)
            self.current = []

    def commit(self, txid: int) -> list[Ack]:
        done = sorted(t for t in self.covered if t <= txid)
        if len(done) == 1:
            return self.covered.pop(done[0])  # the usual case: one txid covered
        released: list[Ack] = []
        for t in done:
            released.extend(self.covered.pop(t))
        return released

    def rollback(self) -> set[int]:
        roots = {root for root, _ in self.current}
        for acks in self.covered.values():
            roots.update(root for root, _ in acks)
        self.current = []
        self.covered = {}
        return roots

    def __len__(self) -> int:
        """The acks held (pairs, not roots)."""
        return len(self.current) + sum(len(a) for a in self.covered.values())


@runtime_checkable
class OverlapsCommits(Protocol):
    """A stateful bolt whose ``post_commit`` may leave its work running when it
    returns, finished before its next ``pre_prepare``, ``post_commit``,
    ``init_state`` or ``cleanup`` returns (a two-phase sink's target write:
    ``statestream.connectors.sink``). :class:`StatefulTaskProtocol` allows it;
    Spark's driver, which calls ``post_commit`` on instances that never
    prepare, does not."""

    def overlap_commits(self) -> None: ...


class StatefulTaskProtocol:
    """One stateful task's side of the checkpoint protocol, for runtimes that ack per tuple.

    ``hold`` takes the task's acks; ``act`` carries out a checkpoint action
    (hook, then state) and returns what the runtime must deliver: the acks a
    COMMIT releases, and the roots a ROLLBACK fails so their tuples are
    replayed. ``ready`` says whether data tuples may be executed: false until
    INITSTATE, and again after a ROLLBACK until the next INITSTATE. A bolt
    that :class:`OverlapsCommits` is told it may, since every action of the
    task goes through this one instance, in order.
    """

    def __init__(self, bolt: StatefulBolt) -> None:
        self.bolt = bolt
        if isinstance(bolt, OverlapsCommits):
            bolt.overlap_commits()
        self.held = HeldAcks()
        self.ready = False

    def hold(self, acks: Iterable[Ack]) -> None:
        self.held.hold(acks)

    def act(self, state: KeyValueState, action: Action, txid: int) -> tuple[list[Ack], set[int]]:
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
            return [], self.held.rollback()
        else:
            self.ready = True
        return [], set()


class CheckpointSpout(Spout):
    """``$checkpointspout``: emits PREPARE/COMMIT/ROLLBACK/INITSTATE on ``$checkpoint``.

    It emits what the :class:`~statestream._checkpoint_driver.CheckpointDriver`
    (the coordinator over its stored record, shared with the Spark driver)
    gives it: each phase change is stored, as a
    :class:`~statestream._exactly_once.CheckpointRecord` in its task's
    namespace (``$checkpointspout-0``), before the tuple announcing it is
    emitted. Time comes from the context's clock.

    With exactly-once state (``context.exactly_once``) it never starts a
    PREPARE by itself: the runtime brings the data spouts to a standstill
    when :meth:`prepare_due` says so and starts it with
    :meth:`start_prepare`, giving the spouts' positions, which are stored
    with ``PREPARING(t)`` in the same commit. With at-least-once state the
    runtime sets :attr:`acked_positions` instead: it is called whenever a
    phase is stored, and what it returns (the data spouts' acked positions, see
    ``statestream._resume``) is stored with ``t`` at ``PREPARING(t)`` and with
    the txid a recovery restores at every phase (so ``COMMITTED(t)`` stores
    those after the acks the commit of ``t`` released).
    """

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(CHECKPOINT_STREAM, CHECKPOINT_FIELDS)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        state = context.state()
        self.clock = context.clock
        interval_ms = settings_of(conf).topology_state_checkpoint_interval_ms
        self.checkpoints = CheckpointDriver(lambda: state, interval_ms, self._now_ms)
        self.gated = context.exactly_once
        self._early = False

    @property
    def coordinator(self) -> CheckpointCoordinator:
        return self.checkpoints.coordinator

    @property
    def record(self) -> CheckpointRecord:
        """The checkpoint record as last stored."""
        return self.checkpoints.record

    @property
    def acked_positions(self) -> Callable[[], Mapping[str, Any]] | None:
        """At-least-once: the data spouts' acked positions, stored with each PREPARE."""
        return self.checkpoints.acked_positions

    @acked_positions.setter
    def acked_positions(self, positions: Callable[[], Mapping[str, Any]] | None) -> None:
        self.checkpoints.acked_positions = positions

    @property
    def committed_txid(self) -> int:
        """The last txid committed everywhere (as stored)."""
        return self.checkpoints.committed_txid

    def restore_point(self) -> tuple[int, Mapping[str, Any] | None]:
        """``(txid, positions)`` that recovery restores: the data spouts seek there."""
        return self.checkpoints.restore_point()

    def request_early(self) -> None:
        """Checkpoint at the next chance instead of after the interval (everything
        in flight waits for a commit, e.g. at the end of a finite input)."""
        self._early = True

    def prepare_due(self) -> bool:
        """Exactly-once: should the runtime bring the spouts to a standstill now?"""
        return self.checkpoints.prepare_due(early=self._early)

    def start_prepare(self, positions: Mapping[str, Any]) -> None:
        """Exactly-once: the spouts stand still at ``positions``; emit PREPARE(t+1) now
        (if still due), storing the positions with it."""
        self._poll(positions, allow_prepare=True)

    def store_acked(self) -> None:
        """At-least-once, at the clean end of a run: store the acked positions now
        (:meth:`CheckpointRecord.with_acked`), so that a rerun after a finished
        input reads nothing; a crash keeps those of the last prepare."""
        self.checkpoints.store_acked()

    def _now_ms(self) -> float:
        return self.clock.monotonic() * 1000.0

    def next_tuple(self) -> None:
        self._poll(None, allow_prepare=not self.gated)

    def _poll(self, positions: Mapping[str, Any] | None, allow_prepare: bool) -> None:
        checkpoints = self.checkpoints
        now_ms = checkpoints.now_ms()  # one instant: a PREPARE cannot fall due in between
        if not allow_prepare and checkpoints.prepare_due(early=self._early, now_ms=now_ms):
            return  # the runtime takes the cut first (start_prepare)
        early, self._early = self._early, False
        emission = checkpoints.poll_prepare(positions, early=early, now_ms=now_ms)
        if emission is None:
            return
        self.collector.emit(
            [emission.txid, emission.action.value],
            msg_id=(emission.action.value, emission.txid),
            stream=CHECKPOINT_STREAM,
        )

    def ack(self, msg_id: Any) -> None:
        action, txid = msg_id
        try:
            self.checkpoints.on_ack(Action(action), txid)
        except Exception as exc:
            # The next phase could not be stored: treat the round as failed so
            # the coordinator recovers from what is stored, instead of waiting
            # for an ack that has already come. Any exception, not only a
            # StateError: a provider that lets an OSError through must not stop
            # checkpointing for good (the runtime would only report the error).
            self.collector.report_error(exc)
            self.checkpoints.on_fail(Action(action), txid)

    def fail(self, msg_id: Any) -> None:
        action, txid = msg_id
        self.checkpoints.on_fail(Action(action), txid)

    def exhausted(self) -> bool:
        # Checkpoints never end, and a run may stop between two of them: the
        # next start recovers from the stored phase.
        return True
