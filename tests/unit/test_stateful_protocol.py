"""StatefulTaskProtocol: which acks a checkpoint action releases and which roots it fails."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from statestream import StatefulBolt
from statestream._checkpoint import Action
from statestream._errors import PrepareRefused, ProtocolViolation, RuntimeFailure
from statestream._stateful import HeldAcks, RefusedPrepares, StatefulTaskProtocol, apply_action
from statestream_providers.memory import MemoryStateProvider


class _Recorder(StatefulBolt):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def init_state(self, state: object) -> None:
        self.calls.append("init_state")

    def pre_prepare(self, txid: int) -> None:
        self.calls.append(f"pre_prepare {txid}")

    def pre_commit(self, txid: int) -> None:
        self.calls.append(f"pre_commit {txid}")

    def pre_rollback(self) -> None:
        self.calls.append("pre_rollback")


Setup = tuple[StatefulTaskProtocol, _Recorder, Any]


def acks(by_root: dict[int, int]) -> list[tuple[int, int]]:
    """Acks as a task hands them over: (root, XOR value) pairs."""
    return list(by_root.items())


def xors(pairs: list[tuple[int, int]]) -> dict[int, int]:
    """Released pairs as the acker adds them up: XOR per root."""
    out: dict[int, int] = {}
    for root, value in pairs:
        out[root] = out.get(root, 0) ^ value
    return out


def acted(result: tuple[list[tuple[int, int]], set[int]]) -> tuple[dict[int, int], set[int]]:
    return xors(result[0]), result[1]


@pytest.fixture
def setup() -> Setup:
    bolt = _Recorder()
    state = MemoryStateProvider.from_config({"name": uuid.uuid4().hex}).get_state("b-0")
    return StatefulTaskProtocol(bolt), bolt, state


def test_acks_are_released_by_the_commit_that_covers_them(setup: Setup) -> None:
    proto, bolt, state = setup
    assert acted(proto.act(state, Action.INITSTATE, -1)) == ({}, set())
    assert proto.ready
    proto.hold(acks({1: 0b1010, 2: 0b0001}))
    assert acted(proto.act(state, Action.PREPARE, 0)) == ({}, set())
    proto.hold(acks({1: 0b1010, 3: 0b0100}))  # after the prepare: belongs to the next txid
    assert acted(proto.act(state, Action.COMMIT, 0)) == ({1: 0b1010, 2: 0b0001}, set())
    assert acted(proto.act(state, Action.PREPARE, 1)) == ({}, set())
    assert acted(proto.act(state, Action.COMMIT, 1)) == ({1: 0b1010, 3: 0b0100}, set())
    assert bolt.calls == [
        "init_state",
        "pre_prepare 0",
        "pre_commit 0",
        "pre_prepare 1",
        "pre_commit 1",
    ]


def test_a_rollback_fails_every_held_root_and_waits_for_initstate(setup: Setup) -> None:
    proto, bolt, state = setup
    proto.act(state, Action.INITSTATE, -1)
    proto.hold(acks({1: 5}))
    proto.act(state, Action.PREPARE, 0)
    proto.hold(acks({2: 6}))
    assert acted(proto.act(state, Action.ROLLBACK, 0)) == ({}, {1, 2})
    assert proto.ready is False
    assert len(proto.held) == 0
    proto.act(state, Action.INITSTATE, -1)
    assert proto.ready
    assert bolt.calls == ["init_state", "pre_prepare 0", "pre_rollback", "init_state"]


def test_prepare_before_initstate_is_refused_and_holds_on_to_the_acks(setup: Setup) -> None:
    proto, _, state = setup
    proto.hold(acks({7: 1}))
    with pytest.raises(ProtocolViolation, match="before INITSTATE") as info:
        proto.act(state, Action.PREPARE, 0)
    assert not isinstance(info.value, PrepareRefused), "not the store's refusal"
    assert len(proto.held) == 1


@pytest.mark.parametrize(
    ("committed", "prepared", "txid", "why"),
    [
        (3, None, 3, "txid 3 is committed already"),
        (3, None, 1, "txid 3 is committed already"),
        (3, 4, 6, "txid 4 is prepared and not committed"),
    ],
)
def test_a_prepare_the_stored_txids_refuse_is_a_prepare_refused(
    setup: Setup, committed: int, prepared: int | None, txid: int, why: str
) -> None:
    proto, bolt, state = setup
    proto.act(state, Action.INITSTATE, committed)
    state.prepare_commit(committed)
    state.commit(committed)
    if prepared is not None:
        state.prepare_commit(prepared)
    with pytest.raises(PrepareRefused, match=why) as info:
        proto.act(state, Action.PREPARE, txid)
    assert isinstance(info.value.__cause__, ProtocolViolation)
    assert bolt.calls[-1] == f"pre_prepare {txid}"  # the hook ran; the state refused


def test_an_error_of_the_pre_prepare_hook_is_not_a_refusal(setup: Setup) -> None:
    proto, bolt, state = setup

    def pre_prepare(txid: int) -> None:
        raise ProtocolViolation("the bolt's own")

    bolt.pre_prepare = pre_prepare  # type: ignore[method-assign]
    proto.act(state, Action.INITSTATE, -1)
    with pytest.raises(ProtocolViolation, match="the bolt's own") as info:
        proto.act(state, Action.PREPARE, 0)
    assert not isinstance(info.value, PrepareRefused)


# (refusals reported, in order) -> the refusal that stops the run (its index), if any
REFUSAL_TABLE: list[tuple[list[str], int | None]] = [
    ([], None),
    (["w/count-0"], None),  # once: the run recovers and tries again
    (["w/count-0", "w/count-1"], None),  # one each
    (["w/count-0", "w/count-0"], 1),  # again after the recovery: stop
    (["w/count-0", "w/count-1", "w/count-1"], 2),
    (["w/count-0", "w/count-1", "w/count-0", "w/count-1"], 2),
]


@pytest.mark.parametrize(("refusals", "fatal_at"), REFUSAL_TABLE)
def test_refused_prepares_stop_the_run_at_a_namespace_s_second_refusal(
    refusals: list[str], fatal_at: int | None
) -> None:
    decider = RefusedPrepares()
    verdicts = [decider.refused(ns) for ns in refusals]
    assert next((i for i, stop in enumerate(verdicts) if stop), None) == fatal_at


def test_the_fatal_error_names_the_namespace_the_cause_and_the_fix() -> None:
    cause = PrepareRefused("state 'w/count-0': cannot prepare txid 4: txid 9 is committed already")
    error = RefusedPrepares.fatal("w/count-0", "w", "SQLiteStateProvider(path='s.db')", cause)
    assert isinstance(error, RuntimeFailure)
    assert error.__cause__ is cause
    message = str(error)
    assert message.startswith("state 'w/count-0' refused a checkpoint's PREPARE again")
    assert "txid 9 is committed already" in message
    assert "another run of topology 'w' writing the same store" in message
    assert "(SQLiteStateProvider(path='s.db'))" in message
    assert "another topology name or store" in message


def test_held_acks_merge_a_re_prepared_txid_and_release_every_covered_txid() -> None:
    held = HeldAcks()
    held.hold(acks({1: 0b0011}))
    held.prepare(4)
    held.hold(acks({1: 0b0101, 2: 0b1000}))
    held.prepare(4)  # txid 4 prepared again: merged, XOR per root
    held.hold(acks({3: 0b0001}))
    held.prepare(5)
    held.hold(acks({9: 0b1111}))  # not covered by any prepare yet
    assert len(held) == 5  # pairs as made: root 1 twice
    # Committing 5 releases what 4 and 5 covered (a lost COMMIT 4 is implied).
    assert xors(held.commit(5)) == {1: 0b0110, 2: 0b1000, 3: 0b0001}
    assert xors(held.commit(5)) == {}
    assert held.rollback() == {9}
    assert len(held) == 0


def test_held_acks_hand_over_a_single_txid_without_mixing_later_acks() -> None:
    held = HeldAcks()
    held.hold(acks({1: 1}))
    held.prepare(0)
    held.hold(acks({1: 2}))  # after the prepare: the next txid's
    released = held.commit(0)
    assert released == [(1, 1)]
    held.prepare(1)
    released.append((1, 99))  # the caller owns what was released
    assert xors(held.commit(1)) == {1: 2}


def test_held_acks_of_one_root_in_two_holds_before_a_prepare_combine_by_xor() -> None:
    held = HeldAcks()
    first = acks({1: 0b0110, 2: 0b0001})
    held.hold(first)
    first[0] = (1, 0)  # the caller keeps its list: what was held does not change
    held.hold(acks({1: 0b0011}))  # a second drain before the same prepare
    assert len(held) == 3
    held.prepare(0)
    assert xors(held.commit(0)) == {1: 0b0101, 2: 0b0001}


@pytest.mark.parametrize(
    ("holds", "expected"),
    [
        ([{1: 1}, {1: 2, 2: 4, 3: 8}], {1: 3, 2: 4, 3: 8}),  # the second is larger
        ([{1: 2, 2: 4, 3: 8}, {1: 1}], {1: 3, 2: 4, 3: 8}),  # the first is larger
        ([{1: 5}, {1: 5}], {}),  # XOR to zero: the tree is done (released as 0)
        ([{}, {7: 1}, {}], {7: 1}),
    ],
)
def test_held_acks_released_add_up_by_xor_whichever_hold_is_larger(
    holds: list[dict[int, int]], expected: dict[int, int]
) -> None:
    held = HeldAcks()
    given = [acks(h) for h in holds]
    copies = [list(g) for g in given]
    for g in given:
        held.hold(g)
    assert given == copies, "hold changed a caller's list"
    held.prepare(0)
    released = xors(held.commit(0))
    assert {r: v for r, v in released.items() if v} == expected


def test_a_commit_resent_after_it_committed_is_a_noop_for_the_state(setup: Setup) -> None:
    proto, bolt, state = setup
    proto.act(state, Action.INITSTATE, -1)
    state.put("a", 1)
    proto.hold(acks({1: 0b0101}))
    proto.act(state, Action.PREPARE, 0)
    assert acted(proto.act(state, Action.COMMIT, 0)) == ({1: 0b0101}, set())
    # The round is re-sent (it failed at another task): no re-prepare, no error.
    assert acted(proto.act(state, Action.COMMIT, 0)) == ({}, set())
    assert (state.committed_txid, state.prepared_txid) == (0, None)
    assert bolt.calls == ["init_state", "pre_prepare 0", "pre_commit 0", "pre_commit 0"]
    state.put("a", 2)
    proto.act(state, Action.PREPARE, 1)
    proto.act(state, Action.COMMIT, 1)
    assert state.committed_txid == 1


def test_a_commit_to_a_state_that_missed_the_prepare_joins_at_that_txid(setup: Setup) -> None:
    # A task that was not in the topology for PREPARE(3) (added, or its state
    # reset) gets COMMIT(3): it moves to 3, so that PREPARE(4) is accepted.
    proto, _, state = setup
    proto.act(state, Action.INITSTATE, 2)
    state.put("a", 1)
    assert acted(proto.act(state, Action.COMMIT, 3)) == ({}, set())
    assert (state.committed_txid, state.prepared_txid) == (3, None)
    assert state.get("a") == 1
    proto.act(state, Action.PREPARE, 4)
    proto.act(state, Action.COMMIT, 4)
    assert state.committed_txid == 4


def test_a_new_protocol_is_not_ready_until_initstate(setup: Setup) -> None:
    proto, _, state = setup
    assert proto.ready is False
    proto.act(state, Action.INITSTATE, -1)
    assert proto.ready is True


def test_held_acks_of_one_root_in_several_committed_txids_combine_by_xor() -> None:
    held = HeldAcks()
    held.hold(acks({1: 0b0011, 2: 0b0100}))
    held.prepare(4)
    held.hold(acks({1: 0b0101}))
    held.prepare(5)
    # COMMIT 4 was lost; COMMIT 5 releases both txids, root 1 XOR-combined.
    assert xors(held.commit(5)) == {1: 0b0110, 2: 0b0100}


def test_apply_action_refuses_an_unknown_action(setup: Setup) -> None:
    _, bolt, state = setup
    with pytest.raises(ProtocolViolation, match=r"^unknown checkpoint action 'RESET'$"):
        apply_action(bolt, state, "RESET", 0, True)  # type: ignore[arg-type]
    assert bolt.calls == []
