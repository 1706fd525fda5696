"""examples/stream_to_postgres.py killed with SIGKILL while a producer feeds its source: exact.

For each source (Redis stream, JetStream, RabbitMQ stream queue), lines are
produced while ``statestream run`` is SIGKILLed at random moments and
restarted; a last run finishes the stream; then ``word_updates`` must hold
every ``(word, k)`` for k = 1 .. the word's count exactly once and
``word_totals`` must equal ``collections.Counter`` of the input
(tests/connectors/end_to_end.py). The same with ``topology.workers: 2`` and
single workers killed. Small sizes (5,000 lines, 3 kills): the issue's
200,000 lines and 20 kills per source are bench/bench_connectors_kill.py's
(results in bench/RESULTS-connectors.md). The kill timings' seed is printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import end_to_end as e2e
import pytest
from kill_loop import seeded_rng
from redis_server import delete_prefix, unique_prefix

pytestmark = [pytest.mark.slow]

LINES = 5_000
# Lines a second from the producer: the 5,000 lines take 2.5 s to arrive, so that
# the runs killed (each about 1 s, start-up included) read a stream still growing.
RATE = 2_000


@pytest.mark.parametrize("kind", e2e.SOURCES)
def test_every_update_is_written_once_through_sigkills(kind: str, tmp_path: Path) -> None:
    with e2e.source(kind) as src, e2e.database() as dsn:
        result = e2e.killed_run(
            "local", src, dsn, tmp_path, lines=LINES, kills=3, rate=RATE, rng=seeded_rng()
        )
    print(e2e.describe(result))
    assert result.kills >= 2, "most runs must die mid-way, or the test proves nothing"
    assert result.verdict.exact, e2e.describe(result)


def test_two_workers_write_every_update_once_through_worker_sigkills(tmp_path: Path) -> None:
    with e2e.source("redis") as src, e2e.database() as dsn:
        result = e2e.killed_run(
            "workers", src, dsn, tmp_path, lines=LINES, kills=2, rate=RATE, rng=seeded_rng()
        )
    print(e2e.describe(result))
    assert result.verdict.exact, e2e.describe(result)


@pytest.mark.spark
@pytest.mark.redis
def test_spark_writes_every_update_once_through_a_driver_sigkill(
    spark_session: Any, tmp_path: Path
) -> None:
    """One ``--runner spark`` driver SIGKILLed mid-way (each costs a JVM start, ~15 s), the
    stream finished on the test session's SparkSession; the state on Redis."""
    prefix = unique_prefix("e2e-spark")
    try:
        with e2e.source("redis") as src, e2e.database() as dsn:
            result = e2e.killed_run(
                "spark", src, dsn, tmp_path, lines=2_000, kills=1, rate=500,
                rng=seeded_rng(), spark=spark_session, state_prefix=prefix,
            )  # fmt: skip
    finally:
        delete_prefix(prefix)
    print(e2e.describe(result))
    assert result.kills == 1, "the driver ended before it could be killed"
    assert result.verdict.exact, e2e.describe(result)
