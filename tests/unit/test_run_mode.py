"""What a run keeps, decided once for every runtime (``statestream._exactly_once.run_mode``),
the positions of a cut (``cut_positions``) and the one seek (``_resume.restore_spouts``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from statestream._checkpoint import CheckpointState, Phase
from statestream._errors import ConfigError, SerializationError
from statestream._exactly_once import CheckpointRecord, RunMode, cut_positions, run_mode
from statestream._resume import SpoutRef, restore_spouts
from statestream._runners import Capabilities, Runner, runner


class Plain:
    """A spout that cannot rewind."""


class Rewinds:
    def __init__(self, at: Any = 0) -> None:
        self.at = at
        self.sought: list[Any] = []

    def position(self) -> Any:
        return self.at

    def seek(self, position: Any) -> None:
        self.sought.append(position)


R, P = "rewinds", "plain"
REFUSED = "refused"
NO_REWIND, REFUSED_WITHOUT_REWIND = "no rewind", "refused without rewind"

LOCAL, SPARK = runner("local"), runner("spark")
# A runner that replays per tuple but cannot go back to a checkpoint within a run.
STILL = Runner("still", "nowhere:make", Capabilities(rewinds_within_run=False))

# (runner entry, setting, stateful, spouts, ackers) -> RunMode or REFUSED
TABLE: list[tuple[Runner, bool | str, bool, str, int, RunMode | str]] = [
    # local: resolve_exactly_once, the ackers do not matter here (the plan refuses 0)
    (LOCAL, "auto", True, R, 1, RunMode(True)),
    (LOCAL, True, True, R, 1, RunMode(True)),
    (LOCAL, False, True, R, 1, RunMode(False)),
    (LOCAL, "auto", False, R, 1, RunMode(False)),
    (LOCAL, "auto", True, P, 1, "note"),
    (LOCAL, False, True, P, 1, RunMode(False)),
    (LOCAL, True, True, P, 1, REFUSED),
    # spark: every spout must rewind, whatever the setting, or at-most-once is asked for
    (SPARK, "auto", True, R, 1, RunMode(True)),
    (SPARK, False, True, R, 1, RunMode(True)),
    (SPARK, "auto", False, R, 1, RunMode(False)),
    (SPARK, "auto", True, P, 1, REFUSED),
    (SPARK, False, True, P, 1, REFUSED),
    (SPARK, True, True, P, 1, REFUSED),
    (SPARK, "auto", True, P, 0, RunMode(False, True)),
    (SPARK, False, False, P, 0, RunMode(False, True)),
    (SPARK, True, True, P, 0, REFUSED),
    # a per-tuple runner that cannot rewind within a run: at-least-once at best
    (STILL, "auto", True, R, 1, NO_REWIND),
    (STILL, False, True, R, 1, RunMode(False)),
    (STILL, True, True, R, 1, REFUSED_WITHOUT_REWIND),
    (STILL, "auto", False, R, 1, RunMode(False)),
    (STILL, True, False, P, 1, RunMode(False)),
    (STILL, "auto", True, P, 1, NO_REWIND),
]


@pytest.mark.parametrize(("runner", "setting", "stateful", "kind", "ackers", "expected"), TABLE)
def test_run_mode(
    runner: Runner,
    setting: bool | str,
    stateful: bool,
    kind: str,
    ackers: int,
    expected: RunMode | str,
) -> None:
    spouts = {"lines": Rewinds() if kind == R else Plain()}
    if expected in (REFUSED, REFUSED_WITHOUT_REWIND):
        match = r"'lines' \(Plain\)" if expected == REFUSED else r"the still runtime cannot go back"
        with pytest.raises(ConfigError, match=match):
            run_mode(runner, setting, stateful, spouts, ackers)
        return
    mode = run_mode(runner, setting, stateful, spouts, ackers)
    if expected in ("note", NO_REWIND):
        assert not mode.exactly_once and not mode.at_most_once
        why = "cannot rewind (no position" if expected == "note" else "still runtime cannot rewind"
        assert mode.note is not None and why in mode.note
    else:
        assert mode == expected


def test_the_spark_refusal_says_why_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"no at-least-once mode.*topology.acker.executors: 0"):
        run_mode(SPARK, "auto", True, {"lines": Plain()}, 1)


def test_a_runner_name_is_looked_up_in_the_registry() -> None:
    spouts = {"lines": Plain()}
    assert run_mode("spark", "auto", True, spouts, 0) == run_mode(SPARK, "auto", True, spouts, 0)
    with pytest.raises(ConfigError, match="no runner is registered"):
        run_mode("flink", "auto", True, spouts, 1)


def test_the_replay_model_not_the_name_decides() -> None:
    """A runner named "local" that replays batches is held to every spout rewinding."""
    batch = Runner("local", "nowhere:make", Capabilities(replay="batch"))
    with pytest.raises(ConfigError, match=r"the local runtime reads a failed"):
        run_mode(batch, "auto", True, {"lines": Plain()}, 1)
    assert run_mode(LOCAL, "auto", True, {"lines": Plain()}, 1).note is not None


@dataclass
class Task:
    namespace: str
    component: str
    spout: Any


def test_cut_positions_are_each_spout_tasks_position_by_namespace() -> None:
    tasks = [Task("a-0", "a", Rewinds({"line": 3})), Task("a-1", "a", Rewinds(None))]
    assert cut_positions(tasks) == {"a-0": {"line": 3}, "a-1": None}
    assert cut_positions([]) == {}


def test_a_position_that_is_not_json_names_the_spout() -> None:
    with pytest.raises(SerializationError, match="spout 'a'"):
        cut_positions([Task("a-0", "a", Rewinds(object()))])


def test_restore_spouts_seeks_what_the_plan_names_once() -> None:
    record = CheckpointRecord(CheckpointState(2, Phase.COMMITTED), {2: {"a-0": 7, "a-1": 9}})
    spouts = [Rewinds(), Rewinds()]
    refs = [SpoutRef(f"a-{i}", "a", i, 2, s) for i, s in enumerate(spouts)]
    plan = restore_spouts(record, True, refs)
    assert [s.sought for s in spouts] == [[7], [9]]
    assert plan.seeks == {"a-0": 7, "a-1": 9}
    spouts = [Rewinds(), Rewinds()]
    refs = [SpoutRef(f"a-{i}", "a", i, 2, s) for i, s in enumerate(spouts)]
    plan = restore_spouts(record, True, refs, seek=False)
    assert [s.sought for s in spouts] == [[], []]
    assert plan.seeks == {"a-0": 7, "a-1": 9}
