"""examples/pageviews.py: views per page per minute by event time, into PostgreSQL.

Clicks out of order within the 5 s lag; each minute's row must hold its exact
count, through a crash in the middle of a window (the windows and the watermark
come back from the checkpoint, the file rewinds, the sink's guard keeps a
re-sent commit from writing twice), and from the command line as the example's
docstring runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from statestream._clock import StepClock
from statestream.connectors import PostgresSink
from statestream.testing import crash_and_recover, crash_at_tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import pageviews  # noqa: E402

DSN = "postgresql://postgres@127.0.0.1:5432/test"


def write_clicks(path: Path, n: int, seed: int) -> Counter[tuple[int, str]]:
    counts: Counter[tuple[int, str]] = Counter()
    with path.open("w") as f:
        for click in pageviews.sample_clicks(n, seed=seed):
            f.write(json.dumps(click) + "\n")
            counts[(click["ts"] - click["ts"] % 60_000, click["page"])] += 1
    return counts


def rows(table: str) -> Counter[tuple[int, str]]:
    with psycopg.connect(DSN, autocommit=True) as db:
        return Counter(
            {(m, p): v for m, p, v in db.execute(f"SELECT minute, page, views FROM {table}")}
        )


@pytest.fixture
def table() -> Iterator[str]:
    name = f"page_views_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(DSN, autocommit=True) as db:
        db.execute(
            f"CREATE TABLE {name} (minute bigint, page text, views bigint, "
            "PRIMARY KEY (minute, page))"
        )
    yield name
    with psycopg.connect(DSN, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {name}")


def test_a_crash_mid_minute_leaves_every_minutes_exact_count(
    tmp_path: Path, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clicks = tmp_path / "clicks.jsonl"
    expected = write_clicks(clicks, 6_000, seed=5)
    monkeypatch.setenv("CLICKS_URL", f"file://{clicks}")
    sink = PostgresSink(
        table, ["minute", "page", "views"], dsn=DSN, mode="upsert", key=["minute", "page"]
    )
    topo = pageviews.build(sink)
    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 20,
        "topology.executor.receive.buffer.size": 64,
    }
    crash_and_recover(topo, config, at=crash_at_tuple("minutes", 3_500), clock=StepClock(0.001))
    assert rows(table) == expected


def test_the_example_runs_as_its_docstring_says(tmp_path: Path) -> None:
    clicks = tmp_path / "clicks.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "pageviews.py"), str(clicks), "3000"],
        check=True,
        capture_output=True,
    )
    expected = Counter()
    for line in clicks.read_text().splitlines():
        click = json.loads(line)
        expected[(click["ts"] - click["ts"] % 60_000, click["page"])] += 1
    with psycopg.connect(DSN, autocommit=True) as db:
        db.execute((ROOT / "examples" / "pageviews.sql").read_text())
        db.execute("TRUNCATE page_views")
    env = {**os.environ, "CLICKS_URL": f"file://{clicks}", "POSTGRES_DSN": DSN}
    done = subprocess.run(
        [sys.executable, "-m", "statestream", "run", str(ROOT / "examples" / "pageviews.py"),
         "--until-idle"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert rows("page_views") == expected


@pytest.mark.slow
def test_worker_sigkills_mid_minute_leave_every_minutes_exact_count(
    tmp_path: Path, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``statestream run examples/pageviews.py`` on two worker processes, one of them
    SIGKILLed twice while the windows fill: the run restarts its workers from the last
    committed checkpoint, ends by itself, and every minute's row is exact."""
    workers_killed_twice(ROOT / "examples" / "pageviews.py", tmp_path, monkeypatch, table, 8, 180)


def workers_killed_twice(
    script: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
    seed: int,
    wait_s: float,
) -> None:
    """``statestream run <script>`` (pageviews' topology) over 60,000 clicks on two
    worker processes, one SIGKILLed twice: it ends by itself, every minute's row exact."""
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from kill_loop import seeded_rng
    from test_workers_kill import RESTARTED, _kill_workers, _Run

    clicks = tmp_path / "clicks.jsonl"
    expected = write_clicks(clicks, 60_000, seed=seed)
    # The run's environment (the subprocess inherits it).
    monkeypatch.setenv("CLICKS_URL", f"file://{clicks}")
    monkeypatch.setenv("POSTGRES_DSN", DSN)
    monkeypatch.setenv("PAGEVIEWS_TABLE", table)
    run = _Run(
        [
            str(script), "--until-idle",
            "--set", "topology.state.provider=sqlite",
            "--set", f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
            "--set", "topology.workers=2",
            "--set", "topology.state.checkpoint.interval.ms=100",
        ]
    )  # fmt: skip
    try:
        _kill_workers(run, 2, seeded_rng())
        assert run.wait(wait_s) == 0, run.log()
        assert run.log().count(RESTARTED) == 2, run.log()
    finally:
        run.cleanup()
    assert rows(table) == expected
