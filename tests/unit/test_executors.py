"""The bolt wrappers: BasicBoltExecutor, CheckpointTupleForwarder, StatefulBoltExecutor, wrap.

Pure table tests: a fake ExecutorCollector records every call, a real
TopologyContext gives the upstream tasks and a memory-provider state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest

from statestream import (
    BasicBolt,
    Bolt,
    FailedException,
    OutputFieldsDeclarer,
    ProtocolViolation,
    StatefulBolt,
    TopologyContext,
)
from statestream._checkpoint import Action
from statestream._executors import (
    BasicBoltExecutor,
    CheckpointTupleForwarder,
    StatefulBoltExecutor,
    unwrap,
    wrap,
)
from statestream._stateful import CHECKPOINT_FIELDS, CHECKPOINT_STREAM
from statestream._tuple import Fields, Origin, Tuple
from statestream_providers.memory import MemoryStateProvider

PREPARE, COMMIT, ROLLBACK, INITSTATE = (
    Action.PREPARE,
    Action.COMMIT,
    Action.ROLLBACK,
    Action.INITSTATE,
)

UP = "up"
UP_TASKS = [1, 2]  # global task ids of the upstream component
SELF_TASK = 10


# -- fakes -------------------------------------------------------------------


def _anchors(anchors: Tuple | Sequence[Tuple] | None) -> list[Tuple]:
    if anchors is None:
        return []
    if isinstance(anchors, Tuple):
        return [anchors]
    return list(anchors)


def _by_root(acks: Iterable[tuple[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for root, value in acks:
        out[root] = out.get(root, 0) ^ value
    return out


class FakeCollector:
    """An ExecutorCollector that records every call.

    While holding (after ``hold_acks``) an ack goes into the buffer that
    ``take_acks`` hands over, as a runtime does; before that, acks are only
    recorded. The acks taken and sent are recorded XOR-combined per root,
    as the acker adds them up.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.holding = False
        self.buffer: list[tuple[int, int]] = []

    # OutputCollector
    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        self.calls.append(("emit", list(values), _anchors(anchors), stream))

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        self.calls.append(("emit_direct", task, list(values), _anchors(anchors), stream))

    def ack(self, tuple: Tuple) -> None:
        self.calls.append(("ack", tuple))
        if self.holding and tuple.root:
            self.buffer.append((tuple.root, tuple.edge))

    def fail(self, tuple: Tuple) -> None:
        self.calls.append(("fail", tuple))

    def reset_timeout(self, tuple: Tuple) -> None:
        self.calls.append(("reset_timeout", tuple))

    def report_error(self, error: BaseException) -> None:
        self.calls.append(("report_error", error))

    # the acker transport
    def hold_acks(self) -> None:
        self.calls.append(("hold_acks",))
        self.holding = True

    def take_acks(self) -> list[tuple[int, int]]:
        taken, self.buffer = self.buffer, []
        self.calls.append(("take_acks", _by_root(taken)))
        return taken

    def send_acks(self, acks: Iterable[tuple[int, int]]) -> None:
        self.calls.append(("send_acks", _by_root(acks)))

    def fail_roots(self, roots: Iterable[int]) -> None:
        self.calls.append(("fail_roots", set(roots)))

    # views
    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == kind]

    def acked(self) -> list[Tuple]:
        return [c[1] for c in self.of("ack")]

    def failed(self) -> list[Tuple]:
        return [c[1] for c in self.of("fail")]

    def checkpoint_emits(self) -> list[tuple[Any, ...]]:
        return [c for c in self.of("emit") if c[3] == CHECKPOINT_STREAM]

    def sent(self) -> dict[int, int]:
        """Every XOR value sent to the ackers, combined."""
        out: dict[int, int] = {}
        for _, acks in self.of("send_acks"):
            for root, value in acks.items():
                out[root] = out.get(root, 0) ^ value
        return out

    def clear(self) -> None:
        self.calls.clear()


def new_state() -> Any:
    return MemoryStateProvider.from_config({"name": uuid.uuid4().hex}).get_state("count-0")


def make_context(
    upstream: int = 2, exactly_once: bool = False, state: Any = None
) -> TopologyContext:
    opened = state if state is not None else new_state()
    return TopologyContext(
        "topo",
        "count",
        0,
        SELF_TASK,
        {UP: UP_TASKS[:upstream], "count": [SELF_TASK]},
        {UP: {"default": Fields("word")}},
        state_opener=lambda namespace: opened,
        sources=[(UP, CHECKPOINT_STREAM), (UP, "default")],
        exactly_once=exactly_once,
    )


_roots = iter(range(1000, 1_000_000))


def ckpt(task: int, action: Action, txid: int) -> Tuple:
    """A checkpoint tuple from upstream task ``task`` (global id), in its own tree."""
    origin = Origin(UP, task, UP_TASKS.index(task), CHECKPOINT_STREAM, CHECKPOINT_FIELDS)
    root = next(_roots)
    return Tuple([txid, action.value], origin, None, SELF_TASK, root, root * 3 + 1)


def data(word: str, root: int, edge: int, task: int = 1) -> Tuple:
    origin = Origin(UP, task, UP_TASKS.index(task), "default", Fields("word"))
    return Tuple([word], origin, None, SELF_TASK, root, edge)


class RecordingBolt(Bolt):
    """A rich bolt that records what it executes and acks it."""

    def __init__(self) -> None:
        self.executed: list[Tuple] = []
        self.prepared = False

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.prepared = True

    def execute(self, tuple: Tuple) -> None:
        self.executed.append(tuple)
        self.collector.ack(tuple)


class Recorder(StatefulBolt):
    """A stateful bolt that records its hooks and executes; acks each input."""

    def __init__(self, raise_in: str | None = None) -> None:
        self.calls: list[str] = []
        self.executed: list[Tuple] = []
        self.raise_in = raise_in
        self.state: Any = None

    def _hook(self, call: str) -> None:
        self.calls.append(call)
        if self.raise_in is not None and call.startswith(self.raise_in):
            raise RuntimeError(f"boom in {call}")

    def init_state(self, state: Any) -> None:
        self.state = state
        self._hook("init_state")

    def pre_prepare(self, txid: int) -> None:
        self._hook(f"pre_prepare {txid}")

    def pre_commit(self, txid: int) -> None:
        self._hook(f"pre_commit {txid}")

    def pre_rollback(self) -> None:
        self._hook("pre_rollback")

    def execute(self, tuple: Tuple) -> None:
        self.executed.append(tuple)
        self.calls.append(f"execute {tuple.values[0]}")
        if self.state is not None:
            self.state.put(tuple.values[0], 1)
        self.collector.ack(tuple)


def round_of(executor: CheckpointTupleForwarder, action: Action, txid: int) -> list[Tuple]:
    """Deliver ``(action, txid)`` from every upstream task; the round's tuples."""
    tuples = [ckpt(task, action, txid) for task in sorted(t for _, t in executor.barrier.upstream)]
    for t in tuples:
        executor.execute(t)
    return tuples


# -- BasicBoltExecutor -------------------------------------------------------


class Upper(BasicBolt):
    def __init__(self, behaviour: str = "ok") -> None:
        self.behaviour = behaviour

    def execute(self, tuple: Tuple, collector: Any) -> None:
        collector.emit([tuple.values[0].upper()])
        collector.emit([len(tuple.values[0])], stream="lengths")
        if self.behaviour == "failed":
            raise FailedException("replay me")
        if self.behaviour == "error":
            raise RuntimeError("bug")


def basic(behaviour: str = "ok") -> tuple[BasicBoltExecutor, FakeCollector]:
    executor = BasicBoltExecutor(Upper(behaviour))
    collector = FakeCollector()
    executor.prepare({}, make_context(), collector)
    return executor, collector


def test_basic_emits_are_anchored_to_the_input_then_the_input_is_acked() -> None:
    executor, collector = basic()
    t = data("word", 7, 3)
    executor.execute(t)
    assert collector.calls == [
        ("emit", ["WORD"], [t], "default"),
        ("emit", [4], [t], "lengths"),
        ("ack", t),
    ]


def test_basic_uses_the_runtime_emit_anchored_fast_path() -> None:
    class Fast(FakeCollector):
        def emit_anchored(self, values: Sequence[Any], anchor: Tuple, stream: str) -> None:
            self.calls.append(("emit_anchored", list(values), anchor, stream))

    executor = BasicBoltExecutor(Upper())
    collector = Fast()
    executor.prepare({}, make_context(), collector)
    t = data("ab", 7, 3)
    executor.execute(t)
    assert collector.calls == [
        ("emit_anchored", ["AB"], t, "default"),
        ("emit_anchored", [2], t, "lengths"),
        ("ack", t),
    ]


def test_basic_emit_direct_is_anchored_to_the_input() -> None:
    class Direct(BasicBolt):
        def execute(self, tuple: Tuple, collector: Any) -> None:
            collector.emit_direct(42, ["x"], stream="s")

    executor = BasicBoltExecutor(Direct())
    collector = FakeCollector()
    executor.prepare({}, make_context(), collector)
    t = data("ab", 7, 3)
    executor.execute(t)
    assert collector.calls == [("emit_direct", 42, ["x"], [t], "s"), ("ack", t)]


def test_basic_failed_exception_fails_the_input_without_ack() -> None:
    executor, collector = basic("failed")
    t = data("word", 7, 3)
    executor.execute(t)
    assert collector.failed() == [t]
    assert collector.acked() == []


def test_basic_other_exception_propagates_without_ack_or_fail() -> None:
    executor, collector = basic("error")
    t = data("word", 7, 3)
    with pytest.raises(RuntimeError, match="bug"):
        executor.execute(t)
    assert collector.of("ack") == []
    assert collector.of("fail") == []


def test_basic_prepares_the_wrapped_bolt_with_the_context() -> None:
    executor, _ = basic()
    assert executor.bolt.context.component_id == "count"


# -- CheckpointTupleForwarder ------------------------------------------------


def forwarder(
    upstream: int = 2, exactly_once: bool = False
) -> tuple[CheckpointTupleForwarder, RecordingBolt, FakeCollector]:
    bolt = RecordingBolt()
    executor = CheckpointTupleForwarder(bolt)
    collector = FakeCollector()
    executor.prepare({}, make_context(upstream, exactly_once), collector)
    return executor, bolt, collector


def test_forwarder_barrier_sources_are_the_upstream_tasks() -> None:
    executor, bolt, _ = forwarder()
    assert executor.barrier.upstream == frozenset({(UP, 1), (UP, 2)})
    assert bolt.prepared


def test_forwarder_one_of_two_upstream_tasks_does_nothing() -> None:
    executor, _, collector = forwarder()
    executor.execute(ckpt(1, PREPARE, 0))
    assert collector.calls == []


@pytest.mark.parametrize("action", list(Action))
def test_forwarder_second_task_forwards_anchored_to_the_round_and_acks_it(action: Action) -> None:
    executor, bolt, collector = forwarder()
    t1, t2 = ckpt(1, action, 3), ckpt(2, action, 3)
    executor.execute(t1)
    executor.execute(t2)
    assert collector.calls == [
        ("emit", [3, action.value], [t1, t2], CHECKPOINT_STREAM),
        ("ack", t1),
        ("ack", t2),
    ]
    assert bolt.executed == []  # checkpoint tuples never reach the bolt


def test_forwarder_single_upstream_task_fires_at_once() -> None:
    executor, _, collector = forwarder(upstream=1)
    t1 = ckpt(1, COMMIT, 0)
    executor.execute(t1)
    assert collector.calls == [("emit", [0, "COMMIT"], [t1], CHECKPOINT_STREAM), ("ack", t1)]


@pytest.mark.parametrize("action", [COMMIT, ROLLBACK, INITSTATE])
def test_forwarder_resent_round_fires_again_only_when_complete_again(action: Action) -> None:
    # A re-sent COMMIT, ROLLBACK or INITSTATE (its first round failed elsewhere)
    # must wait for every upstream task again, not fire on the first arrival.
    executor, _, collector = forwarder()
    round_of(executor, action, 4)
    assert len(collector.checkpoint_emits()) == 1
    collector.clear()
    a1 = ckpt(1, action, 4)
    executor.execute(a1)
    assert collector.calls == []  # the barrier started empty: a new round
    executor.execute(ckpt(1, action, 4))  # the same task again counts once
    assert collector.checkpoint_emits() == []
    a2 = ckpt(2, action, 4)
    executor.execute(a2)
    emits = collector.checkpoint_emits()
    assert len(emits) == 1 and emits[0][1] == [4, action.value]
    assert a1 in emits[0][2] and a2 in emits[0][2]
    assert a1 in collector.acked() and a2 in collector.acked()


def test_stateful_resent_commit_waits_for_every_upstream_task_and_commits_once() -> None:
    executor, bolt, collector, _ = stateful()
    round_of(executor, INITSTATE, -1)
    executor.execute(data("a", 700, 1))
    round_of(executor, PREPARE, 0)
    round_of(executor, COMMIT, 0)
    collector.clear()
    executor.execute(ckpt(1, COMMIT, 0))
    assert collector.checkpoint_emits() == []
    assert bolt.calls.count("pre_commit 0") == 1  # not acted on yet
    executor.execute(ckpt(2, COMMIT, 0))
    assert len(collector.checkpoint_emits()) == 1
    assert bolt.calls.count("pre_commit 0") == 2


def test_forwarder_newer_checkpoint_supersedes_an_incomplete_round() -> None:
    executor, _, collector = forwarder()
    stale = ckpt(1, PREPARE, 5)
    executor.execute(stale)
    r1, r2 = ckpt(1, ROLLBACK, 5), ckpt(2, ROLLBACK, 5)
    executor.execute(r1)
    assert collector.calls == []
    executor.execute(r2)
    # the stale tuple is acked (not failed), and PREPARE(5) is never forwarded
    assert collector.checkpoint_emits() == [("emit", [5, "ROLLBACK"], [r1, r2], CHECKPOINT_STREAM)]
    assert collector.acked() == [stale, r1, r2]
    assert collector.failed() == []


def test_forwarder_straggler_of_a_stale_round_does_not_fire_it() -> None:
    executor, _, collector = forwarder()
    p1 = ckpt(1, PREPARE, 5)
    r1 = ckpt(1, ROLLBACK, 5)
    p2 = ckpt(2, PREPARE, 5)  # task 2's copy of the stale round, late
    r2 = ckpt(2, ROLLBACK, 5)
    for t in (p1, r1, p2):
        executor.execute(t)
    assert collector.checkpoint_emits() == []
    executor.execute(r2)
    assert collector.checkpoint_emits() == [("emit", [5, "ROLLBACK"], [r1, r2], CHECKPOINT_STREAM)]
    assert sorted(map(id, collector.acked())) == sorted(map(id, [p1, p2, r1, r2]))


def test_forwarder_data_tuples_go_to_the_bolt() -> None:
    executor, bolt, collector = forwarder()
    d = data("a", 50, 9)
    executor.execute(d)
    assert bolt.executed == [d]
    assert collector.calls == [("ack", d)]


# (exactly_once, open round action, paused while the round is open)
PAUSE_TABLE = [
    (True, PREPARE, True),
    (True, COMMIT, False),
    (True, ROLLBACK, False),
    (True, INITSTATE, False),
    (False, PREPARE, False),
    (False, COMMIT, False),
]


@pytest.mark.parametrize(
    ("exactly_once", "action", "paused"),
    PAUSE_TABLE,
    ids=[f"{'eo' if e else 'alo'}-{a.value}" for e, a, _ in PAUSE_TABLE],
)
def test_forwarder_data_during_an_open_round(
    exactly_once: bool, action: Action, paused: bool
) -> None:
    executor, bolt, collector = forwarder(exactly_once=exactly_once)
    t1 = ckpt(1, action, 0)
    executor.execute(t1)
    assert executor.paused is paused
    d = data("a", 50, 9)
    executor.execute(d)
    assert bolt.executed == ([] if paused else [d])
    t2 = ckpt(2, action, 0)
    executor.execute(t2)
    assert executor.paused is False
    assert bolt.executed == [d]
    if paused:
        # held data runs only after the round was forwarded and acked
        assert collector.calls == [
            ("emit", [0, action.value], [t1, t2], CHECKPOINT_STREAM),
            ("ack", t1),
            ("ack", t2),
            ("ack", d),
        ]


# BUG: a newer checkpoint superseding an incomplete PREPARE round unpauses the
# forwarder (paused becomes False) without running what it buffered while
# paused: _on_checkpoint returns early for an incomplete round, so
# _run_buffered is not called. A data tuple arriving next goes straight to the
# bolt, overtaking an older tuple from the same upstream task, which stays
# buffered (with paused False) until the superseding round completes.
def test_forwarder_data_buffered_by_a_superseded_prepare_keeps_its_order() -> None:
    executor, bolt, _ = forwarder(exactly_once=True)
    executor.execute(ckpt(1, PREPARE, 0))
    d1 = data("d1", 1, 1, task=1)
    executor.execute(d1)
    assert bolt.executed == []
    executor.execute(ckpt(1, ROLLBACK, 0))  # the spout gave up on PREPARE(0)
    assert not executor.paused
    d2 = data("d2", 2, 2, task=1)
    executor.execute(d2)
    assert bolt.executed[:1] == [d1]  # fails: bolt.executed == [d2], d1 still buffered
    executor.execute(ckpt(2, PREPARE, 0))
    executor.execute(ckpt(2, ROLLBACK, 0))
    assert bolt.executed == [d1, d2]


def test_forwarder_buffered_data_failing_fails_that_tuple_only() -> None:
    class Picky(RecordingBolt):
        def execute(self, tuple: Tuple) -> None:
            if tuple.values[0] == "bad":
                raise FailedException("no")
            if tuple.values[0] == "bug":
                raise ValueError("bug")
            super().execute(tuple)

    bolt = Picky()
    executor = CheckpointTupleForwarder(bolt)
    collector = FakeCollector()
    executor.prepare({}, make_context(2, True), collector)
    executor.execute(ckpt(1, PREPARE, 0))
    bad, bug, good = data("bad", 1, 1), data("bug", 2, 2), data("good", 3, 3)
    for d in (bad, bug, good):
        executor.execute(d)
    executor.execute(ckpt(2, PREPARE, 0))
    assert collector.failed() == [bad, bug]
    assert [type(c[1]) for c in collector.of("report_error")] == [ValueError]
    assert bolt.executed == [good]


# -- StatefulBoltExecutor ----------------------------------------------------


def stateful(
    upstream: int = 2, exactly_once: bool = False, raise_in: str | None = None
) -> tuple[StatefulBoltExecutor, Recorder, FakeCollector, Any]:
    bolt = Recorder(raise_in)
    executor = StatefulBoltExecutor(bolt)
    collector = FakeCollector()
    state = new_state()
    executor.prepare({}, make_context(upstream, exactly_once, state), collector)
    return executor, bolt, collector, state


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


# -- wrap / unwrap -----------------------------------------------------------


class Doubler(BasicBolt):
    def execute(self, tuple: Tuple, collector: Any) -> None:
        collector.emit([tuple.values[0] * 2])


def test_wrap_stateful_bolt() -> None:
    bolt = Recorder()
    for checkpointed in (True, False):
        wrapped = wrap(bolt, checkpointed)
        assert type(wrapped) is StatefulBoltExecutor
        assert wrapped.bolt is bolt
        assert unwrap(wrapped) is bolt


def test_wrap_basic_bolt_checkpointed() -> None:
    bolt = Doubler()
    wrapped = wrap(bolt, checkpointed=True)
    assert type(wrapped) is CheckpointTupleForwarder
    assert type(wrapped.bolt) is BasicBoltExecutor
    assert wrapped.bolt.bolt is bolt
    assert unwrap(wrapped) is bolt


def test_wrap_basic_bolt_not_checkpointed() -> None:
    bolt = Doubler()
    wrapped = wrap(bolt, checkpointed=False)
    assert type(wrapped) is BasicBoltExecutor
    assert wrapped.bolt is bolt


@pytest.mark.parametrize("checkpointed", [True, False])
def test_wrap_rich_bolt(checkpointed: bool) -> None:
    bolt = RecordingBolt()
    wrapped = wrap(bolt, checkpointed)
    if checkpointed:
        assert type(wrapped) is CheckpointTupleForwarder and wrapped.bolt is bolt
    else:
        assert wrapped is bolt


@pytest.mark.parametrize("make", [Doubler, Recorder, RecordingBolt])
@pytest.mark.parametrize("checkpointed", [True, False])
def test_wrap_of_a_wrapped_bolt_does_not_double_wrap(make: Any, checkpointed: bool) -> None:
    bolt = make()
    once = wrap(bolt, checkpointed)
    twice = wrap(once, checkpointed)
    assert type(twice) is type(once)
    assert unwrap(twice) is bolt
    depth = 0
    obj = twice
    while obj is not bolt:
        obj = obj.bolt
        depth += 1
    assert depth == {Doubler: 1 + checkpointed, Recorder: 1, RecordingBolt: int(checkpointed)}[make]


def test_unwrap_of_a_plain_object_is_itself() -> None:
    bolt = RecordingBolt()
    assert unwrap(bolt) is bolt


def test_wrapper_delegates_streams_and_config() -> None:
    class Configured(BasicBolt):
        def component_configuration(self) -> dict[str, Any] | None:
            return {"topology.tick.tuple.freq.secs": 1}

    wrapped = wrap(Configured(), checkpointed=True)
    assert wrapped.component_configuration() == {"topology.tick.tuple.freq.secs": 1}


def test_wrapper_declares_the_streams_of_the_bolt() -> None:
    class Declaring(BasicBolt):
        def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
            declarer.declare(["word"])
            declarer.declare_stream("lengths", ["n"], direct=True)

    declarer = OutputFieldsDeclarer()
    wrap(Declaring(), checkpointed=True).declare_output_fields(declarer)
    assert declarer.streams == {
        "default": (Fields("word"), False),
        "lengths": (Fields("n"), True),
    }


def test_wrapper_repr_shows_the_chain() -> None:
    bolt = Doubler()
    assert repr(wrap(bolt, checkpointed=True)) == (
        f"CheckpointTupleForwarder(BasicBoltExecutor({bolt!r}))"
    )


def test_basic_report_error_reaches_the_runtime() -> None:
    error = ValueError("odd input")

    class Reporting(BasicBolt):
        def execute(self, tuple: Tuple, collector: Any) -> None:
            collector.report_error(error)

    executor = BasicBoltExecutor(Reporting())
    collector = FakeCollector()
    executor.prepare({}, make_context(), collector)
    t = data("ab", 7, 3)
    executor.execute(t)
    assert collector.calls == [("report_error", error), ("ack", t)]


# -- found by mutation testing -------------------------------------------------


@pytest.mark.parametrize("make", [Doubler, Recorder, RecordingBolt])
@pytest.mark.parametrize("checkpointed", [True, False])
def test_every_wrapper_passes_conf_and_context_through(make: Any, checkpointed: bool) -> None:
    conf = {"topology.name": "topo", "mine": 1}
    context = make_context()
    collector = FakeCollector()
    bolt = make()
    executor = wrap(bolt, checkpointed)
    executor.prepare(conf, context, collector)
    # The wrapper is a Bolt like any other: it holds what it was prepared with...
    assert (executor.conf, executor.context, executor.collector) == (conf, context, collector)
    # ...and so does the user's bolt it wraps.
    assert bolt.conf is conf and bolt.context is context
    inner = getattr(executor, "bolt", None)
    inner = inner if isinstance(inner, BasicBoltExecutor) else None
    if inner is not None:
        assert (inner.conf, inner.context) == (conf, context)


def test_forwarder_barrier_hears_only_the_checkpoint_stream_sources() -> None:
    # "count" gets data from "up" and checkpoints from the checkpoint spout:
    # a barrier waiting for "up" would never complete.
    context = TopologyContext(
        "topo",
        "count",
        0,
        SELF_TASK,
        {UP: UP_TASKS, "$checkpointspout": [0], "count": [SELF_TASK]},
        {UP: {"default": Fields("word")}},
        state_opener=lambda namespace: new_state(),
        sources=[("$checkpointspout", CHECKPOINT_STREAM), (UP, "default")],
    )
    executor = CheckpointTupleForwarder(RecordingBolt())
    executor.prepare({}, context, FakeCollector())
    assert executor.barrier.upstream == frozenset({("$checkpointspout", 0)})


def test_basic_emit_direct_defaults_to_the_default_stream() -> None:
    class Direct(BasicBolt):
        def execute(self, tuple: Tuple, collector: Any) -> None:
            collector.emit_direct(7, ["x"])

    executor = BasicBoltExecutor(Direct())
    collector = FakeCollector()
    executor.prepare({}, make_context(), collector)
    t = data("ab", 7, 3)
    executor.execute(t)
    assert collector.calls == [("emit_direct", 7, ["x"], [t], "default"), ("ack", t)]


def test_forwarder_a_newer_txid_of_the_same_action_supersedes_the_round() -> None:
    executor, _, collector = forwarder()
    stale = ckpt(1, PREPARE, 1)
    executor.execute(stale)
    new2 = ckpt(2, PREPARE, 2)
    executor.execute(new2)
    assert collector.checkpoint_emits() == []  # task 1 has not sent PREPARE(2) yet
    new1 = ckpt(1, PREPARE, 2)
    executor.execute(new1)
    assert collector.checkpoint_emits() == [
        ("emit", [2, "PREPARE"], [new2, new1], CHECKPOINT_STREAM)
    ]
    assert collector.acked() == [stale, new2, new1]


class Reentrant(Bolt):
    """Executes data and, on the word "cut", is handed a checkpoint tuple from inside
    ``execute`` (as a runtime delivering inline would do)."""

    def __init__(self) -> None:
        self.executed: list[str] = []
        self.executor: CheckpointTupleForwarder | None = None

    def execute(self, tuple: Tuple) -> None:
        self.executed.append(tuple.values[0])
        self.collector.ack(tuple)
        if tuple.values[0] == "cut":
            assert self.executor is not None
            self.executor.execute(ckpt(2, PREPARE, 1))


def test_forwarder_a_prepare_arriving_while_it_runs_buffered_data_pauses_it_again() -> None:
    bolt = Reentrant()
    executor = CheckpointTupleForwarder(bolt)
    bolt.executor = executor
    executor.prepare({}, make_context(2, exactly_once=True), FakeCollector())
    executor.execute(ckpt(1, PREPARE, 0))  # paused: data is buffered
    for word in ["a", "cut", "b", "c"]:
        executor.execute(data(word, 1, 1))
    assert bolt.executed == []
    executor.execute(ckpt(2, PREPARE, 0))  # the round completes: buffered data runs...
    # ...until "cut" brings PREPARE(1) from task 2: paused again, "b" and "c" wait.
    assert bolt.executed == ["a", "cut"]
    assert executor.paused
    executor.execute(data("d", 1, 1))
    executor.execute(ckpt(1, PREPARE, 1))
    assert bolt.executed == ["a", "cut", "b", "c", "d"]
    assert not executor.paused
