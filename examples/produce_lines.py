"""Produce lines of text into a Redis stream, a JetStream stream, a RabbitMQ stream queue or a Kafka topic.

    python3 examples/produce_lines.py --to redis://127.0.0.1:6379/0 --stream lines --lines 10000
    python3 examples/produce_lines.py --to nats://127.0.0.1:4222 --stream lines --lines 10000
    python3 examples/produce_lines.py --to amqp://guest:guest@127.0.0.1:5672/%2F --stream lines --lines 10000
    python3 examples/produce_lines.py --to kafka://127.0.0.1:9092/lines --lines 10000

The feeder of ``examples/stream_to_postgres.py``. Each line is one message:
a Redis stream entry with the field ``line``, a JetStream message on the
subject named like the stream (the stream is created if missing), a
message of a RabbitMQ *stream* queue (declared if missing), or a record of a
Kafka topic (the URL's path, else ``--stream``; created with one partition if
missing, ``--partitions`` more; the lines go round the partitions). The lines are
``statestream.testing.random_text``'s (``--seed``; 10 words from ``w0`` to
``w799`` each), or those of ``--from FILE``; ``--rate`` spreads them over
time (lines per second), to feed a pipeline that is already running.
``--skip N`` leaves out the first N lines, to produce a file in parts.

Every message is acknowledged by the broker before the script ends (Redis
replies, JetStream publish acks, RabbitMQ publisher confirms, Kafka's acks=all), so when it
exits 0 every line is in the source. It does not retry: a broker lost
mid-way is exit 1, naming the URL and how many lines were sent.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from statestream.testing import random_text

# Lines sent per broker round trip.
BATCH = 500


def lines_of(path: Path, skip: int, count: int | None) -> Iterator[str]:
    """The lines of ``path`` (without their newline) after the first ``skip``, at most ``count``."""
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f):
            if number < skip:
                continue
            if count is not None and number >= skip + count:
                return
            yield line.rstrip("\n")


def hide_password(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class Batches:
    """``lines`` in lists of ``BATCH``, each released no sooner than ``rate`` (lines a
    second, when > 0) allows; ``sent`` counts the lines of the batches acknowledged
    (those before the one being sent)."""

    def __init__(self, lines: Iterator[str], rate: float) -> None:
        self.lines = lines
        self.rate = rate
        self.sent = 0

    def __iter__(self) -> Iterator[list[str]]:
        start = time.monotonic()
        batch: list[str] = []
        for line in self.lines:
            batch.append(line)
            if len(batch) == BATCH:
                yield batch
                self.sent += len(batch)
                batch = []
                ahead = start + self.sent / self.rate - time.monotonic() if self.rate > 0 else 0
                if ahead > 0:
                    time.sleep(ahead)
        if batch:
            yield batch
            self.sent += len(batch)


def produce(url: str, stream: str, batches: Batches, partitions: int = 1) -> None:
    """Send ``batches`` to ``stream`` at ``url``."""
    scheme = urlsplit(url).scheme
    if scheme in ("redis", "rediss", "unix"):
        _redis(url, stream, batches)
    elif scheme in ("nats", "tls"):
        asyncio.run(_jetstream(url, stream, batches))
    elif scheme in ("amqp", "amqps"):
        _rabbitmq(url, stream, batches)
    elif scheme == "kafka":
        _kafka(url, stream, batches, partitions)
    else:
        raise SystemExit(f"produce_lines: --to {url!r}: use redis://, nats://, amqp:// or kafka://")


def _redis(url: str, stream: str, batches: Batches) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        for batch in batches:
            pipe = client.pipeline(transaction=False)
            for line in batch:
                pipe.xadd(stream, {"line": line})
            pipe.execute()
    finally:
        client.close()


async def _jetstream(url: str, stream: str, batches: Batches) -> None:
    import nats
    from nats.js.errors import NotFoundError

    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(stream)
        except NotFoundError:
            await js.add_stream(name=stream, subjects=[stream])
        for batch in batches:
            # One publish ack per message, awaited together: a batch per round trip.
            await asyncio.gather(*(js.publish(stream, line.encode()) for line in batch))
    finally:
        await nc.close()


def _rabbitmq(url: str, stream: str, batches: Batches) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_delivery()
        persistent = pika.BasicProperties(delivery_mode=2)
        for batch in batches:
            for line in batch:
                channel.basic_publish("", stream, line.encode(), persistent, mandatory=True)
    finally:
        connection.close()


def _kafka(url: str, stream: str, batches: Batches, partitions: int) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    parts = urlsplit(url)
    topic = parts.path.strip("/") or stream
    admin = AdminClient({"bootstrap.servers": parts.netloc})
    listed = admin.list_topics(topic, timeout=10).topics.get(topic)
    if listed is None or listed.error is not None:
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            try:
                future.result(timeout=30)
            except KafkaException as exc:  # made meanwhile by another producer: fine
                if "already exists" not in str(exc).lower():
                    raise
        listed = admin.list_topics(topic, timeout=10).topics[topic]
    count = len(listed.partitions)
    producer = Producer({"bootstrap.servers": parts.netloc, "acks": "all", "linger.ms": 5})
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    sent = 0
    for batch in batches:
        for line in batch:
            producer.produce(topic, line.encode(), partition=sent % count, on_delivery=delivered)
            sent += 1
            producer.poll(0)
        if producer.flush(60) or failed:
            raise KafkaException(failed[0] if failed else "the batch was not delivered in 60 s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--to", required=True, help="redis://..., nats://..., amqp://... or kafka://host:port/topic"
    )
    parser.add_argument("--stream", default="lines", help="stream (or queue) name")
    parser.add_argument("--lines", type=int, default=None, help="how many lines to send")
    parser.add_argument("--from", dest="source", type=Path, help="send this file's lines")
    parser.add_argument("--seed", type=int, default=7, help="random_text's seed")
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N lines")
    parser.add_argument(
        "--partitions", type=int, default=1, help="a Kafka topic made here: its partitions"
    )
    parser.add_argument("--rate", type=float, default=0.0, help="lines a second (0: at once)")
    args = parser.parse_args(argv)
    if args.source is None and args.lines is None:
        parser.error("give --lines N (random text) or --from FILE")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.source
        if path is None:
            path = Path(tmp) / "lines.txt"
            random_text(path, args.skip + args.lines, seed=args.seed)
        started = time.monotonic()
        batches = Batches(lines_of(path, args.skip, args.lines), args.rate)
        where = f"{args.stream!r} at {hide_password(args.to)}"
        try:
            produce(args.to, args.stream, batches, args.partitions)
        except Exception as exc:  # any client's error ends the script the same way
            print(f"produce_lines: {where}: {exc!r} after {batches.sent:,} lines", file=sys.stderr)
            return 1
    seconds = time.monotonic() - started
    print(f"sent {batches.sent:,} lines to {where} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
