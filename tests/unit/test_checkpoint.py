"""The checkpoint spout's state machine, its coordinator, and the bolt barrier."""

from __future__ import annotations

from typing import Any

import pytest

from statestream._checkpoint import (
    Action,
    Barrier,
    CheckpointCoordinator,
    CheckpointState,
    Emission,
    Phase,
    emission,
    next_state,
)
from statestream._errors import ConfigError, ProtocolViolation, StateCorruptError

COMMITTED, PREPARING, COMMITTING = Phase.COMMITTED, Phase.PREPARING, Phase.COMMITTING
PREPARE, COMMIT, ROLLBACK, INITSTATE = (
    Action.PREPARE,
    Action.COMMIT,
    Action.ROLLBACK,
    Action.INITSTATE,
)


def cs(phase: Phase, txid: int) -> CheckpointState:
    return CheckpointState(txid, phase)


# -- the transition table ----------------------------------------------------

# (stored, recovering, next state, action, txid the action is emitted with)
TABLE = [
    (cs(PREPARING, 5), False, cs(COMMITTING, 5), PREPARE, 5),
    (cs(PREPARING, 5), True, cs(COMMITTED, 4), ROLLBACK, 5),
    (cs(COMMITTING, 5), False, cs(COMMITTED, 5), COMMIT, 5),
    (cs(COMMITTING, 5), True, cs(COMMITTED, 5), COMMIT, 5),
    (cs(COMMITTED, 5), False, cs(PREPARING, 6), PREPARE, 6),
    (cs(COMMITTED, 5), True, cs(COMMITTED, 5), INITSTATE, 5),
    # The edges of the txid range.
    (cs(PREPARING, 0), True, cs(COMMITTED, -1), ROLLBACK, 0),
    (cs(COMMITTED, -1), False, cs(PREPARING, 0), PREPARE, 0),
    (cs(COMMITTED, -1), True, cs(COMMITTED, -1), INITSTATE, -1),
]


@pytest.mark.parametrize(
    ("state", "recovering", "nxt", "action", "txid"),
    TABLE,
    ids=[f"{s}-{'recovering' if r else 'normal'}" for s, r, *_ in TABLE],
)
def test_transition_table(
    state: CheckpointState, recovering: bool, nxt: CheckpointState, action: Action, txid: int
) -> None:
    assert next_state(state, recovering) == (nxt, action)
    assert emission(state, recovering) == Emission(action, txid)


def test_table_covers_every_phase_and_mode() -> None:
    assert {(s.phase, r) for s, r, *_ in TABLE} == {(p, r) for p in Phase for r in (False, True)}


def test_committed_recovering_maps_to_the_same_object() -> None:
    state = cs(COMMITTED, 3)
    assert next_state(state, True)[0] is state


# -- CheckpointState -----------------------------------------------------------


@pytest.mark.parametrize("state", [cs(COMMITTED, -1), cs(PREPARING, 0), cs(COMMITTING, 12)])
def test_json_round_trip(state: CheckpointState) -> None:
    data = state.to_json()
    assert data == {"txid": state.txid, "phase": state.phase.value}
    assert CheckpointState.from_json(data) == state


def test_json_shape_and_str() -> None:
    assert cs(PREPARING, 4).to_json() == {"txid": 4, "phase": "PREPARING"}
    assert str(cs(COMMITTING, 4)) == "COMMITTING(4)"
    assert CheckpointState.initial() == cs(COMMITTED, -1)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"txid": 1},
        {"phase": "COMMITTED"},
        {"txid": "1", "phase": "COMMITTED"},
        {"txid": 1.0, "phase": "COMMITTED"},
        {"txid": True, "phase": "COMMITTED"},
        {"txid": 1, "phase": "DONE"},
        {"txid": 1, "phase": "committed"},
        {"txid": -1, "phase": "PREPARING"},
        {"txid": -2, "phase": "COMMITTED"},
        [1, "COMMITTED"],
        None,
    ],
)
def test_from_json_rejects_corrupt_data(data: Any) -> None:
    with pytest.raises(StateCorruptError, match=r"stored checkpoint state .* is not valid") as info:
        CheckpointState.from_json(data)
    assert str(info.value).endswith(
        '; expected e.g. {"txid": 4, "phase": "COMMITTED"} '
        "(phases: COMMITTED, PREPARING, COMMITTING)"
    )


@pytest.mark.parametrize(
    ("txid", "phase", "error", "message"),
    [
        (-1, PREPARING, ValueError, "CheckpointState(-1, PREPARING): txid must be >= 0 in phase PREPARING"),
        (-1, COMMITTING, ValueError, "CheckpointState(-1, COMMITTING): txid must be >= 0 in phase COMMITTING"),
        (-2, COMMITTED, ValueError, "CheckpointState(-2, COMMITTED): txid must be >= -1 in phase COMMITTED"),
        ("3", COMMITTED, TypeError, "CheckpointState.txid must be an int, got '3'"),
        (False, COMMITTED, TypeError, "CheckpointState.txid must be an int, got False"),
        (3, "COMMITTED", TypeError, "CheckpointState.phase must be a Phase, got 'COMMITTED'"),
    ],
)  # fmt: skip
def test_state_validates_its_fields(
    txid: Any, phase: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        CheckpointState(txid, phase)
    assert str(info.value) == message


# -- the coordinator: scripted sequences --------------------------------------


class Harness:
    """Drives a coordinator and logs saves and emissions in the order they happen."""

    def __init__(self, stored: CheckpointState | None, interval_ms: int = 1000) -> None:
        self.log: list[str] = []
        self.coord = CheckpointCoordinator(stored, interval_ms, self._save)

    def _save(self, state: CheckpointState) -> None:
        self.log.append(f"save {state}")

    def poll(self, now: float) -> Emission | None:
        out = self.coord.poll(now)
        if out is not None:
            self.log.append(f"emit {out.action.value} {out.txid}")
        return out

    def ack(self, now: float | None = None) -> None:
        pending = self.coord.pending
        assert pending is not None, "nothing in flight to ack"
        self.coord.on_ack(pending.action, pending.txid, now)

    def fail(self) -> None:
        pending = self.coord.pending
        assert pending is not None, "nothing in flight to fail"
        self.coord.on_fail(pending.action, pending.txid)


def test_fresh_start_initstate_then_prepare_0_after_the_interval_then_commit_0() -> None:
    h = Harness(None, interval_ms=1000)
    assert h.coord.recovering
    assert h.poll(0) == Emission(INITSTATE, -1)
    assert h.poll(1) is None  # one checkpoint in flight at most
    h.ack(now=5)
    assert not h.coord.recovering
    assert h.poll(6) is None
    assert h.poll(1004) is None
    assert h.poll(1005) == Emission(PREPARE, 0)
    h.ack()
    assert h.poll(1006) == Emission(COMMIT, 0)  # at once, no interval
    h.ack(now=1500)
    assert h.poll(2499) is None
    assert h.poll(2500) == Emission(PREPARE, 1)
    assert h.log == [
        "emit INITSTATE -1",
        "save PREPARING(0)",
        "emit PREPARE 0",
        "save COMMITTING(0)",
        "emit COMMIT 0",
        "save COMMITTED(0)",
        "save PREPARING(1)",
        "emit PREPARE 1",
    ]


def test_prepare_due_says_when_poll_would_start_a_prepare_without_saving() -> None:
    h = Harness(cs(COMMITTED, 4), interval_ms=100)
    assert not h.coord.prepare_due(0)  # recovering: INITSTATE first
    assert not h.coord.prepare_due(0, early=True)
    assert h.poll(0) == Emission(INITSTATE, 4)
    assert not h.coord.prepare_due(10**6)  # INITSTATE in flight
    h.ack()  # no time: the first prepare_due stamps it
    assert not h.coord.prepare_due(50)
    assert not h.coord.prepare_due(149)
    assert h.coord.prepare_due(60, early=True)
    assert h.log == ["emit INITSTATE 4"]  # asking saves nothing
    assert h.coord.prepare_due(150)
    assert h.poll(150) == Emission(PREPARE, 5)
    assert not h.coord.prepare_due(10**6)  # PREPARE in flight
    h.ack()
    assert not h.coord.prepare_due(10**6)  # COMMITTING: COMMIT is next, not a prepare
    assert h.poll(151) == Emission(COMMIT, 5)


def test_without_an_ack_time_the_interval_counts_from_the_next_poll() -> None:
    h = Harness(None, interval_ms=100)
    h.poll(0)
    h.ack()  # no time given
    assert h.poll(50) is None  # the recovery is stamped as ended at 50
    assert h.poll(149) is None
    assert h.poll(150) == Emission(PREPARE, 0)


def test_poll_early_starts_a_prepare_before_the_interval_and_without_early_does_not() -> None:
    h = Harness(cs(COMMITTED, 2), interval_ms=1000)
    assert h.poll(0) == Emission(INITSTATE, 2)
    h.ack(now=0)
    assert h.coord.poll(1) is None  # the interval has not passed
    assert h.coord.poll(999) is None
    assert h.coord.poll(2, early=True) == Emission(PREPARE, 3)
    h.ack()
    assert h.coord.poll(3, early=True) == Emission(COMMIT, 3)
    h.ack(now=10)
    assert h.coord.poll(500) is None  # early is for one poll only: the interval again
    assert h.coord.poll(1009) is None
    assert h.coord.poll(1010) == Emission(PREPARE, 4)


def test_poll_early_does_not_skip_recovery_or_a_checkpoint_in_flight() -> None:
    h = Harness(cs(PREPARING, 5), interval_ms=1000)
    assert h.coord.poll(0, early=True) == Emission(ROLLBACK, 5)
    assert h.coord.poll(1, early=True) is None  # ROLLBACK in flight
    h.ack()
    assert h.coord.poll(2, early=True) == Emission(INITSTATE, 4)
    h.ack(now=2)
    assert h.coord.poll(3, early=True) == Emission(PREPARE, 5)


def test_zero_interval_prepares_right_after_recovery() -> None:
    h = Harness(cs(COMMITTED, 7), interval_ms=0)
    assert h.poll(0) == Emission(INITSTATE, 7)
    h.ack(now=0)
    assert h.poll(0) == Emission(PREPARE, 8)


def test_recovery_does_not_wait_for_the_interval() -> None:
    h = Harness(cs(PREPARING, 3), interval_ms=10**9)
    assert h.poll(0) == Emission(ROLLBACK, 3)
    h.ack()
    assert h.poll(0) == Emission(INITSTATE, 2)


def test_failed_prepare_is_followed_by_rollback() -> None:
    h = Harness(cs(COMMITTED, 4), interval_ms=100)
    h.poll(0)
    h.ack(now=0)
    assert h.poll(100) == Emission(PREPARE, 5)
    h.fail()
    assert h.coord.recovering
    assert h.poll(100) == Emission(ROLLBACK, 5)
    h.ack()
    assert h.poll(101) == Emission(INITSTATE, 4)
    h.ack(now=150)
    assert h.poll(249) is None
    assert h.poll(250) == Emission(PREPARE, 5)  # the same txid is prepared again
    assert h.log == [
        "emit INITSTATE 4",
        "save PREPARING(5)",
        "emit PREPARE 5",
        "emit ROLLBACK 5",  # a fail saves nothing: PREPARING(5) already says "roll back"
        "save COMMITTED(4)",
        "emit INITSTATE 4",
        "save PREPARING(5)",
        "emit PREPARE 5",
    ]


def test_failed_commit_is_resent() -> None:
    h = Harness(cs(COMMITTED, 4), interval_ms=100)
    h.poll(0)
    h.ack(now=0)
    h.poll(100)
    h.ack()
    assert h.poll(100) == Emission(COMMIT, 5)
    h.fail()
    assert h.poll(100) == Emission(COMMIT, 5)
    h.fail()
    assert h.poll(100) == Emission(COMMIT, 5)
    h.ack()
    assert h.coord.state == cs(COMMITTED, 5)
    assert h.poll(100) == Emission(INITSTATE, 5)  # for bolts that restarted
    h.ack(now=100)
    assert not h.coord.recovering
    assert h.poll(200) == Emission(PREPARE, 6)
    assert h.log == [
        "emit INITSTATE 4",
        "save PREPARING(5)",
        "emit PREPARE 5",
        "save COMMITTING(5)",
        "emit COMMIT 5",
        "emit COMMIT 5",
        "emit COMMIT 5",
        "save COMMITTED(5)",
        "emit INITSTATE 5",
        "save PREPARING(6)",
        "emit PREPARE 6",
    ]


def test_stored_preparing_100_recovers_with_rollback_100_initstate_99_prepare_100() -> None:
    h = Harness(cs(PREPARING, 100), interval_ms=1000)
    assert h.poll(0) == Emission(ROLLBACK, 100)
    h.ack()
    assert h.poll(0) == Emission(INITSTATE, 99)
    h.ack(now=0)
    assert h.poll(999) is None
    assert h.poll(1000) == Emission(PREPARE, 100)
    assert h.log == [
        "emit ROLLBACK 100",
        "save COMMITTED(99)",
        "emit INITSTATE 99",
        "save PREPARING(100)",
        "emit PREPARE 100",
    ]


def test_stored_committing_100_recovers_with_commit_100_then_initstate_100() -> None:
    h = Harness(cs(COMMITTING, 100), interval_ms=1000)
    assert h.poll(0) == Emission(COMMIT, 100)
    h.ack()
    assert h.poll(0) == Emission(INITSTATE, 100)
    h.ack(now=0)
    assert h.poll(1000) == Emission(PREPARE, 101)
    assert h.log == [
        "emit COMMIT 100",
        "save COMMITTED(100)",
        "emit INITSTATE 100",
        "save PREPARING(101)",
        "emit PREPARE 101",
    ]


@pytest.mark.parametrize(
    ("stored", "first"),
    [(cs(PREPARING, 3), Emission(ROLLBACK, 3)), (cs(COMMITTED, 3), Emission(INITSTATE, 3))],
)
def test_failed_recovery_actions_are_resent(stored: CheckpointState, first: Emission) -> None:
    h = Harness(stored)
    for _ in range(3):
        assert h.poll(0) == first
        h.fail()
        assert h.coord.recovering
    assert h.log == [f"emit {first.action.value} {first.txid}"] * 3


# -- the coordinator: every (in-flight action, recovering, reply) pair ---------


def in_flight(phase: Phase, recovering: bool) -> Harness:
    """A harness with the action of ``phase(5)`` in flight, in the given mode."""
    if recovering:
        h = Harness(cs(phase, 5), interval_ms=100)
        h.poll(0)
    else:
        h = Harness(cs(COMMITTED, 4), interval_ms=100)
        h.poll(0)
        h.ack(now=0)
        h.poll(100)  # PREPARE 5
        if phase is COMMITTING:
            h.ack()
            h.poll(100)  # COMMIT 5
    assert h.coord.state == cs(phase, 5)
    assert h.coord.recovering is recovering
    h.log.clear()
    return h


# (phase, recovering, reply, log of the reply and the poll at 100, recovering after,
#  log of a poll at 200)
REPLIES = [
    (PREPARING, True, "ack", ["save COMMITTED(4)", "emit INITSTATE 4"], True, []),
    (PREPARING, True, "fail", ["emit ROLLBACK 5"], True, []),
    (COMMITTING, True, "ack", ["save COMMITTED(5)", "emit INITSTATE 5"], True, []),
    (COMMITTING, True, "fail", ["emit COMMIT 5"], True, []),
    (COMMITTED, True, "ack", [], False, ["save PREPARING(6)", "emit PREPARE 6"]),
    (COMMITTED, True, "fail", ["emit INITSTATE 5"], True, []),
    (PREPARING, False, "ack", ["save COMMITTING(5)", "emit COMMIT 5"], False, []),
    (PREPARING, False, "fail", ["emit ROLLBACK 5"], True, []),
    (
        COMMITTING,
        False,
        "ack",
        ["save COMMITTED(5)"],
        False,
        ["save PREPARING(6)", "emit PREPARE 6"],
    ),
    (COMMITTING, False, "fail", ["emit COMMIT 5"], True, []),
]


@pytest.mark.parametrize(
    ("phase", "recovering", "reply", "log_now", "recovering_after", "log_later"),
    REPLIES,
    ids=[f"{p.value}-{'recovering' if r else 'normal'}-{a}" for p, r, a, *_ in REPLIES],
)
def test_reply_table(
    phase: Phase,
    recovering: bool,
    reply: str,
    log_now: list[str],
    recovering_after: bool,
    log_later: list[str],
) -> None:
    h = in_flight(phase, recovering)
    if reply == "ack":
        h.ack(now=100)
    else:
        h.fail()
    h.poll(100)
    assert h.log == log_now
    assert h.coord.recovering is recovering_after
    h.log.clear()
    if h.coord.pending is None:
        h.poll(200)
    assert h.log == log_later


def test_reply_table_covers_every_in_flight_situation() -> None:
    # COMMITTED is never in flight outside recovery: its PREPARE is sent from PREPARING.
    expected = {(p, r, a) for p in Phase for r in (False, True) for a in ("ack", "fail")}
    expected -= {(COMMITTED, False, "ack"), (COMMITTED, False, "fail")}
    assert {(p, r, a) for p, r, a, *_ in REPLIES} == expected


# -- the coordinator: stale replies, save failures, configuration --------------

STALE = [
    ("ack", PREPARE, 4),
    ("ack", COMMIT, 5),
    ("ack", ROLLBACK, 5),
    ("fail", PREPARE, 6),
    ("fail", INITSTATE, 5),
]


@pytest.mark.parametrize(("reply", "action", "txid"), STALE)
def test_replies_for_something_not_in_flight_are_ignored_and_counted(
    reply: str, action: Action, txid: int
) -> None:
    h = in_flight(PREPARING, False)  # PREPARE 5 in flight
    handler = h.coord.on_ack if reply == "ack" else h.coord.on_fail
    handler(action, txid)
    assert h.coord.stale_replies == 1
    assert h.coord.pending == Emission(PREPARE, 5)
    assert h.coord.state == cs(PREPARING, 5)
    assert not h.coord.recovering
    assert h.log == []


def test_duplicate_ack_and_replies_with_nothing_in_flight_are_stale() -> None:
    h = Harness(None, interval_ms=100)
    h.coord.on_ack(INITSTATE, -1)  # nothing emitted yet
    h.poll(0)
    h.coord.on_ack(INITSTATE, -1)
    h.coord.on_ack(INITSTATE, -1)  # duplicate
    h.coord.on_fail(INITSTATE, -1)
    assert h.coord.stale_replies == 3
    assert not h.coord.recovering
    assert h.coord.pending is None


def test_string_actions_match_the_enum() -> None:
    h = Harness(None)
    h.poll(0)
    h.coord.on_ack("INITSTATE", -1)  # type: ignore[arg-type]
    assert not h.coord.recovering
    assert h.coord.stale_replies == 0


class Flaky:
    """A save callback that fails while ``broken`` is set."""

    def __init__(self) -> None:
        self.broken = False
        self.saved: list[CheckpointState] = []

    def __call__(self, state: CheckpointState) -> None:
        if self.broken:
            raise OSError("disk full")
        self.saved.append(state)


def test_a_failed_save_before_prepare_emits_nothing_and_can_be_retried() -> None:
    save = Flaky()
    coord = CheckpointCoordinator(cs(COMMITTED, 1), 0, save)
    coord.on_ack(*coord.poll(0))  # type: ignore[misc]
    save.broken = True
    with pytest.raises(OSError, match="disk full"):
        coord.poll(10)
    assert coord.state == cs(COMMITTED, 1)
    assert coord.pending is None
    save.broken = False
    assert coord.poll(11) == Emission(PREPARE, 2)
    assert save.saved == [cs(PREPARING, 2)]


def test_a_failed_save_on_ack_leaves_the_emission_in_flight() -> None:
    save = Flaky()
    coord = CheckpointCoordinator(cs(PREPARING, 9), 0, save)
    assert coord.poll(0) == Emission(ROLLBACK, 9)
    save.broken = True
    with pytest.raises(OSError):
        coord.on_ack(ROLLBACK, 9)
    assert coord.state == cs(PREPARING, 9)
    assert coord.pending == Emission(ROLLBACK, 9)
    save.broken = False
    coord.on_ack(ROLLBACK, 9)
    assert coord.state == cs(COMMITTED, 8)
    assert save.saved == [cs(COMMITTED, 8)]


@pytest.mark.parametrize("interval", [-1, True, "1000", None])
def test_interval_must_be_a_non_negative_number(interval: Any) -> None:
    with pytest.raises(ConfigError, match=r"topology\.state\.checkpoint\.interval\.ms"):
        CheckpointCoordinator(None, interval, lambda s: None)


def test_initial_properties_and_repr() -> None:
    coord = CheckpointCoordinator(None, 1000, lambda s: None)
    assert coord.state == cs(COMMITTED, -1)
    assert coord.recovering is True
    assert coord.pending is None
    assert coord.stale_replies == 0
    assert repr(coord) == (
        "CheckpointCoordinator(state=COMMITTED(-1), recovering=True, pending=None)"
    )


# -- the barrier ---------------------------------------------------------------

SPOUT = ("$checkpointspout", 0)
X, Y, Z = ("split", 0), ("split", 1), ("other", 0)
P1, P2, C1, R1 = (PREPARE, 1), (PREPARE, 2), (COMMIT, 1), (ROLLBACK, 1)

# (name, upstream, arrivals as (source, (action, txid)), expected return of each)
BARRIER_TABLE: list[tuple[str, frozenset[tuple[str, int]], list[Any], list[bool]]] = [
    ("single source fires at once", frozenset({SPOUT}), [(SPOUT, P1)], [True]),
    ("a re-sent round fires again", frozenset({SPOUT}), [(SPOUT, C1), (SPOUT, C1)], [True, True]),
    (
        "waits for every source",
        frozenset({X, Y, Z}),
        [(X, P1), (Y, P1), (Z, P1)],
        [False, False, True],
    ),
    ("any arrival order", frozenset({X, Y}), [(Y, P1), (X, P1)], [False, True]),
    (
        "a duplicate counts once",
        frozenset({X, Y}),
        [(X, P1), (X, P1), (Y, P1)],
        [False, False, True],
    ),
    (
        "fires once per round, then starts empty",
        frozenset({X, Y}),
        [(X, P1), (Y, P1), (X, C1), (Y, C1)],
        [False, True, False, True],
    ),
    (
        "a new action supersedes an incomplete round",
        frozenset({X, Y}),
        [(X, P1), (Y, R1), (X, R1)],
        [False, False, True],
    ),
    (
        "a new txid supersedes an incomplete round",
        frozenset({X, Y}),
        [(X, P1), (Y, P2), (X, P2)],
        [False, False, True],
    ),
    (
        "the stale round never fires",
        frozenset({X, Y}),
        [(X, P1), (X, R1), (Y, P1)],  # X moved on: its P1 no longer counts
        [False, False, False],
    ),
    (
        "a straggler of the stale round does not erase the new one",
        frozenset({X, Y}),
        [(X, R1), (Y, P1), (Y, R1)],
        [False, False, True],
    ),
    # A round that fired and is re-sent (a re-sent COMMIT, ROLLBACK or
    # INITSTATE) fires again only once every upstream task sent it again.
    (
        "a re-sent COMMIT waits for every source again",
        frozenset({X, Y}),
        [(X, C1), (Y, C1), (X, C1), (X, C1), (Y, C1)],
        [False, True, False, False, True],
    ),
    (
        "a re-sent ROLLBACK waits for every source again",
        frozenset({X, Y, Z}),
        [(Z, R1), (X, R1), (Y, R1), (Y, R1), (Z, R1), (X, R1)],
        [False, False, True, False, False, True],
    ),
    (
        "a re-sent INITSTATE waits for every source again",
        frozenset({X, Y}),
        [(Y, (INITSTATE, 0)), (X, (INITSTATE, 0)), (Y, (INITSTATE, 0)), (X, (INITSTATE, 0))],
        [False, True, False, True],
    ),
    (
        "the same checkpoint again after others counts anew",
        frozenset({X, Y}),
        [(X, C1), (X, P2), (X, C1), (Y, C1)],
        [False, False, False, True],
    ),
]


@pytest.mark.parametrize(
    ("upstream", "arrivals", "expected"),
    [row[1:] for row in BARRIER_TABLE],
    ids=[row[0] for row in BARRIER_TABLE],
)
def test_barrier_table(
    upstream: frozenset[tuple[str, int]], arrivals: list[Any], expected: list[bool]
) -> None:
    barrier = Barrier(upstream)
    got = [barrier.arrive(source, action, txid) for source, (action, txid) in arrivals]
    assert got == expected


def test_barrier_exposes_the_open_round() -> None:
    barrier = Barrier(frozenset({X, Y, Z}))
    assert barrier.current is None
    assert barrier.arrived == frozenset()
    barrier.arrive(X, PREPARE, 1)
    barrier.arrive(Y, PREPARE, 1)
    assert barrier.current == Emission(PREPARE, 1)
    assert barrier.arrived == frozenset({X, Y})
    assert (
        repr(barrier)
        == "Barrier(current=Emission(action=<Action.PREPARE: 'PREPARE'>, txid=1), arrived=2/3)"
    )
    barrier.arrive(Y, ROLLBACK, 1)
    assert barrier.current == Emission(ROLLBACK, 1)
    assert barrier.arrived == frozenset({Y})
    assert barrier.upstream == frozenset({X, Y, Z})


def test_barrier_reset_drops_the_incomplete_round() -> None:
    barrier = Barrier(frozenset({X, Y}))
    assert repr(barrier) == "Barrier(current=None, arrived=0/2)"
    assert barrier.arrive(X, COMMIT, 3) is False
    barrier.reset()
    assert barrier.current is None
    assert repr(barrier) == "Barrier(current=None, arrived=0/2)"
    assert barrier.arrive(Y, COMMIT, 3) is False  # X's delivery was forgotten
    assert barrier.arrive(X, COMMIT, 3) is True


def test_barrier_rejects_an_unknown_source() -> None:
    barrier = Barrier(frozenset({X, Y}))
    with pytest.raises(
        ProtocolViolation, match=r"PREPARE\(1\) from other\[0\].*upstream: split\[0\], split\[1\]"
    ):
        barrier.arrive(Z, PREPARE, 1)
    assert barrier.current is None


def test_barrier_needs_an_upstream() -> None:
    with pytest.raises(ValueError) as info:
        Barrier(frozenset())
    assert str(info.value) == (
        "Barrier needs at least one upstream (component, task); a bolt receives "
        "checkpoint tuples from the checkpoint spout or from its upstream bolts"
    )
