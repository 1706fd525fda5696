"""Exactly-once state: what recovery restores when PREPARE(t) did not complete.

Issue 10's behaviour: after ``PREPARE(t)`` rolls back, or a crash while the
checkpoint spout's stored phase is ``PREPARING(t)``, recovery restores
``t-1`` and seeks every data spout to the positions stored with ``t-1`` (the
positions of ``t-1`` survive saving ``PREPARING(t)``).

Deterministic: the local runtime on a :class:`~statestream.testing.FakeClock`
(one process, one scheduler thread), the crash injected at a chosen
checkpoint action with :func:`~statestream.testing.crash_at_checkpoint`, the
rollback caused by a hook that raises at a chosen txid. The spout is a
:class:`~statestream.Rewindable` that records every ``seek``.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from statestream import (
    KeyValueState,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream._checkpoint import CheckpointState, Phase
from statestream._exactly_once import CheckpointRecord
from statestream._stateful import CHECKPOINT_SPOUT
from statestream.runtime.local import LocalRuntime
from statestream.testing import (
    FakeClock,
    committed_state,
    crash_and_recover,
    crash_at_checkpoint,
    sink,
)

N = 400
KEYS = 7
SPOUT_NS = "nums-0"
CHECKPOINT_NS = f"{CHECKPOINT_SPOUT}-0"


class Numbers(Spout):
    """Emits ``k<i % KEYS>`` for ``i`` in ``range(N)``; rewinds to an index.

    Every ``seek`` is appended to ``sink("seeks")``. A failed tuple is not
    replayed here: under exactly-once state the runtime rewinds instead. Each
    emit moves the fake clock on by a millisecond, so checkpoints fall due
    while the input is read, at the same tuples on every run.
    """

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["key"])

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.next = 0
        self.pending: set[int] = set()
        self.seeks = sink("seeks")
        self.clock = context.clock
        assert isinstance(self.clock, FakeClock)

    def next_tuple(self) -> None:
        if self.next < N:
            self.pending.add(self.next)
            self.collector.emit([f"k{self.next % KEYS}"], msg_id=self.next)
            self.next += 1
            self.clock.advance(0.001)

    def ack(self, msg_id: Any) -> None:
        self.pending.discard(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.pending.discard(msg_id)

    def exhausted(self) -> bool:
        return self.next >= N and not self.pending

    def position(self) -> int:
        return self.next

    def seek(self, position: Any) -> None:
        self.seeks.append(position)
        self.next = 0 if position is None else int(position)


class Count(StatefulBolt):
    """Counts keys. ``pre_prepare`` notes the checkpoint record as stored then (read
    through the runtime, as the checkpoint spout reads it) in ``sink("records")``;
    with ``fail_prepare_of`` set, ``pre_prepare`` of that txid raises, once."""

    def __init__(self, fail_prepare_of: int | None = None) -> None:
        self.fail_prepare_of = fail_prepare_of

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["key", "count"])

    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        key = tuple["key"]
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        record = CheckpointRecord.load(self.context.state(CHECKPOINT_NS))
        sink("records").append((txid, self.context.task_index, record))
        failed = sink("failed prepares")
        if txid == self.fail_prepare_of and not failed:
            failed.append(txid)
            raise RuntimeError(f"pre_prepare({txid}) fails once")


def _topology(bolt: Count | None = None) -> Topology:
    b = TopologyBuilder("restore")
    b.set_spout("nums", Numbers())
    b.set_bolt("count", bolt or Count(), 2).fields_grouping("nums", ["key"])
    return b.build()


def _config(tmp_path: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 5,
        "topology.executor.receive.buffer.size": 16,
        "statestream.state.exactly.once": True,
    }


def _expected() -> dict[str, int]:
    return dict(collections.Counter(f"k{i % KEYS}" for i in range(N)))


def _record_at_prepare(txid: int) -> CheckpointRecord:
    """The checkpoint record task 0 of "count" read when PREPARE(txid) first reached it."""
    return next(r for t, task, r in sink("records") if (t, task) == (txid, 0))


@pytest.mark.parametrize("txid", [1, 3])
def test_a_crash_while_preparing_t_restores_t_minus_1_and_seeks_to_its_positions(
    tmp_path: Path, txid: int
) -> None:
    topo, config = _topology(), _config(tmp_path)
    seeks = sink("seeks")
    first_run_seeks: list[Any] = []
    records = sink("records")

    def between() -> None:
        first_run_seeks.extend(seeks)
        seeks.clear()
        records.append(("crash", 0, None))

    point = crash_at_checkpoint("count", "prepare", txid=txid, after=True, task=0)
    outcome = crash_and_recover(topo, config, at=point, clock=FakeClock(), between=between)
    assert outcome.result.errors == []

    # The crash came while PREPARING(t) was stored, with the positions of t and of t-1.
    record = _record_at_prepare(txid)
    assert records.index((txid, 0, record)) < records.index(("crash", 0, None))
    assert record.state == CheckpointState(txid, Phase.PREPARING)
    assert set(record.positions) == {txid - 1, txid}
    before, at_cut = record.positions[txid - 1][SPOUT_NS], record.positions[txid][SPOUT_NS]
    assert 0 < before < at_cut <= N  # t-1 and t were cut at different places
    assert record.restore_point() == (txid - 1, record.positions[txid - 1])
    assert first_run_seeks == [None]  # the first run started from the beginning

    # The restart rolled back t and sought the spout to t-1's position, not t's.
    assert seeks[0] == before
    assert committed_state(topo, config, "count") == _expected()


def test_a_prepare_rolled_back_within_a_run_seeks_to_the_positions_of_t_minus_1(
    tmp_path: Path,
) -> None:
    txid = 2
    topo, config = _topology(Count(fail_prepare_of=txid)), _config(tmp_path)
    rt = LocalRuntime(topo, config, clock=FakeClock())
    result = rt.run(until_idle=True)

    assert sink("failed prepares") == [txid]
    record = _record_at_prepare(txid)  # as stored when PREPARE(2) was being handled
    assert record.state == CheckpointState(txid, Phase.PREPARING)
    before = record.positions[txid - 1][SPOUT_NS]
    assert before < record.positions[txid][SPOUT_NS]
    # The start (nothing committed: from the beginning), then the rewind to t-1.
    seeks = sink("seeks")
    assert seeks[:2] == [None, before]
    assert rt.rewinds >= 1
    assert [e.component for e in result.errors] == ["count"]
    assert committed_state(topo, config, "count") == _expected()
