"""KafkaSpout by itself beside RedisStreamSpout: CPU a record of the spout's thread.

    python bench/bench_kafka.py [--lines 100000] [--rounds 3]

Each round, each spout reads the same ``--lines`` lines (random_text) from its
broker (Kafka: a topic of one partition on a tansu broker started here,
tests/kafka_broker.py; Redis: a stream on 127.0.0.1:6379) as a runtime calls
it: ``next_tuple`` until exhausted, the ids acked in groups of 1,000,
exactly-once. Printed per round and spout: the CPU of the calling thread a
line (``time.thread_time``) and of the process (librdkafka's threads, or the
Redis spout's reader thread, included). The spouts alternate within a round.
"""

from __future__ import annotations

import argparse
import shutil
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
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
