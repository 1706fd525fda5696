"""A word count into Kafka, SIGKILLed again and again: a read_committed consumer sees each update once.

tests/connectors/kafka_pipeline.py (lines -> split -> count -> KafkaSink of
every ``(word, count)``, keyed by word) is run by ``statestream run`` and
SIGKILLed at random moments of its work (tests/kill_loop.py: once the count
has executed a random 4-24% of the input's words), then run to the end. The
topic must then hold, for a ``read_committed`` consumer, every ``(word, k)``
for k = 1 .. the word's count exactly once (kafka_committed reads the log by
its transaction markers: tansu 0.6.0 sends no aborted-transaction list, so
librdkafka's own read_committed consumer would show aborted records). The
sources: a file, and a Redis stream fed while the runs are killed; and the
stream with ``topology.workers: 2``, single workers SIGKILLed (the supervisor
restarts them from the last checkpoint). A killed run leaves a transaction
open, aborted by the task's next producer (its fence): those records are in
the log and must not count. The kill timings' seed is printed.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import end_to_end as e2e
import orjson
import pytest
from kafka_committed import committed_records, logged_records
from kill_loop import cli, seeded_rng, sigkill_runs
from test_workers_kill import _kill_workers, _Run

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
RATE = 1_000  # lines a second into the Redis stream while the runs are killed
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

    @property
    def exact(self) -> bool:
        return not (self.duplicates or self.gaps or self.beyond)


def verdict(bootstrap: str, topic: str, truth: collections.Counter[str]) -> Verdict:
    values = [orjson.loads(r.value or b"") for r in committed_records(bootstrap, topic, 2)]
    seen: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for v in values:
        seen[v["word"]][v["count"]] += 1
    duplicates = sum(n - 1 for ks in seen.values() for n in ks.values())
    beyond = sum(1 for w, ks in seen.items() for k in ks if not 1 <= k <= truth.get(w, 0))
    gaps = sum(1 for w, n in truth.items() for k in range(1, n + 1) if k not in seen[w])
    logged = logged_records(bootstrap, topic, 2)
    return Verdict(len(values), logged, duplicates, gaps, beyond)


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


def settings(tmp_path: Path, *more: str) -> list[str]:
    return [
        "--set", "topology.state.provider=sqlite",
        "--set", f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
        "--set", "topology.state.checkpoint.interval.ms=50",
        *more,
    ]  # fmt: skip


def test_a_file_counted_into_kafka_through_sigkills_is_exact(
    env: dict[str, str], tmp_path: Path
) -> None:
    corpus = tmp_path / "lines.txt"
    truth = random_text(corpus, LINES)
    os.environ["LINES_FILE"] = str(corpus)
    args = [PIPELINE, *settings(tmp_path)]
    killed = sigkill_runs(
        args, kills=KILLS, component="count", rng=seeded_rng(), work=SCALE * sum(truth.values())
    )
    finish(args)
    found = verdict(env["KAFKA_BOOTSTRAP"], env["KAFKA_TOPIC"], truth)
    print(f"{killed} kills: {found}")
    assert killed == KILLS, "every run must die mid-way, or the test proves less"
    assert found.exact, found


def test_a_redis_stream_counted_into_kafka_through_sigkills_is_exact(
    env: dict[str, str], tmp_path: Path
) -> None:
    corpus = tmp_path / "lines.txt"
    truth = random_text(corpus, LINES)
    with e2e.source("redis") as src:
        os.environ.update({"LINES_URL": src.url, "LINES_STREAM": src.stream})
        producer = e2e.start_feeding(src, corpus, RATE)
        try:
            args = [PIPELINE, *settings(tmp_path)]
            killed = sigkill_runs(
                args, kills=KILLS, component="count", rng=seeded_rng(),
                work=SCALE * sum(truth.values()),
            )  # fmt: skip
            e2e.wait_producer(producer)
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
        finish(args)
    found = verdict(env["KAFKA_BOOTSTRAP"], env["KAFKA_TOPIC"], truth)
    print(f"{killed} kills: {found}")
    assert killed == KILLS, "every run must die mid-way, or the test proves less"
    assert found.exact, found


def test_two_workers_counting_into_kafka_through_worker_sigkills_are_exact(
    env: dict[str, str], tmp_path: Path
) -> None:
    corpus = tmp_path / "lines.txt"
    truth = random_text(corpus, LINES)
    with e2e.source("redis") as src:
        os.environ.update({"LINES_URL": src.url, "LINES_STREAM": src.stream})
        producer = e2e.start_feeding(src, corpus, RATE)
        run = _Run([PIPELINE, *settings(tmp_path, "--set", "topology.workers=2")])
        try:
            _kill_workers(run, KILLS, seeded_rng())
            e2e.wait_producer(producer)
            run.proc.send_signal(signal.SIGTERM)  # a stream has no end: stopped cleanly
            assert run.wait(120) in (0, 128 + signal.SIGTERM), run.log()
        finally:
            run.cleanup()
            if producer.poll() is None:
                producer.kill()
                producer.wait()
        finish([PIPELINE, *settings(tmp_path)])  # what the stopped run had not counted
    assert len(run.kills) == KILLS
    found = verdict(env["KAFKA_BOOTSTRAP"], env["KAFKA_TOPIC"], truth)
    print(f"{KILLS} worker kills: {found}")
    assert found.exact, found


def finish(args: list[str]) -> None:
    """The pipeline run to the end of its input (``--until-idle``), exit 0."""
    final = subprocess.run(
        cli("run", *args, "--until-idle", "--no-progress"),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert final.returncode == 0, final.stderr
