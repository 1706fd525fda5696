"""A transactional topology's records move with a savepoint: a run crashed in a commit on
sqlite, exported, imported into the memory store under another topology name,
goes on after its last committed transaction and commits each one once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    BatchBolt,
    Committer,
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


class Total(BatchBolt[Any], Committer):
    """Records ``(txid, total)`` into ``sink("store")`` as an outside store keyed by
    txid would (a txid already there is not written again), and crashes the
    process once in the commit of ``crash_at``."""

    crash_at = 0

    def execute(self, tuple: Tuple) -> None:
        self.total = getattr(self, "total", 0) + tuple.values[1]

    def finish_batch(self) -> None:
        store = sink("store")
        txid = self.id.transaction_id
        if not store or store[-1][0] != txid:
            store.append((txid, getattr(self, "total", 0)))
        if txid == Total.crash_at:
            Total.crash_at = 0
            raise SimulatedCrash(f"crash in the commit of {txid}")


def topology(name: str) -> Topology:
    data: dict[int, list[list[Any]]] = {p: [] for p in range(3)}
    for i in range(600):
        data[i % 3].append([i])
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["n"], 20), 3)
    b.set_bolt("pass", Pass(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("total", Total()).global_grouping("pass")
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
    Total.crash_at = 4
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
