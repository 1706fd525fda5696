"""A windowed bolt whose parallelism changed between runs (statestream._window_rescale):
event-time windows move with their keys, after a crash mid-window, and every window
is committed once with exactly its tuples; count windows keep refusing, naming the fix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_windows import PageCounts, Totals, config, expected, on_event_time, views

from statestream import ConfigError, Count, TopologyBuilder
from statestream._clock import StepClock
from statestream.runtime.local import LocalRuntime
from statestream.testing import (
    RewindableListSpout,
    committed_state,
    crash_and_recover,
    crash_at_tuple,
)

WINDOW_MS = 10_000


def topology(events: list[tuple[str, int]], tasks: int, sliding_ms: int = WINDOW_MS) -> Any:
    b = TopologyBuilder("pageviews")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    bolt = on_event_time(PageCounts(), sliding_ms)
    b.set_bolt("windows", bolt, tasks).fields_grouping("views", ["page"])
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    return b.build()


@pytest.mark.parametrize(
    ("before", "after", "sliding_ms", "at"),
    [
        (1, 2, WINDOW_MS, 250),
        (2, 3, 5_000, 310),
        (3, 1, WINDOW_MS, 420),
        (2, 2, 5_000, 310),
        (1, 1, 5_000, 310),
    ],
)
def test_time_windows_move_with_their_keys_and_commit_each_window_once(
    tmp_path: Path, before: int, after: int, sliding_ms: int, at: int
) -> None:
    events = views(700)
    crash_and_recover(
        topology(events, before, sliding_ms),
        config(tmp_path),
        at=crash_at_tuple("windows", at),
        then=topology(events, after, sliding_ms),
        clock=StepClock(0.001),
    )
    totals = committed_state(topology(events, after), config(tmp_path), "totals")
    assert Counter(totals) == expected(events, WINDOW_MS, sliding_ms)


def test_count_windows_refuse_a_change_of_parallelism_naming_the_fix(tmp_path: Path) -> None:
    def counted(tasks: int) -> Any:
        b = TopologyBuilder("pageviews")
        b.set_spout("views", RewindableListSpout(views(50), fields=["page", "ts"]))
        bolt = PageCounts().with_tumbling_window(Count(7))
        b.set_bolt("windows", bolt, tasks).fields_grouping("views", ["page"])
        b.set_bolt("totals", Totals()).shuffle_grouping("windows")
        return b.build()

    LocalRuntime(counted(1), config(tmp_path), clock=StepClock(0.001)).run(until_idle=True)
    with pytest.raises(ConfigError, match="a count window counts per task"):
        LocalRuntime(counted(2), config(tmp_path)).run(until_idle=True)
