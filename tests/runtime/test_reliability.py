"""Guaranteed message processing on the local runtime: the failure cases of the
reference (timeouts, a lost acker, a restarted spout), multi-anchoring, fail,
at-most-once, max.spout.pending, reset_timeout, misuse, late acks.

Time is a FakeClock everywhere: the runtime's idle sleeps move it, and the
tests move it by hand between ``rt.step()`` calls. Nothing sleeps.

They check Storm's per-tuple ack tree (acker ledgers, timeouts, multi-anchoring,
per-tuple fail/ack reaching the spout, max.spout.pending, a crash over a replaying
queue), which the local runtime runs; the Spark runtime replaces it by whole-batch
replay (its batch semantics are tested with ``runner`` in test_groupings,
test_stateful, test_exactly_once and test_runtime). Tests that take
``local_runner`` run in one process and on two worker processes
(``topology.workers: 2``, each worker on its own copy of the FakeClock): what they
record goes to :class:`~runtime_harness.Records`, which every process appends to.
The others inspect the runtime's internals or step its loop by hand: one process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from reliability_parts import (
    SLACK,
    TIMEOUT,
    Forward,
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
    QueueSpout,
    SimulatedCrash,
    SinkBolt,
    queue,
    sink,
)


@pytest.mark.parametrize(("emit_at", "fail_after"), [(0.0, 6.0), (1.0, 5.0), (1.9, 4.1)])
def test_a_never_acked_tuple_times_out_between_1x_and_1_5x_and_is_replayed(
    emit_at: float, fail_after: float
) -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(10)))
    b.set_bolt("forward", Forward(victim=3), 2).shuffle_grouping("src")
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("forward")
    clock = FakeClock()
    rt = runtime(b.build(), clock)
    rt.open()  # timeouts rotate every TIMEOUT/2 seconds from here
    clock.advance(emit_at)
    result = rt.run(until_idle=True)
    assert result.reason == "idle"

    (emitted_at, replayed_at) = events("emit", 3)
    (failed_at,) = events("fail", 3)
    assert emitted_at == emit_at
    waited = failed_at - emitted_at
    assert TIMEOUT <= waited <= 1.5 * TIMEOUT + SLACK
    assert waited == pytest.approx(fail_after, abs=SLACK)
    assert replayed_at == failed_at  # replayed as soon as it failed
    # Only the victim failed; it reached the sink after its replay; all acked once.
    assert events("fail") == [(3, failed_at)]
    assert sorted(sink("out")) == [(v,) for v in range(10)]
    assert sorted(i for i, _ in events("ack")) == list(range(10))
    assert result.counters["timed_out"] == 1
    assert result.counters["acker_expired"] == 1
    assert result.counters["pending"] == result.counters["acker_pending"] == 0


@pytest.mark.parametrize("ackers", [1, 2])
def test_a_never_acked_tuple_in_another_task_times_out_and_is_replayed(
    local_runner: Runner, ackers: int
) -> None:
    # The same behaviour through the Runner: on two workers the spout (task 0)
    # and the first forward task are in different workers, and its replay may
    # go to either forward task. The spout waits 1 s of its clock before it emits.
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(10), start_at=1.0))
    b.set_bolt("forward", Forward(victim=3), 2).shuffle_grouping("src")
    b.set_bolt("out", Sink("out")).shuffle_grouping("forward")
    conf = conf_of(local_runner, topology_acker_executors=ackers)
    result = local_runner.run(b.build(), conf)
    assert result.reason == "idle"

    (emitted_at, replayed_at) = events("emit", 3)
    (failed_at,) = events("fail", 3)
    assert emitted_at == pytest.approx(1.0, abs=slack(local_runner))
    waited = failed_at - emitted_at
    assert TIMEOUT - slack(local_runner) <= waited <= 1.5 * TIMEOUT + slack(local_runner)
    if local_runner.local:
        assert waited == pytest.approx(5.0, abs=SLACK)
    assert replayed_at == failed_at  # replayed as soon as it failed
    assert events("fail") == [(3, failed_at)]
    assert sorted(records("out")) == [(v,) for v in range(10)]
    assert sorted(i for i, _ in events("ack")) == list(range(10))
    assert result.counters["timed_out"] == 1
    assert result.counters["acker_expired"] == 1
    assert result.counters["pending"] == result.counters["acker_pending"] == 0


def test_with_timeouts_disabled_a_never_acked_tuple_stays_pending(local_runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(3)))
    b.set_bolt("forward", Forward(victim=1)).shuffle_grouping("src")
    conf = conf_of(local_runner, topology_enable_message_timeouts=False)
    duration = 100 if local_runner.local else 10
    result = local_runner.run(b.build(), conf, until_idle=True, duration=duration)
    assert result.reason == "duration"
    assert result.counters.get("worker_restarts", 0) == 0
    assert events("fail") == []
    assert result.counters["pending"] == 1
    assert result.counters["timed_out"] == 0


# -- an acker that loses its ledger -------------------------------------------------------------


def test_an_acker_that_loses_its_ledger_times_out_its_roots_and_nothing_is_lost() -> None:
    n = 40
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(n)))
    b.set_bolt("hold", Hold(after=1.0)).shuffle_grouping("src").add_configuration(
        "topology.tick.tuple.freq.secs", 1
    )
    clock = FakeClock()
    rt = runtime(b.build(), clock, topology_acker_executors=2)
    rt.open()
    rt.step()
    rt.step()
    src = spout_task(rt)
    assert len(src.pending) == n  # all emitted, all held by the bolt
    assert rt.acking is not None
    # A pending entry is (message id, values, origin).
    lost = sorted(entry[0] for root, entry in src.pending.items() if root % 2 == 0)
    kept = sorted(entry[0] for root, entry in src.pending.items() if root % 2 == 1)
    assert len(rt.acking.ledgers[0]) == len(lost) > 0
    assert len(rt.acking.ledgers[1]) == len(kept) > 0

    rt.acking.ledgers[0].clear()  # acker 0 dies and comes back empty
    result = rt.run(until_idle=True)

    assert result.reason == "idle"
    # The roots acker 0 forgot timed out on the spout and were replayed ...
    assert sorted(i for i, _ in events("fail")) == lost
    assert all(TIMEOUT <= t <= 1.5 * TIMEOUT + SLACK for _, t in events("fail"))
    # ... the others completed at the first tick, and nothing was lost.
    assert sorted(i for i, t in events("ack") if t < TIMEOUT) == kept
    assert sorted(i for i, _ in events("ack")) == list(range(n))
    assert sorted(set(records("hold"))) == list(range(n))
    assert result.counters["timed_out"] == len(lost)
    # The bolt's acks for the forgotten roots reached an acker that did not
    # know them: kept as possible early acks, then expired as late acks.
    assert result.counters["late_acks"] == len(lost)
    assert result.counters["acker_pending"] == result.counters["pending"] == 0


# -- a spout restarted over a replaying source ------------------------------------------------------


class CrashOnce(Bolt):
    """Raises SimulatedCrash (a process death) the first time anyone sees ``at``."""

    def __init__(self, at: Any) -> None:
        self.at = at

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def execute(self, tuple: Tuple) -> None:
        if tuple[0] == self.at and not sink("crashed"):
            sink("crashed").append(True)  # process-wide, so the restart does not crash
            raise SimulatedCrash(f"crash at {self.at}")
        self.collector.emit([tuple[0]], tuple)
        self.collector.ack(tuple)


def queue_topology(middle: Bolt) -> Topology:
    b = TopologyBuilder("t")
    b.set_spout("src", QueueSpout("q"))
    b.set_bolt("middle", middle).shuffle_grouping("src").add_configuration(
        "topology.tick.tuple.freq.secs", 1
    )
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("middle")
    return b.build()


def test_a_crashed_run_restarted_over_a_replaying_queue_loses_nothing() -> None:
    q = queue("q", range(30))
    topology = queue_topology(CrashOnce(at=10))
    with pytest.raises(SimulatedCrash):
        runtime(topology).run(until_idle=True)
    assert q.open  # taken, not acked: the crash left them open
    assert len(sink("out")) < 30
    first_run = list(sink("out"))

    result = runtime(topology).run(until_idle=True)  # a new process, the same queue
    assert result.reason == "idle"
    assert q.empty
    assert sorted(q.done) == list(range(30))
    assert q.deliveries > 30  # the open ones were delivered again
    # Nothing lost; the first run's outputs may be repeated (at-least-once).
    assert {v for (v,) in first_run + sink("out")} == set(range(30))


def test_a_stopped_run_with_open_messages_restarted_loses_nothing() -> None:
    q = queue("q", range(30))
    topology = queue_topology(Hold(after=10.0))
    rt = runtime(topology)
    rt.open()
    for _ in range(3):
        rt.step()
    rt.stop()
    rt.close()  # gone with every message open
    assert sorted(q.open) == list(range(30))
    assert not q.done

    clock = FakeClock(start=1000.0)
    result = runtime(topology, clock).run(until_idle=True)
    assert result.reason == "idle"
    assert q.empty
    assert sorted(q.done) == list(range(30))
    assert sorted(v for (v,) in sink("out")) == list(range(30))


# -- multi-anchoring ------------------------------------------------------------------------------------


class Join(Bolt):
    """Pairs one tuple from each source; emits the pair anchored to both, acks both."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["left", "right"])

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.waiting: dict[str, Tuple] = {}

    def execute(self, tuple: Tuple) -> None:
        self.waiting[tuple.source_component] = tuple
        if len(self.waiting) == 2:
            left, right = self.waiting["left"], self.waiting["right"]
            self.collector.emit([left[0], right[0]], [left, right])
            self.collector.ack(left)
            self.collector.ack(right)
            self.waiting = {}


def join_topology(downstream: Bolt) -> Topology:
    b = TopologyBuilder("t")
    b.set_spout("left", ListSpout(["L"]))
    b.set_spout("right", ListSpout(["R"]))
    b.set_bolt("join", Join()).global_grouping("left").global_grouping("right")
    b.set_bolt("down", downstream).shuffle_grouping("join").add_configuration(
        "topology.tick.tuple.freq.secs", 5
    )
    return b.build()


@pytest.mark.parametrize("ackers", [1, 2, 3])
def test_multi_anchored_roots_complete_only_after_the_joined_tuple_is_acked(ackers: int) -> None:
    clock = FakeClock()
    rt = runtime(join_topology(Hold(after=5.0)), clock, topology_acker_executors=ackers)
    rt.open()
    for _ in range(5):
        rt.step()
    left, right = spout_task(rt, "left").spout, spout_task(rt, "right").spout
    # Join acked both inputs, but the joined tuple is still held downstream.
    assert rt.tasks_of["join"][0].acked == 2
    assert left.acked == right.acked == []
    assert rt.counters()["acker_pending"] == 2
    clock.advance(5)
    for _ in range(3):
        rt.step()
    assert records("released") == [("L", 5.0)]
    assert left.acked == [0] and right.acked == [0]
    assert left.failed == right.failed == []
    assert rt.counters()["acker_pending"] == rt.counters()["pending"] == 0
    rt.close()


class FailJoined(Bolt):
    def execute(self, tuple: Tuple) -> None:
        Records("down").append(tuple.values)
        if len(records("down")) == 1:
            self.collector.fail(tuple)
        else:
            self.collector.ack(tuple)


def recording_join_topology(downstream: Bolt) -> Topology:
    """``join_topology`` with spouts that record in ``Records("left-events")`` and
    ``Records("right-events")``. On two workers: left (task 0) and join (task 2)
    in worker 0, right (task 1) and down (task 3) in worker 1."""
    b = TopologyBuilder("t")
    b.set_spout("left", RecordingSpout(["L"], prefix="left-"))
    b.set_spout("right", RecordingSpout(["R"], prefix="right-"))
    b.set_bolt("join", Join()).global_grouping("left").global_grouping("right")
    b.set_bolt("down", downstream).shuffle_grouping("join").add_configuration(
        "topology.tick.tuple.freq.secs", 5
    )
    return b.build()


@pytest.mark.parametrize("ackers", [1, 2, 3])
def test_multi_anchored_roots_held_downstream_complete_when_it_is_acked(
    local_runner: Runner, ackers: int
) -> None:
    # The run-until-idle view of the test above: each spout hears its ack when
    # the joined tuple is released (at the 5 s tick), not when join acked it.
    # On two workers, 1 acker lives in worker 0; with 2 or 3 the two roots are
    # tracked in different workers.
    result = local_runner.run(
        recording_join_topology(Hold(after=5.0)),
        conf_of(local_runner, topology_acker_executors=ackers),
    )
    assert result.reason == "idle"
    ((value, released_at),) = records("released")
    assert value == "L"
    assert released_at == pytest.approx(5.0, abs=slack(local_runner))
    for side in ("left-", "right-"):
        ((msg_id, acked_at),) = events("ack", prefix=side)
        assert msg_id == 0
        assert released_at <= acked_at <= released_at + slack(local_runner)
        assert events("fail", prefix=side) == []
    assert result.counters["acker_pending"] == result.counters["pending"] == 0


def test_failing_a_multi_anchored_tuple_fails_both_roots_at_once(local_runner: Runner) -> None:
    # On two workers the spouts, the join and the failing bolt span both workers,
    # and the two roots are tracked by ackers in different workers.
    topology = recording_join_topology(FailJoined())
    result = local_runner.run(topology, conf_of(local_runner, topology_acker_executors=2))
    assert result.reason == "idle"
    for side in ("left-", "right-"):
        assert events("fail", prefix=side) == [(0, 0.0)]  # no timeout was waited for
        assert [i for i, _ in events("ack", prefix=side)] == [0]
        assert [i for i, _ in events("emit", prefix=side)] == [0, 0]
    assert records("down") == [["L", "R"], ["L", "R"]]
    if local_runner.local:
        rt = local_runner.last
        left, right = spout_task(rt, "left").spout, spout_task(rt, "right").spout
        assert left.failed == right.failed == [0]
        assert left.acked == right.acked == [0]
        assert rt.clock.now == 0


class PairSink(Bolt):
    def execute(self, tuple: Tuple) -> None:
        sink("pairs").append(tuple.values)
        self.collector.ack(tuple)


class WalkthroughIds:
    """The 4-bit ids of acking-walkthrough.md: roots 2 and 3 (so acker 0 and acker 1),
    spout edges 1010 and 1011, and for tid1, the tuple anchored to both, one fresh
    edge per anchor as Storm draws them: 1100 (anchor in root 2's tree) and 1101
    (anchor in root 3's). Installed through the runtime's id sources."""

    def __init__(self) -> None:
        self.roots = iter([2, 3])
        self.edges = iter([0b1010, 0b1011, 0b1100, 0b1101])

    def install(self, rt: LocalRuntime) -> None:
        rt.new_root = lambda: next(self.roots)
        rt.randbits = lambda bits: next(self.edges)

    def all_used(self) -> bool:
        return next(self.roots, None) is None and next(self.edges, None) is None


def test_acking_walkthrough_end_to_end_with_two_ackers() -> None:
    ids = WalkthroughIds()
    b = TopologyBuilder("t")
    b.set_spout("left", ListSpout(["L"]))
    b.set_spout("right", ListSpout(["R"]))
    b.set_bolt("bolt1", Join()).global_grouping("left").global_grouping("right")
    b.set_bolt("bolt2", PairSink()).shuffle_grouping("bolt1")
    rt = runtime(b.build(), topology_acker_executors=2)
    ids.install(rt)
    assert rt.acking is not None
    acker1, acker2 = rt.acking.ledgers
    sid1, sid2 = rt.component_tasks["left"][0], rt.component_tasks["right"][0]
    rt.open()

    rt.step()  # both spouts emit: acker1 tracks stid1 (root 2), acker2 stid2 (root 3)
    assert acker1.entry(2) == (0b1010, sid1, False)
    assert acker2.entry(3) == (0b1011, sid2, False)
    assert 3 not in acker1 and 2 not in acker2

    rt.tasks_of["bolt1"][0].drain()  # tid1 anchored to both, then both inputs acked
    assert acker1.ack_value(2) == 0b1100
    assert acker2.ack_value(3) == 0b1101

    rt.tasks_of["bolt2"][0].drain()  # tid1 acked: both trees are complete
    assert len(acker1) == len(acker2) == 0
    rt.step()  # the spouts hear about it
    assert spout_task(rt, "left").spout.acked == [0]
    assert spout_task(rt, "right").spout.acked == [0]
    assert sink("pairs") == [["L", "R"]]
    rt.close()
    assert ids.all_used()


# -- explicit fail -----------------------------------------------------------------------------------


class FailOnce(Bolt):
    def __init__(self, victim: Any) -> None:
        self.victim = victim

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.failed = False

    def execute(self, tuple: Tuple) -> None:
        if tuple[0] == self.victim and not self.failed:
            self.failed = True
            self.collector.fail(tuple)
        else:
            Records("out").append(tuple[0])
            self.collector.ack(tuple)


def test_an_explicit_fail_reaches_the_spout_at_once() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(5)))
    b.set_bolt("f", FailOnce(victim=2)).shuffle_grouping("src")
    clock = FakeClock(start=50.0)
    rt = runtime(b.build(), clock)
    rt.open()
    rt.step()  # emits all five
    rt.step()  # the bolt fails 2; the spout hears it in the same step and replays it
    assert events("fail") == [(2, 50.0)]
    rt.step()
    assert events("emit", 2) == [50.0, 50.0]
    assert sorted(records("out")) == [0, 1, 2, 3, 4]
    assert sorted(i for i, _ in events("ack")) == [0, 1, 2, 3, 4]
    assert clock.now == 50.0
    assert rt.counters()["timed_out"] == 0
    rt.close()


def test_an_explicit_fail_reaches_a_spout_in_another_worker_at_once(local_runner: Runner) -> None:
    # The run-until-idle view of the test above; on two workers the spout is in
    # worker 0 and the failing bolt in worker 1. No time passes.
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(5)))
    b.set_bolt("f", FailOnce(victim=2)).shuffle_grouping("src")
    result = local_runner.run(b.build(), conf_of(local_runner), clock=FakeClock(start=50.0))
    assert result.reason == "idle"
    assert events("fail") == [(2, 50.0)]
    assert events("emit", 2) == [50.0, 50.0]
    assert sorted(records("out")) == [0, 1, 2, 3, 4]
    assert sorted(i for i, _ in events("ack")) == [0, 1, 2, 3, 4]
    assert all(t == 50.0 for _, t in events("ack"))
    assert result.counters["timed_out"] == 0


# -- at-most-once --------------------------------------------------------------------------------------


class Blackhole(Bolt):
    def execute(self, tuple: Tuple) -> None:
        Records("blackhole").append(tuple[0])  # never acks, never fails


def test_without_ackers_spouts_are_acked_right_after_emit_and_nothing_is_tracked(
    local_runner: Runner,
) -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(25)))
    b.set_bolt("hole", Blackhole(), 2).shuffle_grouping("src")
    rt = local_runner.runtime(b.build(), conf_of(local_runner, topology_acker_executors=0))
    if local_runner.local:
        assert rt.acking is None
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    if local_runner.local:
        assert rt.clock.now == 0  # nothing to wait for
    assert [i for i, _ in events("ack")] == list(range(25))
    assert all(t == 0 for _, t in events("ack"))
    assert events("fail") == []
    assert sorted(records("blackhole")) == list(range(25))
    counters = dict(result.counters)
    if local_runner.workers:
        assert counters.pop("worker_restarts") == 0
    assert counters == {
        "untracked_acks": 25,
        "timed_out": 0,
        "pending": 0,
        "retrying": 0,
        "dead_lettered": 0,
        "skipped_dead_letters": 0,
    }


# -- max.spout.pending --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["topology", "component"])
def test_max_spout_pending_bounds_the_tracked_tuples_in_flight(
    local_runner: Runner, where: str
) -> None:
    # On two workers the spout is in worker 0 and the holding bolt in worker 1.
    n, limit = 23, 5
    b = TopologyBuilder("t")
    spout = b.set_spout("src", RecordingSpout(range(n)))
    b.set_bolt("hold", Hold(after=0.0)).shuffle_grouping("src").add_configuration(
        "topology.tick.tuple.freq.secs", 1
    )
    config: dict[str, Any] = {}
    if where == "topology":
        config["topology_max_spout_pending"] = limit
    else:
        spout.add_configuration("topology.max.spout.pending", limit)
    rt = local_runner.runtime(b.build(), conf_of(local_runner, **config))
    seen: list[int] = []
    if local_runner.local:
        src = spout_task(rt)
        rt.after_step = lambda: seen.append(len(src.pending))
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    if local_runner.local:
        assert max(seen) == limit
    # What the spout saw in flight (emitted, not yet acked) never passed the limit.
    in_flight, most = 0, 0
    for kind, _, _ in records("events"):
        in_flight += 1 if kind == "emit" else -1
        most = max(most, in_flight)
    assert most == limit
    assert sorted(records("hold")) == list(range(n))
    # One batch of `limit` per tick: the spout waited for acks, it did not drop.
    assert [t for _, t in records("released")][::limit] == pytest.approx(
        [1, 2, 3, 4, 5], abs=slack(local_runner)
    )
    assert events("fail") == []


# -- reset_timeout -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reset", [True, False])
def test_reset_timeout_keeps_a_slow_tuple_alive(local_runner: Runner, reset: bool) -> None:
    # On two workers the spout and its acker are in worker 0, the slow bolt in worker 1:
    # the reset must reach the spout task's own pending timeout in the other worker.
    b = TopologyBuilder("t")
    b.set_spout("src", RecordingSpout(range(3)))
    b.set_bolt("slow", Hold(after=10.0, reset=reset, victim=1)).shuffle_grouping(
        "src"
    ).add_configuration("topology.tick.tuple.freq.secs", 1)
    result = local_runner.run(b.build(), conf_of(local_runner))
    assert result.reason == "idle"
    if reset:
        # Held for 10 s, 2.5x the timeout, and never failed.
        assert records("released") == [(1, pytest.approx(10, abs=slack(local_runner)))]
        assert events("fail") == []
        assert result.counters["timed_out"] == 0
        assert [i for i, _ in events("ack")] == [0, 2, 1]
        assert events("ack", 1) == [pytest.approx(10, abs=2 * slack(local_runner))]
    else:
        # The control: without reset_timeout the same tuple times out and is replayed.
        assert [i for i, _ in events("fail")] == [1]
        assert result.counters["timed_out"] == 1
        assert (
            records("released") == []
        )  # the run was over (idle) before the first delivery's release


# -- a million tuples leave nothing behind ------------------------------------------------------------------
