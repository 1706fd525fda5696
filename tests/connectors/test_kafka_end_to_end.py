"""examples/stream_to_postgres.py reading a Kafka topic (3 partitions, on the tests'
tansu broker) while its runs are SIGKILLed: exact on the local runtime, with
``topology.workers: 2`` (single workers killed) and on Spark (the driver killed),
as tests/connectors/test_end_to_end.py proves it for the other sources
(tests/connectors/end_to_end.py: the producer, the kills, the verdict).

Sized for CI's time: 1,500 lines, 2 kills (1 Spark driver kill: each driver is a
JVM start of its own).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import end_to_end as e2e
import pytest
from kill_loop import seeded_rng

from tests.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

LINES = 1_500
KILLS = 2
RATE = 1_000  # lines a second: the killed runs read a topic still growing


@pytest.mark.parametrize("runtime", ["local", "workers"])
def test_every_update_is_written_once_through_sigkills(
    kafka_broker: KafkaBroker, runtime: str, tmp_path: Path
) -> None:
    url = f"kafka://{kafka_broker.bootstrap}"
    with e2e.source("kafka", url) as src, e2e.database() as dsn:
        result = e2e.killed_run(
            runtime, src, dsn, tmp_path, lines=LINES, kills=KILLS, rate=RATE, rng=seeded_rng()
        )
    print(e2e.describe(result))
    assert result.kills == KILLS, "every kill must land mid-run, or the test proves less"
    assert result.verdict.exact, e2e.describe(result)


@pytest.mark.spark
def test_every_update_is_written_once_through_spark_driver_sigkills(
    kafka_broker: KafkaBroker, spark_session: Any, tmp_path: Path
) -> None:
    url = f"kafka://{kafka_broker.bootstrap}"
    with e2e.source("kafka", url) as src, e2e.database() as dsn:
        result = e2e.killed_run(
            "spark", src, dsn, tmp_path, lines=LINES, kills=1, rate=RATE, rng=seeded_rng(),
            spark=spark_session, state_prefix=f"e2e-kafka-{uuid.uuid4().hex[:8]}:",
        )  # fmt: skip
    print(e2e.describe(result))
    assert result.kills == 1, "the driver kill must land mid-run"
    assert result.verdict.exact, e2e.describe(result)
