"""Guaranteed message processing on the local runtime, continued: a million tuples, misuse
of ack/fail/anchors, late acks, and a tuple anchored twice in one tree (the shared
pieces are in reliability_parts.py; the failure cases in test_reliability.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from reliability_parts import (
    TIMEOUT,
    Hold,
    RecordingSpout,
    conf_of,
    events,
    runtime,
    slack,
    spout_task,
)
from runtime_harness import Records, Runner, Sink, records

from statestream import (
    Bolt,
    FakeClock,
    OutputCollector,
    OutputFieldsDeclarer,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream.runtime.local import LocalRuntime
from statestream.testing import (
    ListSpout,
    sink,
)


class AckOnly(Bolt):
    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)


@pytest.mark.slow
def test_a_million_tuples_leave_the_ledgers_and_pending_maps_empty() -> None:
    n = 1_000_000
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(range(n)))
    b.set_bolt("ack", AckOnly(), 2).shuffle_grouping("src")
    rt = runtime(b.build(), topology_acker_executors=2)
    started = time.perf_counter()
    result = rt.run(until_idle=True)
    elapsed = time.perf_counter() - started
    assert result.reason == "idle"
    src = spout_task(rt)
    assert len(src.spout.acked) == n
    assert src.spout.failed == []
    assert not src.spout._pending
    assert len(src.pending) == 0
    assert rt.acking is not None
    assert [len(ledger) for ledger in rt.acking.ledgers] == [0, 0]
    assert result.counters["acker_pending"] == result.counters["pending"] == 0
    assert result.components["ack"].acked == n
    print(f"1,000,000 tracked tuples in {elapsed:.1f} s")


# -- misuse ------------------------------------------------------------------------------------------------------


class Misuse(Bolt):
    """Does the mistake named by its input after acking (or failing) it properly."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def execute(self, tuple: Tuple) -> None:
        mistake = tuple[0]
        if records("misused"):  # only the first delivery misbehaves; a replay is handled well
            self.collector.ack(tuple)
            return
        Records("misused").append(mistake)
        if mistake == "fail-then-fail":
            self.collector.fail(tuple)
            self.collector.fail(tuple)
            return
        self.collector.ack(tuple)
        if mistake == "ack-twice":
            self.collector.ack(tuple)
        elif mistake == "ack-then-fail":
            self.collector.fail(tuple)
        elif mistake == "anchor-to-acked":
            self.collector.emit(["child"], tuple)
        elif mistake == "multi-anchor-to-acked":
            self.collector.emit(["child"], [tuple])


MISUSES = {
    "ack-twice": "bolt 'misuse' task 1 acked or failed Tuple(src[0]:default ['ack-twice']) "
    "twice; ack or fail each input exactly once",
    "ack-then-fail": "bolt 'misuse' task 1 acked or failed Tuple(src[0]:default "
    "['ack-then-fail']) twice; ack or fail each input exactly once",
    "fail-then-fail": "bolt 'misuse' task 1 acked or failed Tuple(src[0]:default "
    "['fail-then-fail']) twice; ack or fail each input exactly once",
    "anchor-to-acked": "bolt 'misuse' task 1 anchored an emit to Tuple(src[0]:default "
    "['anchor-to-acked']), which it already acked or failed; emit before acking the input",
    "multi-anchor-to-acked": "bolt 'misuse' task 1 anchored an emit to Tuple(src[0]:default "
    "['multi-anchor-to-acked']), which it already acked or failed; emit before acking the input",
}


class ToTask1:
    def choose_tasks(self, values: Any, n_tasks: int) -> list[int]:
        return [1]


@pytest.mark.parametrize("mistake", list(MISUSES))
def test_misusing_ack_fail_or_anchors_is_reported_and_leaves_the_ledger_sound(
    local_runner: Runner, mistake: str
) -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout([mistake]))
    b.set_bolt("misuse", Misuse(), 2).custom_grouping("src", ToTask1())
    b.set_bolt("out", Sink("out")).shuffle_grouping("misuse")
    result = local_runner.run(b.build(), conf_of(local_runner))
    assert result.reason == "idle"
    (report,) = result.errors
    assert (report.component, report.task_index) == ("misuse", 1)
    assert report.tuple == f"Tuple(src[0]:default [{mistake!r}])"
    assert report.error == f"ReliabilityError({MISUSES[mistake]!r})"
    assert records("out") == []  # the bad emit sent nothing
    # The first ack (or fail) stood; the second changed nothing.
    if mistake == "fail-then-fail":
        assert events("fail")[0][0] == 0
        assert [i for i, _ in events("ack")] == [0]  # the replay passed
    else:
        assert events("fail") == []
        assert [i for i, _ in events("ack")] == [0]
    assert result.counters["acker_pending"] == result.counters["pending"] == 0
    assert result.counters["late_acks"] == 0


# -- a late ack -----------------------------------------------------------------------------------------------------


def test_a_late_ack_for_an_expired_tree_is_dropped_quietly_and_counted(
    local_runner: Runner,
) -> None:
    # On two workers the late ack crosses from the bolt's worker to the acker's.
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(3)))
    b.set_bolt("late", Hold(after=8.0, victim=1)).shuffle_grouping("src").add_configuration(
        "topology.tick.tuple.freq.secs", 1
    )
    duration = 30 if local_runner.local else 20
    result = local_runner.run(b.build(), conf_of(local_runner), until_idle=False, duration=duration)
    assert result.reason == "duration"
    assert result.counters.get("worker_restarts", 0) == 0
    assert result.errors == []
    (failed_at,) = events("fail", 1)
    # The first delivery timed out.
    assert TIMEOUT - slack(local_runner) <= failed_at <= 1.5 * TIMEOUT + slack(local_runner)
    # Acked too late.
    assert records("released") == [(1, pytest.approx(8, abs=slack(local_runner)))]
    # The spout heard about item 1 exactly once each way: one fail, and one ack (the replay).
    assert [i for i, _ in events("ack")] == [0, 2, 1]
    assert events("ack", 1)[0] == pytest.approx(failed_at, abs=2 * slack(local_runner))
    assert result.counters["timed_out"] == 1
    assert result.counters["late_acks"] == 1
    assert result.counters["acker_pending"] == result.counters["pending"] == 0


_STOLEN: list[Tuple] = []


class _AcksAnothersTuple(Bolt):
    """Task 0 keeps its inputs; task 1 acks one of them instead of its own."""

    def execute(self, tup: Tuple) -> None:
        if self.context.task_index == 0:
            _STOLEN.append(tup)
        elif _STOLEN:
            self.collector.ack(_STOLEN.pop())
        else:
            self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def test_acking_a_tuple_of_another_task_is_reported_and_the_ledger_stays_sound() -> None:
    _STOLEN.clear()
    b = TopologyBuilder("foreign")
    b.set_spout("s", ListSpout(range(20)))
    b.set_bolt("b", _AcksAnothersTuple(), 2).shuffle_grouping("s")
    # Task 1 fails every tuple it misuses: past the error-rate limit, which
    # would stop the run (tests/runtime/test_failing_bolts.py); off here.
    conf = {"topology.message.timeout.secs": 5, "statestream.errors.max.rate": 1}
    rt = LocalRuntime(b.build(), conf, clock=FakeClock())
    rt.run(duration=1)
    foreign = [e for e in rt.errors if "delivered to b[0]" in e.error]
    assert foreign and all(e.component == "b" and e.task_index == 1 for e in foreign)
    # Nothing was acked on task 0's behalf: those roots are still pending, not completed.
    assert rt.counters()["acker_pending"] >= len(_STOLEN) > 0


# -- multi-anchoring inside one tree ----------------------------------------------------------------


class Twice(Bolt):
    """Emits each input twice, anchored to it: two tuples of the same tree."""

    def execute(self, tuple: Tuple) -> None:
        self.collector.emit([tuple[0], 1], anchors=tuple)
        self.collector.emit([tuple[0], 2], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value", "copy"])


class Pairs(Bolt):
    """Aggregates the two copies of a value into one tuple anchored to both."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.waiting: dict[Any, Tuple] = {}

    def execute(self, tuple: Tuple) -> None:
        first = self.waiting.pop(tuple[0], None)
        if first is None:
            self.waiting[tuple[0]] = tuple
            return
        self.collector.emit([tuple[0]], anchors=[first, tuple])
        self.collector.ack(first)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])


class FailAll(Bolt):
    def execute(self, tuple: Tuple) -> None:
        sink("aggregated").append(tuple[0])
        self.collector.fail(tuple)


class HoldAll(Bolt):
    def execute(self, tuple: Tuple) -> None:
        sink("aggregated").append(tuple[0])  # never acked


def _aggregation(last: Bolt) -> Topology:
    b = TopologyBuilder("agg")
    b.set_spout("src", ListSpout(["a"]))
    b.set_bolt("twice", Twice()).shuffle_grouping("src")
    b.set_bolt("pairs", Pairs()).global_grouping("twice")
    b.set_bolt("last", last).shuffle_grouping("pairs")
    return b.build()


def test_a_tuple_anchored_twice_in_one_tree_is_tracked_and_its_fail_reaches_the_spout() -> None:
    # Two anchors of one tree: with one shared edge id the parity rule cancels
    # it, and the spout tuple is acked before the aggregate is even processed.
    clock = FakeClock()
    rt = runtime(_aggregation(FailAll()), clock)
    rt.open()
    for _ in range(4):
        rt.step()
    src = spout_task(rt).spout
    assert sink("aggregated")[:1] == ["a"]
    assert src.failed[:1] == [0]
    assert src.acked == []
    assert clock.now == 0  # failed at once, not by a timeout
    rt.close()


def test_a_tuple_anchored_twice_in_one_tree_keeps_the_tree_open_until_it_is_acked() -> None:
    clock = FakeClock()
    rt = runtime(_aggregation(HoldAll()), clock)
    rt.open()
    for _ in range(50):
        rt.step()
    src = spout_task(rt).spout
    assert sink("aggregated") == ["a"]
    assert src.acked == [], "the tree completed while the aggregate was unacked"
    for _ in range(8):  # past 1.5x the timeout, a rotation per step
        clock.advance(TIMEOUT / 4)
        rt.step()
    assert src.failed[:1] == [0]  # it times out instead
    rt.close()
