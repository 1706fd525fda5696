"""KafkaSpout by itself beside RedisStreamSpout: CPU a record of the spout's thread;
and with ``--pipeline``, a word count's rate reading Kafka beside reading a file.

    python bench/bench_kafka.py [--lines 100000] [--rounds 3]
    python bench/bench_kafka.py --pipeline [--lines 20000] [--rounds 3]

Each round, each spout reads the same ``--lines`` lines (random_text) from its
broker (Kafka: a topic of one partition on a tansu broker started here,
tests/kafka_broker.py; Redis: a stream on 127.0.0.1:6379) as a runtime calls
it: ``next_tuple`` until exhausted, the ids acked in groups of 1,000,
exactly-once. Printed per round and spout: the CPU of the calling thread a
line (``time.thread_time``) and of the process (librdkafka's threads, or the
Redis spout's reader thread, included). The spouts alternate within a round.

``--pipeline``: tests/connectors/kafka_pipeline.py (lines -> split, 2 tasks ->
count, 2 tasks -> KafkaSink of every ``(word, count)``, 2 tasks; exactly-once,
state in a fresh SQLite file, a checkpoint a second) run to the end of its
input by ``statestream.run(..., until_idle=True)`` in this process, its
``lines`` a KafkaSpout on a topic of 3 partitions holding the ``--lines``
lines, or a FileSpout on a file of the same lines: the same topology but the
source. Each run writes to a topic of its own; the two alternate within a
round. Printed per run: wall-clock seconds from start to the end of the run
(the spout's open, the sink's producers and the last checkpoint included),
lines a second, and the CPU seconds of this process; then the ratio of the
two rates per round (Kafka over file), whose median is the figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Last:
    """A collector keeping the last message id emitted."""

    last: Any = None

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.last = msg_id


def measure(spout: Any) -> tuple[int, float, float]:
    """Drive ``spout`` to its end; (lines, thread CPU s, process CPU s)."""
    from statestream import FakeClock
    from statestream.testing import mock_context

    out = _Last()
    context = mock_context("lines", clock=FakeClock())
    context.exactly_once = True
    spout.open({}, context, out)
    spout.seek(None)
    n, pending = 0, []
    thread, process = time.thread_time(), time.process_time()
    while True:
        out.last = None
        spout.next_tuple()
        if out.last is not None:
            n += 1
            pending.append(out.last)
            if len(pending) < 1000:
                continue
        elif spout.exhausted():
            break
        for msg_id in pending:
            spout.ack(msg_id)
        pending.clear()
    thread, process = time.thread_time() - thread, time.process_time() - process
    spout.close()
    return n, thread, process


PIPELINE = ROOT / "tests" / "connectors" / "kafka_pipeline.py"


def pipeline_run(env: dict[str, str], tmp: Path, broker: Any) -> tuple[float, float]:
    """kafka_pipeline.py run to its input's end with ``env`` (its source), into a topic
    of its own; (wall-clock s, process CPU s)."""
    from statestream import load_topology, run
    from tests.kafka_broker import unique_topic

    topic = unique_topic("bench-counts")
    broker.create_topic(topic, 2)
    old = dict(os.environ)
    os.environ.update({**env, "KAFKA_BOOTSTRAP": broker.bootstrap, "KAFKA_TOPIC": topic})
    try:
        topology = load_topology(str(PIPELINE))
        conf = {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp / f"{topic}.db")},
        }
        wall, cpu = time.perf_counter(), time.process_time()
        result = run(topology, conf, until_idle=True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert not result.errors, result.errors
    return wall, cpu


def pipeline(args: argparse.Namespace) -> None:
    """The word count reading Kafka beside reading a file (module docstring)."""
    from confluent_kafka import Producer

    from statestream import _core
    from statestream.testing import random_text
    from tests.kafka_broker import started_kafka_broker, unique_topic

    tmp = Path(tempfile.mkdtemp())
    corpus = tmp / "lines.txt"
    random_text(corpus, args.lines)
    try:
        with started_kafka_broker() as broker:
            topic = unique_topic("bench-lines")
            broker.create_topic(topic, 3)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            for i, line in enumerate(corpus.read_text().splitlines()):
                producer.produce(topic, line.encode(), partition=i % 3)
                producer.poll(0)
            assert producer.flush(60) == 0
            sources = {
                "Kafka (3 partitions)": {"LINES_URL": f"kafka://{broker.bootstrap}",
                                         "LINES_STREAM": topic},
                "file": {"LINES_FILE": str(corpus)},
            }  # fmt: skip
            print(f"{args.lines:,} lines -> split -> count -> KafkaSink, exactly-once; "
                  f"{_core.describe()}\n")  # fmt: skip
            print("| round | source | seconds | lines/s | CPU s (this process) |")
            print("|---:|---|---:|---:|---:|")
            ratios = []
            for r in range(1, args.rounds + 1):
                rates = {}
                for name, env in sources.items():
                    wall, cpu = pipeline_run(env, tmp, broker)
                    rates[name] = args.lines / wall
                    print(f"| {r} | {name} | {wall:.2f} | {rates[name]:,.0f} | {cpu:.2f} |",
                          flush=True)  # fmt: skip
                kafka, file = rates.values()
                ratios.append(kafka / file)
            listed = ", ".join(f"{x:.2f}" for x in ratios)
            print(
                f"\nKafka over file, per round: {listed} (median {statistics.median(ratios):.2f})"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pipeline", action="store_true", help="the word count's rate instead")
    args = ap.parse_args()
    if args.pipeline:
        pipeline(args)
        return
    import redis
    from confluent_kafka import Producer

    from statestream.connectors import KafkaSpout, RedisStreamSpout
    from statestream.testing import random_text
    from tests.kafka_broker import started_kafka_broker

    tmp = Path(tempfile.mkdtemp())
    random_text(tmp / "lines.txt", args.lines)
    lines = (tmp / "lines.txt").read_text().splitlines()
    client = redis.Redis()
    stream = topic = f"bench-kafka-{uuid.uuid4().hex[:8]}"
    pipe = client.pipeline(transaction=False)
    for line in lines:
        pipe.xadd(stream, {"line": line})
    pipe.execute()
    try:
        with started_kafka_broker() as broker:
            broker.create_topic(topic, 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            for line in lines:
                producer.produce(topic, line.encode(), partition=0)
                producer.poll(0)
            assert producer.flush(60) == 0
            spouts: dict[str, Callable[[], Any]] = {
                "KafkaSpout": lambda: KafkaSpout(topic, broker.bootstrap),
                "RedisStreamSpout": lambda: RedisStreamSpout(stream, fields=["line"]),
            }
            print(f"{args.lines:,} lines, each spout alone (exactly-once, as in a run)\n")
            print("| round | spout | its thread, us a line | the process, us a line |")
            print("|---:|---|---:|---:|")
            for r in range(1, args.rounds + 1):
                for name, make in spouts.items():
                    n, thread, process = measure(make())
                    assert n == args.lines, f"{name} read {n} of {args.lines}"
                    print(
                        f"| {r} | {name} | {thread / n * 1e6:.2f} | {process / n * 1e6:.2f} |",
                        flush=True,
                    )
    finally:
        client.delete(stream)
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
