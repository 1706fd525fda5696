"""The bolt wrappers: BasicBoltExecutor, CheckpointTupleForwarder, StatefulBoltExecutor, wrap.

Pure table tests: a fake ExecutorCollector records every call, a real
TopologyContext gives the upstream tasks and a memory-provider state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from executor_parts import (
    COMMIT,
    INITSTATE,
    PREPARE,
    ROLLBACK,
    SELF_TASK,
    UP,
    UP_TASKS,
    FakeCollector,
    Recorder,
    RecordingBolt,
    Upper,
    ckpt,
    data,
    make_context,
    new_state,
    round_of,
    stateful,
)

from statestream import (
    BasicBolt,
    Bolt,
    FailedException,
    OutputFieldsDeclarer,
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
from statestream._stateful import CHECKPOINT_STREAM
from statestream._tuple import Fields, Tuple


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
