"""The Spark runtime's configuration refusals: decided before any SparkSession starts.

Moved out of ``tests/spark`` (where the ``spark`` marker kept them out of
the fast suite): none of them needs Spark to run. Each test also checks that
no SparkContext was started on the way to the refusal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    ConfigError,
    KeyValueState,
    OutputFieldsDeclarer,
    StatefulBolt,
    Topology,
    TopologyBuilder,
    Tuple,
)
from statestream.testing import ListSpout

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from statestream.runtime.spark import DataFrameSpout, SparkRuntime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount


@pytest.fixture(autouse=True)
def _no_spark_started() -> Iterator[None]:
    from pyspark import SparkContext

    before = SparkContext._active_spark_context
    yield
    if before is None:
        assert SparkContext._active_spark_context is None, "a SparkContext was started"


class Tally(StatefulBolt):
    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        self.state.put("all", self.state.get("all", 0) + 1)
        self.collector.ack(tuple)


class Words(BasicBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple.values[-1].split():
            collector.emit([word])


def list_topology(items: list[str]) -> Topology:
    b = TopologyBuilder("listed")
    b.set_spout("items", ListSpout(items, ["word"]))
    b.set_bolt("count", Tally(), 2).fields_grouping("items", "word")
    return b.build()


def fed_topology() -> Topology:
    b = TopologyBuilder("fed")
    b.set_spout("lines", DataFrameSpout(["value"]))
    b.set_bolt("split", Words(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Tally(), 2).fields_grouping("split", "word")
    return b.build()


def test_sqlite_on_a_multi_process_master_is_refused(tmp_path: Path) -> None:
    conf: dict[str, Any] = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "s.db")},
        "spark.master": "local-cluster[2,1,1024]",
    }
    rt = SparkRuntime(wordcount.topology(), conf)
    with pytest.raises(ConfigError, match="redis"):
        rt.run(until_idle=True)


def test_spout_that_cannot_rewind_is_refused() -> None:
    """True, auto and false alike (the local runtime's at-least-once does not exist on
    Spark): refused, naming the spout and the way out, unless ackers are off."""
    for setting, why in [
        (True, "is true"),
        ("auto", "is auto.*no at-least-once mode"),
        (False, "is false.*no at-least-once mode"),
    ]:
        with pytest.raises(
            ConfigError,
            match=rf"(?s)'items' \(ListSpout\) cannot rewind.*{why}.*Rewindable.*"
            r"at-most-once.*topology\.acker\.executors: 0",
        ):
            SparkRuntime(list_topology(["a"]), {"statestream.state.exactly.once": setting})
    with pytest.raises(ConfigError, match="is true"):
        SparkRuntime(
            list_topology(["a"]),
            {"statestream.state.exactly.once": True, "topology.acker.executors": 0},
        )


def test_run_refuses_a_dataframe_spout() -> None:
    with pytest.raises(ConfigError, match=r"feed\("):
        SparkRuntime(fed_topology(), {}).run(until_idle=True)
