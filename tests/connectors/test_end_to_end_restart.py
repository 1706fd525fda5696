"""examples/stream_to_postgres.py while its broker is restarted under it: exact.

The test starts a broker of its own on spare ports (tests/connectors/
end_to_end.py ``Server``; the shared servers are never restarted): Redis with
the append-only file on. Half the lines are produced, the pipeline runs, the
broker is stopped and started again once the sinks have committed something,
the other half is produced, and the same run (never restarted) must
reconnect, without reporting an error, and commit every word; then the
tables must be exact.

Sized for CI's time: 2,000 lines (was 10,000: the restart is what is tested,
not the volume). The JetStream restart of the whole pipeline (9 s at 2,000
lines in the bench; the JetStream spout riding out a nats-server restart
stays in CI, in test_source_outage.py) and the RabbitMQ one (a second node
takes ~15 s a start) are in bench/bench_connectors_kill.py --restart-lines,
results in bench/RESULTS-connectors.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import end_to_end as e2e
import pytest

pytestmark = [pytest.mark.slow]

LINES = 2_000


def test_a_run_rides_out_a_redis_restart_exactly(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed")
    server = e2e.Server("redis", tmp_path / "redis")
    server.start()
    try:
        with e2e.database() as dsn:
            result = e2e.broker_restart_run(server, dsn, tmp_path, lines=LINES)
    finally:
        server.stop()
    print(e2e.describe(result))
    assert result.verdict.exact, e2e.describe(result)
    assert result.errors == 0, f"the run reported errors riding the restart out: {result}"
