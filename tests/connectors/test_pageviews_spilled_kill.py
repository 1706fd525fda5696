"""Windows larger than memory through real SIGKILLs: examples/pageviews.py with 50
tuples in memory per window task (pageviews_spilled.py), on two worker processes,
one of them SIGKILLed twice while the windows fill and spill; every minute's row
in PostgreSQL is exact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_pageviews_example import DSN, ROOT, rows, table, write_clicks

__all__ = ["table"]  # the fixture, used by name


@pytest.mark.slow
def test_worker_sigkills_with_spilled_windows_leave_every_minutes_exact_count(
    tmp_path: Path, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from kill_loop import seeded_rng
    from test_workers_kill import RESTARTED, _kill_workers, _Run

    clicks = tmp_path / "clicks.jsonl"
    expected = write_clicks(clicks, 60_000, seed=9)
    monkeypatch.setenv("CLICKS_URL", f"file://{clicks}")
    monkeypatch.setenv("POSTGRES_DSN", DSN)
    monkeypatch.setenv("PAGEVIEWS_TABLE", table)
    run = _Run(
        [
            str(Path(__file__).with_name("pageviews_spilled.py")), "--until-idle",
            "--set", "topology.state.provider=sqlite",
            "--set", f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
            "--set", "topology.workers=2",
            "--set", "topology.state.checkpoint.interval.ms=100",
        ]
    )  # fmt: skip
    try:
        _kill_workers(run, 2, seeded_rng())
        assert run.wait(240) == 0, run.log()
        assert run.log().count(RESTARTED) == 2, run.log()
    finally:
        run.cleanup()
    assert rows(table) == expected
