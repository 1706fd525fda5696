"""Poison tuples on Spark (issue 12): the poisoned word count of
``tests/cli/test_cli_poison.py`` (its input, topology file and config), run on the
session's SparkSession in this process instead of by ``statestream run``, which
would start a JVM per run.

A poison line makes the split bolt raise. Spark runs the failing task again
(``local[2,2]``); on its last try the task fails only that tuple and reports its
line to the driver, which counts an attempt of it, rolls the batch back and runs it
again after the retry policy's delay; after the fifth attempt the line goes to the
dead-letter file, the spout hears ``dead_lettered`` when it reads the line again,
and the batch commits without it. ``statestream deadletter replay`` feeds the lines
back into the next Spark run, as into the local runtime's.
"""

from __future__ import annotations

import collections
import importlib.util
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    OutputFieldsDeclarer,
    TopologyBuilder,
    Tuple,
)
from statestream._cli import main
from statestream._deadletter import REPLAY, DeadLetter
from statestream._run import load_topology
from statestream.runtime.spark import SparkRuntime
from statestream.testing import FakeClock, RewindableListSpout, sink, spout_record

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _cli_poison() -> Any:
    spec = importlib.util.spec_from_file_location(
        "_cli_poison", ROOT / "tests" / "cli" / "test_cli_poison.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CLI = _cli_poison()


# Spark has one mode (a batch is the unit of replay), so each provider runs once,
# with one of the two settings of statestream.state.exactly.once; the local runtime
# runs all four (tests/cli/test_cli_poison.py).
@pytest.fixture(
    params=[("sqlite", True), pytest.param(("redis", False), marks=pytest.mark.redis)],
    ids=["sqlite-exactly-once", "redis-at-least-once"],
)
def poisoned(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The poisoned word count's input, topology file and config (CLI.Setup)."""
    provider, exactly_once = request.param
    if provider == "redis" and not CLI.redis_up():
        if os.environ.get("CI"):
            pytest.fail("no Redis server on 127.0.0.1:6379, and CI must run the redis tests")
        pytest.skip("no Redis server on 127.0.0.1:6379")
    s = CLI.Setup(tmp_path, provider, exactly_once)
    yield s
    s.cleanup()


def _spark_conf(s: Any, **changes: Any) -> dict[str, Any]:
    return {**orjson.loads(s.config.read_bytes()), "topology.runner": "spark", **changes}


def test_until_idle_ends_with_the_poison_lines_dead_lettered_and_every_other_count_exact(
    spark_session: Any, poisoned: Any
) -> None:
    s = poisoned
    conf = _spark_conf(s)
    rt = SparkRuntime(load_topology(str(s.topology)), conf, spark=spark_session)
    assert rt.deadletter_path == s.deadletters  # what the start-up line names
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    dead = s.dead()
    assert {r["msg_id"]: (r["values"], r["error"]) for r in dead} == {
        n: ([n, s.lines[n]], f"poison word in line {n}") for n in s.poisoned
    }
    assert {
        (r["topology"], r["spout"], r["task"], r["component"], r["error_type"], r["attempts"])
        for r in dead
    } == {("wordcount", "sentences", 0, "split", "ValueError", 5)}
    assert s.counts() == s.expected
    spout = result.components["sentences"]
    assert (spout.dead_lettered, spout.retrying) == (len(s.poisoned), 0)
    assert spout.failed == 5 * len(s.poisoned)
    assert result.components["split"].last_error.startswith("ValueError: poison word")
    # The poison lines failed together: five attempts of the one batch.
    assert result.counters["replays"] == 5


class TimedItems(RewindableListSpout):
    """Records (item, the runtime's clock) in sink("reads") each time it emits an item;
    calls sink("stop")[0] at the sixth read of "poison"."""

    def _values(self, item: Any) -> list[Any]:
        reads = sink("reads")
        reads.append((item, self.context.clock.monotonic()))
        if sum(1 for read, _ in reads if read == "poison") == 6:
            sink("stop")[0]()
        return list(super()._values(item))


class Picky(BasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if tuple[0] == "poison":
            raise ValueError("cannot digest 'poison'")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def test_the_delays_follow_the_policy_on_the_runtimes_clock_and_0_retries_forever(
    spark_session: Any, tmp_path: Path
) -> None:
    b = TopologyBuilder("poisoned")
    b.set_spout("src", TimedItems(["a", "poison", "b"], name="src"))
    b.set_bolt("picky", Picky()).shuffle_grouping("src")
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "statestream.deadletter.path": str(tmp_path / "dead.jsonl"),
        "statestream.retry.max.attempts": 0,  # Storm's: never give up
        "statestream.retry.max.ms": 400,
    }
    rt = SparkRuntime(b.build(), conf, spark=spark_session, clock=FakeClock())
    sink("stop").append(rt.stop)
    result = rt.run(until_idle=True)
    assert result.reason == "stopped"  # never idle: the poison is retried forever
    reads = [t for item, t in sink("reads") if item == "poison"]
    # Each attempt is a job of the whole batch, read again once the delay has
    # passed on the runtime's (fake) clock: 100 ms, x2, capped at 400 ms.
    gaps = [b - a for a, b in itertools.pairwise(reads)]
    assert gaps == pytest.approx([0.1, 0.2, 0.4, 0.4, 0.4])
    assert not (tmp_path / "dead.jsonl").exists()
    src = result.components["src"]
    assert (src.failed, src.retrying, src.dead_lettered) == (6, 1, 0)


def test_deadletter_replay_feeds_the_poison_lines_into_the_next_spark_run_once(
    spark_session: Any, poisoned: Any
) -> None:
    s = poisoned

    def run(**changes: Any) -> Any:
        # Two attempts instead of five: the poison run is three jobs shorter.
        conf = _spark_conf(s, **{"statestream.retry.max.attempts": 2, **changes})
        return SparkRuntime(load_topology(str(s.topology)), conf, spark=spark_session).run(
            until_idle=True
        )

    assert run().reason == "idle"
    assert sorted(r["msg_id"] for r in s.dead()) == sorted(s.poisoned)
    assert s.counts() == s.expected

    replay = CliRunner().invoke(main, ["deadletter", "replay", "--config", str(s.config)])
    assert replay.exit_code == 0, replay.output
    assert f"{len(s.poisoned)} dead letters marked for replay" in replay.output
    assert {r["status"] for r in s.dead()} == {REPLAY}

    # The bolt is fixed (no poison word any more): the next run counts the
    # poison lines, once, and marks them replayed; the spout reads nothing new.
    fixed = run(**{"wordcount.poison": None})
    assert fixed.reason == "idle"
    assert fixed.counters["batches"] == 1
    assert fixed.components["sentences"].dead_lettered == 0
    dead = s.dead()
    assert sorted((r["msg_id"], r["status"]) for r in dead) == [
        (n, "replayed") for n in sorted(s.poisoned)
    ]
    everything: collections.Counter[str] = collections.Counter()
    for line in s.input.read_text().splitlines():
        everything.update(line.split())
    assert s.counts() == everything

    # A third run finds nothing to replay and nothing to read: nothing changes.
    file_after = s.deadletters.read_bytes()
    again = run(**{"wordcount.poison": None})
    assert (again.reason, again.counters["batches"]) == ("idle", 0)
    assert s.deadletters.read_bytes() == file_after
    assert s.counts() == everything


def test_a_replay_that_fails_to_its_last_attempt_again_is_dead_again_and_the_spout_never_hears(
    spark_session: Any, tmp_path: Path
) -> None:
    b = TopologyBuilder("poisoned")
    b.set_spout("src", RewindableListSpout(["a", "b"], name="replay-src"))
    b.set_bolt("picky", Picky()).shuffle_grouping("src")
    path = tmp_path / "dead.jsonl"

    def letter(values: list[Any], status: str, topology: str = "poisoned") -> bytes:
        record = DeadLetter.of(topology, "src", 0, 7, values, "picky", ValueError("before"), 5)
        record.status = status
        return record.to_json() + b"\n"

    path.write_bytes(
        letter(["poison"], REPLAY)  # still poison: dead again
        + letter(["fixed"], REPLAY)  # goes through: replayed
        + letter(["poison"], "dead")  # not marked: not fed back
        + letter(["fixed"], REPLAY, topology="other")  # another topology's
    )
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "statestream.deadletter.path": str(path),
        "statestream.retry.max.attempts": 2,
        "statestream.retry.initial.ms": 5,
    }
    result = SparkRuntime(b.build(), conf, spark=spark_session).run(until_idle=True)
    assert result.reason == "idle"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [(r["topology"], r["values"], r["status"]) for r in records] == [
        ("poisoned", ["poison"], "dead"),
        ("poisoned", ["fixed"], "replayed"),
        ("poisoned", ["poison"], "dead"),
        ("other", ["fixed"], REPLAY),
    ]
    # Given up on again: this run's failure, not a second record.
    assert (records[0]["error_type"], records[0]["error"], records[0]["attempts"]) == (
        "ValueError",
        "cannot digest 'poison'",
        2,
    )
    assert records[2]["error"] == "before"
    src = result.components["src"]
    assert (src.failed, src.dead_lettered, src.retrying) == (2, 1, 0)
    # The spout's own messages (0 and 1) went through; it never heard of the replays.
    told = spout_record("replay-src")
    assert (sorted(told.acked), told.failed, told.dead_lettered) == ([0, 1], [], [])
