"""A Spark run leaves the process as it found it: the modules it made travel by value
(cloudpickle's registry is process-wide) are let go when the run ends, so a local
runtime later in the same process copies these classes by reference again and
they keep seeing their module's globals."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from statestream import Bolt, OutputFieldsDeclarer, TopologyBuilder, Tuple
from statestream.runtime.local import LocalRuntime
from statestream.runtime.spark import SparkRuntime
from statestream.testing import FakeClock, RewindableListSpout

SEEN: dict[str, int] = {}


class Note(Bolt):
    """Counts into this module's SEEN: only a copy by reference reaches the real dict."""

    def execute(self, tuple: Tuple) -> None:
        SEEN["n"] = SEEN.get("n", 0) + 1
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def _topology() -> Any:
    b = TopologyBuilder("trace")
    b.set_spout("items", RewindableListSpout(list(range(10))))
    b.set_bolt("note", Note()).shuffle_grouping("items")
    return b.build()


@pytest.mark.spark
def test_a_spark_run_lets_go_of_the_modules_it_shipped(spark_session: Any, tmp_path: Path) -> None:
    module = sys.modules[__name__]
    assert __name__ not in cloudpickle.list_registry_pickle_by_value()
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    SparkRuntime(_topology(), conf, spark=spark_session).run(until_idle=True)
    assert module.__name__ not in cloudpickle.list_registry_pickle_by_value()
    SEEN.clear()
    result = LocalRuntime(_topology(), clock=FakeClock()).run(until_idle=True)
    assert result.components["note"].executed == 10
    assert SEEN == {"n": 10}
