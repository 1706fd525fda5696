"""StatefulTaskProtocol: which acks a checkpoint action releases and which roots it fails."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from statestream import StatefulBolt
from statestream._checkpoint import Action
from statestream._errors import ProtocolViolation
from statestream._stateful import StatefulTaskProtocol
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
    assert not proto.ready
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
