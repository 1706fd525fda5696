"""Windowed bolts at-least-once (``statestream.state.exactly.once: false``): Storm's
in-memory windows. The windows are kept in memory only (nothing of them in the
checkpoint), and each tuple is acked once no window to come holds it: a window's
tuples are all pending at the spout when it fires, and all acked by the end."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_windows import LAG_MS, WINDOW_MS, expected, views

from statestream import (
    BaseWindowedBolt,
    ConfigError,
    Count,
    Duration,
    TopologyBuilder,
    TupleWindow,
)
from statestream._clock import StepClock
from statestream.runtime.local import LocalRuntime
from statestream.testing import (
    ListSpout,
    RewindableListSpout,
    SinkBolt,
    committed_state,
    sink,
    spout_record,
)

ALO = {"statestream.state.exactly.once": False}


class ChecksAcks(BaseWindowedBolt):
    """Counts per page per window, and notes which of the window's tuples the spout
    saw acked before the window fired (none should be)."""

    def execute(self, window: TupleWindow) -> None:
        acked = set(spout_record(self.conf["alo.name"]).acked)
        early = [t for t in window.get() if t["i"] in acked]
        counts = Counter(t["page"] for t in window.get())
        for page, n in sorted(counts.items()):
            self.collector.emit([window.end_timestamp, page, n, len(early)])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["end", "page", "views", "early"])


def conf(tmp_path: Path, name: str, **more: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 20,
        "alo.name": name,
        **ALO,
        **more,
    }


def run(bolt: BaseWindowedBolt, items: list[Any], fields: list[str], tmp_path: Path) -> Any:
    name = f"alo-{tmp_path.name}"
    b = TopologyBuilder("alo")
    b.set_spout("views", ListSpout(items, fields=fields, name=name))
    b.set_bolt("windows", bolt).shuffle_grouping("views")
    b.set_bolt("out", SinkBolt(name)).shuffle_grouping("windows")
    topo = b.build()
    c = conf(tmp_path, name)
    result = LocalRuntime(topo, c, clock=StepClock(0.001)).run(until_idle=True)
    assert not result.errors
    return topo, c, name


@pytest.mark.parametrize("sliding_ms", [WINDOW_MS, 5_000])
def test_event_time_windows_in_memory_ack_their_tuples_once_no_window_holds_them(
    tmp_path: Path, sliding_ms: int
) -> None:
    events = views(400)
    items = [(page, ts, i) for i, (page, ts) in enumerate(events)]
    bolt = (
        ChecksAcks()
        .with_window(Duration.milliseconds(WINDOW_MS), Duration.milliseconds(sliding_ms))
        .with_timestamp_field("ts")
        .with_lag(Duration.milliseconds(LAG_MS))
        .with_watermark_interval(Duration.milliseconds(50))
    )
    topo, c, name = run(bolt, items, ["page", "ts", "i"], tmp_path)
    got: Counter[str] = Counter()
    for end, page, n, early in sink(name):
        assert early == 0, "a tuple was acked before a window that holds it fired"
        got[f"{end}:{page}"] += n
    assert got == expected(events, WINDOW_MS, sliding_ms)
    record = spout_record(name)
    assert sorted(record.acked) == list(range(400)) and not record.failed
    # Nothing of the windows went into the checkpoint.
    assert not any(str(k).startswith("$window") for k in committed_state(topo, c, "windows"))


def test_count_windows_in_memory_fire_and_ack_every_tuple(tmp_path: Path) -> None:
    class Sizes(BaseWindowedBolt):
        def execute(self, window: TupleWindow) -> None:
            self.collector.emit([[t["n"] for t in window.get()]])

        def declare_output_fields(self, declarer: Any) -> None:
            declarer.declare(["ns"])

    _, _, name = run(Sizes().with_window(Count(4), Count(2)), list(range(11)), ["n"], tmp_path)
    assert [ns for (ns,) in sink(name)][:3] == [[0, 1], [0, 1, 2, 3], [2, 3, 4, 5]]
    assert sorted(spout_record(name).acked) == list(range(11))


def test_in_memory_windows_longer_than_the_message_timeout_are_refused_naming_the_fix(
    tmp_path: Path,
) -> None:
    b = TopologyBuilder("alo")
    b.set_spout("views", ListSpout([(1,)], fields=["n"]))
    bolt = BaseWindowedBolt().with_tumbling_window(Duration.seconds(40))
    b.set_bolt("windows", bolt).shuffle_grouping("views")
    with pytest.raises(ConfigError, match=r"topology\.message\.timeout\.secs"):
        LocalRuntime(b.build(), conf(tmp_path, "x")).run(until_idle=True)
    b = TopologyBuilder("alo")
    b.set_spout("views", ListSpout([(1,)], fields=["n"]))
    b.set_bolt("windows", BaseWindowedBolt().with_tumbling_window(Count(50))).shuffle_grouping(
        "views"
    )
    c = conf(tmp_path, "x", **{"topology.max.spout.pending": 10})
    with pytest.raises(ConfigError, match=r"raise topology\.max\.spout\.pending"):
        LocalRuntime(b.build(), c).run(until_idle=True)


def test_in_memory_windows_on_worker_processes_end_with_every_window_once(tmp_path: Path) -> None:
    from test_windows import PageCounts, Totals, on_event_time

    from statestream import run

    events = views(300)
    b = TopologyBuilder("alow")
    b.set_spout("views", RewindableListSpout(events, fields=["page", "ts"]))
    b.set_bolt("windows", on_event_time(PageCounts()), 2).fields_grouping("views", ["page"])
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    topo = b.build()
    c = {**conf(tmp_path, "w"), "topology.workers": 2}
    del c["alo.name"]
    result = run(topo, c, until_idle=True)
    assert result.errors == [] and result.reason == "idle"
    got = Counter(committed_state(topo, c, "totals"))
    assert got == expected(events, WINDOW_MS, WINDOW_MS)
