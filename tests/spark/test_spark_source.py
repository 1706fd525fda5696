"""Spark as a source: a streaming DataFrame feeds a topology, one micro-batch per transaction."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
from test_spark_runtime import Tally, Words, read_state

from statestream import ConfigError, RuntimeFailure, Topology, TopologyBuilder
from statestream.runtime.spark import DataFrameSpout, SparkRuntime

pytestmark = pytest.mark.spark

FILES = [
    "a b c\nb c\n",
    "c d\nd d e\n",
    "a e\nf\n",
]


def fed_topology() -> Topology:
    b = TopologyBuilder("fed")
    b.set_spout("lines", DataFrameSpout(["value"]))
    b.set_bolt("split", Words(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Tally("word"), 2).fields_grouping("split", "word")
    return b.build()


def stream(spark: Any, folder: Path) -> Any:
    folder.mkdir(exist_ok=True)
    for i, text in enumerate(FILES):
        (folder / f"part-{i}.txt").write_text(text)
    return spark.readStream.schema("value STRING").option("maxFilesPerTrigger", 1).text(str(folder))


def counts(conf: dict[str, Any]) -> dict[str, int]:
    return {**read_state(conf, "count-0"), **read_state(conf, "count-1")}


EXPECTED = collections.Counter("".join(FILES).split())


@pytest.mark.parametrize("point", ["prepared", "committed"])
def test_micro_batches_are_transactions_and_replays_apply_once(
    spark_session: Any, tmp_path: Path, point: str
) -> None:
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    checkpoint = str(tmp_path / "checkpoint")
    df = stream(spark_session, tmp_path / "in")

    def crash(at: str, txid: int) -> None:
        if at == point and txid == 1:
            raise OSError(f"driver lost after batch {txid} was {at}")

    first = SparkRuntime(fed_topology(), conf)
    first.fault_hook = crash
    with pytest.raises(RuntimeFailure, match="driver lost"):
        first.feed(df, checkpoint=checkpoint)
    result = SparkRuntime(fed_topology(), conf).feed(df, checkpoint=checkpoint)
    # Spark replays batch 1 (same id, same file): rolled back and run again, or
    # skipped if it had committed; then batch 2.
    assert result.counters.get("skipped", 0) == (1 if point == "committed" else 0)
    assert result.counters["batches"] == (2 if point == "prepared" else 1)
    assert counts(conf) == EXPECTED
    # A fed row is acked when its batch commits (no message id on the driver).
    lines = result.components["lines"]
    assert lines.acked == lines.emitted > 0, lines


def test_refuses_a_checkpoint_behind_the_store(spark_session: Any, tmp_path: Path) -> None:
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    df = stream(spark_session, tmp_path / "in")
    SparkRuntime(fed_topology(), conf).feed(df, checkpoint=str(tmp_path / "cp1"))
    assert counts(conf) == EXPECTED
    with pytest.raises(ConfigError, match=r"checkpoint .* was lost or belongs to another query"):
        SparkRuntime(fed_topology(), conf).feed(df, checkpoint=str(tmp_path / "cp2"))
    assert counts(conf) == EXPECTED
