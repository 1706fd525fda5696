"""Windows larger than memory on the local runtime (``with_max_events_in_memory``):
with 30 tuples in memory, 10 s windows of about 100 tuples spill to the store
many times, and a crash in the middle of a window still commits every window
exactly once; a window read back from the store gives the same tuples, new and
expired ones as one kept in memory. At-least-once windows, kept in memory
(Storm's in-memory mode), refuse the setting naming the fix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_windows import WINDOW_MS, PageCounts, Totals, config, expected, on_event_time, views

from statestream import BaseWindowedBolt, ConfigError, TopologyBuilder, TupleWindow
from statestream._clock import StepClock
from statestream.runtime.local import LocalRuntime
from statestream.testing import RewindableListSpout, committed_state, crash_and_recover

LIMIT = 30


class IteratedPageCounts(BaseWindowedBolt):
    """Views per page per window, iterating the window (read back chunk by chunk when
    it spilled), and checking get_new/get_expired against the window before it."""

    spilled: ClassVar[int] = 0

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.last: set[tuple[Any, ...]] | None = None  # this process's previous window

    def execute(self, window: TupleWindow) -> None:
        counts: Counter[str] = Counter()
        for t in window:
            counts[t["page"]] += 1
        now = {tuple(t.values) for t in window.get()}  # (page, ts, i): each its own
        assert len(window) == sum(counts.values()) == len(window.get()) == len(now)
        if not isinstance(window._tuples, list):
            IteratedPageCounts.spilled += 1
        if self.last is not None:
            new = [tuple(t.values) for t in window.get_new()]
            gone = [tuple(t.values) for t in window.get_expired()]
            assert len(new) == len(set(new)) and set(new) == now - self.last
            assert len(gone) == len(set(gone)) and set(gone) == self.last - now
        self.last = now
        for page, n in sorted(counts.items()):
            self.collector.emit([window.end_timestamp, page, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["end", "page", "views"])


def topology(events: list[tuple[str, int, int]], sliding_ms: int, limit: int = LIMIT) -> Any:
    b = TopologyBuilder("spilled")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts", "i"]))
    bolt = on_event_time(IteratedPageCounts(), sliding_ms).with_max_events_in_memory(limit)
    b.set_bolt("windows", bolt).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    return b.build()


@pytest.mark.parametrize(("sliding_ms", "at"), [(WINDOW_MS, 270), (5_000, 420)])
def test_a_crash_mid_window_with_spilled_windows_commits_every_window_once(
    tmp_path: Path, sliding_ms: int, at: int
) -> None:
    from statestream.testing import crash_at_tuple

    IteratedPageCounts.spilled = 0
    events = views(600, seed=at)
    numbered = [(page, ts, i) for i, (page, ts) in enumerate(events)]
    topo = topology(numbered, sliding_ms)
    crash_and_recover(
        topo, config(tmp_path), at=crash_at_tuple("windows", at), clock=StepClock(0.001)
    )
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == expected(
        events, WINDOW_MS, sliding_ms
    )
    assert IteratedPageCounts.spilled > 5  # windows read back from the store


def test_tumbling_windows_read_their_expired_tuples_back_through_a_crash(tmp_path: Path) -> None:
    """Nothing spills by number here (the limit is far above a window), but a tumbling
    window's tuples are let go of once it has fired: the next window's get_expired()
    reads them back from the store, and IteratedPageCounts checks them against the
    window before, through a crash mid-window."""
    from statestream.testing import crash_at_tuple

    events = views(600, seed=5)
    numbered = [(page, ts, i) for i, (page, ts) in enumerate(events)]
    topo = topology(numbered, WINDOW_MS, limit=100_000)
    crash_and_recover(
        topo, config(tmp_path), at=crash_at_tuple("windows", 310), clock=StepClock(0.001)
    )
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == expected(
        events, WINDOW_MS, WINDOW_MS
    )


def test_at_least_once_windows_refuse_max_events_in_memory_naming_the_fix(
    tmp_path: Path,
) -> None:
    b = TopologyBuilder("alo")
    b.set_spout("views", RewindableListSpout(views(10), fields=["page", "ts"]))
    b.set_bolt(
        "windows", on_event_time(IteratedPageCounts()).with_max_events_in_memory(100)
    ).shuffle_grouping("views")
    conf = {**config(tmp_path), "statestream.state.exactly.once": False}
    with pytest.raises(ConfigError, match=r"with_max_events_in_memory.*exactly-once state"):
        LocalRuntime(b.build(), conf, clock=StepClock(0.001)).run(until_idle=True)


def test_at_least_once_windows_ignore_the_default_limit(tmp_path: Path) -> None:
    """Without the setting, at-least-once windows run in memory as Storm's do."""
    events = views(300)
    b = TopologyBuilder("alo")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    b.set_bolt("windows", on_event_time(PageCounts())).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    conf = {**config(tmp_path), "statestream.state.exactly.once": False}
    result = LocalRuntime(topo, conf, clock=StepClock(0.001)).run(until_idle=True)
    assert result.errors == []
    assert Counter(committed_state(topo, conf, "totals")) == expected(events, WINDOW_MS, WINDOW_MS)


def test_max_events_in_memory_takes_a_positive_number_of_tuples() -> None:
    with pytest.raises(ConfigError, match="positive number of tuples"):
        IteratedPageCounts().with_max_events_in_memory(0)
    bolt = IteratedPageCounts()
    assert bolt.with_max_events_in_memory(5) is bolt and bolt.max_events_in_memory == 5
