"""The one part of the Spark driver that needs Spark, built alone: :class:`BatchJobs`
(statestream.runtime.spark.jobs), the Spark job of a batch, given a batch by hand
(no spout reader, no checkpoints, no runtime): one acknowledgement per task,
each tuple executed once by the task its grouping names."""

from __future__ import annotations

from typing import Any

import pytest

from statestream import Bolt, OutputFieldsDeclarer, TopologyBuilder, Tuple
from statestream._clock import FakeClock
from statestream._routing import task_for_key
from statestream.runtime.metrics import MetricsBank
from statestream.runtime.plan import RuntimePlan, as_config
from statestream.runtime.spark.jobs import BatchJobs
from statestream.runtime.spark.sessions import ShippedModules, broadcast_plan
from statestream.runtime.spark.spouts import Batch
from statestream.runtime.spark.stages import JobWatch
from statestream.testing import ListSpout

pytestmark = pytest.mark.spark


class Upper(Bolt):
    def execute(self, tuple: Tuple) -> None:
        self.collector.emit([tuple["word"].upper()], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


class Drop(Bolt):
    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def test_a_batch_job_runs_every_bolt_task_once_and_collects_their_acks(
    spark_session: Any,
) -> None:
    b = TopologyBuilder("jobs-alone")
    b.set_spout("words", ListSpout([], fields=("word",)))
    b.set_bolt("upper", Upper(), 2).fields_grouping("words", ["word"])
    b.set_bolt("drop", Drop(), 3).shuffle_grouping("upper")
    topology = b.build()
    plan = RuntimePlan(topology, as_config({}, (topology.name,)))
    modules = ShippedModules(topology)
    sc = spark_session.sparkContext
    payload = broadcast_plan(sc, plan, modules.sources, False)
    bank = MetricsBank(topology.name, "spark", {}, 0.0)
    words = ["a", "b", "c", "d", "e", "a"]
    batch = Batch(records={("words", 0): [("default", [w], None) for w in words]})
    try:
        job = BatchJobs(plan, JobWatch(bank, FakeClock()), dict).for_run(sc, "tok", payload)
        acks = job(7, batch)
    finally:
        payload.unpersist()
        modules.release()
    executed = {(cid, index): ack_executed for cid, index, ack_executed, *_ in acks}
    # The read stage's task acks too (what its spout task sent), then every bolt task.
    assert sorted(executed) == [
        ("drop", 0),
        ("drop", 1),
        ("drop", 2),
        ("upper", 0),
        ("upper", 1),
        ("words", 0),
    ]
    assert sum(n for (cid, _), n in executed.items() if cid == "drop") == len(words)
    # The fields grouping: each word to the task its key names, on every runtime.
    for index in (0, 1):
        want = sum(1 for w in words if task_for_key(w, 2) == index)
        assert executed["upper", index] == want
