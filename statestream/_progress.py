"""What `statestream run` shows of a run: the live table or status lines, and the summary.

On a terminal a live table (rich), redrawn in place under the log
(:class:`~statestream._screen.Screen` prints every line written meanwhile
above it); otherwise one plain status line every
``statestream.progress.interval.secs`` on stderr. The summary is printed
once, when the run is over.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import click

from ._config import Config, settings_of
from ._results import RunResult, TaskMetrics
from ._text import count, cut_message, cut_value

if TYPE_CHECKING:
    from .runtime.contract import Runtime
    from .runtime.metrics import MetricsSnapshot, TaskStats

__all__ = ["Progress", "print_summary", "status_line"]

# retrying: a spout's tuples waiting for their retry; dead: those it gave up
# on (in the dead-letter file); last error: a component's, on one line.
_HEADERS = (
    "component",
    "emitted",
    "executed",
    "acked",
    "failed",
    "errors",
    "queued",
    "retrying",
    "dead",
    "last error",
)

# After the rate: the sampled latency (a bolt's execute latency, a spout's
# complete latency) and a bolt's capacity (busy share of the last window).
_LIVE_HEADERS = (*_HEADERS, "rate", "latency", "capacity")

# Each worker process of a run with topology.workers > 1: its index, pid, the
# tasks it runs, the tuples its tasks executed per second, and restarts so far.
_WORKER_HEADERS = ("worker", "pid", "tasks", "rate", "restarts")

# Spark: each of the last batches' jobs, from Spark's status tracker: the batch's
# txid, its jobs and stages, the stages' tasks done of all and failed, the
# status of its worst job, and the seconds the driver waited on it.
_SPARK_HEADERS = ("batch", "jobs", "stages", "tasks", "failed", "status", "seconds")
_SPARK_ROWS = 5

# The last error in a table is a cell: its start says which error it is, and
# the whole message is in the log above the table and in the summary.
_ERROR_CELL = 60


def _rows(
    metrics: Mapping[str, TaskMetrics], error_cell: int | None = _ERROR_CELL
) -> list[tuple[str, ...]]:
    """One row of cells per component; the last error whole when ``error_cell`` is None."""
    rows: list[tuple[str, ...]] = []
    for cid, m in metrics.items():
        error = m.last_error
        rows.append(
            (
                cid,
                f"{m.emitted:,}",
                f"{m.executed:,}",
                f"{m.acked:,}",
                f"{m.failed:,}",
                f"{m.errors:,}",
                f"{m.queued:,}",
                f"{m.retrying:,}",
                f"{m.dead_lettered:,}",
                cut_message(error) if error_cell is None else cut_value(error, error_cell),
            )
        )
    return rows


def _duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h01m``: a duration to read at a glance."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _latency(stats: TaskStats) -> str:
    value = stats.complete_latency if stats.kind == "spout" else stats.execute_latency
    if value is None:
        return "-"
    return f"{value * 1000:.3f} ms" if value < 0.1 else f"{value:.2f} s"


def status_line(snap: MetricsSnapshot) -> str:
    """The run at a glance: elapsed, how much of the input is read with the time
    left at the rate so far (files) or the lag (a broker), the last checkpoint and
    how long ago it committed."""
    parts = [f"elapsed {_duration(snap.elapsed)}"]
    done = sum(p.done for p in snap.sources)
    totals = [p.total for p in snap.sources]
    if snap.sources and all(t is not None for t in totals):
        total = sum(t for t in totals if t is not None)
        unit = snap.sources[0].unit
        if unit == "bytes" and total > 0:
            share = min(1.0, done / total)
            eta = "-"
            if share >= 1.0:
                eta = "0s"
            elif done > 0 and snap.elapsed > 0:
                eta = _duration((total - done) * snap.elapsed / done)
            parts.append(f"input {share:.0%} ETA {eta}")
        else:
            parts.append(f"lag {max(0, total - done):,} {unit}")
    last = snap.last_checkpoint
    if last is not None:
        age = max(0.0, snap.at - (last.ended_at or snap.at))
        parts.append(f"checkpoint {last.txid} ({_duration(age)} ago)")
    return " | ".join(parts)


def _spark_rows(snap: MetricsSnapshot) -> list[tuple[str, ...]]:
    """Spark: one row per recent batch, the newest first (none on other runtimes)."""
    rows: list[tuple[str, ...]] = []
    for b in reversed(snap.spark[-_SPARK_ROWS:]):
        tasks = sum(s.tasks for s in b.stages)
        done = sum(s.completed for s in b.stages)
        rows.append(
            (
                str(b.txid),
                str(len(b.jobs)),
                str(len(b.stages)),
                f"{done:,}/{tasks:,}",
                f"{sum(s.failed for s in b.stages):,}",
                b.status,
                "-" if b.duration is None else f"{b.duration:.2f}",
            )
        )
    return rows


def print_summary(result: RunResult, deadletters: object = None) -> None:
    """The run's counts as a plain table, and one line: why it ended, the errors, the
    dead letters (and where they went: ``deadletters``, the file)."""
    rows = _rows(result.components)
    # A run stopped before any task reported has no rows: the headers alone.
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(_HEADERS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(_HEADERS, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    click.echo("\n".join(lines), err=True)
    errors = sum(m.errors for m in result.components.values())
    first = ""
    if result.errors:
        e = result.errors[0]
        first = f" (the first: {e.component}[{e.task_index}] {cut_message(e.error)})"
    dead = result.dead_lettered
    if dead:
        where = f" in {deadletters}" if deadletters is not None else ""
        first += f"; {count(dead, 'dead letter')}{where} (statestream deadletter show)"
    late = result.counters.get("late_tuples", 0)
    if late:
        first += f"; {count(late, 'late tuple')} (older than the watermark: the late stream)"
    click.echo(
        f"statestream: {result.reason} after {result.elapsed:.2f} s, {count(errors, 'error')}{first}",
        err=True,
    )


class Progress:
    """Shows the run's counters while it runs, from a background thread.

    ``live``: the table on the terminal (stderr), with the log above it;
    otherwise status lines. Reading the counters from another thread is safe:
    they are ints the run loop only increments. ``task_names`` names the tasks
    of the worker rows (``RuntimePlan.task_names``).
    """

    def __init__(
        self, rt: Runtime, conf: Config, task_names: Mapping[int, str], live: bool
    ) -> None:
        self.rt = rt
        self.task_names = task_names
        self.live = live
        self.interval = settings_of(conf).statestream_progress_interval_secs
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._screen: Any = None
        self._last: dict[str, tuple[float, int]] = {}
        # The first rate of a component counts from here (the run starts with the
        # progress), not 0/s until a second reading.
        self._began = time.monotonic()

    def _rates(
        self, snap: MetricsSnapshot, error_cell: int | None = _ERROR_CELL
    ) -> list[tuple[str, ...]]:
        """One row per component of ``snap``: counts, rate, latency, capacity."""
        now = time.monotonic()
        rows = []
        for cid, m in snap.components.items():
            done = m.executed if m.executed else m.emitted
            t0, n0 = self._last.get(cid, (self._began, 0))
            rate = (done - n0) / (now - t0) if now > t0 else 0.0
            self._last[cid] = (now, done)
            capacity = f"{m.capacity:.0%}" if m.kind == "bolt" else "-"
            rows.append((*_rows({cid: m}, error_cell)[0], f"{rate:,.0f}/s", _latency(m), capacity))
        return rows

    def _worker_rows(self) -> list[tuple[str, ...]]:
        """One row per worker process (``topology.workers`` > 1): pid, tasks, rate, restarts."""
        names = self.task_names
        return [
            (
                str(w.index),
                str(w.pid or "-"),
                ", ".join(names.get(t, str(t)) for t in w.tasks) or "-",
                f"{w.rate:,.0f}/s",
                str(w.restarts),
            )
            for w in self.rt.worker_rows()
        ]

    def _table(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        snap = self.rt.metrics_snapshot()
        table = Table(title=f"statestream: {status_line(snap)}", expand=False)
        for h in _LIVE_HEADERS:
            table.add_column(h, justify="left" if h in ("component", "last error") else "right")
        for row in self._rates(snap):
            table.add_row(*row)
        tables = [table]
        for title, headers, rows in (
            ("workers", _WORKER_HEADERS, self._worker_rows()),
            ("spark", _SPARK_HEADERS, _spark_rows(snap)),
        ):
            if rows:
                sub = Table(title=title, expand=False)
                for h in headers:
                    sub.add_column(h, justify="left" if h in ("tasks", "status") else "right")
                for row in rows:
                    sub.add_row(*row)
                tables.append(sub)
        return tables[0] if len(tables) == 1 else Group(*tables)

    def _run_live(self) -> None:
        while not self._done.wait(0.5):
            self._screen.update()

    def _run_plain(self) -> None:
        while not self._done.wait(self.interval):
            snap = self.rt.metrics_snapshot()
            parts = [
                f"{r[0]} emitted={r[1]} executed={r[2]} failed={r[4]} errors={r[5]} "
                f"retrying={r[7]} dead={r[8]} rate={r[10]} latency={r[11].replace(' ', '')}"
                + (f" last_error={r[9]!r}" if r[9] else "")
                for r in self._rates(snap, error_cell=None)
            ]
            click.echo(f"statestream: {status_line(snap)}", err=True)
            click.echo("statestream: " + "; ".join(parts), err=True)
            workers = [
                f"worker {r[0]} pid={r[1]} rate={r[3]} restarts={r[4]} tasks=[{r[2]}]"
                for r in self._worker_rows()
            ]
            if workers:
                click.echo("statestream: " + "; ".join(workers), err=True)
            spark = [
                f"batch {r[0]} jobs={r[1]} stages={r[2]} tasks={r[3]} failed={r[4]} "
                f"{r[5].lower()} {r[6]}s"
                for r in _spark_rows(snap)[:1]
            ]
            if spark:
                click.echo("statestream: spark " + "; ".join(spark), err=True)

    def __enter__(self) -> Progress:
        target: Callable[[], None] = self._run_plain
        if self.live:
            from ._screen import Screen

            # Only a terminal can take a redrawn table; a forced --progress
            # elsewhere (a pipe) gets the status lines.
            if not os.isatty(2):
                self.live = False
            else:
                self._screen = Screen(self._table).__enter__()
                target = self._run_live
        self._thread = threading.Thread(target=target, name="statestream-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._screen is not None:
            self._screen.__exit__(None, None, None)
            self._screen = None
