"""A word count into Kafka, SIGKILLed again and again: a read_committed consumer sees each update once.

tests/connectors/kafka_pipeline.py (lines -> split -> count -> KafkaSink of
every ``(word, count)``, keyed by word) is run by ``statestream run`` and
SIGKILLed at random moments of its work (tests/kill_loop.py: once the count
has executed a random 4-24% of the input's words), then run to the end. The
topic must then hold, for a ``read_committed`` consumer, every ``(word, k)``
for k = 1 .. the word's count exactly once, and each word's last record the
word's true count (kafka_committed reads the log by its transaction markers:
tansu 0.6.0 sends no aborted-transaction list, so librdkafka's own
read_committed consumer would show aborted records). The sources: a file;
a Redis stream fed while the runs are killed; and a Kafka topic fed so
(Kafka -> count -> Kafka) on the local runtime, with ``topology.workers: 2``
(single workers SIGKILLed; the supervisor restarts them from the last
checkpoint) and on Spark (the driver SIGKILLed, its KafkaSink writes being
the driver's). The streams go through tests/connectors/end_to_end.py's kill
loops. A killed run leaves a transaction open, aborted by the task's next
producer (its fence): those records are in the log and must not count. The
kill timings' seed is printed.
"""

from __future__ import annotations

import collections
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import end_to_end as e2e
import orjson
import pytest
from kafka_committed import committed_records, logged_records
from kill_loop import seeded_rng, sigkill_runs

from statestream.testing import random_text
from tests.kafka_broker import unique_topic

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
# The sink runs as one task here: tansu 0.6.0 keeps a committed transaction's group
# offsets (the sink's guard) back while another producer's transaction on the same
# partitions is open, which Kafka does not (test_kafka_broker.py shows it). With two sink
# tasks killed while one had a transaction open, the other read a guard one checkpoint
# old and wrote that checkpoint again (CI at c5e04cd: 8,027 duplicate updates).

PIPELINE = str(Path(__file__).resolve().parent / "kafka_pipeline.py")
LINES = 3_000
KILLS = 2
RATE = 1_000  # lines a second into the stream while the runs are killed
INTERVAL_MS = 50  # a checkpoint every 50 ms: kills land mid-transaction often
# Each run is killed once its count has executed a random 1-6% of SCALE times the input's
# words (4-24% of them): after several checkpoints, so that a recovery has a committed
# stage whose records may or may not be in the topic yet.
SCALE = 4


@dataclass
class Verdict:
    records: int
    logged: int  # records in the log, aborted ones included
    duplicates: int
    gaps: int
    beyond: int
    totals_exact: bool  # each word's last committed record holds its true count

    @property
    def exact(self) -> bool:
        return not (self.duplicates or self.gaps or self.beyond) and self.totals_exact


def verdict(bootstrap: str, topic: str, truth: collections.Counter[str]) -> Verdict:
    values = [orjson.loads(r.value or b"") for r in committed_records(bootstrap, topic, 2)]
    seen: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    last: dict[str, int] = {}  # a word's records are on one partition, in commit order
    for v in values:
        seen[v["word"]][v["count"]] += 1
        last[v["word"]] = v["count"]
    duplicates = sum(n - 1 for ks in seen.values() for n in ks.values())
    beyond = sum(1 for w, ks in seen.items() for k in ks if not 1 <= k <= truth.get(w, 0))
    gaps = sum(1 for w, n in truth.items() for k in range(1, n + 1) if k not in seen[w])
    logged = logged_records(bootstrap, topic, 2)
    return Verdict(len(values), logged, duplicates, gaps, beyond, last == dict(truth))


@pytest.fixture
def env(kafka_broker: Any) -> Iterator[dict[str, str]]:
    """The pipeline's environment (its topic, of two partitions), set for the runs."""
    topic = unique_topic("kill")
    kafka_broker.create_topic(topic, 2)
    values = {"KAFKA_BOOTSTRAP": kafka_broker.bootstrap, "KAFKA_TOPIC": topic}
    old = dict(os.environ)
    os.environ.update(values)
    try:
        yield values
    finally:
        os.environ.clear()
        os.environ.update(old)


def settings(tmp_path: Path) -> list[str]:
    return [
        "--set", "topology.state.provider=sqlite",
        "--set", f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
        "--set", f"topology.state.checkpoint.interval.ms={INTERVAL_MS}",
    ]  # fmt: skip


def test_a_file_counted_into_kafka_through_sigkills_is_exact(
    env: dict[str, str], tmp_path: Path
) -> None:
    corpus = tmp_path / "lines.txt"
    truth = random_text(corpus, LINES)
    os.environ["LINES_FILE"] = str(corpus)
    killed = sigkill_runs(
        [PIPELINE, *settings(tmp_path)], kills=KILLS, component="count", rng=seeded_rng(),
        work=SCALE * sum(truth.values()),
    )  # fmt: skip
    e2e.finish(settings(tmp_path), pipeline=PIPELINE)
    found = verdict(env["KAFKA_BOOTSTRAP"], env["KAFKA_TOPIC"], truth)
    print(f"{killed} kills: {found}")
    assert killed == KILLS, "every run must die mid-way, or the test proves less"
    assert found.exact, found


# A stream fed while the runs are killed, into the pipeline on each runtime, through
# tests/connectors/end_to_end.py's kill loops (the PostgreSQL pipeline's). The Kafka
# source makes it Kafka -> count -> Kafka: KafkaSpout's positions restored and
# KafkaSink's guard read at every restart. One Spark driver kill: each driver is a
# JVM start of its own (and the finish runs on the tests' SparkSession).
STREAMS = [
    pytest.param("redis", "local", id="redis-local"),
    pytest.param("kafka", "local", id="kafka-local"),
    pytest.param("kafka", "workers", id="kafka-workers2"),
    pytest.param("kafka", "spark", id="kafka-spark", marks=pytest.mark.spark),
]


@pytest.mark.parametrize(("kind", "runtime"), STREAMS)
def test_a_stream_counted_into_kafka_through_sigkills_is_exact(
    env: dict[str, str], kind: str, runtime: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    spark = request.getfixturevalue("spark_session") if runtime == "spark" else None
    kills = 1 if runtime == "spark" else KILLS
    url = f"kafka://{env['KAFKA_BOOTSTRAP']}" if kind == "kafka" else None
    with e2e.source(kind, url) as src:
        truth, killed = e2e.killed_runs(
            runtime, src, tmp_path, lines=LINES, kills=kills, rate=RATE, rng=seeded_rng(),
            spark=spark, state_prefix=f"kafka-sink-{uuid.uuid4().hex[:8]}:",
            pipeline=PIPELINE, interval_ms=INTERVAL_MS, work_scale=SCALE,
        )  # fmt: skip
    found = verdict(env["KAFKA_BOOTSTRAP"], env["KAFKA_TOPIC"], truth)
    print(f"{kind} -> {runtime}, {killed} kills: {found}")
    assert killed == kills, "every kill must land mid-run, or the test proves less"
    assert found.exact, found
