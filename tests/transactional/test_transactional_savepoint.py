"""A transactional topology's records move with a savepoint: a run crashed in a commit on
sqlite, exported, imported into the memory store under another topology name,
goes on after its last committed transaction and commits each one once."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_transactional_local import CrashAt, data

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    MemoryTransactionalSpout,
    OutputFieldsDeclarer,
    Topology,
    TransactionalTopologyBuilder,
    Tuple,
    export_state,
    import_state,
)
from statestream.runtime.local import LocalRuntime
from statestream.testing import FakeClock, SimulatedCrash, sink


class Pass(BasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit(list(tuple.values))

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "n"])


def topology(name: str) -> Topology:
    spout = MemoryTransactionalSpout(data(600), ["n"], 20)
    b = TransactionalTopologyBuilder(name, "spout", spout, 3)
    b.set_bolt("pass", Pass(), 2).shuffle_grouping("spout")
    # Records (txid, total) as an outside store keyed by txid, crashing once in a commit.
    b.set_committer_bolt("total", CrashAt()).global_grouping("pass")
    return b.build()


def test_a_crashed_transactional_run_goes_on_in_another_store_under_another_name(
    tmp_path: Path,
) -> None:
    source = {
        "topology.max.spout.pending": 4,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    target = {
        "topology.max.spout.pending": 4,
        "topology.state.provider": "memory",
        "topology.state.provider.config": {"name": f"moved-{tmp_path.name}"},
    }
    CrashAt.crash_at = 4
    with pytest.raises(SimulatedCrash):
        LocalRuntime(topology("counts"), source, clock=FakeClock()).run(until_idle=True)
    assert [t for t, _ in sink("store")] == [1, 2, 3, 4]
    savepoint = tmp_path / "counts.jsonl"
    export_state(savepoint, "counts", source)
    moved = topology("totals")
    done = import_state(savepoint, moved, target)
    assert done.topology == "totals"
    result = LocalRuntime(moved, target, clock=FakeClock()).run(until_idle=True)
    assert result.reason == "idle" and not result.errors
    store = sink("store")
    assert [t for t, _ in store] == list(range(1, 11))  # 4 finished again, kept once
    assert sum(n for _, n in store) == sum(range(600))
