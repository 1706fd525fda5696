"""examples/stream_to_postgres.py while its broker is restarted under it: exact.

Each test starts a broker of its own on spare ports (tests/connectors/
end_to_end.py ``Server``; the shared servers are never restarted): Redis with
the append-only file on, NATS with JetStream's file store. Half the lines are
produced, the pipeline runs, the broker is stopped and started again once the
sinks have committed something, the other half is produced, and the same run
(never restarted) must reconnect, without reporting an error, and commit
every word; then the tables must be exact. The RabbitMQ restart (a second node takes ~15 s a start) is in
bench/bench_connectors_kill.py --restart, results in bench/RESULTS-connectors.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import end_to_end as e2e
import pytest

pytestmark = [pytest.mark.slow]

LINES = 10_000


@pytest.mark.parametrize(
    ("kind", "binary"), [("redis", "redis-server"), ("jetstream", "nats-server")]
)
def test_a_run_rides_out_a_broker_restart_exactly(kind: str, binary: str, tmp_path: Path) -> None:
    if shutil.which(binary) is None:
        pytest.fail(f"{binary} is not installed")
    server = e2e.Server(kind, tmp_path / kind)
    server.start()
    try:
        with e2e.database() as dsn:
            result = e2e.broker_restart_run(server, dsn, tmp_path, lines=LINES)
    finally:
        server.stop()
    print(e2e.describe(result))
    assert result.verdict.exact, e2e.describe(result)
    assert result.errors == 0, f"the run reported errors riding the restart out: {result}"
