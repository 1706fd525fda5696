"""The runtimes: backpressure, error isolation, lifecycle, stopping, word count.

Tests that take ``runner`` run on the local runtime and on Spark; the others
are local-only by nature, each says why.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from runtime_harness import Items, Runner, Sink, records

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    ConfigError,
    FailedException,
    FakeClock,
    FileSpout,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
    load_topology,
    stable_hash,
)
from statestream._routing import task_for_key
from statestream.runtime.local import LocalRuntime
from statestream.testing import ListSpout, SinkBolt, sink

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"

# Components are copied per task, so they reach the runtime under test (to
# observe it or to stop it) through this module-level slot, set by each test.
CURRENT: dict[str, LocalRuntime] = {}


@pytest.fixture(autouse=True)
def _forget_runtime() -> Any:
    yield
    CURRENT.clear()


class Relay(BasicBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0]])


# -- backpressure ----------------------------------------------------------------------------


def observe_depths() -> None:
    """Record the deepest bolt inbox and the spout's tracked tuples right now."""
    rt = CURRENT["rt"]
    stats = sink("depths")
    if not stats:
        stats.extend([0, 0])
    stats[0] = max(stats[0], *(len(b.inbox) for b in rt.bolts))
    stats[1] = max(stats[1], sum(len(s.pending) for s in rt.spouts))


class ObservedListSpout(ListSpout):
    def next_tuple(self) -> None:
        observe_depths()
        super().next_tuple()


class SlowSink(Bolt):
    """Does real (bounded) work per tuple, and watches the queues while it does."""

    def execute(self, tuple: Tuple) -> None:
        observe_depths()
        sink("total").append(sum(i * i for i in range(tuple[0] % 50)))
        self.collector.ack(tuple)


# Local-only: queue caps and backpressure are the local loop's flow control.
@pytest.mark.parametrize("acking", [1, 0], ids=["acking", "no-acking"])
def test_a_slow_bolt_bounds_every_queue_by_the_buffer_size(acking: int) -> None:
    n, cap = 10_000, 16
    b = TopologyBuilder("t")
    b.set_spout("src", ObservedListSpout(range(n)))
    b.set_bolt("relay", Relay(), 2).shuffle_grouping("src")
    b.set_bolt("slow", SlowSink()).shuffle_grouping("relay")
    rt = CURRENT["rt"] = LocalRuntime(
        b.build(),
        {"topology.executor.receive.buffer.size": cap, "topology.acker.executors": acking},
        clock=FakeClock(),
    )
    # Also sample between steps, when the spout has just filled its queues.
    rt.after_step = observe_depths
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    assert len(sink("total")) == n
    max_inbox, max_pending = sink("depths")
    # The queues filled up (so the spout really was held back) but never beyond the cap.
    assert max_inbox == cap
    # What is tracked is what sits in the three queues plus the tuples being handled.
    assert max_pending <= (3 * cap + 2 if acking else 0)
    assert result.components["src"].emitted == n
    assert result.components["slow"].executed == n


class Countdown(BasicBolt):
    """Feeds ``n - 1`` back into the cycle until 0, which it records."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        n = tuple[0]
        if n > 0:
            collector.emit([n - 1])
        else:
            sink("zeros").append(tuple.source_component)


def run_steps_until_idle(rt: LocalRuntime, clock: FakeClock, limit: int) -> bool:
    """Drive the loop by hand (as run() does) for at most ``limit`` steps; True once idle.
    A deadlocked topology never becomes idle, and this returns False instead of hanging."""
    rt.open()
    for _ in range(limit):
        if not rt.step():
            if rt.idle():
                return True
            clock.advance(0.001)
    return False


# Local-only: drives the local loop by hand, on full local queues.
@pytest.mark.parametrize("shape", ["self-loop", "two-cycle"])
def test_a_cycle_does_not_deadlock_on_full_queues(shape: str) -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout([5] * 100))
    if shape == "self-loop":
        b.set_bolt("a", Countdown()).shuffle_grouping("src").shuffle_grouping("a")
    else:
        b.set_bolt("a", Countdown()).shuffle_grouping("src").shuffle_grouping("b")
        b.set_bolt("b", Countdown()).shuffle_grouping("a")
    clock = FakeClock()
    rt = LocalRuntime(b.build(), {"topology.executor.receive.buffer.size": 4}, clock=clock)
    assert run_steps_until_idle(rt, clock, 10_000)
    rt.close()
    assert len(sink("zeros")) == 100
    assert rt.tasks_of["src"][0].spout.acked == list(range(100))
    assert clock.now == 0  # it never even had to wait


# -- a raising bolt ----------------------------------------------------------------------------


class Flaky(Bolt):
    """Raises on the value 7 the first time this task sees it; forwards everything."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.seen: set[int] = set()

    def execute(self, tuple: Tuple) -> None:
        v = tuple[0]
        if v == 7 and v not in self.seen:
            self.seen.add(v)
            raise ValueError("seven is unlucky")
        self.collector.emit([v], tuple)
        self.collector.ack(tuple)


def test_a_raising_bolt_is_isolated_reported_and_its_input_replayed() -> None:
    # Local-only: on Spark an exception other than a wrong emit fails the Spark
    # task, which Spark retries and then the batch replays (documented in spark.py).
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(range(20)))
    b.set_bolt("flaky", Flaky(), 2).fields_grouping("src", "value")
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("flaky")
    rt = LocalRuntime(b.build(), {}, clock=FakeClock())
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    (report,) = result.errors
    assert report.component == "flaky"
    assert report.task_index == task_for_key(7, 2)
    assert report.tuple == "Tuple(src[0]:default [7])"
    assert report.error == "ValueError('seven is unlucky')"
    assert "seven is unlucky" in report.traceback
    assert result.components["flaky"].errors == 1
    assert result.components["flaky"].failed == 1
    assert rt.tasks_of["src"][0].spout.failed == [7]
    # Nothing lost, and everything after the error still went through.
    assert sorted(sink("out")) == [(v,) for v in range(20)]
    assert result.counters["pending"] == 0


def test_a_raising_bolt_without_acking_drops_only_its_input() -> None:
    # Local-only: at-most-once per tuple; Spark replays whole batches.
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(range(20)))
    b.set_bolt("flaky", Flaky()).shuffle_grouping("src")
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("flaky")
    result = LocalRuntime(b.build(), {"topology.acker.executors": 0}, clock=FakeClock()).run(
        until_idle=True
    )
    assert [(r.component, r.tuple) for r in result.errors] == [
        ("flaky", "Tuple(src[0]:default [7])")
    ]
    assert sorted(sink("out")) == [(v,) for v in range(20) if v != 7]


class FailsOdd(BasicBolt):
    """Odd values: FailedException the first time (a replay request, not an error)."""

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        super().prepare(conf, context)
        self.seen: set[int] = set()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        v = tuple[0]
        if v % 2 and v not in self.seen:
            self.seen.add(v)
            raise FailedException(f"again, {v}")
        collector.emit([v])


def test_failed_exception_replays_without_reporting_an_error(runner: Runner) -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", Items(range(10)))
    b.set_bolt("fails", FailsOdd()).shuffle_grouping("src")
    b.set_bolt("out", Sink("out")).shuffle_grouping("fails")
    result = runner.run(b.build())
    assert result.errors == []
    assert result.components["fails"].failed == 5
    if runner.local:  # the spout hears of each failed tuple (on Spark: of failed batches)
        assert sorted(runner.last.tasks_of["src"][0].spout.failed) == [1, 3, 5, 7, 9]
    assert sorted(records("out")) == [(v,) for v in range(10)]


class RaisesInBasic(BasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        raise KeyError(tuple[0])


def test_a_basic_bolt_that_raises_fails_and_reports_every_input() -> None:
    # Local-only: steps the local loop by hand (the input never passes, so a run
    # would not end).
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(["a", "b"]))
    b.set_bolt("bad", RaisesInBasic()).shuffle_grouping("src")
    rt = LocalRuntime(b.build(), {}, clock=FakeClock())
    rt.open()
    for _ in range(3):
        rt.step()
    assert [(r.component, r.tuple, r.error) for r in rt.errors] == [
        ("bad", "Tuple(src[0]:default ['a'])", "KeyError('a')"),
        ("bad", "Tuple(src[0]:default ['b'])", "KeyError('b')"),
    ]
    src = rt.tasks_of["src"][0]
    # Handed back to the spout after the retry policy's first delay, not at once.
    assert src.spout.failed == []
    assert src.metrics().retrying == 2
    rt.clock.advance(0.1)  # type: ignore[attr-defined]
    rt.step()
    assert src.spout.failed == [0, 1]
    rt.close()


# -- lifecycle ----------------------------------------------------------------------------------


class LifeSpout(ListSpout):
    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        sink("life").append((context.component_id, context.task_index, "open"))

    def close(self) -> None:
        sink("life").append((self.context.component_id, self.context.task_index, "close"))


class LifeBolt(Bolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        sink("life").append((context.component_id, context.task_index, "prepare"))

    def execute(self, tuple: Tuple) -> None:
        sink("life").append((self.context.component_id, self.context.task_index, "execute"))
        self.collector.emit([tuple[0]], tuple)
        self.collector.ack(tuple)

    def cleanup(self) -> None:
        sink("life").append((self.context.component_id, self.context.task_index, "cleanup"))


class LifeBasic(BasicBolt):
    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        super().prepare(conf, context)
        sink("life").append((context.component_id, context.task_index, "prepare"))

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        sink("life").append((self.context.component_id, self.context.task_index, "execute"))

    def cleanup(self) -> None:
        sink("life").append((self.context.component_id, self.context.task_index, "cleanup"))


def test_open_prepare_close_cleanup_run_once_per_task() -> None:
    # Local-only: on Spark a bolt instance lives for one batch attempt (documented).
    b = TopologyBuilder("t")
    b.set_spout("src", LifeSpout(range(10)), 2)
    b.set_bolt("mid", LifeBolt(), 3).shuffle_grouping("src")
    b.set_bolt("end", LifeBasic(), 2).shuffle_grouping("mid")
    rt = LocalRuntime(b.build(), {}, clock=FakeClock())
    assert sink("life") == []  # nothing is called before open/run
    rt.run(until_idle=True)
    rt.close()  # idempotent
    life = sink("life")
    lifecycle = Counter(e for e in life if e[2] != "execute")
    expected = (
        [("src", i, ev) for i in range(2) for ev in ("open", "close")]
        + [("mid", i, ev) for i in range(3) for ev in ("prepare", "cleanup")]
        + [("end", i, ev) for i in range(2) for ev in ("prepare", "cleanup")]
    )
    assert lifecycle == Counter(expected)
    assert sum(e[2] == "execute" for e in life) == 40  # 2 spout tasks x 10, through 2 bolts
    # Set-up strictly before any tuple, tear-down strictly after.
    kinds = [e[2] for e in life]
    first_execute, last_execute = kinds.index("execute"), len(kinds) - kinds[::-1].index("execute")
    assert set(kinds[:first_execute]) == {"open", "prepare"}
    assert set(kinds[last_execute:]) == {"close", "cleanup"}


def test_close_without_open_calls_nothing() -> None:
    # Local-only: LocalRuntime's context-manager lifecycle.
    b = TopologyBuilder("t")
    b.set_spout("src", LifeSpout(range(3)))
    b.set_bolt("mid", LifeBolt()).shuffle_grouping("src")
    with LocalRuntime(b.build(), {}, clock=FakeClock()):
        pass
    assert sink("life") == []


# -- stopping -----------------------------------------------------------------------------------
# Local-only: these stop the local loop on simulated time (FakeClock) or from a bolt
# that reaches the runtime in this process.


class Counting(Spout):
    """An unbounded source of 0, 1, 2, ..."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.n = 0

    def next_tuple(self) -> None:
        self.collector.emit([self.n], msg_id=self.n)
        self.n += 1


class Quiet(Spout):
    """An unbounded source with nothing to say."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def next_tuple(self) -> None:
        pass


class HoldUntilTick(Bolt):
    """Holds every input until its next tick tuple, then acks them all."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.held: list[Tuple] = []

    def execute(self, tuple: Tuple) -> None:
        if tuple.is_tick:
            for held in self.held:
                sink("released").append((held[0], self.context.clock.monotonic()))
                self.collector.ack(held)
            self.held = []
        else:
            self.held.append(tuple)


def test_until_idle_waits_for_tuples_still_in_flight() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(range(3)))
    b.set_bolt("hold", HoldUntilTick()).shuffle_grouping("src").add_configuration(
        "topology.tick.tuple.freq.secs", 10
    )
    clock = FakeClock()
    rt = LocalRuntime(b.build(), {"topology.message.timeout.secs": 60}, clock=clock)
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    # The spout was exhausted at once, but the run waited for the acks at t=10.
    assert [v for v, _ in sink("released")] == [0, 1, 2]
    assert all(10 <= t < 10.01 for _, t in sink("released"))
    assert 10 <= clock.now < 10.01
    assert rt.tasks_of["src"][0].spout.acked == [0, 1, 2]


def test_until_idle_does_not_stop_while_a_spout_is_not_exhausted() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", Quiet())
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("src")
    clock = FakeClock()
    result = LocalRuntime(b.build(), {}, clock=clock).run(until_idle=True, duration=5)
    assert result.reason == "duration"
    assert 5 <= clock.now < 5.01


def test_duration_stops_on_simulated_time() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(range(5)))
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("src")
    clock = FakeClock(start=100.0)
    result = LocalRuntime(b.build(), {}, clock=clock).run(duration=5)
    assert result.reason == "duration"
    assert 105 <= clock.now < 105.01
    assert 5 <= result.elapsed < 5.01
    assert sink("out") == [(v,) for v in range(5)]  # done long before; kept running


class StopsAt(Bolt):
    def __init__(self, at: int) -> None:
        self.at = at

    def execute(self, tuple: Tuple) -> None:
        sink("seen").append(tuple[0])
        if tuple[0] == self.at:
            CURRENT["rt"].stop()
        self.collector.ack(tuple)

    def cleanup(self) -> None:
        sink("cleanup").append(True)


def test_stop_from_inside_a_bolt_stops_the_loop_and_closes() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", Counting())
    b.set_bolt("stopper", StopsAt(100)).shuffle_grouping("src")
    rt = CURRENT["rt"] = LocalRuntime(
        b.build(), {"topology.executor.receive.buffer.size": 8}, clock=FakeClock()
    )
    result = rt.run()
    assert result.reason == "stopped"
    seen = sink("seen")
    assert seen == list(range(len(seen)))
    # The loop ends after the current step (which may still fill the queue once),
    # and what was queued by then is finished, not stranded: at most 2 queues' worth.
    assert 101 <= len(seen) <= 101 + 2 * 8
    assert result.counters["pending"] == 0
    assert rt.tasks_of["src"][0].spout.n == len(seen)
    assert sink("cleanup") == [True]


# -- word count ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wordcount() -> Topology:
    return load_topology(str(WORDCOUNT))


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, Counter[str]]:
    rng = random.Random(7)
    vocabulary = [f"word{i}" for i in range(300)] + ["é", "naïve", "a-b", "x"]
    lines = []
    for _ in range(2000):
        lines.append(" ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 12))))
    lines[5] = "   "  # blank lines count nothing
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, Counter(path.read_text(encoding="utf-8").split())


def read_counts(path: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        assert row["word"] not in counts, f"{row['word']!r} written twice"
        counts[row["word"]] = row["count"]
    return counts


@pytest.mark.parametrize(
    ("ackers", "fail_rate"),
    [(1, 0.0), (2, 0.0), (1, 0.1), (2, 0.1)],
    ids=["ackers1", "ackers2", "ackers1-fail0.1", "ackers2-fail0.1"],
)
# Local-only: acker counts, at-least-once per-line replay and its counters are the
# local runtime's (the exactly-once word count below runs on both).
def test_wordcount_output_equals_a_counter_over_the_file(
    wordcount: Topology,
    corpus: tuple[Path, Counter[str]],
    tmp_path: Path,
    ackers: int,
    fail_rate: float,
) -> None:
    path, expected = corpus
    out = tmp_path / "out" / "counts.jsonl"
    config = {
        "wordcount.input": str(path),
        "wordcount.output": str(out),
        "topology.acker.executors": ackers,
        "topology.executor.receive.buffer.size": 64,
        # The counts live in checkpointed state: a store of this test's own.
        "topology.state.provider": "memory",
        "topology.state.provider.config": {"name": str(tmp_path)},
    }
    if fail_rate:
        config["wordcount.fail_rate"] = fail_rate
    # Storm's at-least-once replay (exactly-once rewinds are tested below).
    config["statestream.state.exactly.once"] = False
    rt = LocalRuntime(wordcount, config, clock=FakeClock())
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    assert result.errors == []
    assert read_counts(out) == expected
    assert result.components["count"].executed == sum(expected.values())
    sentences = result.components["sentences"]
    if fail_rate:
        # The lines that draw a failure fail once (the process remembers
        # them), and are replayed until they pass.
        failing = sum(stable_hash(["fail", i]) % 1_000_000 < 100_000 for i in range(2000))
        assert 150 <= failing <= 250
        assert sentences.failed == failing
        assert result.components["split"].failed == sentences.failed
        assert sentences.emitted == 2000 + sentences.failed
        assert sentences.acked == 2000
    else:
        assert sentences.failed == 0
        assert sentences.emitted == sentences.acked == 2000
    assert result.counters["untracked_acks"] == 0
    assert result.counters["acker_pending"] == 0
    assert result.counters["pending"] == 0
    assert not rt.tasks_of["sentences"][0].spout._in_flight


def test_wordcount_with_failing_lines_counts_exactly_once(
    runner: Runner, wordcount: Topology, corpus: tuple[Path, Counter[str]], tmp_path: Path
) -> None:
    # The default (exactly-once, auto). A failed line is executed again where it
    # failed, on every runtime; nothing else is replayed. Each word counts once.
    path, expected = corpus
    out = tmp_path / "counts.jsonl"
    config = {
        "wordcount.input": str(path),
        "wordcount.output": str(out),
        "wordcount.fail_rate": 0.1,
        "topology.executor.receive.buffer.size": 64,
    }
    rt = runner.runtime(wordcount, config)
    assert rt.exactly_once
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    assert result.errors == []
    assert read_counts(out) == expected
    # Every line that draws a failure fails once (the process remembers it);
    # on two workers once per worker process whose split task it reaches (a
    # shuffle grouping may send a replayed line to the other worker).
    failing = sum(stable_hash(["fail", i]) % 1_000_000 < 100_000 for i in range(2000))
    if runner.local or runner.workers:
        # Retried where it failed (the split task executes the line again and
        # it goes through): no rewind, and the spout never hears of it.
        assert result.components["split"].failed == failing
        assert result.counters["rewinds"] == 0
        assert result.components["sentences"].failed == 0
        assert result.components["sentences"].emitted == 2000
    else:
        assert result.components["count"].executed == sum(expected.values())


def test_wordcount_refuses_to_run_without_ackers(wordcount: Topology) -> None:
    # Local-only: the local runtime's checkpoints travel through the acker.
    # Its counts are checkpointed state, and checkpoints need the acker.
    with pytest.raises(ConfigError, match=r"set topology\.acker\.executors to 1 or more"):
        LocalRuntime(wordcount, {"topology.acker.executors": 0}, clock=FakeClock())


class PlainCount(Bolt):
    """Counts in memory and reports the counts at cleanup (no state, no checkpoints)."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.counts: Counter[str] = Counter()

    def execute(self, tuple: Tuple) -> None:
        self.counts[tuple[0]] += 1
        self.collector.ack(tuple)

    def cleanup(self) -> None:
        sink("counts").append(self.counts)


def test_wordcount_split_at_most_once_without_ackers(
    wordcount: Topology, corpus: tuple[Path, Counter[str]]
) -> None:
    """The example's spout and split bolt with a plain counter, acker.executors 0."""
    # Local-only: the counts are reported by cleanup, which on Spark runs on a fresh
    # driver-side instance (documented lifecycle).
    path, expected = corpus
    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", FileSpout(path))
    b.set_bolt("split", wordcount.components["split"].obj, 2).shuffle_grouping("sentences")
    b.set_bolt("count", PlainCount(), 2).fields_grouping("split", "word")
    rt = LocalRuntime(b.build(), {"topology.acker.executors": 0}, clock=FakeClock())
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    total: Counter[str] = Counter()
    for counts in sink("counts"):
        assert not set(counts) & set(total)  # fields grouping: each word on one task
        total.update(counts)
    assert total == expected
    # At-most-once: every line acked right after its emit, nothing tracked.
    assert result.counters["untracked_acks"] == 2000
    assert result.counters["pending"] == 0
    assert "acker_pending" not in result.counters
    assert result.components["sentences"].acked == 2000


# Local-only: the embedded runtime tunes this process's garbage collector.
@pytest.mark.parametrize("frozen_before", [False, True], ids=["nothing-frozen", "app-froze"])
def test_a_run_leaves_the_garbage_collector_as_it_found_it(frozen_before: bool) -> None:
    import gc

    b = TopologyBuilder("gc")
    b.set_spout("src", ListSpout(range(100)))
    b.set_bolt("out", SinkBolt("gc-out")).shuffle_grouping("src")
    thresholds = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []
    if frozen_before:
        gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        rt = LocalRuntime(b.build(), {})
        rt.after_step = lambda: seen.append((gc.get_threshold(), gc.get_freeze_count()))
        assert rt.run(until_idle=True).reason == "idle"
        # During the run the young generation is collected less often, and
        # what existed before it is frozen out of the scans (unless the
        # process had frozen its own objects: that freeze is left alone).
        assert seen and all(t[0] >= 50_000 for t, _ in seen)
        assert all(n > 0 for _, n in seen)
        # CPython 3.12 starts with objects of its own frozen (375 on 3.12.1; 0 on
        # 3.11 and 3.13): the runtime cannot tell them from an application's.
        if frozen_before or frozen:
            # Left alone: not frozen again (which would add every object made
            # since). Frozen objects that die leave the count, so it may drop.
            assert all(n <= frozen for _, n in seen)
            assert 0 < gc.get_freeze_count() <= frozen
        else:
            assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == thresholds
    finally:
        gc.unfreeze()
    assert len(sink("gc-out")) == 100
