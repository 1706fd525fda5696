"""A windowed bolt's per-tuple path (statestream._window_intake): the watermark moves
once per watermark interval, and also once a task has taken MOVE_EVERY tuples since
it last moved, so that a fast input does not hold an interval of tuples pending."""

from __future__ import annotations

from statestream._clock import FakeClock
from statestream._tuple import Fields, Origin, Tuple
from statestream._window_intake import MOVE_EVERY, WindowIntake
from statestream._windowing import Duration, Fire, Watermarks, WindowCore, WindowSpec

ORIGIN = Origin("src", 3, 0, "default", Fields("n", "ts"))


def intake(clock: FakeClock) -> WindowIntake:
    """Tumbling 10 ms event-time windows, no lag, the watermark every 1 s of ``clock``."""
    core = WindowCore(WindowSpec(Duration(10), Duration(10), event_time=True))
    return WindowIntake("w", core, Watermarks(0), clock, 1000, "ts", None)


def take(w: WindowIntake, ts: int) -> list[Fire]:
    fires = w.take(Tuple([ts, ts], ORIGIN))
    assert fires is not None  # none is late: the timestamps only go up
    return fires


def test_the_watermark_moves_every_move_every_tuples_before_its_interval_is_up() -> None:
    clock = FakeClock()  # never moves: only the count moves the watermark
    w = intake(clock)
    fires = [take(w, ts) for ts in range(MOVE_EVERY)]
    assert not any(fires[:-1])
    # The watermark is the latest timestamp (no lag): the windows before it fire.
    last = MOVE_EVERY - 1
    assert [f.end for f in fires[-1]] == list(range(10, last - last % 10 + 1, 10))
    assert [e.item()[0] for f in fires[-1] for e in f.events] == list(range(last - last % 10))
    # The next move is as many tuples on (at least as many as the lag left pending).
    more = [take(w, ts) for ts in range(MOVE_EVERY, 2 * MOVE_EVERY)]
    assert not any(more[:-1]) and more[-1]


def test_a_slow_input_moves_the_watermark_once_per_interval() -> None:
    clock = FakeClock()
    w = intake(clock)
    assert take(w, 5) == [] and take(w, 15) == []
    clock.advance(1.0)  # the interval is up: the next tuple moves it
    assert [f.end for f in take(w, 25)] == [10, 20]
