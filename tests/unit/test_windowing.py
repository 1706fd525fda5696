"""The window model alone (statestream._windowing): which tuples each window holds
and when it fires, in event and processing time, for every length x slide kind.

Cases marked "Storm" follow Storm's WindowManagerTest / WaterMarkEventGeneratorTest
(the behaviour we share; our time windows are aligned to the epoch, as Flink's)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import orjson
import pytest

from statestream._errors import ConfigError
from statestream._windowing import Count, Duration, Fire, Watermarks, WindowCore, WindowSpec


def payloads(fire: Fire) -> list[Any]:
    return [e.payload for e in fire.events]


def run_processing(spec: WindowSpec, arrivals: list[tuple[int, Any]], until: int) -> list[Fire]:
    """Tuples arriving at (clock ms, payload); ticks every ms up to ``until``."""
    core = WindowCore(spec)
    fires: list[Fire] = []
    for now, payload in arrivals:
        fires += core.advance(now)
        fired = core.add(now, payload)
        assert fired is not None
        fires += fired
    fires += core.advance(until)
    return fires


# -- durations and counts ------------------------------------------------------------
def test_durations_are_whole_milliseconds() -> None:
    assert Duration.seconds(2) == Duration.milliseconds(2000) == Duration(2000)
    assert Duration.minutes(1).ms == 60_000 and Duration.hours(1).ms == 3_600_000
    assert Duration.days(1).ms == 86_400_000 and Duration.seconds(0.5).ms == 500
    with pytest.raises(ConfigError, match="whole number of milliseconds"):
        Duration.seconds(0.0001)
    with pytest.raises(ConfigError, match="positive"):
        Duration.milliseconds(0)
    with pytest.raises(ConfigError, match="positive"):
        Count(0)


def test_a_window_slides_by_at_most_its_length() -> None:
    with pytest.raises(ConfigError, match="slides by at most its length"):
        WindowSpec(Count(2), Count(3))
    with pytest.raises(ConfigError, match="Count or a Duration"):
        WindowSpec(5, Count(3))  # type: ignore[arg-type]


# -- count windows (Storm: testCountBasedWindow, testCountBasedTumblingWindow) --------
@pytest.mark.parametrize(
    ("length", "slide", "n", "expected"),
    [
        (5, 2, 7, [[0, 1], [0, 1, 2, 3], [1, 2, 3, 4, 5]]),
        (3, 3, 9, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]),
        (2, 1, 3, [[0], [0, 1], [1, 2]]),
    ],
)
def test_count_windows_fire_every_slide_with_the_last_length_tuples(
    length: int, slide: int, n: int, expected: list[list[int]]
) -> None:
    fires = run_processing(
        WindowSpec(Count(length), Count(slide)), [(i, i) for i in range(n)], until=n
    )
    assert [payloads(f) for f in fires] == expected


def test_new_and_expired_are_the_difference_to_the_last_window() -> None:
    fires = run_processing(WindowSpec(Count(3), Count(2)), [(i, i) for i in range(6)], until=6)
    assert [payloads(f) for f in fires] == [[0, 1], [1, 2, 3], [3, 4, 5]]
    assert [[e.payload for e in f.new] for f in fires] == [[0, 1], [2, 3], [4, 5]]
    assert [[e.payload for e in f.expired] for f in fires] == [[], [0], [1, 2]]


# -- processing-time duration windows -----------------------------------------------
def test_tumbling_processing_time_windows_are_aligned_and_fire_on_the_clock() -> None:
    spec = WindowSpec(Duration(10), Duration(10))
    fires = run_processing(spec, [(3, "a"), (9, "b"), (10, "c"), (25, "d")], until=40)
    assert [(f.start, f.end, payloads(f)) for f in fires] == [
        (0, 10, ["a", "b"]),
        (10, 20, ["c"]),
        (20, 30, ["d"]),
    ]


def test_sliding_processing_time_windows_overlap_and_empty_ones_are_skipped() -> None:
    spec = WindowSpec(Duration(20), Duration(10))
    fires = run_processing(spec, [(5, "a"), (15, "b"), (95, "c")], until=200)
    assert [(f.start, f.end, payloads(f)) for f in fires] == [
        (-10, 10, ["a"]),
        (0, 20, ["a", "b"]),
        (10, 30, ["b"]),
        (80, 100, ["c"]),
        (90, 110, ["c"]),
    ]


def test_a_count_length_with_a_duration_slide_fires_the_last_n_at_each_boundary() -> None:
    spec = WindowSpec(Count(2), Duration(10))
    fires = run_processing(spec, [(1, "a"), (2, "b"), (3, "c"), (12, "d")], until=30)
    assert [(f.end, payloads(f)) for f in fires] == [(10, ["b", "c"]), (20, ["c", "d"])]


def test_a_duration_length_with_a_count_slide_fires_every_n_tuples() -> None:
    spec = WindowSpec(Duration(10), Count(2))
    fires = run_processing(spec, [(1, "a"), (5, "b"), (12, "c"), (30, "d")], until=40)
    assert [(f.start, f.end, payloads(f)) for f in fires] == [(-4, 6, ["a", "b"]), (21, 31, ["d"])]


# -- event time ------------------------------------------------------------------------
def oracle(events: list[tuple[int, Any]], length: int, slide: int) -> Counter[tuple[int, Any]]:
    """Every (window end, payload) of aligned [end - length, end) windows."""
    out: Counter[tuple[int, Any]] = Counter()
    for ts, payload in events:
        end = ts - ts % slide + slide
        while end - length <= ts:
            out[(end, payload)] += 1
            end += slide
    return out


@pytest.mark.parametrize(("length", "slide"), [(10, 10), (30, 10), (25, 5), (7, 3)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_event_time_windows_hold_exactly_their_tuples_whatever_the_disorder_within_the_lag(
    length: int, slide: int, seed: int
) -> None:
    rnd = random.Random(seed)
    lag = 20
    events = [(max(0, i * 3 - rnd.randrange(lag)), i) for i in range(200)]
    core = WindowCore(WindowSpec(Duration(length), Duration(slide), event_time=True))
    marks = Watermarks(lag)
    fires: list[Fire] = []
    for ts, payload in events:
        assert core.add(ts, payload) is not None  # none late: disorder within the lag
        marks.track("s", ts)
        mark = marks.next()
        if mark is not None:
            fires += core.advance(mark)
    fires += core.finish()
    got: Counter[tuple[int, Any]] = Counter()
    for f in fires:
        assert f.end - f.start == length and f.end % slide == 0
        assert all(f.start <= e.ts < f.end for e in f.events)
        assert [e.ts for e in f.events] == sorted(e.ts for e in f.events)
        got.update((f.end, p) for p in payloads(f))
    assert got == oracle(events, length, slide)
    assert len({f.end for f in fires}) == len(fires)  # each window fires once


def test_a_tuple_older_than_the_watermark_is_late_and_never_in_a_window() -> None:
    core = WindowCore(WindowSpec(Duration(10), Duration(10), event_time=True))
    core.add(5, "a")
    core.add(15, "b")
    fires = core.advance(12)
    assert [payloads(f) for f in fires] == [["a"]]
    assert core.add(11, "late") is None and core.late == 1
    assert core.add(12, "on time") == []
    assert [payloads(f) for f in core.finish()] == [["on time", "b"]]


def test_the_end_of_input_fires_every_open_window_once() -> None:
    core = WindowCore(WindowSpec(Duration(30), Duration(10), event_time=True))
    for ts in (1, 12, 25):
        core.add(ts, ts)
    fires = core.finish()
    assert [(f.end, payloads(f)) for f in fires] == [
        (10, [1]),
        (20, [1, 12]),
        (30, [1, 12, 25]),
        (40, [12, 25]),
        (50, [25]),
    ]
    assert core.finish() == [] and len(core) == 0


@pytest.mark.parametrize(
    ("length", "slide", "last"),
    [(3, 3, [3, 4]), (5, 2, [1, 2, 3, 4]), (4, 3, [2, 3, 4])],
)
def test_a_partial_count_window_fires_at_the_end_of_input(
    length: int, slide: int, last: list[int]
) -> None:
    """The window the next slide would have fired, of the tuples there are."""
    core = WindowCore(WindowSpec(Count(length), Count(slide)))
    for i in range(5):
        core.add(i, i)
    assert [payloads(f) for f in core.finish()][-1:] == [last]


# -- the watermark (Storm: WaterMarkEventGeneratorTest) -------------------------------
def test_the_watermark_is_the_least_latest_timestamp_over_the_streams_minus_the_lag() -> None:
    marks = Watermarks(5, streams=["s1", "s2"])
    marks.track("s1", 100)
    assert marks.next() is None  # s2 sent nothing yet: it holds the watermark back
    marks.track("s2", 90)
    assert marks.next() == 85
    marks.track("s1", 120)
    assert marks.next() is None  # s2 is still at 90
    marks.track("s2", 80)  # older than its latest: no move back
    assert marks.next() is None
    marks.track("s2", 130)
    assert marks.next() == 115


# -- the checkpoint --------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [
        WindowSpec(Duration(30), Duration(10), event_time=True),
        WindowSpec(Count(4), Count(2)),
        WindowSpec(Count(3), Duration(10)),
        WindowSpec(Duration(20), Count(3), event_time=True),
    ],
)
def test_a_core_restored_from_its_snapshot_fires_as_the_one_that_went_on(spec: WindowSpec) -> None:
    rnd = random.Random(7)
    events = [(i * 4 + rnd.randrange(3), i) for i in range(60)]

    def feed(core: WindowCore, part: list[tuple[int, Any]]) -> list[Any]:
        out: list[Any] = []
        for ts, p in part:
            out += core.add(ts, p) or []
            out += core.advance(ts - 2)
        return [
            (
                f.start,
                f.end,
                payloads(f),
                [e.payload for e in f.new],
                [e.payload for e in f.expired],
            )
            for f in out
        ]

    def fin(core: WindowCore) -> list[Any]:
        return [(f.end, payloads(f)) for f in core.finish()]

    straight = WindowCore(spec)
    whole = feed(straight, events)
    first = WindowCore(spec)
    head = feed(first, events[:23])
    again = WindowCore(spec)
    again.restore(orjson.loads(orjson.dumps(first.snapshot())))
    assert head + feed(again, events[23:]) == whole
    assert fin(again) == fin(straight)


def test_the_end_of_input_goes_to_one_windowed_bolt_at_a_time_then_waits_for_a_commit() -> None:
    from statestream._windowed import EndOfInput

    ending = EndOfInput(["minutes", "hours"])
    assert ending.next(4) == "minutes" and not ending.committed(5)
    assert ending.next(7) == "hours" and not ending.committed(8)
    assert ending.next(9) is None and ending.committed(9)
    ending.reset()  # a rewind: the windows come back as committed
    assert ending.next(3) == "minutes"
    assert EndOfInput([]).next(0) is None and EndOfInput([]).committed(-1)


# -- release order and a fire's new / expired tuples ------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_tuples_are_released_in_timestamp_then_arrival_order_whatever_their_disorder(
    seed: int,
) -> None:
    # A count window of one tuple fires each tuple as it is released: the fires are
    # the release order. Timestamps repeat and go back (as far as the watermark lets
    # them: older ones are late), the watermark moves at random.
    rng = random.Random(seed)
    core = WindowCore(WindowSpec(Count(1), Count(1), event_time=True))
    fires: list[Fire] = []
    taken: list[tuple[int, int]] = []
    for i in range(2_000):
        ts = 1_000 + i // 3 - rng.choice([0, 0, 0, rng.randrange(200)])
        if core.add(ts, i) is not None:
            taken.append((ts, i))
        if rng.random() < 0.05:
            fires += core.advance(1_000 + i // 3 - rng.randrange(100))
        # The least pending tuple, kept up as they come and go (the store's bound).
        least = min(((e.ts, e.seq) for e in core.pending_now()), default=None)
        assert core.first_pending() == least
    fires += core.finish()
    assert core.first_pending() is None
    released = [(f.events[0].ts, f.events[0].payload) for f in fires]
    assert released == sorted(taken)  # payload i is the arrival order, as seq


@pytest.mark.parametrize(
    ("length", "slide"),
    [
        (Duration(10), Duration(10)),
        (Duration(10), Duration(3)),
        (Count(5), Count(2)),
        (Count(5), Duration(4)),
        (Duration(10), Count(3)),
    ],
)
def test_new_and_expired_are_the_tuples_entering_and_leaving_since_the_last_fire(
    length: Any, slide: Any
) -> None:
    # Storm's definition, by membership: new = in this window and not the last one,
    # expired = in the last one and not this one (Fire works them out by position).
    rng = random.Random(7)
    core = WindowCore(WindowSpec(length, slide, event_time=True))
    fires: list[Fire] = []
    for i in range(600):
        ts = i // 2 - rng.choice([0, 0, rng.randrange(6)])
        core.add(ts, i)
        if i % 7 == 0:
            fires += core.advance(i // 2 - 6)
    fires += core.finish()
    assert len(fires) > 20
    before: list[Any] = []
    for f in fires:
        now = payloads(f)
        assert [e.payload for e in f.new] == [p for p in now if p not in before]
        assert [e.payload for e in f.expired] == [p for p in before if p not in now]
        before = now
