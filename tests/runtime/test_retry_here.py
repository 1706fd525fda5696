"""Exactly-once: a tuple a bolt fails is retried where it failed (DESIGN.md section 4).

Storm's word count as its state document writes it, with the count bolt failing
a share of its tuples at random (each attempt independent). At-least-once
replays the whole line from the spout; exactly-once used to go back to the last
checkpoint for every failure, replaying everything since the cut (20x the
lines) and dead-lettering healthy lines that other lines' failures made run
again. Now the failed ``execute``'s state writes are undone and the tuple is
executed again after its delay: one failure costs one retry, the counts are
exact, and only a tuple that fails ``statestream.retry.max.attempts`` times
itself is dead-lettered: the tuple, at its bolt, so that a replay after the
fix counts it once and nothing else of its line twice.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Runner
from word_bolts import Split

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    FailedException,
    OutputFieldsDeclarer,
    StatefulBolt,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream._deadletter import DeadLetterFile
from statestream._spouts import FileSpout
from statestream.testing import committed_state

WORDS = [f"w{i}" for i in range(40)]
POISON = "poison"


def corpus(path: Path, lines: int, poison_every: int = 0) -> Counter[str]:
    rng = random.Random(7)
    counts: Counter[str] = Counter()
    with path.open("w") as f:
        for n in range(lines):
            words = [rng.choice(WORDS) for _ in range(10)]
            if poison_every and n % poison_every == poison_every - 1:
                words[3] = POISON
            counts.update(words)
            f.write(" ".join(words) + "\n")
    return counts


class FlakyCount(StatefulBolt):
    """Storm's documented count; fails ``fail_rate`` of its attempts at random and
    every attempt at ``poison`` unless ``cured``."""

    def __init__(self, fail_rate: float, cured: bool = False) -> None:
        self.fail_rate = fail_rate
        self.cured = cured

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.rng = random.Random(context.task_index)

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        word = tuple["word"]
        # The write comes first: a failed attempt's write must be undone.
        self.state.put(word, self.state.get(word, 0) + 1)
        if (word == POISON and not self.cured) or self.rng.random() < self.fail_rate:
            self.collector.fail(tuple)
            return
        self.collector.ack(tuple)


def topology(path: Path, fail_rate: float, cured: bool = False) -> Any:
    b = TopologyBuilder("retryhere")
    b.set_spout("lines", FileSpout(str(path)))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", FlakyCount(fail_rate, cured), 2).fields_grouping("split", ["word"])
    return b.build()


def counts(runner: Runner, topo: Any) -> Counter[str]:
    return Counter(committed_state(topo, runner.config(), "count"))


CONF = {"statestream.retry.initial.ms": 10, "topology.state.checkpoint.interval.ms": 200}


def test_random_failures_are_retried_in_place_exactly(runner: Runner, tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    lines = 2_000
    expected = corpus(path, lines)
    topo = topology(path, 0.01)
    result = runner.run(topo, CONF)
    assert result.reason == "idle"
    assert counts(runner, topo) == expected
    assert result.components["count"].failed > 100, "1% of 20,000 words failed"
    assert sum(m.dead_lettered for m in result.components.values()) == 0
    if runner.name != "spark":
        # No rewind: every line went out once (a failure costs its own retry only).
        assert result.components["lines"].emitted == lines
        assert result.components["lines"].failed == 0


def test_a_poison_word_is_dead_lettered_alone_and_its_replay_counts_it_once(
    local_runner: Runner, tmp_path: Path
) -> None:
    runner = local_runner
    path = tmp_path / "in.txt"
    lines = 300
    expected = corpus(path, lines, poison_every=100)
    conf = {**CONF, "statestream.deadletter.path": str(tmp_path / "dead.jsonl")}
    topo = topology(path, 0.0)
    result = runner.run(topo, conf)
    assert result.reason == "idle"
    without = Counter({w: n for w, n in expected.items() if w != POISON})
    assert counts(runner, topo) == without, "every other word of the poisoned lines counted once"
    dead = DeadLetterFile(tmp_path / "dead.jsonl")
    records = dead.records()
    assert len(records) == 3
    assert {(r.at, tuple(r.values), r.attempts) for r in records} == {("count", (POISON,), 5)}
    assert sum(m.dead_lettered for m in result.components.values()) == 3
    # The fix, then `statestream deadletter replay`: only the poison words run again.
    dead.update(lambda r: setattr(r, "status", "replay") or True)
    result = runner.run(topology(path, 0.0, cured=True), conf)
    assert counts(runner, topo) == expected
    assert {r.status for r in DeadLetterFile(tmp_path / "dead.jsonl").records()} == {"replayed"}


@pytest.mark.parametrize("mode", [False])
def test_at_least_once_still_replays_the_line(tmp_path: Path, mode: bool) -> None:
    runner = Runner("local", tmp_path)
    path = tmp_path / "in.txt"
    corpus(path, 500)
    result = runner.run(topology(path, 0.01), {**CONF, "statestream.state.exactly.once": mode})
    assert result.components["lines"].failed > 0


class SplitThenFail(BasicBolt):
    """Emits every word of the line, then fails ``fail_rate`` of its attempts: what
    the failed attempt sent must be taken back before the line runs again."""

    def __init__(self, fail_rate: float) -> None:
        self.fail_rate = fail_rate

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        super().prepare(conf, context)
        self.rng = random.Random(100 + context.task_index)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple["line"].split():
            collector.emit([word])
        if self.rng.random() < self.fail_rate:
            raise FailedException("after its emits")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


def test_what_a_failed_attempt_emitted_is_taken_back(local_runner: Runner, tmp_path: Path) -> None:
    # On two workers the count tasks are partly in the other process: the
    # words sent there are taken back from the link's queue.
    path = tmp_path / "in.txt"
    lines = 1_000
    expected = corpus(path, lines)
    b = TopologyBuilder("retryhere")
    b.set_spout("lines", FileSpout(str(path)))
    b.set_bolt("split", SplitThenFail(0.1), 2).shuffle_grouping("lines")
    b.set_bolt("count", FlakyCount(0.0), 2).fields_grouping("split", ["word"])
    topo = b.build()
    result = local_runner.run(topo, CONF)
    assert result.reason == "idle"
    assert result.components["split"].failed > 50
    assert counts(local_runner, topo) == expected
    assert result.counters["rewinds"] == 0
    assert result.components["lines"].emitted == lines
    assert result.components["split"].emitted == sum(expected.values())
