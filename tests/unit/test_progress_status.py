"""The terminal table's status line (statestream._progress.status_line): elapsed, % of
the input with its ETA (files) or the lag (a broker), the last checkpoint and its age."""

from __future__ import annotations

import pytest

from statestream._progress import print_summary, status_line
from statestream._results import RunResult
from statestream.runtime.metrics import CheckpointInfo, MetricsSnapshot, SourceProgress


def _snap(
    elapsed: float,
    sources: list[SourceProgress],
    checkpoints: list[CheckpointInfo] = (),  # type: ignore[assignment]
) -> MetricsSnapshot:
    return MetricsSnapshot("t", "local", 100.0, elapsed, {}, [], list(checkpoints), sources=sources)


@pytest.mark.parametrize(
    ("elapsed", "sources", "checkpoints", "expected"),
    [
        (0.0, [], [], "elapsed 0s"),
        # A quarter read in 30 s: 90 s to go at that rate.
        (30.0, [SourceProgress("f", 0, 250, 1000)], [], "elapsed 30s | input 25% ETA 1m30s"),
        (5.0, [SourceProgress("f", 0, 0, 1000)], [], "elapsed 5s | input 0% ETA -"),
        (75.0, [SourceProgress("f", 0, 1000, 1000)], [], "elapsed 1m15s | input 100% ETA 0s"),
        # Two tasks reading files: their bytes together.
        (
            10.0,
            [SourceProgress("f", 0, 100, 200), SourceProgress("f", 1, 100, 200)],
            [],
            "elapsed 10s | input 50% ETA 10s",
        ),
        # A broker: the lag, not a percentage.
        (
            4000.0,
            [SourceProgress("b", 0, 10, 1244, "entries")],
            [],
            "elapsed 1h06m | lag 1,234 entries",
        ),
        # A size not known: no percentage.
        (3.0, [SourceProgress("f", 0, 10, None)], [], "elapsed 3s"),
        (
            12.0,
            [],
            [
                CheckpointInfo(6, "committed", 90.0, 91.0, 1.0),
                CheckpointInfo(7, "committed", 95.0, 96.0, 1.0),
                CheckpointInfo(8, "preparing", 99.0),
            ],
            "elapsed 12s | checkpoint 7 (4s ago)",
        ),
    ],
)
def test_status_line(
    elapsed: float,
    sources: list[SourceProgress],
    checkpoints: list[CheckpointInfo],
    expected: str,
) -> None:
    assert status_line(_snap(elapsed, sources, checkpoints)) == expected


def test_the_first_status_line_gives_a_rate_not_zero() -> None:
    """A component's first rate counts from the progress's start, not 0/s until a
    second reading (issue 48 item 6)."""
    from statestream import Config, TopologyBuilder
    from statestream._progress import Progress
    from statestream.runtime.local import LocalRuntime
    from statestream.testing import ListSpout, SinkBolt

    b = TopologyBuilder("rates")
    b.set_spout("src", ListSpout(list(range(500))))
    b.set_bolt("out", SinkBolt("rates")).shuffle_grouping("src")
    rt = LocalRuntime(b.build(), Config({}))
    progress = Progress(rt, Config({}), {}, live=False)
    rt.run(until_idle=True)
    rows = {r[0]: r[10] for r in progress._rates(rt.metrics_snapshot(), error_cell=None)}
    assert rows["out"] != "0/s" and rows["src"] != "0/s"


def test_the_summary_of_a_run_stopped_before_any_task_reported_is_the_headers_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A stop (or a worker's SIGKILL) before the first report leaves no component rows;
    # the summary must still print, not raise.
    print_summary(RunResult(components={}, errors=[], elapsed=0.5, reason="stopped"))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].split()[0] == "component"
    assert lines[1] == "statestream: stopped after 0.50 s, 0 errors"
