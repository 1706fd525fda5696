"""The Spark runtime's parts of the retry policy that need no Spark: how many tries
Spark gives a task, and which spout message a root reported by a task names."""

from __future__ import annotations

from typing import Any

import pytest

from statestream import TopologyBuilder
from statestream.runtime.plan import RuntimePlan
from statestream.runtime.spark.config import task_tries
from statestream.runtime.spark.shared import SEQ_BITS
from statestream.runtime.spark.spouts import Batch, SpoutTask
from statestream.testing import ListSpout, SinkBolt


class FakeContext:
    def __init__(self, master: str, conf: dict[str, str] | None = None) -> None:
        self.master = master
        self._conf = conf or {}

    def getConf(self) -> Any:  # SparkContext's name
        return self._conf


@pytest.mark.parametrize(
    ("master", "conf", "tries"),
    [
        ("local", {}, 1),
        ("local[2]", {}, 1),
        ("local[*]", {"spark.task.maxFailures": "8"}, 1),  # local ignores the setting
        ("local[2,2]", {}, 2),
        ("local[*, 3]", {}, 3),
        ("local-cluster[2,1,1024]", {}, 4),  # Spark's default
        ("spark://host:7077", {"spark.task.maxFailures": "6"}, 6),
    ],
)
def testtask_tries(master: str, conf: dict[str, str], tries: int) -> None:
    assert task_tries(FakeContext(master, conf)) == tries


def test_a_root_names_the_record_and_message_id_the_read_stage_gave_it() -> None:
    b = TopologyBuilder("t")
    b.set_spout("a", ListSpout([]), 2)
    b.set_spout("b", ListSpout([]))
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("a").shuffle_grouping("b")
    topology = b.build()
    plan = RuntimePlan(topology, {})
    tasks = {
        (cid, i): SpoutTask(cid, i, f"{cid}-{i}", None, None)  # type: ignore[arg-type]
        for cid, i in [("a", 0), ("a", 1), ("b", 0)]
    }
    batch = Batch()
    for (cid, i), task in tasks.items():
        batch.records[cid, i] = [("default", [f"{cid}{i}-{n}"], None) for n in range(3)]
        batch.msg_ids.append((task, [f"{cid}{i}-{n}" if n != 1 else None for n in range(3)]))

    def root(cid: str, i: int, n: int) -> int:
        return (plan.component_tasks[cid][i] << SEQ_BITS | n) + 1

    assert batch.message(plan, root("a", 1, 2)) == (
        tasks["a", 1],
        ("default", ["a1-2"], None),
        "a1-2",
    )
    assert batch.message(plan, root("b", 0, 0)) == (
        tasks["b", 0],
        ("default", ["b0-0"], None),
        "b0-0",
    )
    task, _, msg_id = batch.message(plan, root("a", 0, 1)) or (None, None, "?")
    assert (task, msg_id) == (tasks["a", 0], None)  # emitted without a message id
    assert batch.message(plan, 0) is None  # an unanchored emit
    assert batch.message(plan, root("a", 0, 3)) is None  # beyond the batch
    assert batch.message(plan, root("out", 0, 0)) is None  # not a spout's
