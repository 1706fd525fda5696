"""StatefulBoltExecutor: acks held from PREPARE to COMMIT, the hook order, rollbacks,
stale and re-sent rounds (the shared pieces are in executor_parts.py; the basic,
forwarder and wrapping executors in test_executors.py).
"""

from __future__ import annotations

import pytest
from executor_parts import (
    COMMIT,
    INITSTATE,
    PREPARE,
    ROLLBACK,
    ckpt,
    data,
    round_of,
    stateful,
)

from statestream import (
    ProtocolViolation,
)
from statestream._checkpoint import Action
from statestream._stateful import CHECKPOINT_STREAM

# -- StatefulBoltExecutor ----------------------------------------------------


def test_stateful_holds_acks_from_prepare_and_is_paused_until_initstate() -> None:
    executor, bolt, collector, _ = stateful()
    assert collector.calls == [("hold_acks",)]
    assert executor.paused and not executor.ready
    d1, d2 = data("a", 50, 9), data("b", 51, 4, task=2)
    executor.execute(d1)
    executor.execute(d2)
    assert bolt.executed == []
    executor.execute(ckpt(1, INITSTATE, -1))
    assert bolt.executed == [] and executor.paused  # the round is not complete
    round_of(executor, INITSTATE, -1)
    assert executor.ready and not executor.paused
    assert bolt.executed == [d1, d2]
    assert bolt.calls == ["init_state", "execute a", "execute b"]
    d3 = data("c", 52, 1)
    executor.execute(d3)
    assert bolt.executed == [d1, d2, d3]


# (checkpoint actions delivered, the bolt's hooks in order)
HOOK_TABLE = [
    ([(INITSTATE, -1)], ["init_state"]),
    ([(INITSTATE, -1), (PREPARE, 0)], ["init_state", "pre_prepare 0"]),
    ([(INITSTATE, -1), (PREPARE, 0), (COMMIT, 0)], ["init_state", "pre_prepare 0", "pre_commit 0"]),
    (
        [(INITSTATE, -1), (PREPARE, 0), (ROLLBACK, 0), (INITSTATE, -1)],
        ["init_state", "pre_prepare 0", "pre_rollback", "init_state"],
    ),
    (
        [(INITSTATE, 2), (PREPARE, 3), (COMMIT, 3), (PREPARE, 4), (COMMIT, 4)],
        ["init_state", "pre_prepare 3", "pre_commit 3", "pre_prepare 4", "pre_commit 4"],
    ),
    # recovery of a decided commit: COMMIT re-sent, then INITSTATE
    ([(COMMIT, 0), (INITSTATE, 0)], ["pre_commit 0", "init_state"]),
]


@pytest.mark.parametrize(
    ("actions", "hooks"),
    HOOK_TABLE,
    ids=["-".join(f"{a.value}{t}" for a, t in actions) for actions, _ in HOOK_TABLE],
)
def test_stateful_hook_order(actions: list[tuple[Action, int]], hooks: list[str]) -> None:
    executor, bolt, collector, _ = stateful()
    for action, txid in actions:
        round_of(executor, action, txid)
    assert bolt.calls == hooks
    assert [c[1] for c in collector.checkpoint_emits()] == [[t, a.value] for a, t in actions]
    assert collector.of("fail") == [] and collector.of("report_error") == []


def test_stateful_init_state_gets_the_context_state() -> None:
    executor, bolt, _, state = stateful()
    round_of(executor, INITSTATE, -1)
    assert bolt.state is state
    assert executor.state is state


def test_stateful_prepare_before_initstate_fails_the_round() -> None:
    executor, bolt, collector, state = stateful()
    collector.clear()
    rnd = round_of(executor, PREPARE, 0)
    assert collector.failed() == rnd
    assert collector.acked() == []
    assert collector.checkpoint_emits() == []
    errors = [c[1] for c in collector.of("report_error")]
    assert len(errors) == 1 and isinstance(errors[0], ProtocolViolation)
    assert bolt.calls == []  # pre_prepare not called
    assert state.prepared_txid is None and state.committed_txid == -1
    assert executor.paused


def test_stateful_acks_taken_at_prepare_are_sent_at_commit_not_before() -> None:
    executor, _, collector, _ = stateful()
    round_of(executor, INITSTATE, -1)
    executor.execute(data("a", 500, 0b0110))
    executor.execute(data("b", 501, 0b0001))
    executor.execute(data("c", 500, 0b0011))
    round_of(executor, PREPARE, 0)
    assert 500 not in collector.sent() and 501 not in collector.sent()
    executor.execute(data("d", 502, 0b1000))  # after the cut: the next txid's
    before = len(collector.of("send_acks"))
    round_of(executor, COMMIT, 0)
    released = [c[1] for c in collector.of("send_acks")[before:] if 500 in c[1]]
    assert released == [{500: 0b0110 ^ 0b0011, 501: 0b0001}]
    assert 502 not in collector.sent()
    round_of(executor, PREPARE, 1)
    assert 502 not in collector.sent()
    round_of(executor, COMMIT, 1)
    assert collector.sent()[502] == 0b1000


def test_stateful_rollback_fails_the_held_roots_and_pauses_until_initstate() -> None:
    executor, bolt, collector, _ = stateful()
    round_of(executor, INITSTATE, -1)
    executor.execute(data("a", 600, 1))
    round_of(executor, PREPARE, 0)
    executor.execute(data("b", 601, 2))
    round_of(executor, ROLLBACK, 0)
    assert collector.of("fail_roots") == [("fail_roots", {600, 601})]
    assert 600 not in collector.sent() and 601 not in collector.sent()
    assert executor.paused and not executor.ready
    d = data("c", 602, 3)
    executor.execute(d)
    assert d not in bolt.executed
    round_of(executor, INITSTATE, -1)
    assert bolt.executed[-1] is d


@pytest.mark.parametrize(
    ("hook", "actions", "failing"),
    [
        ("init_state", [], (INITSTATE, -1)),
        ("pre_prepare", [(INITSTATE, -1)], (PREPARE, 0)),
        ("pre_commit", [(INITSTATE, -1), (PREPARE, 0)], (COMMIT, 0)),
        ("pre_rollback", [(INITSTATE, -1), (PREPARE, 0)], (ROLLBACK, 0)),
    ],
)
def test_stateful_hook_raising_fails_the_round(
    hook: str, actions: list[tuple[Action, int]], failing: tuple[Action, int]
) -> None:
    executor, _, collector, _ = stateful(raise_in=hook)
    for action, txid in actions:
        round_of(executor, action, txid)
    collector.clear()
    rnd = round_of(executor, *failing)
    assert collector.checkpoint_emits() == []
    assert collector.failed() == rnd
    assert collector.acked() == []
    errors = [c[1] for c in collector.of("report_error")]
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)


def test_stateful_pre_prepare_raising_leaves_the_state_unprepared() -> None:
    executor, _, _, state = stateful(raise_in="pre_prepare")
    round_of(executor, INITSTATE, -1)
    round_of(executor, PREPARE, 0)
    assert state.prepared_txid is None


def test_stateful_round_acks_are_sent_at_once_not_held() -> None:
    executor, _, collector, _ = stateful()
    executor.execute(data("early", 700, 5))  # buffered until INITSTATE
    rnd = round_of(executor, INITSTATE, -1)
    sent = collector.sent()
    for t in rnd:
        assert sent[t.root] == t.edge
    # the data executed after INITSTATE stays held
    assert 700 not in sent
    rnd = round_of(executor, PREPARE, 0)
    sent = collector.sent()
    for t in rnd:
        assert sent[t.root] == t.edge
    assert 700 not in sent
    round_of(executor, COMMIT, 0)
    assert collector.sent()[700] == 5


def test_stateful_stale_round_is_acked_at_once_and_not_acted_on() -> None:
    executor, bolt, collector, state = stateful()
    round_of(executor, INITSTATE, -1)
    executor.execute(data("a", 800, 1))
    stale = ckpt(1, PREPARE, 0)
    executor.execute(stale)
    rnd = round_of(executor, ROLLBACK, 0)
    assert "pre_prepare 0" not in bolt.calls
    assert state.prepared_txid is None
    sent = collector.sent()
    assert sent[stale.root] == stale.edge
    for t in rnd:
        assert sent[t.root] == t.edge
    # the data ack was not lost in the stale round's ack: the rollback fails it
    assert collector.of("fail_roots") == [("fail_roots", {800})]


def test_stateful_commit_resent_after_commit_is_a_noop_that_completes_the_round() -> None:
    executor, bolt, collector, state = stateful()
    round_of(executor, INITSTATE, -1)
    round_of(executor, PREPARE, 0)
    round_of(executor, COMMIT, 0)
    assert state.committed_txid == 0
    collector.clear()
    rnd = round_of(executor, COMMIT, 0)
    assert collector.checkpoint_emits() == [("emit", [0, "COMMIT"], rnd, CHECKPOINT_STREAM)]
    assert collector.acked() == rnd
    assert collector.failed() == [] and collector.of("report_error") == []
    assert state.committed_txid == 0 and state.prepared_txid is None
    # No re-prepare: the hooks saw one prepare and the state still works on.
    assert bolt.calls.count("pre_prepare 0") == 1
    assert bolt.calls[-1] == "pre_commit 0"
    executor.execute(data("b", 710, 1))
    round_of(executor, PREPARE, 1)
    round_of(executor, COMMIT, 1)
    assert (state.committed_txid, state.get("b")) == (1, 1)
    assert collector.sent()[710] == 1


def test_stateful_acks_of_one_root_held_in_two_drains_combine_by_xor() -> None:
    # Every completed round takes this task's acks from the runtime (a drain).
    # Acks of one root taken in two drains before the same PREPARE must
    # combine by XOR: one overwriting the other leaves the tree incomplete
    # until it times out.
    executor, _, collector, _ = stateful()
    round_of(executor, INITSTATE, -1)
    executor.execute(data("a", 902, 0b0110))
    round_of(executor, INITSTATE, -1)  # re-sent (it failed elsewhere): drain 1
    executor.execute(data("b", 902, 0b0011))
    executor.execute(data("c", 903, 0b1000))
    round_of(executor, PREPARE, 0)  # drain 2
    assert 902 not in collector.sent()
    round_of(executor, COMMIT, 0)
    assert collector.sent()[902] == 0b0110 ^ 0b0011
    assert collector.sent()[903] == 0b1000


def test_stateful_state_txids_after_prepare_and_commit() -> None:
    executor, _, _, state = stateful()
    round_of(executor, INITSTATE, -1)
    executor.execute(data("a", 900, 1))
    assert (state.committed_txid, state.prepared_txid) == (-1, None)
    round_of(executor, PREPARE, 0)
    assert (state.committed_txid, state.prepared_txid) == (-1, 0)
    round_of(executor, COMMIT, 0)
    assert (state.committed_txid, state.prepared_txid) == (0, None)
    assert state.get("a") == 1


def test_stateful_exactly_once_holds_data_during_prepare_round() -> None:
    executor, bolt, _, _ = stateful(exactly_once=True)
    round_of(executor, INITSTATE, -1)
    executor.execute(ckpt(1, PREPARE, 0))
    assert executor.paused
    d = data("x", 950, 1)
    executor.execute(d)
    assert d not in bolt.executed
    executor.execute(ckpt(2, PREPARE, 0))
    assert not executor.paused
    assert bolt.calls[-2:] == ["pre_prepare 0", "execute x"]
