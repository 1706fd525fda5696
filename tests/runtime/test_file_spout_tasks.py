"""A FileSpout with parallelism N: task i emits the lines numbered i modulo N, on one
process and on two workers; its stored positions are per task, and a run with
another parallelism is refused instead of losing or repeating lines."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from runtime_harness import Records, Runner, records

from statestream import (
    Bolt,
    ConfigError,
    FileSpout,
    OutputCollector,
    OutputFieldsDeclarer,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream._registry import open_provider, stored_topologies


class Lines(Bolt):
    """Records (source task index, line number, text) of every line and acks it."""

    def __init__(self) -> None:
        self.out = Records("lines")

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)

    def execute(self, tup: Tuple) -> None:
        self.out.append((tup.source_task_index, tup[0], tup[1]))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def _topology(path: Path, tasks: int, resume: bool = False) -> Any:
    b = TopologyBuilder("lines")
    b.set_spout("file", FileSpout(path, resume=resume), tasks)
    b.set_bolt("sink", Lines(), 2).shuffle_grouping("file")
    return b.build()


def _stored_positions(config: Mapping[str, Any], tasks: int) -> list[Any]:
    with open_provider(
        config["topology.state.provider"], config["topology.state.provider.config"]
    ) as provider:
        (name,) = stored_topologies(provider.namespaces())
        return [provider.get_state(f"{name}/file-{i}").get("position") for i in range(tasks)]


@pytest.fixture(params=["local", "workers"])
def local_runner(request: pytest.FixtureRequest, tmp_path: Path) -> Runner:
    return Runner(request.param, tmp_path)


def test_each_task_emits_its_own_lines_once(local_runner: Runner, tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    result = local_runner.run(_topology(path, 3))
    assert result.reason == "idle"
    got = records("lines")
    assert sorted(n for _, n, _ in got) == list(range(100))
    assert all(text == f"line {n}" and task == n % 3 for task, n, text in got)
    assert Counter(task for task, _, _ in got) == {0: 34, 1: 33, 2: 33}


def test_the_acked_prefix_moves_over_each_tasks_own_lines(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"line {i}\n" for i in range(10)))
    runner = Runner("local", tmp_path)
    config = runner.config()
    runner.run(_topology(path, 3, resume=True), config)
    assert len(records("lines")) == 10
    # Each task's acked position: every line acked, so the end of the file.
    assert [p["line"] for p in _stored_positions(config, 3)] == [10, 10, 10]
    assert {p["tasks"] for p in _stored_positions(config, 3)} == {3}
    # A restart over the same file has nothing left to emit.
    Records("lines").clear()
    runner.run(_topology(path, 3, resume=True), config)
    assert records("lines") == []
    # Another parallelism would split the lines another way: refused.
    with pytest.raises(ConfigError, match="with 3 task"):
        runner.run(_topology(path, 2, resume=True), config)


def test_two_spout_tasks_count_exactly_once_with_failing_lines(
    local_runner: Runner, tmp_path: Path
) -> None:
    # The documented word count's bolts behind a FileSpout of parallelism 2: on
    # two workers each worker reads its half of the file. Failing lines rewind
    # every task to the last checkpoint; each word still counts once.
    import random
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    from wordcount import SplitSentence, WordCount

    rng = random.Random(3)
    path = tmp_path / "in.txt"
    path.write_text(
        "".join(" ".join(f"w{rng.randrange(80)}" for _ in range(8)) + "\n" for _ in range(600))
    )
    expected = Counter(path.read_text().split())
    out = tmp_path / "counts.jsonl"
    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", FileSpout(path), 2)
    b.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    config = local_runner.config(
        {
            "wordcount.fail_rate": 0.05,
            "wordcount.input": str(path),
            "wordcount.output": str(out),
            "topology.state.checkpoint.interval.ms": 50,
        }
    )
    result = local_runner.run(b.build(), config)
    assert result.reason == "idle" and result.errors == []
    counts: Counter[str] = Counter()
    for row in map(orjson.loads, out.read_bytes().splitlines()):
        assert row["word"] not in counts, f"{row['word']!r} written twice"
        counts[row["word"]] = row["count"]
    assert counts == expected
    assert result.components["split"].failed > 0, "no line failed: nothing was tested"
