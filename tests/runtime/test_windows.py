"""Windowed bolts on the local runtime, exactly-once (statestream._windowed).

Page views per page per window, on event time with disorder within the lag:
the committed results (a stateful bolt downstream sums each window's count, so
a window fired twice would show twice) equal what the windows hold by their
timestamps, with and without a crash in the middle of a window."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest

from statestream import (
    BaseWindowedBolt,
    ConfigError,
    Count,
    Duration,
    SerializationError,
    StatefulBolt,
    StatefulWindowedBolt,
    TopologyBuilder,
    Tuple,
    TupleWindow,
)
from statestream._clock import StepClock
from statestream.runtime.contract import make_runtime
from statestream.runtime.local import LocalRuntime
from statestream.testing import (
    ListSpout,
    RewindableListSpout,
    SinkBolt,
    committed_state,
    crash_and_recover,
    sink,
)

PAGES = [f"/p{i}" for i in range(5)]
LAG_MS = 3_000
WINDOW_MS = 10_000


def views(n: int, seed: int = 3) -> list[tuple[str, int]]:
    """``n`` page views, about 100 ms apart, each up to 2.9 s late (within the lag)."""
    rnd = random.Random(seed)
    return [(rnd.choice(PAGES), max(0, i * 100 - rnd.randrange(LAG_MS - 100))) for i in range(n)]


def expected(events: list[tuple[str, int]], length: int, slide: int) -> Counter[str]:
    out: Counter[str] = Counter()
    for page, ts in events:
        end = ts - ts % slide + slide
        while end - length <= ts:
            out[f"{end}:{page}"] += 1
            end += slide
    return out


class PageCounts(BaseWindowedBolt):
    def execute(self, window: TupleWindow) -> None:
        counts = Counter(t["page"] for t in window.get())
        for page, n in sorted(counts.items()):
            self.collector.emit([window.end_timestamp, page, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["end", "page", "views"])


class Totals(StatefulBolt):
    """Sums what each window emitted: a window fired twice would count twice."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        key = f"{tuple['end']}:{tuple['page']}"
        self.state.put(key, self.state.get(key, 0) + tuple["views"])
        self.collector.ack(tuple)


def on_event_time(bolt: Any, sliding_ms: int = WINDOW_MS) -> Any:
    """``bolt`` with the tests' event-time window: 10 s, the lag, a 50 ms watermark."""
    return (
        bolt.with_window(Duration.milliseconds(WINDOW_MS), Duration.milliseconds(sliding_ms))
        .with_timestamp_field("ts")
        .with_lag(Duration.milliseconds(LAG_MS))
        .with_watermark_interval(Duration.milliseconds(50))
    )


def topology(events: list[tuple[str, int]], sliding_ms: int = WINDOW_MS, late: bool = False) -> Any:
    b = TopologyBuilder("pageviews")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    bolt = on_event_time(PageCounts(), sliding_ms)
    if late:
        bolt.with_late_tuple_stream("late")
    b.set_bolt("windows", bolt).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    if late:
        b.set_bolt("late", SinkBolt("late")).shuffle_grouping("windows", "late")
    return b.build()


def config(tmp_path: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 20,
        "topology.executor.receive.buffer.size": 64,
    }


@pytest.mark.parametrize("sliding_ms", [WINDOW_MS, 5_000])
def test_event_time_windows_commit_each_window_once(tmp_path: Path, sliding_ms: int) -> None:
    events = views(600)
    topo = topology(events, sliding_ms)
    result = LocalRuntime(topo, config(tmp_path), clock=StepClock(0.001)).run(until_idle=True)
    assert result.errors == []
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == expected(
        events, WINDOW_MS, sliding_ms
    )


def test_event_time_windows_on_worker_processes_end_with_every_window(tmp_path: Path) -> None:
    """Two workers: the windowed bolt's two tasks each get the end of input, in the
    same round, and the run ends once a checkpoint after it committed."""
    events = views(600)
    b = TopologyBuilder("pageviews")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    b.set_bolt("windows", on_event_time(PageCounts()), parallelism=2).fields_grouping(
        "views", ["page"]
    )
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    conf = {**config(tmp_path), "topology.workers": 2}
    result = make_runtime(topo, conf).run(until_idle=True)
    assert result.errors == [] and result.reason == "idle"
    assert Counter(committed_state(topo, conf, "totals")) == expected(events, WINDOW_MS, WINDOW_MS)


@pytest.mark.parametrize("at", [270, 420])
def test_a_crash_mid_window_commits_every_window_once(tmp_path: Path, at: int) -> None:
    from statestream.testing import crash_at_tuple

    events = views(600, seed=at)
    topo = topology(events)
    crash_and_recover(
        topo, config(tmp_path), at=crash_at_tuple("windows", at), clock=StepClock(0.001)
    )
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == expected(
        events, WINDOW_MS, WINDOW_MS
    )


def test_late_tuples_go_out_on_the_late_stream_and_are_acked(tmp_path: Path) -> None:
    events = views(300)
    events.insert(250, ("/late", 100))  # 25 s behind: far past the lag
    topo = topology(events, late=True)
    result = LocalRuntime(topo, config(tmp_path), clock=StepClock(0.001)).run(until_idle=True)
    assert sink("late") == [(["/late", 100], 100)]
    on_time = [e for e in events if e[0] != "/late"]
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == expected(
        on_time, WINDOW_MS, WINDOW_MS
    )
    assert result.components["views"].acked == len(events)
    assert result.counters["late_tuples"] == 1


class CountWindows(StatefulWindowedBolt):
    """Count windows with a state of their own: how many windows fired."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, window: TupleWindow) -> None:
        self.state.put("windows", self.state.get("windows", 0) + 1)
        self.collector.emit([window.end_timestamp, "all", len(window)])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["end", "page", "views"])


def test_count_windows_with_their_own_state_survive_a_crash(tmp_path: Path) -> None:
    from statestream.testing import crash_at_tuple

    b = TopologyBuilder("counted")
    b.set_spout("views", RewindableListSpout(list(range(303)), fields=["n"]))
    b.set_bolt("windows", CountWindows().with_tumbling_window(Count(10))).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    conf = {**config(tmp_path), "topology.state.checkpoint.interval.ms": 1}
    crash_and_recover(topo, conf, at=crash_at_tuple("windows", 255), clock=StepClock(0.001))
    totals = committed_state(topo, config(tmp_path), "totals")
    assert sum(totals.values()) == 303  # 30 windows of 10, and the 3 at the end of input
    state = committed_state(topo, config(tmp_path), "windows")
    assert state["windows"] == 31
    # The window's own keys beside the user's: its state, and its tuples in chunks.
    assert {k for k in state if not k.startswith("$window/")} == {"windows", "$window"}


def test_a_windowed_bolt_without_a_window_is_refused_naming_the_fix(tmp_path: Path) -> None:
    b = TopologyBuilder("bad")
    b.set_spout("views", ListSpout([1]))
    b.set_bolt("windows", PageCounts()).shuffle_grouping("views")
    with pytest.raises(ConfigError, match="with_tumbling_window"):
        LocalRuntime(b.build(), config(tmp_path)).run(until_idle=True)


def test_storms_window_keys_configure_a_bolt_without_with_methods(tmp_path: Path) -> None:
    """Storm's topology.bolts.* keys, as a component's config (add_configuration)."""
    events = views(600)
    b = TopologyBuilder("pageviews")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    declarer = b.set_bolt("windows", PageCounts()).shuffle_grouping("views")
    for key, value in {
        "topology.bolts.window.length.duration.ms": WINDOW_MS,
        "topology.bolts.window.sliding.interval.duration.ms": 5_000,
        "topology.bolts.tuple.timestamp.field.name": "ts",
        "topology.bolts.tuple.timestamp.max.lag.ms": LAG_MS,
        "topology.bolts.watermark.event.interval.ms": 50,
    }.items():
        declarer.add_configuration(key, value)
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    LocalRuntime(topo, config(tmp_path), clock=StepClock(0.001)).run(until_idle=True)
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == expected(
        events, WINDOW_MS, 5_000
    )


class PageCountsAggregated(BaseWindowedBolt):
    """Views per page per window, one accumulator per window (no tuples kept)."""

    def execute(self, window: TupleWindow) -> None:
        assert window.get() == []
        for page, n in sorted(window.value.items()):
            self.collector.emit([window.end_timestamp, page, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["end", "page", "views"])


def _count(acc: dict[str, int], t: Tuple) -> dict[str, int]:
    acc[t["page"]] = acc.get(t["page"], 0) + 1
    return acc


def _merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


@pytest.mark.parametrize("sliding_ms", [WINDOW_MS, 5_000])
def test_aggregating_windows_survive_a_crash_exactly(tmp_path: Path, sliding_ms: int) -> None:
    from statestream.testing import crash_at_tuple

    events = views(600, seed=sliding_ms)
    b = TopologyBuilder("aggregated")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    bolt = on_event_time(PageCountsAggregated(), sliding_ms)
    b.set_bolt(
        "windows", bolt.with_aggregate(dict, _count, _merge, lambda acc: acc)
    ).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    crash_and_recover(
        topo, config(tmp_path), at=crash_at_tuple("windows", 333), clock=StepClock(0.001)
    )
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == expected(
        events, WINDOW_MS, sliding_ms
    )


class Sessions(BaseWindowedBolt):
    def execute(self, window: TupleWindow) -> None:
        users = {t["page"] for t in window.get()}
        assert len(users) == 1
        self.collector.emit([window.end_timestamp, users.pop(), len(window)])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["end", "page", "views"])


def session_oracle(events: list[tuple[str, int]], gap: int) -> Counter[str]:
    out: Counter[str] = Counter()
    for user in {u for u, _ in events}:
        times = sorted(ts for u, ts in events if u == user)
        run = [times[0]]
        nexts: list[int | None] = [*times[1:], None]
        for ts in nexts:
            if ts is not None and ts - run[-1] < gap:
                run.append(ts)
                continue
            out[f"{run[-1] + gap}:{user}"] += len(run)
            if ts is not None:
                run = [ts]
    return out


def test_session_windows_per_key_survive_a_crash_exactly(tmp_path: Path) -> None:
    from statestream.testing import crash_at_tuple

    rnd = random.Random(11)
    t = 0
    events = []
    for _ in range(500):  # bursts with pauses: sessions of a few seconds per user
        t += rnd.choice([50, 100, 200, 4_000])
        events.append((rnd.choice(PAGES), t))
    gap = 3_000
    b = TopologyBuilder("sessions")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    b.set_bolt(
        "windows",
        Sessions()
        .with_session_window(Duration.milliseconds(gap), key="page")
        .with_timestamp_field("ts")
        .with_watermark_interval(Duration.milliseconds(50)),
    ).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    crash_and_recover(
        topo, config(tmp_path), at=crash_at_tuple("windows", 260), clock=StepClock(0.001)
    )
    assert Counter(committed_state(topo, config(tmp_path), "totals")) == session_oracle(events, gap)


class FlakyPageCounts(PageCounts):
    """Raises the first time it sees each third window: retried where it failed."""

    failed: ClassVar[set[int]] = set()

    def execute(self, window: TupleWindow) -> None:
        end = window.end_timestamp
        if end % (3 * WINDOW_MS) == 0 and end not in FlakyPageCounts.failed:
            FlakyPageCounts.failed.add(end)
            self.collector.emit([end, "/partial", 1])  # taken back with the failure
            raise RuntimeError(f"window {end} failed once")
        super().execute(window)


def test_a_window_function_that_fails_once_is_fired_again_and_counted_once(
    tmp_path: Path,
) -> None:
    FlakyPageCounts.failed = set()
    events = views(600)
    b = TopologyBuilder("flaky")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    b.set_bolt("windows", on_event_time(FlakyPageCounts())).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    conf = {**config(tmp_path), "statestream.retry.initial.ms": 1}
    result = LocalRuntime(topo, conf, clock=StepClock(0.001)).run(until_idle=True)
    assert FlakyPageCounts.failed and len(result.errors) == len(FlakyPageCounts.failed)
    assert Counter(committed_state(topo, conf, "totals")) == expected(events, WINDOW_MS, WINDOW_MS)


def test_a_window_holding_a_value_json_cannot_store_stops_the_run_naming_the_fix(
    tmp_path: Path,
) -> None:
    b = TopologyBuilder("unstorable")
    b.set_spout("views", RewindableListSpout([("/a", 1, {1, 2})], fields=["page", "ts", "tags"]))
    b.set_bolt("windows", on_event_time(PageCounts())).shuffle_grouping("views")
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    with pytest.raises(SerializationError, match=r"cannot be stored as JSON.*emit JSON values"):
        LocalRuntime(b.build(), config(tmp_path), clock=StepClock(0.001)).run(until_idle=True)
