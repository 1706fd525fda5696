"""A bolt that fails every tuple, or a bug no retry fixes, stops the run (issue 30).

Exactly-once state used to dead-letter such input one message at a time, a
rewind per attempt of each (150 of 200 lines in 180 s); at-least-once
dead-lettered the whole input. Now the error-rate limit
(``statestream.errors.max.rate``) stops a run whose bolt fails more than half of
what it executes, naming the first error, and a ``SerializationError`` from
``state.put`` stops it at once, on every runtime. What was committed stays.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Runner

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    KeyValueState,
    OutputFieldsDeclarer,
    RuntimeFailure,
    SerializationError,
    StatefulBolt,
    TopologyBuilder,
    Tuple,
)
from statestream.testing import RewindableListSpout, committed_state


class Refuse(BasicBolt):
    """Raises on every line holding ``bad`` (on every line with ``every``)."""

    def __init__(self, every: bool = False) -> None:
        self.every = every

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if self.every or "bad" in tuple[0]:
            raise ValueError(f"cannot read {tuple[0]!r}")
        collector.emit([tuple[0]])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


class Count(StatefulBolt):
    """Counts words; stores a datetime for the word ``when`` (not JSON)."""

    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        word = tuple[0]
        if word == "when":
            self.state.put(word, datetime.datetime(2026, 11, 26))
        else:
            self.state.put(word, self.state.get(word, 0) + 1)
        self.collector.ack(tuple)


def _topology(lines: list[str], every: bool = False) -> Any:
    b = TopologyBuilder("failing")
    b.set_spout("lines", RewindableListSpout(lines, fields=("line",), name="lines"))
    b.set_bolt("read", Refuse(every), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("read", ["word"])
    return b.build()


def _conf(tmp_path: Path, exactly_once: bool, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "statestream.deadletter.path": str(tmp_path / "dead.jsonl"),
        "statestream.state.exactly.once": exactly_once,
        "topology.state.checkpoint.interval.ms": 100,
    }
    conf.update(extra)
    return conf


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_bolt_that_fails_every_tuple_stops_the_run_naming_its_first_error(
    runner: Runner, tmp_path: Path, exactly_once: bool
) -> None:
    lines = [f"line {i}" for i in range(400)]
    conf = runner.config(_conf(tmp_path, exactly_once))
    with pytest.raises(RuntimeFailure) as stopped:
        runner.run(_topology(lines, every=True), conf)
    message = str(stopped.value)
    assert "read[" in message
    assert "failed (100%, more than statestream.errors.max.rate, 50%)" in message
    assert "the first error: ValueError(\"cannot read 'line " in message
    assert "raise statestream.errors.max.rate" in message
    # It stopped early: far from every line was dead-lettered.
    dead = tmp_path / "dead.jsonl"
    assert not dead.exists() or len(dead.read_bytes().splitlines()) < 100


@pytest.mark.parametrize("exactly_once", [True, False])
def test_poison_below_the_limit_is_dead_lettered_and_the_run_goes_on(
    runner: Runner, tmp_path: Path, exactly_once: bool
) -> None:
    lines = [f"w{i % 5}" if i % 40 else f"bad {i}" for i in range(800)]
    conf = runner.config(_conf(tmp_path, exactly_once, **{"statestream.retry.max.attempts": 2}))
    result = runner.run(_topology(lines), conf)
    assert result.reason == "idle"
    dead = tmp_path / "dead.jsonl"
    assert len(dead.read_bytes().splitlines()) == 20
    expected: dict[str, int] = {}
    for line in lines:
        if "bad" not in line:
            expected[line] = expected.get(line, 0) + 1
    counts = committed_state(_topology(lines), conf, "count")
    if exactly_once:
        assert counts == expected
    else:
        assert all(counts[w] >= n for w, n in expected.items())


def test_the_limit_can_be_turned_off(runner: Runner, tmp_path: Path) -> None:
    lines = [f"line {i}" for i in range(30)]
    conf = runner.config(
        _conf(
            tmp_path,
            False,
            **{"statestream.errors.max.rate": 1, "statestream.retry.max.attempts": 1},
        )
    )
    result = runner.run(_topology(lines, every=True), conf)
    assert result.reason == "idle"
    assert len((tmp_path / "dead.jsonl").read_bytes().splitlines()) == 30


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_value_the_store_cannot_encode_stops_the_run_at_once_with_its_message_whole(
    runner: Runner, tmp_path: Path, exactly_once: bool
) -> None:
    first = [f"w{i % 3}" for i in range(30)]
    conf = runner.config(_conf(tmp_path, exactly_once))
    runner.run(_topology(first), conf)
    before = committed_state(_topology(first), conf, "count")
    assert before == {"w0": 10, "w1": 10, "w2": 10}
    lines = [f"w{i % 3}" for i in range(200)] + ["when"] + ["w0"] * 200
    with pytest.raises(SerializationError) as stopped:
        runner.run(_topology(lines), conf)
    message = str(stopped.value)
    assert "datetime" in message
    # The message is whole: it ends with the fix, not with a cut.
    assert not message.endswith("...")
    assert "characters)" not in message
    # Nothing was dead-lettered: a bug is no poison message.
    assert not (tmp_path / "dead.jsonl").exists()
    # What was committed stays (at least the first run's counts, never a mix
    # with a datetime).
    after = committed_state(_topology(lines), conf, "count")
    assert "when" not in after
    assert all(after[w] >= n for w, n in before.items())
