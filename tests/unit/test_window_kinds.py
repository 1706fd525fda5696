"""Session windows and aggregating windows alone (statestream._window_kinds)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import orjson
import pytest

from statestream._errors import ConfigError
from statestream._window_kinds import Aggregate, AggregateCore, SessionCore
from statestream._windowing import Count, Duration, Fire, Watermarks, WindowSpec

SUM = Aggregate(lambda: 0, lambda acc, v: acc + v, lambda a, b: a + b, lambda acc: acc)


def by_user(payload: Any) -> Any:
    return payload[0]


def value(payload: Any) -> Any:
    return payload[1]


def sessions(fires: list[Fire]) -> list[tuple[int, int, list[Any]]]:
    return [(f.start, f.end, [e.payload for e in f.events]) for f in fires]


def test_sessions_merge_tuples_closer_than_the_gap_per_key_and_fire_after_it() -> None:
    core = SessionCore(Duration(10), True, by_user)
    for ts, user in [(0, "a"), (5, "b"), (8, "a"), (30, "a"), (12, "b")]:
        core.add(ts, (user, ts))
    fires = core.advance(25)
    assert sessions(fires) == [(0, 18, [("a", 0), ("a", 8)]), (5, 22, [("b", 5), ("b", 12)])]
    assert sessions(core.finish()) == [(30, 40, [("a", 30)])]


def test_a_tuple_a_gap_after_its_session_starts_a_new_one_and_closes_the_old() -> None:
    core = SessionCore(Duration(10), False, lambda p: None)  # processing time, one stream
    fires = []
    for now in (0, 4, 20, 25):
        fires += core.add(now, now) or []
    assert sessions(fires) == [(0, 14, [0, 4])]
    assert sessions(core.advance(35)) == [(20, 35, [20, 25])]


def test_session_aggregates_keep_an_accumulator_not_tuples() -> None:
    core = SessionCore(Duration(10), True, by_user, SUM, value)
    for ts, user in [(0, "a"), (3, "a"), (4, "b")]:
        core.add(ts, (user, ts))
    fires = core.finish()
    assert [(f.start, f.end, f.value, f.events) for f in fires] == [
        (0, 13, 3, []),
        (4, 14, 4, []),
    ]


def oracle(events: list[tuple[int, int]], length: int, slide: int) -> dict[int, int]:
    out: Counter[int] = Counter()
    for ts, v in events:
        end = ts - ts % slide + slide
        while end - length <= ts:
            out[end] += v
            end += slide
    return dict(out)


@pytest.mark.parametrize(("length", "slide"), [(10, 10), (30, 10), (20, 5)])
def test_aggregating_windows_give_what_their_tuples_would(length: int, slide: int) -> None:
    rnd = random.Random(length + slide)
    events = [(max(0, i * 2 - rnd.randrange(15)), rnd.randrange(100)) for i in range(300)]
    core = AggregateCore(WindowSpec(Duration(length), Duration(slide), event_time=True), SUM, value)
    marks = Watermarks(15)
    fires: list[Fire] = []
    for ts, v in events:
        assert core.add(ts, (None, v)) is not None
        marks.track("s", ts)
        mark = marks.next()
        if mark is not None:
            fires += core.advance(mark)
    fires += core.finish()
    assert {f.end: f.value for f in fires} == oracle(events, length, slide)
    assert len(core.panes) == 0


def test_an_aggregate_needs_duration_windows_whose_length_is_whole_slides() -> None:
    with pytest.raises(ConfigError, match="window of durations"):
        AggregateCore(WindowSpec(Count(3), Count(3)), SUM, value)
    with pytest.raises(ConfigError, match="multiple of its slide"):
        AggregateCore(WindowSpec(Duration(25), Duration(10)), SUM, value)


def seen(f: Fire) -> tuple[Any, ...]:
    return (f.start, f.end, f.value, [e.payload for e in f.events])


def test_session_and_aggregate_cores_restore_from_their_snapshots() -> None:
    def make() -> list[Any]:
        return [
            SessionCore(Duration(10), True, lambda p: tuple(p[0])),
            AggregateCore(WindowSpec(Duration(20), Duration(10), event_time=True), SUM, value),
        ]

    events = [(i * 3, [["k", i % 3], i]) for i in range(40)] + [(200, [["k", 0], 1])]
    for straight, first, again in zip(make(), make(), make(), strict=True):
        whole = []
        for ts, p in events:
            straight.add(ts, p)
            whole += straight.advance(ts - 5)
        whole += straight.finish()
        head = []
        for ts, p in events[:17]:
            first.add(ts, p)
            head += first.advance(ts - 5)
        again.restore(orjson.loads(orjson.dumps(first.snapshot())))
        tail = []
        for ts, p in events[17:]:
            again.add(ts, p)
            tail += again.advance(ts - 5)
        tail += again.finish()
        assert [seen(f) for f in head + tail] == [seen(f) for f in whole]
        assert whole
