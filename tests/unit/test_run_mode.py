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

# (runner, setting, stateful, spouts, ackers) -> RunMode or REFUSED
TABLE: list[tuple[str, bool | str, bool, str, int, RunMode | str]] = [
    # local: resolve_exactly_once, the ackers do not matter here (the plan refuses 0)
    ("local", "auto", True, R, 1, RunMode(True)),
    ("local", True, True, R, 1, RunMode(True)),
    ("local", False, True, R, 1, RunMode(False)),
    ("local", "auto", False, R, 1, RunMode(False)),
    ("local", "auto", True, P, 1, "note"),
    ("local", False, True, P, 1, RunMode(False)),
    ("local", True, True, P, 1, REFUSED),
    # spark: every spout must rewind, whatever the setting, or at-most-once is asked for
    ("spark", "auto", True, R, 1, RunMode(True)),
    ("spark", False, True, R, 1, RunMode(True)),
    ("spark", "auto", False, R, 1, RunMode(False)),
    ("spark", "auto", True, P, 1, REFUSED),
    ("spark", False, True, P, 1, REFUSED),
    ("spark", True, True, P, 1, REFUSED),
    ("spark", "auto", True, P, 0, RunMode(False, True)),
    ("spark", False, False, P, 0, RunMode(False, True)),
    ("spark", True, True, P, 0, REFUSED),
]


@pytest.mark.parametrize(("runner", "setting", "stateful", "kind", "ackers", "expected"), TABLE)
def test_run_mode(
    runner: str,
    setting: bool | str,
    stateful: bool,
    kind: str,
    ackers: int,
    expected: RunMode | str,
) -> None:
    spouts = {"lines": Rewinds() if kind == R else Plain()}
    if expected == REFUSED:
        with pytest.raises(ConfigError, match=r"'lines' \(Plain\)"):
            run_mode(runner, setting, stateful, spouts, ackers)
        return
    mode = run_mode(runner, setting, stateful, spouts, ackers)
    if expected == "note":
        assert not mode.exactly_once and not mode.at_most_once
        assert mode.note is not None and "cannot rewind" in mode.note
    else:
        assert mode == expected


def test_the_spark_refusal_says_why_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"no at-least-once mode.*topology.acker.executors: 0"):
        run_mode("spark", "auto", True, {"lines": Plain()}, 1)


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
