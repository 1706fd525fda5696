"""The terminal table's Spark rows (statestream._progress): each of the last batches'
jobs, newest first, in the live table and in the plain status lines."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from statestream._config import Config
from statestream._progress import Progress, _spark_rows
from statestream.runtime.metrics import (
    MetricsSnapshot,
    SparkBatchStats,
    SparkStageStats,
    TaskStats,
)


def _snap(batches: int) -> MetricsSnapshot:
    spark = [
        SparkBatchStats(
            txid,
            [txid],
            "SUCCEEDED" if txid else "FAILED",
            float(txid),
            0.25 * (txid + 1),
            [
                SparkStageStats(2 * txid, "read", 0, 1, 0, 1, 0),
                SparkStageStats(2 * txid + 1, "count", 0, 2, 0, 2, 1 if txid == 0 else 0),
            ],
        )
        for txid in range(batches)
    ]
    comps = {"count": TaskStats("count", -1, executed=7)}
    return MetricsSnapshot("t", "spark", 9.0, 9.0, comps, [], spark=spark)


def test_spark_rows_are_the_last_batches_newest_first() -> None:
    rows = _spark_rows(_snap(7))
    assert [r[0] for r in rows] == ["6", "5", "4", "3", "2"]  # the last five
    assert rows[0] == ("6", "1", "2", "3/3", "0", "SUCCEEDED", "1.75")
    assert _spark_rows(_snap(1)) == [("0", "1", "2", "3/3", "1", "FAILED", "0.25")]
    assert _spark_rows(_snap(0)) == []  # no Spark: no rows, no table


class _Runtime:
    def __init__(self, snap: MetricsSnapshot) -> None:
        self.snap = snap

    def metrics_snapshot(self) -> MetricsSnapshot:
        return self.snap

    def worker_rows(self) -> list[Any]:
        return []


def test_the_live_table_has_a_spark_table_and_the_status_lines_a_spark_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = Progress(_Runtime(_snap(3)), Config({}), {}, live=True)  # type: ignore[arg-type]
    out = io.StringIO()
    Console(file=out, width=200).print(progress._table())
    text = out.getvalue()
    assert "spark" in text and "SUCCEEDED" in text and "3/3" in text
    answers = iter([False, True])  # one round of status lines, then the loop ends
    progress._done = SimpleNamespace(wait=lambda timeout: next(answers))  # type: ignore[assignment]
    progress._run_plain()
    err = capsys.readouterr().err
    assert "statestream: spark batch 2 jobs=1 stages=2 tasks=3/3 failed=0 succeeded 0.75s" in err
