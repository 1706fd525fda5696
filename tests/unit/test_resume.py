"""statestream._resume and the acked positions of CheckpointRecord: where each data
spout resumes at start, in both modes, as a table; and FileSpout's acked_position()."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statestream import FakeClock, FileSpout, TopologyContext
from statestream._checkpoint import CheckpointState, Phase
from statestream._exactly_once import CheckpointRecord, can_resume
from statestream._resume import SpoutRef, acked_positions, describe_position, plan_resume


class Resumable:
    def __init__(self, acked: Any = None) -> None:
        self.acked = acked

    def position(self) -> Any:
        return {"line": 99}

    def seek(self, position: Any) -> None: ...

    def acked_position(self) -> Any:
        return self.acked


class RewindOnly:
    def position(self) -> Any:
        return {"line": 99}

    def seek(self, position: Any) -> None: ...


class Plain:
    pass


class Emits:
    """A spout collector that keeps what was emitted."""

    def __init__(self) -> None:
        self.emitted: list[Any] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append(msg_id)


def _opened(path: Path) -> FileSpout:
    spout = FileSpout(path)
    context = TopologyContext("t", "s", 0, 0, {"s": [0]}, {}, clock=FakeClock())
    spout.open({}, context, Emits())  # type: ignore[arg-type]
    return spout


def _record(
    state: CheckpointState,
    positions: dict[int, Any] | None = None,
    acked: dict[int, Any] | None = None,
) -> CheckpointRecord:
    return CheckpointRecord(state, positions or {}, acked or {})


FRESH = CheckpointState.initial()
DONE_3 = CheckpointState(3, Phase.COMMITTED)
PREPARING_4 = CheckpointState(4, Phase.PREPARING)  # restores 3
EXACT = {3: {"s-0": {"line": 30}}}
ACKED = {3: {"s-0": {"line": 20}}}
FROM_START = "s: reading from the start (no position stored yet)"


@pytest.mark.parametrize(
    ("exactly_once", "record", "spout", "seeks", "line", "warns"),
    [
        # exactly-once: the cut's positions; seek(None) on a fresh store
        (True, _record(FRESH), Resumable(), {"s-0": None}, FROM_START, False),
        (True, _record(DONE_3, EXACT), RewindOnly(), {"s-0": {"line": 30}}, "after line 30", False),
        (True, _record(PREPARING_4, EXACT), Resumable(), {"s-0": {"line": 30}}, "line 30", False),
        # exactly-once over a checkpoint taken at-least-once: its acked positions, warned
        (True, _record(DONE_3, acked=ACKED), Resumable(), {"s-0": {"line": 20}}, "line 20", True),
        (True, _record(DONE_3), Resumable(), {}, "no stored position", True),
        # at-least-once: the acked position, else the exact one; nothing stored: no seek
        (False, _record(FRESH), Resumable(), {}, FROM_START, False),
        (False, _record(DONE_3, acked=ACKED), Resumable(), {"s-0": {"line": 20}}, "line 20", False),
        (False, _record(DONE_3, EXACT), Resumable(), {"s-0": {"line": 30}}, "line 30", False),
        (False, _record(DONE_3, EXACT, ACKED), Resumable(), {"s-0": {"line": 20}}, "20", False),
        (False, _record(DONE_3), Resumable(), {}, FROM_START, False),
        # at-least-once, a spout that cannot resume: never sought, and said so
        (False, _record(DONE_3, EXACT, ACKED), RewindOnly(), {}, "RewindOnly cannot resume", False),
        (False, _record(DONE_3, acked=ACKED), Plain(), {}, "Plain cannot resume", False),
    ],
)
def test_plan_resume_table(
    exactly_once: bool, record: CheckpointRecord, spout: object, seeks: Any, line: str, warns: bool
) -> None:
    plan = plan_resume(record, exactly_once, [SpoutRef("s-0", "s", 0, 1, spout)])
    assert plan.seeks == seeks
    (said,) = plan.lines
    assert said.startswith("s: ") and line in said
    assert (plan.warning is not None) == warns


def test_a_spout_of_several_tasks_is_named_with_its_task() -> None:
    refs = [SpoutRef(f"s-{i}", "s", i, 2, Resumable()) for i in range(2)]
    record = _record(DONE_3, acked={3: {"s-0": {"line": 4}, "s-1": {"line": 7}}})
    plan = plan_resume(record, False, refs)
    assert plan.lines == ["s task 0: resuming after line 4", "s task 1: resuming after line 7"]


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ({"path": "/data/input.txt", "line": 200_000}, "input.txt after line 200,000"),
        ({"path": "/data/input.txt", "line": 0, "replay": []}, "input.txt from the start"),
        ({"line": 5, "replay": [[3, "x"], [4, "y"]]}, "after line 5, 2 failed message(s) first"),
        ({"offset": 81_920, "retry": []}, "at byte offset 81,920"),
        # a broker's streams (Redis entry ids, JetStream sequences) or queues (offsets)
        ({"partitions": {"lines": "1764-0"}, "replay": []}, "lines after 1764-0"),
        (
            {"partitions": {"a": 5001, "b": 3}, "replay": [[1, "x"]]},
            "a at 5,001, b at 3, 1 failed message(s) first",
        ),
        ({"queues": {"q": 2000}, "replay": []}, "q at 2,000"),
        # a folder's files, each at its byte
        (
            {"path": "/data/in/", "partitions": {f"f{i}": i * 1000 for i in range(5)}},
            "in in/: f0 at byte 0, f1 at byte 1,000, f2 at byte 2,000 and 2 more",
        ),
        # a Kafka spout's offsets, nested by topic (partitions in number order)
        (
            {"offsets": {"t": {"10": 3, "2": 1_200}, "u": {"0": 5}}, "replay": [["t", 2, 4]]},
            "t partition 2 at offset 1,200, t partition 10 at offset 3, u partition 0 at "
            "offset 5, 1 failed message(s) first",
        ),
        ({"offsets": {}, "replay": [], "tasks": 2}, "each partition from its start"),
        ([1, 2], "at [1,2]"),
        ({"id": "x" * 200}, 'at {"id":"' + "x" * 70 + "..."),
    ],
)
def test_describe_position(where: Any, said: str) -> None:
    assert describe_position(where) == said


def test_acked_positions_are_asked_of_resumable_spouts_only() -> None:
    refs = [SpoutRef("a-0", "a", 0, 1, Resumable({"line": 1})), SpoutRef("b-0", "b", 0, 1, Plain())]
    assert acked_positions(refs) == {"a-0": {"line": 1}}
    assert can_resume(Resumable()) and not can_resume(RewindOnly())


def test_the_record_keeps_acked_positions_of_two_txids_and_carries_missing_spouts() -> None:
    r = _record(CheckpointState(1, Phase.COMMITTED), acked={1: {"a-0": 5, "b-0": 7}})
    # PREPARING(2) heard only of a-0 (b-0's worker not yet): b-0 keeps its newest.
    r = r.advance(CheckpointState(2, Phase.PREPARING), acked={"a-0": 9})
    assert r.acked == {1: {"a-0": 5, "b-0": 7}, 2: {"a-0": 9, "b-0": 7}}
    r = r.advance(CheckpointState(2, Phase.COMMITTING))
    r = r.advance(CheckpointState(2, Phase.COMMITTED))
    r = r.advance(CheckpointState(3, Phase.PREPARING), acked={"a-0": 11, "b-0": 12})
    assert sorted(r.acked) == [2, 3]
    # A rollback of 3 drops what was stored with it: 2 is resumed from.
    r = r.advance(CheckpointState(2, Phase.COMMITTED))
    assert r.resume_point() == (2, {"a-0": 9, "b-0": 7}, False)


def test_with_acked_stores_for_the_txid_a_recovery_restores() -> None:
    assert _record(FRESH).with_acked({"a-0": 1}).acked == {}  # nothing committed
    r = _record(PREPARING_4, EXACT).with_acked({"s-0": {"line": 40}})
    assert r.acked == {3: {"s-0": {"line": 40}}}
    assert r.resume_point() == (3, {"s-0": {"line": 40}}, False)
    assert r.restore_point() == (3, {"s-0": {"line": 30}})  # exactly-once keeps the cut


def test_the_record_round_trips_its_acked_positions(tmp_path: Path) -> None:
    from statestream._registry import open_provider

    r = _record(DONE_3, EXACT, {2: {"s-0": 1}, 3: {"s-0": {"line": 20}}})
    with open_provider("sqlite", {"path": str(tmp_path / "s.db")}, scope="t") as provider:
        r.save(provider.get_state("$checkpointspout-0"))
        assert CheckpointRecord.load(provider.get_state("$checkpointspout-0")) == r


def test_file_spout_acked_position_is_its_first_unacked_line(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"l{i}\n" for i in range(6)))
    spout = _opened(path)
    for _ in range(4):
        spout.next_tuple()
    assert spout.acked_position()["line"] == 0
    spout.ack(1)
    spout.ack(0)
    assert spout.acked_position()["line"] == 2
    spout.fail(2)
    spout.ack(3)
    assert spout.acked_position()["line"] == 2  # failed, still to emit again
    spout.next_tuple()  # line 2 again
    spout.ack(2)
    assert spout.acked_position()["line"] == 4  # nothing in flight: the next line
    # A fresh spout sought there emits the lines not acked, failed ones first (sorted).
    again = _opened(path)
    again.seek({"path": str(path.resolve()), "line": 5, "replay": [[4, "l4"], [2, "l2"]]})
    assert again.acked_position()["line"] == 2
    spout.close()
    again.close()
