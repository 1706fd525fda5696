"""StatefulTaskProtocol: which acks a checkpoint action releases and which roots it fails."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from statestream import StatefulBolt
from statestream._checkpoint import Action
from statestream._errors import ProtocolViolation
from statestream._stateful import HeldAcks, StatefulTaskProtocol, apply_action
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


@pytest.fixture
def setup() -> Setup:
    bolt = _Recorder()
    state = MemoryStateProvider.from_config({"name": uuid.uuid4().hex}).get_state("b-0")
    return StatefulTaskProtocol(bolt), bolt, state


def test_acks_are_released_by_the_commit_that_covers_them(setup: Setup) -> None:
    proto, bolt, state = setup
    assert proto.act(state, Action.INITSTATE, -1) == ({}, set())
    assert proto.ready
    proto.hold({1: 0b1010, 2: 0b0001})
    assert proto.act(state, Action.PREPARE, 0) == ({}, set())
    proto.hold({1: 0b1010, 3: 0b0100})  # after the prepare: belongs to the next txid
    assert proto.act(state, Action.COMMIT, 0) == ({1: 0b1010, 2: 0b0001}, set())
    assert proto.act(state, Action.PREPARE, 1) == ({}, set())
    assert proto.act(state, Action.COMMIT, 1) == ({1: 0b1010, 3: 0b0100}, set())
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
    proto.hold({1: 5})
    proto.act(state, Action.PREPARE, 0)
    proto.hold({2: 6})
    assert proto.act(state, Action.ROLLBACK, 0) == ({}, {1, 2})
    assert proto.ready is False
    assert len(proto.held) == 0
    proto.act(state, Action.INITSTATE, -1)
    assert proto.ready
    assert bolt.calls == ["init_state", "pre_prepare 0", "pre_rollback", "init_state"]


def test_prepare_before_initstate_is_refused_and_holds_on_to_the_acks(setup: Setup) -> None:
    proto, _, state = setup
    proto.hold({7: 1})
    with pytest.raises(ProtocolViolation, match="before INITSTATE"):
        proto.act(state, Action.PREPARE, 0)
    assert len(proto.held) == 1


def test_held_acks_merge_a_re_prepared_txid_and_release_every_covered_txid() -> None:
    held = HeldAcks()
    held.hold({1: 0b0011})
    held.prepare(4)
    held.hold({1: 0b0101, 2: 0b1000})
    held.prepare(4)  # txid 4 prepared again: merged, XOR per root
    held.hold({3: 0b0001})
    held.prepare(5)
    held.hold({9: 0b1111})  # not covered by any prepare yet
    assert len(held) == 4
    # Committing 5 releases what 4 and 5 covered (a lost COMMIT 4 is implied).
    assert held.commit(5) == {1: 0b0110, 2: 0b1000, 3: 0b0001}
    assert held.commit(5) == {}
    assert held.rollback() == {9}
    assert len(held) == 0


def test_held_acks_hand_over_a_single_txid_without_mixing_later_acks() -> None:
    held = HeldAcks()
    held.hold({1: 1})
    held.prepare(0)
    held.hold({1: 2})  # after the prepare: the next txid's
    released = held.commit(0)
    assert released == {1: 1}
    held.prepare(1)
    released[1] = 99  # the caller owns what was released
    assert held.commit(1) == {1: 2}


def test_held_acks_of_one_root_in_two_holds_before_a_prepare_combine_by_xor() -> None:
    held = HeldAcks()
    first = {1: 0b0110, 2: 0b0001}
    held.hold(first)
    first[1] = 0  # the caller keeps its dict: what was held does not change
    held.hold({1: 0b0011})  # a second drain before the same prepare
    assert len(held) == 2
    held.prepare(0)
    assert held.commit(0) == {1: 0b0101, 2: 0b0001}


@pytest.mark.parametrize(
    ("holds", "expected"),
    [
        ([{1: 1}, {1: 2, 2: 4, 3: 8}], {1: 3, 2: 4, 3: 8}),  # the second is larger
        ([{1: 2, 2: 4, 3: 8}, {1: 1}], {1: 3, 2: 4, 3: 8}),  # the first is larger
        ([{1: 5}, {1: 5}], {}),  # XOR to zero: the tree is done (released as 0)
        ([{}, {7: 1}, {}], {7: 1}),
    ],
)
def test_held_acks_merge_holds_by_xor_whichever_is_larger(
    holds: list[dict[int, int]], expected: dict[int, int]
) -> None:
    held = HeldAcks()
    copies = [dict(h) for h in holds]
    for h in holds:
        held.hold(h)
    assert holds == copies, "hold changed a caller's dict"
    held.prepare(0)
    released = held.commit(0)
    assert {r: v for r, v in released.items() if v} == expected


def test_a_commit_resent_after_it_committed_is_a_noop_for_the_state(setup: Setup) -> None:
    proto, bolt, state = setup
    proto.act(state, Action.INITSTATE, -1)
    state.put("a", 1)
    proto.hold({1: 0b0101})
    proto.act(state, Action.PREPARE, 0)
    assert proto.act(state, Action.COMMIT, 0) == ({1: 0b0101}, set())
    # The round is re-sent (it failed at another task): no re-prepare, no error.
    assert proto.act(state, Action.COMMIT, 0) == ({}, set())
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
    assert proto.act(state, Action.COMMIT, 3) == ({}, set())
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
    held.hold({1: 0b0011, 2: 0b0100})
    held.prepare(4)
    held.hold({1: 0b0101})
    held.prepare(5)
    # COMMIT 4 was lost; COMMIT 5 releases both txids, root 1 XOR-combined.
    assert held.commit(5) == {1: 0b0110, 2: 0b0100}


def test_apply_action_refuses_an_unknown_action(setup: Setup) -> None:
    _, bolt, state = setup
    with pytest.raises(ProtocolViolation, match=r"^unknown checkpoint action 'RESET'$"):
        apply_action(bolt, state, "RESET", 0, True)  # type: ignore[arg-type]
    assert bolt.calls == []
