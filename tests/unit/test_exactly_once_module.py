"""Exactly-once state: Standstill, CheckpointRecord, resolve_exactly_once, check_position."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from statestream._checkpoint import CheckpointState, Phase
from statestream._errors import ConfigError, SerializationError, StateCorruptError
from statestream._exactly_once import (
    CHECKPOINT_KEY,
    POSITIONS_KEY,
    REWIND,
    CheckpointRecord,
    Lockstep,
    Standstill,
    StandstillStep,
    can_rewind,
    check_position,
    quiet_wants_checkpoint,
    resolve_exactly_once,
)
from statestream_providers.memory import MemoryStateProvider

COMMITTED, PREPARING, COMMITTING = Phase.COMMITTED, Phase.PREPARING, Phase.COMMITTING
POLL, DRAIN, CUT = StandstillStep.POLL, StandstillStep.DRAIN, StandstillStep.CUT


def cs(phase: Phase, txid: int) -> CheckpointState:
    return CheckpointState(txid, phase)


def new_kv() -> Any:
    name = uuid.uuid4().hex
    return MemoryStateProvider.from_config({"name": name}).get_state("$checkpointspout-0")


# -- Standstill --------------------------------------------------------------

# (quiescing, prepare_due, queued, budget spent) -> (step, quiescing after, emitted reset)
STANDSTILL_TABLE = [
    (False, False, False, False, POLL, False, False),
    (False, False, True, False, POLL, False, False),
    (False, True, True, False, DRAIN, True, False),
    (False, True, False, False, CUT, False, True),
    (False, False, True, True, DRAIN, True, False),
    (False, False, False, True, CUT, False, True),
    (False, True, True, True, DRAIN, True, False),
    (False, True, False, True, CUT, False, True),
    # once quiescing, it drains to the cut even if the checkpoint is no longer due
    (True, False, True, False, DRAIN, True, False),
    (True, False, False, False, CUT, False, True),
    (True, True, True, False, DRAIN, True, False),
    (True, True, False, False, CUT, False, True),
    (True, False, True, True, DRAIN, True, False),
    (True, False, False, True, CUT, False, True),
]


@pytest.mark.parametrize(
    ("quiescing", "due", "queued", "spent", "step", "quiescing_after", "reset"),
    STANDSTILL_TABLE,
    ids=[
        f"{'quiescing' if q else 'running'}-{'due' if d else 'notdue'}-"
        f"{'queued' if u else 'empty'}-{'spent' if s else 'budget'}"
        for q, d, u, s, *_ in STANDSTILL_TABLE
    ],
)
def test_standstill_step_table(
    quiescing: bool,
    due: bool,
    queued: bool,
    spent: bool,
    step: StandstillStep,
    quiescing_after: bool,
    reset: bool,
) -> None:
    s = Standstill(budget=4, emitted=4 if spent else 3, quiescing=quiescing)
    assert s.spent() is spent
    assert s.step(due, queued) is step
    assert s.quiescing is quiescing_after
    if step is CUT:
        s.on_cut()  # the runtime took it
    assert s.emitted == (0 if reset else (4 if spent else 3))
    assert not s.rewind


@pytest.mark.parametrize(
    ("quiescing", "due", "queued", "spent", "step", "quiescing_after", "reset"),
    STANDSTILL_TABLE,
)
def test_a_doomed_attempt_runs_to_where_its_cut_would_be_then_rewinds(
    quiescing: bool,
    due: bool,
    queued: bool,
    spent: bool,
    step: StandstillStep,
    quiescing_after: bool,
    reset: bool,
) -> None:
    """Issue 30: a tuple failed since the cut: the same steps, but where the cut
    would be taken the standstill asks for a rewind instead (one rewind finds
    every message failing in the attempt)."""
    for doomed_by in ("tuple_failed", "argument"):
        s = Standstill(budget=4, emitted=4 if spent else 3, quiescing=quiescing)
        if doomed_by == "tuple_failed":
            s.tuple_failed()
            got = s.step(due, queued)
        else:
            got = s.step(due, queued, doomed=True)  # the workers' replicas say it
        assert got is (DRAIN if step is CUT else step)
        assert s.rewind is (step is CUT)
        assert s.quiescing is quiescing_after
        assert s.emitted == (4 if spent else 3)  # the rewind's budget comes from it


def test_a_replay_is_cut_where_its_attempt_was_and_no_retry_is_handed_back_in_it() -> None:
    s = Standstill(emitted=40)
    s.tuple_failed()
    assert s.ends_early()  # a failed attempt with nothing left to find rewinds now
    s.on_rewind()
    assert (s.budget, s.emitted, s.failed, s.rewind) == (40, 0, False, False)
    assert s.replaying and s.ends_early()
    s.emitted = 40
    assert s.step(False, False) is CUT
    s.on_cut()
    assert not s.replaying and not s.ends_early()


def test_standstill_without_budget_polls_during_a_checkpoint_round() -> None:
    s = Standstill()
    assert s.step(prepare_due=False, queued=True, in_checkpoint=True) is POLL
    assert s.step(prepare_due=False, queued=False, in_checkpoint=True) is POLL


def test_standstill_with_a_budget_waits_for_the_checkpoint_round_to_end() -> None:
    s = Standstill(budget=8, emitted=1)
    assert s.step(prepare_due=False, queued=False, in_checkpoint=True) is DRAIN
    assert s.quiescing is False and s.emitted == 1
    assert s.step(prepare_due=False, queued=False, in_checkpoint=False) is POLL
    # Once quiescing, a round in flight does not stop the cut.
    s = Standstill(budget=8, emitted=8)
    assert s.step(prepare_due=False, queued=True) is DRAIN
    assert s.quiescing is True
    assert s.step(prepare_due=False, queued=False, in_checkpoint=True) is CUT


# (budget, emitted, most) -> allowance
ALLOWANCE_TABLE = [
    (None, 0, 10, 10),
    (None, 10**6, 7, 7),
    (8, 0, 10, 8),
    (8, 3, 10, 5),
    (8, 3, 4, 4),
    (8, 8, 10, 0),
    (8, 9, 10, 0),  # overshot: never negative
    (1, 0, 10, 1),
]


@pytest.mark.parametrize(("budget", "emitted", "most", "allowed"), ALLOWANCE_TABLE)
def test_standstill_allowance(budget: int | None, emitted: int, most: int, allowed: int) -> None:
    s = Standstill(budget=budget, emitted=emitted)
    assert s.allowance(most) == allowed


def test_standstill_without_budget_is_never_spent() -> None:
    s = Standstill(emitted=10**9)
    assert not s.spent()
    assert s.step(prepare_due=False, queued=True) is POLL


def test_standstill_drains_then_cuts() -> None:
    s = Standstill()
    assert s.step(True, queued=True) is DRAIN
    assert s.step(False, queued=True) is DRAIN
    assert s.step(False, queued=False) is CUT
    assert s.step(False, queued=False) is POLL


# (emitted before the failure, budget after the rewind)
REWIND_TABLE = [(10, 10), (11, 11), (2, 2), (1, 1), (0, 1)]


@pytest.mark.parametrize(("emitted", "budget"), REWIND_TABLE)
def test_standstill_on_rewind_makes_the_emitted_count_the_budget(emitted: int, budget: int) -> None:
    s = Standstill(emitted=emitted, quiescing=True)
    s.fail()
    s.on_rewind()
    assert s.budget == budget
    assert s.emitted == 0
    assert s.quiescing is False
    assert s.rewind is False


def test_standstill_fail_sets_rewind_and_on_rewind_clears_it() -> None:
    s = Standstill()
    assert not s.rewind
    s.fail()
    assert s.rewind
    s.fail()
    assert s.rewind
    s.on_rewind()
    assert not s.rewind


def test_standstill_commits_double_the_budget_until_it_no_longer_binds() -> None:
    s = Standstill(budget=1, max_budget=8)
    seen = []
    for _ in range(5):
        s.on_commit()
        seen.append(s.budget)
    assert seen == [2, 4, 8, None, None]


def test_standstill_budget_equal_to_max_still_binds() -> None:
    s = Standstill(budget=4, max_budget=8)
    s.on_commit()
    assert s.budget == 8
    s.on_commit()
    assert s.budget is None


def test_standstill_step_counts_a_new_committed_txid_as_a_commit() -> None:
    s = Standstill(budget=2)
    s.step(False, False, committed=-1)  # first report: not a commit
    assert s.budget == 2
    s.step(False, False, committed=-1)
    assert s.budget == 2
    s.step(False, False, committed=0)
    assert s.budget == 4
    s.step(False, False, committed=0)
    assert s.budget == 4
    s.step(False, False, committed=3)
    assert s.budget == 8
    assert s.committed == 3


def test_standstill_spent_budget_forces_a_cut_and_the_count_restarts() -> None:
    s = Standstill(budget=3)
    s.emitted = 2
    assert s.step(False, False) is POLL
    s.emitted = 3
    assert s.step(False, True) is DRAIN
    assert s.step(False, False) is CUT
    s.on_cut()
    assert s.emitted == 0
    assert s.step(False, False) is POLL


# -- CheckpointRecord --------------------------------------------------------


def test_record_load_of_a_fresh_store() -> None:
    record = CheckpointRecord.load(new_kv())
    assert record.state == cs(COMMITTED, -1)
    assert record.positions == {}


def test_record_advance_keeps_t_and_t_minus_1_only() -> None:
    r = CheckpointRecord(cs(COMMITTED, -1))
    r = r.advance(cs(PREPARING, 0), {"reader-0": {"offset": 10}})
    assert r.positions == {0: {"reader-0": {"offset": 10}}}
    r = r.advance(cs(COMMITTING, 0)).advance(cs(COMMITTED, 0))
    assert r.positions == {0: {"reader-0": {"offset": 10}}}
    r = r.advance(cs(PREPARING, 1), {"reader-0": {"offset": 20}})
    assert r.positions == {0: {"reader-0": {"offset": 10}}, 1: {"reader-0": {"offset": 20}}}
    r = r.advance(cs(COMMITTING, 1)).advance(cs(COMMITTED, 1))
    r = r.advance(cs(PREPARING, 2), {"reader-0": {"offset": 30}})
    assert r.state == cs(PREPARING, 2)
    assert r.positions == {1: {"reader-0": {"offset": 20}}, 2: {"reader-0": {"offset": 30}}}


def test_record_advance_copies_and_does_not_mutate() -> None:
    given = {"reader-0": 1}
    r0 = CheckpointRecord(cs(COMMITTED, -1))
    r1 = r0.advance(cs(PREPARING, 0), given)
    given["reader-0"] = 99
    assert r1.positions == {0: {"reader-0": 1}}
    assert r0.positions == {}


def test_record_advance_rollback_keeps_the_restored_positions() -> None:
    r = CheckpointRecord(cs(PREPARING, 4), {3: {"a": 3}, 4: {"a": 4}})
    r = r.advance(cs(COMMITTED, 3))
    # the rolled-back txid's positions go; the restored one stays
    assert r.positions == {3: {"a": 3}}
    assert r.restore_point() == (3, {"a": 3})


def test_record_save_then_load_round_trips() -> None:
    kv = new_kv()
    record = CheckpointRecord(
        cs(PREPARING, 7), {6: {"reader-0": {"line": 5}}, 7: {"reader-0": {"line": 9}, "b-1": None}}
    )
    record.save(kv)
    assert CheckpointRecord.load(kv) == record
    assert kv.get(CHECKPOINT_KEY) == {"txid": 7, "phase": "PREPARING"}
    assert set(kv.get(POSITIONS_KEY)) == {"6", "7"}


def test_record_save_commits_directly() -> None:
    kv = new_kv()
    CheckpointRecord(cs(COMMITTED, 2), {2: {"a": 1}}).save(kv)
    kv.rollback()  # nothing uncommitted to lose
    assert CheckpointRecord.load(kv).state == cs(COMMITTED, 2)


def test_record_load_ignores_malformed_positions() -> None:
    kv = new_kv()
    kv.put(CHECKPOINT_KEY, {"txid": 1, "phase": "COMMITTED"})
    kv.put(POSITIONS_KEY, {"1": {"a": 1}, "x": {"a": 2}, "0": "not a mapping"})
    kv.commit(None)
    assert CheckpointRecord.load(kv).positions == {1: {"a": 1}}


def test_record_load_reads_every_integer_txid_key_and_skips_malformed_ones() -> None:
    kv = new_kv()
    kv.put(CHECKPOINT_KEY, {"txid": 0, "phase": "PREPARING"})
    bad = {"1-": {"a": 9}, "--1": {"a": 9}, "\u00b2": {"a": 9}, " 1": {"a": 9}, "": {"a": 9}}
    kv.put(POSITIONS_KEY, {"-1": {"a": 0}, "0": {"a": 4}, **bad})
    kv.commit(None)
    assert CheckpointRecord.load(kv).positions == {-1: {"a": 0}, 0: {"a": 4}}


def test_record_load_of_a_corrupt_phase_raises() -> None:
    kv = new_kv()
    kv.put(CHECKPOINT_KEY, {"txid": 1, "phase": "DONE"})
    kv.commit(None)
    with pytest.raises(StateCorruptError):
        CheckpointRecord.load(kv)


POS = {2: {"a": 2}, 3: {"a": 3}}

# (stored state, positions, restore point)
RESTORE_TABLE = [
    (cs(PREPARING, 3), POS, (2, {"a": 2})),
    (cs(COMMITTING, 3), POS, (3, {"a": 3})),
    (cs(COMMITTED, 3), POS, (3, {"a": 3})),
    (cs(COMMITTED, -1), {}, (-1, None)),
    (cs(PREPARING, 0), {0: {"a": 0}}, (-1, None)),
    (cs(COMMITTING, 0), {0: {"a": 0}}, (0, {"a": 0})),
    # taken without exactly-once state: no positions stored
    (cs(COMMITTED, 5), {}, (5, None)),
    (cs(PREPARING, 6), {}, (5, None)),
]


@pytest.mark.parametrize(
    ("state", "positions", "point"),
    RESTORE_TABLE,
    ids=[f"{s}-{len(p)}pos" for s, p, _ in RESTORE_TABLE],
)
def test_record_restore_point(
    state: CheckpointState, positions: dict[int, Any], point: tuple[int, Any]
) -> None:
    assert CheckpointRecord(state, positions).restore_point() == point


# -- resolve_exactly_once / can_rewind -----------------------------------------


class RewindSpout:
    def position(self) -> Any:
        return 0

    def seek(self, position: Any) -> None:
        pass


class PlainSpout:
    pass


class HalfSpout:
    position = 3  # not callable

    def seek(self, position: Any) -> None:
        pass


class NoSeekSpout:
    def position(self) -> Any:
        return 0


@pytest.mark.parametrize(
    ("spout", "ok"),
    [(RewindSpout(), True), (PlainSpout(), False), (HalfSpout(), False), (NoSeekSpout(), False)],
    ids=["rewindable", "plain", "position-not-callable", "no-seek"],
)
def test_can_rewind(spout: object, ok: bool) -> None:
    assert can_rewind(spout) is ok


ALL_REWIND = {"a": RewindSpout(), "b": RewindSpout()}
ONE_NOT = {"a": RewindSpout(), "lines": PlainSpout()}

# (setting, stateful, spouts, on, note contains)
RESOLVE_TABLE = [
    ("auto", True, ALL_REWIND, True, None),
    ("auto", True, ONE_NOT, False, "'lines' (PlainSpout)"),
    (True, True, ALL_REWIND, True, None),
    (False, True, ALL_REWIND, False, None),
    (False, True, ONE_NOT, False, None),
    ("auto", False, ALL_REWIND, False, None),
    ("auto", False, ONE_NOT, False, None),
    (True, False, ONE_NOT, False, None),
    ("auto", True, {}, True, None),
]


@pytest.mark.parametrize(
    ("setting", "stateful", "spouts", "on", "note"),
    RESOLVE_TABLE,
    ids=[
        f"{s}-{'stateful' if st else 'stateless'}-{'all' if all(map(can_rewind, sp.values())) else 'one-not'}"
        for s, st, sp, *_ in RESOLVE_TABLE
    ],
)
def test_resolve_exactly_once(
    setting: bool | str, stateful: bool, spouts: dict[str, object], on: bool, note: str | None
) -> None:
    got_on, got_note = resolve_exactly_once(setting, stateful, spouts)
    assert got_on is on
    if note is None:
        assert got_note is None
    else:
        assert got_note is not None and note in got_note
        assert "'a'" not in got_note  # only the spouts that cannot rewind are named


def test_resolve_exactly_once_true_with_a_spout_that_cannot_rewind_raises() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_exactly_once(True, True, ONE_NOT)
    assert str(info.value) == (
        "statestream.state.exactly.once is true, but spout 'lines' (PlainSpout) cannot "
        "rewind: give it position() and seek(position) (see statestream.Rewindable and "
        "FileSpout), or set statestream.state.exactly.once: auto (or false) for Storm's "
        "at-least-once"
    )


def test_resolve_exactly_once_auto_note_says_what_happens() -> None:
    spouts = {"x": PlainSpout(), "y": HalfSpout()}
    assert resolve_exactly_once("auto", True, spouts) == (
        False,
        "exactly-once state is off: spout 'x' (PlainSpout), 'y' (HalfSpout) cannot rewind "
        "(no position()/seek()); stateful bolts are at-least-once (Storm's guarantee)",
    )


def test_resolve_exactly_once_names_every_spout_that_cannot_rewind() -> None:
    spouts = {"x": PlainSpout(), "ok": RewindSpout(), "y": HalfSpout()}
    on, note = resolve_exactly_once("auto", True, spouts)
    assert not on
    assert note is not None and "'x'" in note and "'y'" in note and "'ok'" not in note


# -- check_position ------------------------------------------------------------


@pytest.mark.parametrize(
    "position",
    [None, 0, 12.5, "line 3", True, [1, 2], {"offset": 3, "failed": [[1, "x"]]}],
    ids=repr,
)
def test_check_position_json_passes_through(position: Any) -> None:
    assert check_position("reader", position) is position


@pytest.mark.parametrize(
    ("position", "type_name"),
    [({1, 2}, "set"), (object(), "object"), ({"seen": {3}}, "dict")],
    ids=["set", "object", "nested-set"],
)
def test_check_position_not_json_raises_naming_the_spout(position: Any, type_name: str) -> None:
    with pytest.raises(SerializationError, match=rf"spout 'reader'.*\({type_name}:") as info:
        check_position("reader", position)
    assert isinstance(info.value.__cause__, TypeError)
    assert str(info.value).endswith(
        "positions are stored with the checkpoint, return dicts, lists, strings, numbers, "
        "booleans or None"
    )


# -- Lockstep: the workers' standstill, decided from the round statuses ------


@dataclass
class St:
    """One worker's status of a round, as the lockstep decider reads it."""

    rewind: bool = False
    emitted: int = 0
    queued: bool = False
    sent: bool = False
    failed: bool = False
    holding: bool = False
    prepare_due: bool = False
    committed: int = -1
    in_checkpoint: bool = False
    positions: dict[str, Any] | None = None


def lockstep(decided: StandstillStep = DRAIN, lag: int = 1, cp_worker: int = 0) -> Lockstep:
    ls = Lockstep(Standstill(), lag=lag, checkpoint_worker=cp_worker)
    for _ in range(lag + 1):
        ls.record(decided)
    return ls


def test_lockstep_a_rewind_anywhere_rewinds_every_worker_and_counts_nothing() -> None:
    ls = lockstep()
    got = ls.decide([St(emitted=5), St(rewind=True, emitted=3)], quiet_before=True)
    assert got == REWIND
    assert ls.standstill.emitted == 0


def test_lockstep_holds_the_data_spouts_after_a_cut_for_lag_plus_one_rounds() -> None:
    ls = lockstep()
    positions = ls.cut([St(positions={"s-0": 4}), St(positions={"s-1": 7}), St()])
    assert positions == {"s-0": 4, "s-1": 7}
    assert ls.hold == 2
    assert ls.standstill.emitted == 0 and not ls.standstill.replaying
    quiet = [St(prepare_due=True), St()]
    assert ls.decide(quiet, quiet_before=True) is DRAIN
    assert ls.decide(quiet, quiet_before=True) is DRAIN
    assert ls.hold == 0
    assert ls.decide(quiet, quiet_before=True) is CUT  # the hold is over


def test_lockstep_counts_every_workers_emits_even_while_holding() -> None:
    ls = lockstep()
    ls.hold = 1
    assert ls.decide([St(emitted=2), St(emitted=3)], quiet_before=True) is DRAIN
    assert ls.standstill.emitted == 5


# (quiet before, a POLL among the decisions since, queued or sent in the
#  statuses, checkpoint due) -> step
LOCKSTEP_TABLE = [
    (True, False, False, True, CUT),
    (True, False, True, True, DRAIN),
    (False, False, False, True, DRAIN),  # sent in the rounds before: still in flight
    (True, True, False, True, DRAIN),  # a spout polled since: the positions moved
    (True, False, False, False, POLL),
    (False, True, True, False, POLL),
]


@pytest.mark.parametrize(("quiet_before", "polled", "busy", "due", "step"), LOCKSTEP_TABLE)
def test_lockstep_cuts_only_when_no_worker_has_anything_queued_or_in_flight(
    quiet_before: bool, polled: bool, busy: bool, due: bool, step: StandstillStep
) -> None:
    ls = lockstep()
    if polled:
        ls.record(POLL)
    statuses = [St(prepare_due=due), St(queued=busy, sent=busy)]
    assert ls.decide(statuses, quiet_before) is step


@pytest.mark.parametrize(("cp_worker", "step"), [(0, POLL), (1, CUT)])
def test_lockstep_reads_the_checkpoint_from_the_checkpoint_spouts_worker(
    cp_worker: int, step: StandstillStep
) -> None:
    ls = lockstep(cp_worker=cp_worker)
    assert ls.decide([St(), St(prepare_due=True)], quiet_before=True) is step


def test_lockstep_a_failure_in_any_worker_dooms_the_attempt_in_every_replica() -> None:
    ls = lockstep()
    got = ls.decide([St(prepare_due=True), St(failed=True)], quiet_before=True)
    assert got is DRAIN
    assert ls.standstill.rewind


def test_lockstep_passes_the_commits_to_the_standstill() -> None:
    ls = lockstep()
    ls.standstill.on_rewind()  # a budget binds after a rewind
    budget = ls.standstill.budget
    ls.decide([St(committed=3)], quiet_before=False)
    ls.decide([St(committed=4)], quiet_before=False)
    assert ls.standstill.budget == 2 * budget  # type: ignore[operator]
    # a checkpoint round in flight holds the spouts while the budget binds
    assert ls.decide([St(committed=4, in_checkpoint=True)], quiet_before=False) is DRAIN


# (exactly-once, replaying, a worker failed, a worker holds acks) -> ask for a checkpoint
QUIET_TABLE = [
    (False, False, False, False, False),
    (False, False, False, True, True),
    (True, False, False, False, False),
    (True, True, False, False, True),
    (True, False, True, False, True),
    (True, False, False, True, True),
]


@pytest.mark.parametrize(("eo", "replaying", "failed", "holding", "ask"), QUIET_TABLE)
def test_quiet_round_asks_for_a_checkpoint_when_acks_or_an_attempt_wait_for_one(
    eo: bool, replaying: bool, failed: bool, holding: bool, ask: bool
) -> None:
    ss = Standstill(replaying=replaying) if eo else None
    statuses = [St(), St(failed=failed, holding=holding)]
    assert quiet_wants_checkpoint(ss, statuses) is ask
