"""Windows dealt to a new number of tasks by key (statestream._window_rescale): the new
cores fire, between them, exactly the windows the one that went on fires; tasks not
at one window boundary, and count windows, are refused naming the fix."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from statestream._errors import ConfigError
from statestream._window_rescale import rescale_windows
from statestream._windowing import Count, Duration, Fire, WindowCore, WindowSpec


def feed(core: WindowCore, part: list[tuple[int, int]]) -> list[Fire]:
    out: list[Fire] = []
    for ts, p in part:
        core.add(ts, p)
        out += core.advance(ts - 25)
    return out


def seen(fires: list[Fire]) -> Counter[tuple[int, Any]]:
    return Counter((f.end, e.payload) for f in fires for e in f.events)


@pytest.mark.parametrize("slide", [50, 100])
@pytest.mark.parametrize(("before", "after"), [(1, 3), (2, 1), (3, 2)])
def test_windows_dealt_by_key_fire_as_the_ones_that_went_on(
    slide: int, before: int, after: int
) -> None:
    spec = WindowSpec(Duration(100), Duration(slide), event_time=True)
    rnd = random.Random(5)
    evs = [(i * 4 + rnd.randrange(20), i) for i in range(300)]
    # Each tuple its own key (the payload): the windows of all tasks together are
    # the windows of one task holding every key.
    whole = WindowCore(spec)
    want = seen(feed(whole, evs) + whole.finish())
    olds = [WindowCore(spec) for _ in range(before)]
    got: Counter[tuple[int, Any]] = Counter()
    for t, core in enumerate(olds):
        got += seen(feed(core, [e for e in evs[:150] if e[1] % before == t]))
    stored = [(c.state(), [], c.held()) for c in olds]
    for t, (state, _, held) in enumerate(
        rescale_windows("w", spec, stored, lambda p: p % after, after)
    ):
        core = WindowCore(spec)
        core.rebuild(state, held)
        got += seen(feed(core, [e for e in evs[150:] if e[1] % after == t]) + core.finish())
    assert got == want


def test_tasks_at_different_boundaries_are_refused_naming_the_fix() -> None:
    spec = WindowSpec(Duration(100), Duration(100), event_time=True)
    ahead, behind = WindowCore(spec), WindowCore(spec)
    feed(ahead, [(i * 10, i) for i in range(30)])  # its window [200, 300) fired
    feed(behind, [(i * 10, i) for i in range(22)])
    stored = [(c.state(), [], c.held()) for c in (ahead, behind)]
    with pytest.raises(ConfigError, match="previous parallelism"):
        rescale_windows("w", spec, stored, lambda p: 0, 1)


def test_count_windows_do_not_move() -> None:
    core = WindowCore(WindowSpec(Count(3), Count(3)))
    with pytest.raises(ConfigError, match="a count window counts per task"):
        rescale_windows("w", core.spec, [(core.state(), [], [])], lambda p: 0, 2)
