"""Windows larger than memory through real SIGKILLs: examples/pageviews.py with 50
tuples in memory per window task (pageviews_spilled.py), on two worker processes,
one of them SIGKILLed twice while the windows fill and spill; every minute's row
in PostgreSQL is exact."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pageviews_example import table, workers_killed_twice

__all__ = ["table"]  # the fixture, used by name


@pytest.mark.slow
def test_worker_sigkills_with_spilled_windows_leave_every_minutes_exact_count(
    tmp_path: Path, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers_killed_twice(
        Path(__file__).with_name("pageviews_spilled.py"), tmp_path, monkeypatch, table, 9, 240
    )
