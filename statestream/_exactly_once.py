"""Exactly-once state, shared by every runtime: the rewindable-spout contract,
the checkpoint record, the decision to turn it on, and the standstill.

Storm's stateful bolts are at-least-once: after a failure the tuples since
the last committed checkpoint are replayed and counted again. Exactly-once
state removes the double count with two things:

* **Sources that rewind.** A spout that implements :class:`Rewindable` tells
  where it stands (:meth:`~Rewindable.position`) and goes back there
  (:meth:`~Rewindable.seek`). Its position is stored in the same record as
  the checkpoint phase (:class:`CheckpointRecord`), so restoring checkpoint
  ``t`` and seeking every spout to the positions stored with ``t`` replays
  exactly what ``t`` does not hold.
* **A consistent cut.** The positions stored with ``t`` must mark exactly the
  tuples whose effects ``t`` holds. The local runtime gets that from a
  standstill (:class:`Standstill`): before ``PREPARE(t)`` the data spouts stop,
  every queue drains, the positions are taken and the prepare goes out before
  any spout emits again. The Spark runtime gets it from its batches: batch
  ``t`` is read from the positions of ``t-1`` to the positions of ``t``.

Within a run, any failure (a tuple failed or timed out, a checkpoint rolled
back) goes back to the last committed checkpoint and rewinds the spouts, as
Flink restarts from its last checkpoint. A failed tuple does not rewind
at once: its attempt runs on to where its cut would have been, so that one
rewind finds every message failing in it (:class:`Standstill`).

A poison record would roll the topology back forever, so the retry policy
(:mod:`statestream._retry`) holds here too: a failure counts as an attempt
of its message (attempts count *consecutive* failures: a cut taken after the
message went through clears them); the replay after the rewind goes on
without the failed messages, each held until its delay has passed and then
emitted again (its next attempt), and after the last attempt the message is
written to the dead-letter file and the rewind replays without it. The
settled set is the dead-letter file itself, not
this record: the runtime skips, at emit, a message the file holds (the
same spout task, message id and values) and tells the spout it is settled
(``Spout.dead_lettered``); the next cut's positions are then past it. A
restart reads the file again, so a message dead-lettered after the last
commit is skipped after a crash too.

Pure: no threads, no I/O beyond the state object passed in.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

import orjson

from ._checkpoint import CheckpointState, next_state
from ._errors import ConfigError, SerializationError
from ._runners import Runner
from ._runners import runner as runner_entry

if TYPE_CHECKING:
    from ._state import KeyValueState

__all__ = [
    "ACKED_KEY",
    "CHECKPOINT_KEY",
    "POSITIONS_KEY",
    "REWIND",
    "CheckpointRecord",
    "Lockstep",
    "Rewindable",
    "RoundStatus",
    "RunMode",
    "SpoutAt",
    "Standstill",
    "StandstillStep",
    "can_resume",
    "can_rewind",
    "check_position",
    "cut_positions",
    "quiet_wants_checkpoint",
    "resolve_exactly_once",
    "run_mode",
]

CHECKPOINT_KEY = "checkpoint"
"""Key of the checkpoint phase ``{"txid", "phase"}`` in ``$checkpointspout-0``."""
POSITIONS_KEY = "positions"
"""Key of the spout positions ``{str(txid): {namespace: position}}`` beside it."""
ACKED_KEY = "acked"
"""Key of the at-least-once resume positions ``{str(txid): {namespace: acked position}}``:
apart from the exact positions, so that exactly-once never takes one for a cut."""
_TXID_KEY = re.compile(r"-?[0-9]+")


@runtime_checkable
class Rewindable(Protocol):
    """A spout whose source can go back: the contract of exactly-once state.

    Lifecycle, on every runtime:

    * ``open`` first, as for any spout.
    * :meth:`seek` once, after ``open`` and before the first ``next_tuple``,
      with the position stored with the checkpoint being restored, or
      ``None`` when nothing was ever committed (start from the beginning).
      After a failure within a run the spout is opened again and sought
      again (a fresh instance, as after a restart).
    * :meth:`position` whenever the runtime takes a cut: between two
      ``next_tuple`` calls, never during one. The local runtime calls it at a
      standstill (everything the spout emitted is processed); the Spark
      driver calls it after reading a batch.

    What a position must capture: where the *next* ``next_tuple`` continues,
    plus every message that failed and waits to be emitted again (with what
    is needed to emit it), because a failure before the cut belongs after
    it. It need not (and must not) hold back for tuples merely in flight:
    at a cut nothing is in flight. It must be JSON (a dict, list, str,
    number, bool or None), since it is stored with the checkpoint and read
    by either runtime. ``seek(position())`` on a fresh instance over the same
    source must make it emit the same tuples it would have emitted next.

    Optional, for at-least-once state (``statestream.state.exactly.once``
    false, or ``auto`` with another spout that cannot rewind): ``acked_position()``,
    the position below which every message was acked, in the format of
    :meth:`position` (Storm's Kafka spout commits this offset). The runtime
    takes it whenever the checkpoint spout stores ``PREPARING(t)`` (at any
    moment between two ``next_tuple`` calls, on another worker a little
    older: never ahead of what was acked) and stores it with ``t``; a
    restart calls :meth:`seek` with the one stored with the restored
    checkpoint, so only what was not acked is read again. It is safe because
    a stateful topology acks a message only once the checkpoint covering it
    has committed. Without a stored one (a fresh store) an at-least-once
    start does not call :meth:`seek`. It is called often (every round on
    several workers): keep it cheap, and keep ``ack`` cheap too. A spout
    without it is read again from wherever its ``open`` starts, and the
    start line says so.
    """

    def position(self) -> Any:
        """Where the spout stands now (JSON)."""
        ...

    def seek(self, position: Any) -> None:
        """Continue from ``position`` (from :meth:`position`; None: from the beginning)."""
        ...


def can_rewind(spout: object) -> bool:
    """Whether ``spout`` implements :class:`Rewindable`."""
    return callable(getattr(spout, "position", None)) and callable(getattr(spout, "seek", None))


def can_resume(spout: object) -> bool:
    """Whether at-least-once state can resume ``spout`` where it was acked: it has
    ``seek`` and the optional ``acked_position`` of :class:`Rewindable`."""
    return callable(getattr(spout, "acked_position", None)) and callable(
        getattr(spout, "seek", None)
    )


def resolve_exactly_once(
    setting: bool | str, stateful: bool, spouts: Mapping[str, object]
) -> tuple[bool, str | None]:
    """Decide whether a run keeps exactly-once state.

    ``setting`` is ``statestream.state.exactly.once`` (True, False or
    ``"auto"``), ``stateful`` whether the topology has stateful bolts, and
    ``spouts`` maps each data spout's id to its object. Returns ``(on,
    note)``: ``note`` is the line to log when ``auto`` falls back to
    at-least-once. ``True`` with a spout that cannot rewind raises
    :class:`ConfigError` naming it.
    """
    if not stateful or setting is False:
        return False, None
    cannot = [
        f"{cid!r} ({type(obj).__name__})" for cid, obj in spouts.items() if not can_rewind(obj)
    ]
    if not cannot:
        return True, None
    names = ", ".join(cannot)
    if setting == "auto":
        return False, (
            f"exactly-once state is off: spout {names} cannot rewind (no position()/seek()); "
            "stateful bolts are at-least-once (Storm's guarantee)"
        )
    raise ConfigError(
        f"statestream.state.exactly.once is true, but spout {names} cannot rewind: give it "
        "position() and seek(position) (see statestream.Rewindable and FileSpout), or set "
        "statestream.state.exactly.once: auto (or false) for Storm's at-least-once"
    )


@dataclass(frozen=True)
class RunMode:
    """What a run of a topology keeps: :func:`run_mode`'s answer, for every runtime."""

    exactly_once: bool
    """Exactly-once state: the spouts' positions are stored with each cut
    (what bolts are told through ``context.exactly_once``)."""
    at_most_once: bool = False
    """A batch runtime only: a spout cannot rewind and the user accepted
    at-most-once (a failed batch runs again with the records already read; a
    batch lost to a crash is not replayed)."""
    note: str | None = None
    """A line to log for the user (``auto`` fell back to at-least-once)."""


def run_mode(
    runner: str | Runner,
    setting: bool | str,
    stateful: bool,
    spouts: Mapping[str, object],
    ackers: int,
) -> RunMode:
    """Decide, once for every runtime, what a run keeps.

    ``runner`` is ``topology.runner`` (a name, or its registry entry),
    ``setting`` ``statestream.state.exactly.once``, ``stateful`` whether the
    topology is checkpointed, ``spouts`` its data spouts that the runtime
    reads (id -> object) and ``ackers`` ``topology.acker.executors``.

    The answer follows the runner's :class:`~statestream._runners.Capabilities`.
    A runtime that replays per tuple (local: one process or workers) keeps
    exactly-once state as :func:`resolve_exactly_once` decides, Storm's
    at-least-once otherwise; if it cannot rewind within a run, exactly-once
    is off (``auto``, with a note) or refused (``true``). A runtime that
    replays per batch (spark) seeks its spouts back whether or not a bolt is
    stateful, so every spout must rewind; it has no at-least-once mode to
    fall back to. A spout that cannot is refused (ConfigError naming it and
    the fix) unless the user opted into at-most-once with
    ``topology.acker.executors: 0`` (and the setting ``auto`` or false).
    """
    entry = runner_entry(runner)
    if entry.capabilities.replay == "tuple":
        if stateful and setting is not False and not entry.capabilities.rewinds_within_run:
            return _without_rewind(entry.name, setting)
        on, note = resolve_exactly_once(setting, stateful, spouts)
        return RunMode(on, False, note)
    cannot = [cid for cid, obj in spouts.items() if not can_rewind(obj)]
    try:
        # A batch is the unit of replay whether or not a bolt is stateful,
        # so the decision is taken as for a stateful topology.
        on, _ = resolve_exactly_once(setting, True, spouts)
    except ConfigError:
        on = False  # true, and a spout cannot rewind: refused below
    if on or not cannot:
        return RunMode(stateful)
    if setting is not True and ackers == 0:
        return RunMode(False, True)  # as asked (auto asks for no more than is possible)
    names = ", ".join(f"{cid!r} ({type(spouts[cid]).__name__})" for cid in cannot)
    if setting is True:
        why = "statestream.state.exactly.once is true"
    else:
        why = (
            f"statestream.state.exactly.once is {str(setting).lower()}, which on the local "
            f"runtime gives Storm's at-least-once, but the {entry.name} runtime has no "
            "at-least-once mode"
        )
    raise ConfigError(
        f"spout {names} cannot rewind (no position()/seek()), and the {entry.name} runtime "
        f"reads a failed or unfinished batch again by seeking its spouts back ({why}). "
        "Implement statestream.Rewindable (position() and seek(position), see FileSpout), "
        "or accept at-most-once processing with topology.acker.executors: 0 (and "
        "statestream.state.exactly.once auto or false)"
    )


def _without_rewind(name: str, setting: bool | str) -> RunMode:
    """The run mode of a stateful topology on a runner that cannot rewind within a run."""
    if setting is True:
        raise ConfigError(
            f"statestream.state.exactly.once is true, but the {name} runtime cannot go back "
            "to the last committed checkpoint within a run, which exactly-once state needs "
            "after a failure; set statestream.state.exactly.once: auto (or false) for "
            "Storm's at-least-once, or run on a runner that rewinds (topology.runner)"
        )
    return RunMode(
        False,
        False,
        f"exactly-once state is off: the {name} runtime cannot rewind within a run; "
        "stateful bolts are at-least-once (Storm's guarantee)",
    )


class SpoutAt(Protocol):
    """A data spout task as a cut sees it (every runtime's spout task has these)."""

    @property
    def namespace(self) -> str: ...

    @property
    def component(self) -> str: ...

    @property
    def spout(self) -> Any: ...


def cut_positions(spouts: Iterable[SpoutAt]) -> dict[str, Any]:
    """The positions of a cut: each data spout task's ``position()`` (JSON-checked),
    by namespace. Called between two ``next_tuple`` calls of every one of them:
    at a standstill (local, workers) or after a batch was read (Spark)."""
    return {s.namespace: check_position(s.component, s.spout.position()) for s in spouts}


def check_position(component: str, position: Any) -> Any:
    """``position`` if it is JSON; else a SerializationError naming the spout and the type."""
    try:
        orjson.dumps(position)
    except TypeError as exc:
        raise SerializationError(
            f"spout {component!r} returned a position() that is not JSON "
            f"({type(position).__name__}: {exc}); positions are stored with the checkpoint, "
            "return dicts, lists, strings, numbers, booleans or None"
        ) from exc
    return position


@dataclass(frozen=True)
class CheckpointRecord:
    """The checkpoint spout's durable record, in one format for every runtime.

    ``state`` is the phase ``(txid, phase)``; ``positions`` maps a txid to
    the data spouts' positions (task namespace -> position) stored with the
    prepare of that txid. At most two txids are kept: ``t``, being prepared
    or committed, and ``t-1``, which a rollback of ``t`` restores.

    ``acked`` is the same per txid for at-least-once state: each resumable
    data spout's ``acked_position()`` taken when ``PREPARING(t)`` was stored,
    then again (:meth:`with_acked`) whenever a later phase whose recovery
    restores ``t`` was (see :class:`Rewindable`). Kept apart from
    ``positions``: an acked position is safe to resume from but is no cut.
    """

    state: CheckpointState
    positions: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    acked: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, kv: KeyValueState) -> CheckpointRecord:
        """The record stored in ``kv`` (``COMMITTED(-1)`` and no positions on a fresh store)."""
        raw = kv.get(CHECKPOINT_KEY)
        state = CheckpointState.from_json(raw) if raw is not None else CheckpointState.initial()
        return cls(state, _by_txid(kv.get(POSITIONS_KEY)), _by_txid(kv.get(ACKED_KEY)))

    def advance(
        self,
        state: CheckpointState,
        positions: Mapping[str, Any] | None = None,
        acked: Mapping[str, Any] | None = None,
    ) -> CheckpointRecord:
        """The record after moving to ``state``.

        ``positions`` are the data spouts' positions for ``state.txid`` (given
        with ``PREPARING(t)``), ``acked`` their acked positions (at-least-once);
        those of ``t`` and ``t-1`` are kept, older ones dropped. A spout
        missing from ``acked`` (on another worker, not heard of yet) keeps the
        newest one stored: an older acked position is still safe.
        """
        lo, hi = state.txid - 1, state.txid
        kept = {t: p for t, p in self.positions.items() if lo <= t <= hi}
        kept_acked = {t: p for t, p in self.acked.items() if lo <= t <= hi}
        if positions is not None:
            kept[state.txid] = dict(positions)
        if acked is not None:
            kept_acked[state.txid] = {**self._newest(below=state.txid), **acked}
        return CheckpointRecord(state, kept, kept_acked)

    def with_acked(self, acked: Mapping[str, Any]) -> CheckpointRecord:
        """The record with ``acked`` stored for the txid a recovery restores.

        Safe at any moment, not only at a prepare: a message is acked only
        after the checkpoint holding its effects committed, and nothing is
        committed beyond what a recovery from this record restores. The
        runtime calls it at the clean end of a run, so that a finished input
        is not read again. Unchanged if nothing was ever committed.
        """
        txid, _ = self.restore_point()
        if txid < 0:
            return self
        merged = {**self._newest(below=txid + 1), **acked}
        return replace(self, acked={**self.acked, txid: merged})

    def _newest(self, below: int) -> Mapping[str, Any]:
        """The newest positions stored for a txid below ``below`` (exact or acked)."""
        txids = [t for t in (*self.positions, *self.acked) if t < below]
        if not txids:
            return {}
        t = max(txids)
        return self.positions.get(t) or self.acked.get(t) or {}

    def save(self, kv: KeyValueState) -> None:
        """Store phase and positions in ``kv`` in one direct commit."""
        kv.put(CHECKPOINT_KEY, self.state.to_json())
        kv.put(POSITIONS_KEY, {str(t): dict(p) for t, p in self.positions.items()})
        kv.put(ACKED_KEY, {str(t): dict(p) for t, p in self.acked.items()})
        kv.commit(None)

    def restore_point(self) -> tuple[int, Mapping[str, Any] | None]:
        """``(txid, positions)`` a recovery from this record restores.

        ``txid`` is the committed txid recovery ends at (``-1``: nothing was
        ever committed, start from the beginning); ``positions`` were stored
        with it (None if it was taken without exactly-once state).
        """
        state = self.state
        while True:
            nxt, _ = next_state(state, True)
            if nxt == state:
                break
            state = nxt
        if state.txid < 0:
            return -1, None
        return state.txid, self.positions.get(state.txid)

    def resume_point(self) -> tuple[int, Mapping[str, Any] | None, bool]:
        """``(txid, positions, exact)`` an at-least-once recovery resumes from.

        As :meth:`restore_point`, but with the acked positions stored with
        ``txid`` when there are (``exact`` False then): they are at least as far
        as exact ones stored with it, since :meth:`with_acked` stores them later.
        """
        txid, positions = self.restore_point()
        acked = self.acked.get(txid)
        if txid < 0 or acked is None:
            return txid, positions, True
        return txid, acked, False


def _by_txid(stored: Any) -> dict[int, Mapping[str, Any]]:
    """A stored ``{str(txid): {namespace: position}}`` read back with int txids."""
    got: dict[int, Mapping[str, Any]] = {}
    if isinstance(stored, Mapping):
        for txid, where in stored.items():
            # A malformed key is skipped, never fatal: "--1" or "²" pass
            # str.isdigit() after lstrip("-") but int() refuses them.
            if isinstance(where, Mapping) and _TXID_KEY.fullmatch(str(txid)):
                got[int(txid)] = dict(where)
    return got


class StandstillStep(Enum):
    """What the local runtime does with its data spouts this step."""

    POLL = "poll"
    """Poll them as usual."""
    DRAIN = "drain"
    """Do not poll them (deliver their acks and fails only): a checkpoint is
    due, or their budget is spent, and tuples are still queued."""
    CUT = "cut"
    """Nothing is queued: take their positions now and start the PREPARE
    before any of them emits again."""


@dataclass
class Standstill:
    """The local runtime's consistent cut, as a pure decider.

    Each scheduler step the runtime calls :meth:`step` with whether a
    ``PREPARE`` is due and whether any tuple is queued anywhere, and does
    what the returned :class:`StandstillStep` says. ``budget`` bounds how many
    spout tuples may be emitted between two cuts (``None``: no bound). After
    a rewind (:meth:`on_rewind`) the budget is what the failed attempt
    emitted, so that the replay (without the failed messages, which wait for
    their retries) is cut and committed before new input comes in; each
    commit (:meth:`on_commit`) doubles it again until it no longer binds.
    """

    budget: int | None = None
    emitted: int = 0
    """Spout tuples emitted since the last cut (the runtime adds to it)."""
    quiescing: bool = False
    rewind: bool = False
    """Go back to the last committed checkpoint at the next step (:meth:`fail`)."""
    failed: bool = False
    """A data tuple failed since the last cut (:meth:`tuple_failed`): the
    attempt is doomed, but runs on to where its cut would have been, so that
    one rewind counts an attempt for every message failing in it (a poison
    message per rewind would take a rewind per message and attempt)."""
    replaying: bool = False
    """From a rewind to the next cut: the replay of what the failed attempt
    emitted. No retry is handed back meanwhile (a retry falling due in the
    replay and failing again would undo the replay with it)."""
    max_budget: int = 1 << 16

    committed: int | None = None
    """The last committed txid :meth:`step` was told of."""

    def step(
        self,
        prepare_due: bool,
        queued: bool,
        committed: int = -1,
        in_checkpoint: bool = False,
        doomed: bool | None = None,
    ) -> StandstillStep:
        """What to do with the data spouts now.

        ``committed`` is the last committed txid (a new one counts as a commit
        for the budget); ``in_checkpoint`` says a checkpoint round is in
        flight. While a budget binds (after a rewind) the spouts wait for that
        round to end: a failure of a tuple emitted meanwhile would roll the
        round back with it, and a bolt that fails now and then could keep
        every round from committing. ``doomed`` (default: :attr:`failed`)
        says a tuple failed since the last cut: where the cut would be taken,
        :attr:`rewind` is set instead (the runtime rewinds at its next step).
        """
        if self.committed is not None and committed > self.committed:
            self.on_commit()
        self.committed = committed
        if self.budget is not None and in_checkpoint and not self.quiescing:
            return StandstillStep.DRAIN
        if not self.quiescing:
            if not (prepare_due or self.spent()):
                return StandstillStep.POLL
            self.quiescing = True
        if queued:
            return StandstillStep.DRAIN
        self.quiescing = False
        if self.failed if doomed is None else doomed:
            self.rewind = True
            return StandstillStep.DRAIN
        return StandstillStep.CUT

    def allowance(self, most: int) -> int:
        """How many more spout tuples may be emitted before the next cut (at most ``most``)."""
        if self.budget is None:
            return most
        return max(0, min(most, self.budget - self.emitted))

    def spent(self) -> bool:
        """True when the spouts have emitted their budget since the last cut."""
        return self.budget is not None and self.emitted >= self.budget

    def fail(self) -> None:
        """A checkpoint failed: rewind at the next step."""
        self.rewind = True

    def on_cut(self) -> None:
        """The runtime took the cut :meth:`step` asked for."""
        self.emitted = 0
        self.replaying = False

    def ends_early(self) -> bool:
        """Whether to cut (or rewind) now rather than at the interval, once the
        spouts are quiet and nothing is queued: a replay that has emitted all
        it will, or a failed attempt with nothing left to find."""
        return self.replaying or self.failed

    def tuple_failed(self) -> None:
        """A data tuple failed or timed out: rewind where the cut would be (see :attr:`failed`)."""
        self.failed = True

    def on_rewind(self) -> None:
        """The runtime went back to the last committed checkpoint.

        The next cut comes once the replay has emitted what the failed attempt
        did: the messages that failed in it wait for their retries (held, see
        ``statestream._retry``), so the replay of the others commits, before
        new input can bring new failures into it.
        """
        self.budget = max(1, self.emitted)
        self.emitted = 0
        self.quiescing = False
        self.rewind = False
        self.failed = False
        self.replaying = True

    def on_commit(self) -> None:
        if self.budget is not None:
            self.budget *= 2
            if self.budget > self.max_budget:
                self.budget = None


class RoundStatus(Protocol):
    """What the workers' lockstep decider reads of one worker's status of a round."""

    @property
    def rewind(self) -> bool:
        """The worker's standstill asks for a rewind."""
        ...

    @property
    def emitted(self) -> int:
        """Spout tuples the worker emitted (or held) in the round."""
        ...

    @property
    def queued(self) -> bool:
        """Tuples or completions wait in the worker's queues."""
        ...

    @property
    def sent(self) -> bool:
        """The worker sent tuples to a peer in the round."""
        ...

    @property
    def failed(self) -> bool:
        """A data tuple failed in the worker since the last cut."""
        ...

    @property
    def holding(self) -> bool:
        """A bolt task of the worker holds acks that no checkpoint covers yet."""
        ...

    @property
    def prepare_due(self) -> bool:
        """The checkpoint spout's worker only: a PREPARE is due."""
        ...

    @property
    def committed(self) -> int:
        """The checkpoint spout's worker only: the last committed txid."""
        ...

    @property
    def in_checkpoint(self) -> bool:
        """The checkpoint spout's worker only: a checkpoint round is in flight."""
        ...

    @property
    def positions(self) -> Mapping[str, Any] | None:
        """The worker's data spout positions, when it stands still."""
        ...


#: What :meth:`Lockstep.decide` returns when a worker asks for a rewind.
REWIND: Final = "rewind"


@dataclass
class Lockstep:
    """The workers' consistent cut: each worker's replica of :class:`Standstill`,
    fed with the same round statuses, so that every worker decides alike.

    In round ``r`` a worker decides from the statuses of round ``q = r - lag
    - 1``, the last that every worker has (``checkpoint_worker``'s carries
    the checkpoint spout's phase). The cut is taken when no worker has had
    anything queued or in flight, nor polled its spouts, since the rounds
    before ``q``; after it the data spouts wait ``lag + 1`` rounds
    (:attr:`hold`), until the PREPARE has reached the first bolts of every
    worker (sent, then delivered ``lag`` rounds later). Pure: no I/O, the
    worker applies what it returns.
    """

    standstill: Standstill
    lag: int = 1
    checkpoint_worker: int = 0
    hold: int = 0
    """Rounds the data spouts still wait after a cut."""
    decided: deque[StandstillStep] = field(default_factory=deque)
    """The decisions of rounds ``q`` to ``r - 1`` (:meth:`record`)."""

    def __post_init__(self) -> None:
        self.decided = deque(self.decided, maxlen=self.lag + 1)

    def record(self, decision: StandstillStep) -> None:
        """The decision this worker acted on in the round it ends."""
        self.decided.append(decision)

    def decide(
        self, statuses: Sequence[RoundStatus], quiet_before: bool
    ) -> StandstillStep | Literal["rewind"]:
        """The decision for round ``r`` from the statuses of round ``q``, one per worker.

        ``quiet_before``: nothing was sent in rounds ``q - lag`` to ``q - 1``
        either. :data:`REWIND` when any worker asks for one: every worker
        rewinds in the same round.
        """
        ss = self.standstill
        if any(s.rewind for s in statuses):
            return REWIND
        ss.emitted += sum(s.emitted for s in statuses)
        if self.hold:
            self.hold -= 1
            return StandstillStep.DRAIN
        cp = statuses[self.checkpoint_worker]
        # Nothing anywhere: nothing queued or sent in q, nothing sent in the
        # lag rounds before (delivered after q's statuses), and no spout
        # polled in q or since (so the positions in q's statuses still hold).
        still = all(d is not StandstillStep.POLL for d in self.decided)
        queued = not (quiet_before and still) or any(s.queued or s.sent for s in statuses)
        # Every replica dooms the attempt in the same round: from the statuses,
        # not from its own worker's news (ss.failed), which the others lack.
        doomed = any(s.failed for s in statuses)
        return ss.step(cp.prepare_due, queued, cp.committed, cp.in_checkpoint, doomed)

    def cut(self, statuses: Sequence[RoundStatus]) -> dict[str, Any]:
        """Take the cut :meth:`decide` asked for: every worker's spout positions,
        which the checkpoint spout's worker stores with the PREPARE."""
        self.standstill.on_cut()
        self.hold = self.lag + 1
        positions: dict[str, Any] = {}
        for st in statuses:
            if st.positions is not None:
                positions.update(st.positions)
        return positions


def quiet_wants_checkpoint(standstill: Standstill | None, statuses: Sequence[RoundStatus]) -> bool:
    """No worker moved last round: True if a checkpoint should be asked for now
    (acks wait for one, or, exactly-once, a replay or a doomed attempt can end
    early), False if the workers should sleep."""
    if standstill is not None and (standstill.replaying or any(s.failed for s in statuses)):
        return True
    # Queued and still nobody moved: a failed tuple waits out its retry delay
    # (or a full queue waits), which only the clock ends; a checkpoint now
    # would not be cut before it anyway.
    return any(s.holding for s in statuses) and not any(s.queued for s in statuses)
