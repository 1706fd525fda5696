"""Groupings, streams, per-component config, ticks and emit errors, on every runtime.

Tests that take ``runner`` run on the local runtime (on a FakeClock, so idle
waits cost no real time) and on Spark; what bolts see is collected in
:class:`~runtime_harness.Records`, which Spark's worker processes can append to.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from runtime_harness import Items, Records, Runner, Sink, records

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    FakeClock,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream._results import RunResult
from statestream._routing import task_for_key
from statestream.runtime.local import LocalRuntime
from statestream.testing import ListSpout, sink

WORDS = [f"w{i % 37}" for i in range(500)]


def run_idle(
    runner: Runner, topology: Topology, config: Mapping[str, Any] | None = None
) -> RunResult:
    result = runner.run(topology, config)
    assert result.reason == "idle"
    return result


class Numbers(Spout):
    """Emits ``(task_index, i)`` for i in range(count), then is exhausted once all are acked."""

    def __init__(self, count: int, *, reliable: bool = True, stream: str = "default") -> None:
        self.count = count
        self.reliable = reliable
        self.stream = stream

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(self.stream, ["src", "n"])

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.next = 0
        self.pending: set[int] = set()

    def next_tuple(self) -> None:
        if self.next < self.count:
            i = self.next
            self.next += 1
            if self.reliable:
                self.pending.add(i)
                self.collector.emit([self.context.task_index, i], msg_id=i, stream=self.stream)
            else:
                self.collector.emit([self.context.task_index, i], stream=self.stream)

    def ack(self, msg_id: Any) -> None:
        self.pending.discard(msg_id)

    def fail(self, msg_id: Any) -> None:
        raise AssertionError(f"nothing should fail here, got {msg_id!r}")

    def exhausted(self) -> bool:
        return self.next >= self.count and not self.pending

    def position(self) -> Any:
        return self.next

    def seek(self, position: Any) -> None:
        self.next = position or 0
        self.pending = set()


class Relay(BasicBolt):
    """Re-emits its input, anchored (a basic bolt)."""

    def __init__(self, fields: Sequence[str] = ("value",)) -> None:
        self.fields = list(fields)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.fields)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit(list(tuple.values))


def sink_of(name: str) -> list[Any]:
    return records(name)


def by_task(records: list[tuple[int, tuple[Any, ...]]]) -> dict[int, list[tuple[Any, ...]]]:
    out: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for task, values in records:
        out[task].append(values)
    return dict(out)


# -- shuffle / none --------------------------------------------------------------


@pytest.mark.parametrize("grouping", ["shuffle_grouping", "none_grouping"])
@pytest.mark.parametrize("reliable", [True, False], ids=["tracked", "untracked"])
def test_shuffle_is_round_robin_per_emitter(runner: Runner, grouping: str, reliable: bool) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Numbers(100, reliable=reliable), 2)
    getattr(b.set_bolt("out", Sink("out", record="task"), 3), grouping)("nums")
    result = run_idle(runner, b.build())
    records = sink_of("out")
    assert sorted(v for _, v in records) == [(s, i) for s in (0, 1) for i in range(100)]
    for src in (0, 1):
        counts = Counter(task for task, (s, _) in records if s == src)
        assert sorted(counts.values()) == [33, 33, 34]
    totals = Counter(task for task, _ in records)
    assert max(totals.values()) - min(totals.values()) <= 1
    assert result.errors == []


def test_shuffle_from_a_bolt_anchored_is_round_robin(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Items(range(10)))
    b.set_bolt("relay", Relay()).shuffle_grouping("nums")
    b.set_bolt("out", Sink("out", record="task"), 4).shuffle_grouping("relay")
    run_idle(runner, b.build())
    # One emitter, strict rotation: tuple i goes to task i % 4.
    assert sorted(records("out")) == sorted((i % 4, (i,)) for i in range(10))


# -- fields ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["spout-untracked", "spout-tracked", "bolt-anchored"])
def test_fields_grouping_sends_equal_keys_to_the_task_of_task_for_key(
    runner: Runner, path: str
) -> None:
    b = TopologyBuilder("t")
    b.set_spout("words", Items(WORDS, fields=["word"], reliable=path != "spout-untracked"))
    source = "words"
    if path == "bolt-anchored":
        b.set_bolt("relay", Relay(["word"]), 2).shuffle_grouping("words")
        source = "relay"
    b.set_bolt("out", Sink("out", record="task"), 4).fields_grouping(source, ["word"])
    run_idle(runner, b.build())
    records = sink_of("out")
    assert Counter(v[0] for _, v in records) == Counter(WORDS)
    tasks_of_word: dict[str, set[int]] = defaultdict(set)
    for task, (word,) in records:
        tasks_of_word[word].add(task)
    assert {w: tasks for w, tasks in tasks_of_word.items()} == {
        w: {task_for_key(w, 4)} for w in set(WORDS)
    }
    assert len({task for task, _ in records}) == 4  # 37 keys do reach every task


def test_subscribers_grouped_by_one_field_each_get_their_own_task_for_key(
    runner: Runner,
) -> None:
    # An anchored emit to subscribers grouped by the same field shares the hash
    # between those with as many tasks: each must still get task_for_key of its own n.
    b = TopologyBuilder("t")
    b.set_spout("words", Items(WORDS, fields=["word"]))
    b.set_bolt("relay", Relay(["word"]), 2).shuffle_grouping("words")
    for name, n in (("four", 4), ("three", 3), ("four_too", 4)):
        b.set_bolt(name, Sink(name, record="task"), n).fields_grouping("relay", ["word"])
    run_idle(runner, b.build())
    for name, n in (("four", 4), ("three", 3), ("four_too", 4)):
        assert sorted(records(name)) == sorted((task_for_key(w, n), (w,)) for w in WORDS)


def test_fields_grouping_on_several_fields_and_non_string_keys(runner: Runner) -> None:
    items = [(i % 5, f"k{i % 3}") for i in range(60)]
    b = TopologyBuilder("t")
    b.set_spout("pairs", Items(items, fields=["n", "k"]))
    b.set_bolt("both", Sink("both", record="task"), 3).fields_grouping("pairs", ["k", "n"])
    b.set_bolt("num", Sink("num", record="task"), 3).fields_grouping("pairs", "n")
    run_idle(runner, b.build())
    assert sorted(records("both")) == sorted((task_for_key([k, n], 3), (n, k)) for n, k in items)
    assert sorted(records("num")) == sorted((task_for_key(n, 3), (n, k)) for n, k in items)


# -- global / all ---------------------------------------------------------------------


def test_global_grouping_goes_to_task_0_only(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Numbers(50), 2)
    b.set_bolt("out", Sink("out", record="task"), 3).global_grouping("nums")
    run_idle(runner, b.build())
    assert {task for task, _ in records("out")} == {0}
    assert len(records("out")) == 100


@pytest.mark.parametrize("reliable", [True, False], ids=["tracked", "untracked"])
def test_all_grouping_replicates_to_every_task(runner: Runner, reliable: bool) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Items(range(20), reliable=reliable))
    b.set_bolt("out", Sink("out", record="task"), 3).all_grouping("nums")
    result = run_idle(runner, b.build())
    assert by_task(records("out")) == {t: [(i,) for i in range(20)] for t in range(3)}
    # Every task acks its own copy: no copy is shared, so no "acked twice".
    assert result.errors == []
    assert result.components["out"].acked == 60


def test_two_subscribers_of_one_stream_each_get_and_ack_every_tuple(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Items(range(10), reliable=False))
    b.set_bolt("a", Sink("a")).shuffle_grouping("nums")
    b.set_bolt("b", Sink("b")).shuffle_grouping("nums")
    result = run_idle(runner, b.build(), {"topology.acker.executors": 0})
    assert records("a") == records("b") == [(i,) for i in range(10)]
    assert result.errors == []


# -- direct ------------------------------------------------------------------------------


class DirectRouter(Bolt):
    """Sends value v to task v % n of ``target`` with emit_direct (anchored)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream("direct", ["value"], direct=True)

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.tasks = context.component_tasks(self.target)

    def execute(self, tuple: Tuple) -> None:
        v = tuple[0]
        self.collector.emit_direct(self.tasks[v % len(self.tasks)], [v], tuple, "direct")
        self.collector.ack(tuple)


class DirectSpout(Spout):
    """Emits value v directly to task (v * 2) % n of ``target``, tracked."""

    def __init__(self, target: str, count: int) -> None:
        self.target = target
        self.count = count

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"], direct=True)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.tasks = context.component_tasks(self.target)
        self.next = 0
        self.acked: set[int] = set()

    def next_tuple(self) -> None:
        if self.next < self.count:
            v = self.next
            self.next += 1
            self.collector.emit_direct(self.tasks[(v * 2) % len(self.tasks)], [v], msg_id=v)

    def ack(self, msg_id: Any) -> None:
        self.acked.add(msg_id)

    def exhausted(self) -> bool:
        return len(self.acked) == self.count

    def position(self) -> Any:
        return self.next

    def seek(self, position: Any) -> None:
        self.next = position or 0


def test_direct_grouping_goes_exactly_to_the_chosen_task(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Items(range(30)))
    b.set_bolt("router", DirectRouter("out"), 2).shuffle_grouping("nums")
    b.set_bolt("out", Sink("out", record="task"), 3).direct_grouping("router", "direct")
    result = run_idle(runner, b.build())
    assert sorted(records("out")) == sorted((v % 3, (v,)) for v in range(30))
    assert result.errors == []


def test_direct_emit_from_a_spout(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", DirectSpout("out", 12))
    b.set_bolt("out", Sink("out", record="task"), 4).direct_grouping("nums")
    run_idle(runner, b.build())
    assert sorted(records("out")) == sorted(((v * 2) % 4, (v,)) for v in range(12))


# -- custom ----------------------------------------------------------------------------------


class EvensAndEdges:
    """Even values to the first and last task, odd values to task 1."""

    def choose_tasks(self, values: Sequence[Any], n_tasks: int) -> list[int]:
        return [0, n_tasks - 1] if values[0] % 2 == 0 else [1]


@pytest.mark.parametrize("reliable", [True, False], ids=["tracked", "untracked"])
def test_custom_grouping(runner: Runner, reliable: bool) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Items(range(10), reliable=reliable))
    b.set_bolt("out", Sink("out", record="task"), 3).custom_grouping("nums", EvensAndEdges())
    result = run_idle(runner, b.build())
    assert by_task(records("out")) == {
        0: [(v,) for v in range(0, 10, 2)],
        1: [(v,) for v in range(1, 10, 2)],
        2: [(v,) for v in range(0, 10, 2)],
    }
    assert result.errors == []


# -- named streams ------------------------------------------------------------------------------


class Parity(BasicBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream("even", ["n"])
        declarer.declare_stream("odd", ["n", "half"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        n = tuple[0]
        if n % 2:
            collector.emit([n, n // 2], stream="odd")
        else:
            collector.emit([n], stream="even")


def StreamSink(name: str) -> Sink:
    return Sink(name, record="dict")


def test_named_streams_reach_only_their_subscribers(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Items(range(6)))
    b.set_bolt("parity", Parity()).shuffle_grouping("nums")
    b.set_bolt("evens", StreamSink("evens")).shuffle_grouping("parity", "even")
    b.set_bolt("odds", StreamSink("odds")).shuffle_grouping("parity", "odd")
    b.set_bolt("both", StreamSink("both")).shuffle_grouping("parity", "even").shuffle_grouping(
        "parity", "odd"
    )
    run_idle(runner, b.build())
    assert records("evens") == [("parity", "even", {"n": n}) for n in (0, 2, 4)]
    assert records("odds") == [("parity", "odd", {"n": n, "half": n // 2}) for n in (1, 3, 5)]
    assert sorted(records("both"), key=lambda r: r[2]["n"]) == [
        ("parity", "odd" if n % 2 else "even", {"n": n, "half": n // 2} if n % 2 else {"n": n})
        for n in range(6)
    ]


# -- per-component config and ticks ------------------------------------------------------------------


class ConfRecorder(Bolt):
    def __init__(self, name: str) -> None:
        self.out = Records(name)

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.out.append(
            (
                context.task_index,
                conf.get("t.greeting"),
                conf["topology.tick.tuple.freq.secs"],
                conf["topology.message.timeout.secs"],
            )
        )

    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)


def test_component_config_is_visible_in_prepare_of_that_component_only(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", Items(range(3)))
    b.set_bolt("a", ConfRecorder("a"), 2).shuffle_grouping("nums").add_configuration(
        "t.greeting", "hello"
    ).add_configuration("topology.tick.tuple.freq.secs", 7)
    b.set_bolt("b", ConfRecorder("b")).shuffle_grouping("nums")
    run_idle(
        runner, b.build(), {"t.greeting": "topology-wide", "topology.message.timeout.secs": 12}
    )
    a, b_ = records("a"), records("b")
    if not runner.local:
        # On Spark a bolt instance lives for one batch attempt (prepare per batch,
        # and once more on the driver for cleanup): every prepare saw the same.
        a, b_ = sorted(set(a)), sorted(set(b_))
    assert sorted(a) == [(0, "hello", 7, 12), (1, "hello", 7, 12)]
    assert b_ == [(0, "topology-wide", None, 12)]


class TickCounter(Bolt):
    def __init__(self, name: str) -> None:
        self.name = name

    def execute(self, tuple: Tuple) -> None:
        if tuple.is_tick:
            sink(self.name).append(
                (
                    self.context.task_index,
                    tuple.source_component,
                    tuple.source_stream,
                    tuple.values,
                )
            )
        else:
            sink(self.name + ".data").append(tuple[0])
        self.collector.ack(tuple)


class Forever(Spout):
    """An unbounded source that has nothing to say."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def next_tuple(self) -> None:
        pass


# The tick tests are local-only: ticks are timed by the local loop's clock (the
# Spark runtime has no tick tuples; a batch is its unit of time).


def test_ticks_arrive_at_the_component_frequency_on_simulated_time() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", Forever())
    b.set_bolt("ticked", TickCounter("ticked"), 2).shuffle_grouping("src").add_configuration(
        "topology.tick.tuple.freq.secs", 2
    )
    b.set_bolt("plain", TickCounter("plain")).shuffle_grouping("src")
    clock = FakeClock()
    result = LocalRuntime(b.build(), {}, clock=clock).run(duration=11)
    assert result.reason == "duration"
    assert 11 <= clock.now < 11.01
    # Ticks at 2, 4, 6, 8 and 10 simulated seconds, to each task of the bolt.
    assert Counter(task for task, *_ in sink("ticked")) == {0: 5, 1: 5}
    assert {tuple(rest[:2]) for _, *rest in sink("ticked")} == {("__system", "__tick")}
    assert all(values == [2.0] for *_, values in sink("ticked"))
    assert sink("plain") == []


def test_topology_wide_tick_frequency_reaches_every_bolt() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", Forever())
    b.set_bolt("one", TickCounter("one")).shuffle_grouping("src")
    b.set_bolt("two", TickCounter("two")).shuffle_grouping("src").add_configuration(
        "topology.tick.tuple.freq.secs", 5
    )
    LocalRuntime(b.build(), {"topology.tick.tuple.freq.secs": 1}, clock=FakeClock()).run(
        duration=10.5
    )
    assert len(sink("one")) == 10
    assert len(sink("two")) == 2  # the component's own frequency wins


def test_ticks_and_data_interleave() -> None:
    b = TopologyBuilder("t")
    b.set_spout("nums", ListSpout(range(5)))
    b.set_bolt("ticked", TickCounter("ticked")).shuffle_grouping("nums")
    LocalRuntime(b.build(), {"topology.tick.tuple.freq.secs": 1}, clock=FakeClock()).run(
        duration=3.5
    )
    assert sink("ticked.data") == [0, 1, 2, 3, 4]
    assert len(sink("ticked")) == 3


# -- emit errors ----------------------------------------------------------------------------------------


class BadEmitter(Bolt):
    """Makes the emit mistake its input names (the first time only), then passes a good
    tuple on."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])
        declarer.declare_stream("direct", ["value"], direct=True)

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.seen: set[str] = set()

    def execute(self, tuple: Tuple) -> None:
        mistake = tuple[0]
        if mistake in self.seen:
            mistake = "replayed " + mistake
        self.seen.add(mistake)
        if mistake == "arity":
            self.collector.emit([1, 2], tuple)
        elif mistake == "stream":
            self.collector.emit([1], tuple, stream="nope")
        elif mistake == "direct-with-emit":
            self.collector.emit([1], tuple, stream="direct")
        elif mistake == "emit-direct-on-plain":
            self.collector.emit_direct(self.context.component_tasks("out")[0], [1], tuple)
        elif mistake == "emit-direct-to-non-subscriber":
            self.collector.emit_direct(self.context.task_id, [1], tuple, stream="direct")
        self.collector.emit([f"ok {mistake}"], tuple)
        self.collector.ack(tuple)


EMIT_ERRORS = {
    "arity": "component 'bad' emitted 2 values [1, 2] on stream 'default', which declares 1 "
    "fields ['value']",
    "stream": "component 'bad' task 0 emitted on stream 'nope', which it did not declare "
    "(declared: default, direct); declare it in declare_output_fields",
    "direct-with-emit": "component 'bad': stream 'direct' is a direct stream; use "
    "emit_direct(task, ...)",
    "emit-direct-on-plain": "component 'bad': stream 'default' is not a direct stream; use "
    "emit(...)",
    "emit-direct-to-non-subscriber": "component 'bad' emit_direct to task 1, which does not "
    "subscribe to that stream (subscribed tasks: [3]); pick one from "
    "context.component_tasks(<bolt>)",
}


def emit_errors_topology(reliable: bool) -> Topology:
    b = TopologyBuilder("t")
    b.set_spout("src", Items([*EMIT_ERRORS, "none"], reliable=reliable))
    b.set_bolt("bad", BadEmitter()).shuffle_grouping("src")
    b.set_bolt("out", Sink("out")).shuffle_grouping("bad")
    b.set_bolt("direct", Sink("direct")).direct_grouping("bad", "direct")
    return b.build()


def check_emit_errors(result: RunResult) -> None:
    assert result.reason == "idle"
    assert [(r.component, r.task_index, r.tuple) for r in result.errors] == [
        ("bad", 0, f"Tuple(src[0]:default [{m!r}])") for m in EMIT_ERRORS
    ]
    for report, message in zip(result.errors, EMIT_ERRORS.values(), strict=True):
        assert report.error == f"TupleError({message!r})"
        assert "TupleError" in report.traceback
    assert result.components["bad"].errors == len(EMIT_ERRORS)
    # The topology kept running: the tuple without a mistake went through ...
    assert ("ok none",) in records("out")
    assert records("direct") == []


def test_emit_errors_are_reported_for_the_component_and_tuple(runner: Runner) -> None:
    rt = runner.runtime(emit_errors_topology(reliable=True))
    assert rt.component_tasks["direct"] == [3]  # the message above names it
    result = rt.run(until_idle=True)
    check_emit_errors(result)
    # ... and each failed input was replayed, and then went through too.
    assert sorted(records("out")) == sorted(
        [("ok none",)] + [(f"ok replayed {m}",) for m in EMIT_ERRORS]
    )
    if runner.local:  # the spout hears of each failed tuple (on Spark: of failed batches)
        assert rt.tasks_of["src"][0].spout.failed == [0, 1, 2, 3, 4]


def test_emit_errors_of_untracked_tuples_are_reported_and_not_replayed() -> None:
    # Local only: an untracked tuple that fails is dropped; the Spark runtime
    # re-executes any failed tuple within its batch, tracked or not.
    rt = LocalRuntime(emit_errors_topology(reliable=False), {}, clock=FakeClock())
    check_emit_errors(rt.run(until_idle=True))
    assert rt.tasks_of["src"][0].spout.failed == []
    assert records("out") == [("ok none",)]


class BadSpout(Spout):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["a", "b"])

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.calls = 0

    def next_tuple(self) -> None:
        self.calls += 1
        if self.calls == 1:
            self.collector.emit(["only one"])
        elif self.calls == 2:
            self.collector.emit(["x", "y"])

    def exhausted(self) -> bool:
        return self.calls >= 2

    def position(self) -> Any:
        return self.calls

    def seek(self, position: Any) -> None:
        self.calls = position or 0


def test_a_spout_emit_error_is_reported_and_the_spout_keeps_going(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", BadSpout())
    b.set_bolt("out", Sink("out")).shuffle_grouping("src")
    result = run_idle(runner, b.build())
    (report,) = result.errors
    assert (report.component, report.task_index, report.tuple) == ("src", 0, "'next_tuple()'")
    assert report.error.startswith("TupleError(\"component 'src' emitted 1 values ['only one']")
    assert records("out") == [("x", "y")]
    assert result.components["src"].errors == 1
