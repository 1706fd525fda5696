"""Windowed bolts on Spark (statestream._windowed): time moves at batch boundaries
(a tick at the end of each batch's input), the end of a bounded input is a batch
of its own, and the driver killed mid-run and restarted commits every window once."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statestream._errors import SimulatedCrash
from statestream.runtime.spark import SparkRuntime
from statestream.testing import committed_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import test_windows as tw

pytestmark = pytest.mark.spark


def _conf(tmp_path: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }


@pytest.mark.parametrize("sliding_ms", [tw.WINDOW_MS, 5_000])
def test_event_time_windows_on_spark_commit_each_window_once(
    spark_session: Any, tmp_path: Path, sliding_ms: int
) -> None:
    events = tw.views(600)
    topo = tw.topology(events, sliding_ms)
    result = SparkRuntime(topo, _conf(tmp_path), spark=spark_session, batch_size=100).run(
        until_idle=True
    )
    assert result.errors == []
    assert Counter(committed_state(topo, _conf(tmp_path), "totals")) == tw.expected(
        events, tw.WINDOW_MS, sliding_ms
    )


@pytest.mark.parametrize("point", ["prepared", "committed"])
def test_a_driver_killed_mid_window_then_restarted_commits_every_window_once(
    spark_session: Any, tmp_path: Path, point: str
) -> None:
    events = tw.views(600, seed=9)
    topo = tw.topology(events)

    def crash(at: str, txid: int) -> None:
        if at == point and txid == 3:
            raise SimulatedCrash(f"driver killed after batch {txid} was {at}")

    first = SparkRuntime(topo, _conf(tmp_path), spark=spark_session, batch_size=100)
    first.fault_hook = crash
    with pytest.raises(SimulatedCrash):
        first.run(until_idle=True)
    SparkRuntime(topo, _conf(tmp_path), spark=spark_session, batch_size=100).run(until_idle=True)
    assert Counter(committed_state(topo, _conf(tmp_path), "totals")) == tw.expected(
        events, tw.WINDOW_MS, tw.WINDOW_MS
    )
