"""A stream of lines, counted word by word, exactly once into PostgreSQL.

    psql -h 127.0.0.1 -U postgres -d test -f examples/stream_to_postgres.sql
    python3 examples/produce_lines.py --to redis://127.0.0.1:6379/0 --stream lines --lines 10000
    statestream run examples/stream_to_postgres.py --config examples/stream_to_postgres.yaml --until-idle

``lines`` reads the stream (one tuple ``(line,)`` per entry), ``split`` breaks
each line into words (shuffle grouping, 2 tasks), ``count`` counts them in a
checkpointed KeyValueState (fields grouping on ``word``, 2 tasks) and emits
``(word, count)`` at every update, and two PostgreSQL sinks (fields grouping
on ``word``, so each word's updates reach one sink task in order) write
them: ``updates`` appends every ``(word, count)`` to ``word_updates``,
``totals`` keeps the last count of each word in ``word_totals`` (an upsert
on ``word``). The sinks take part in the checkpoint: what they received is
written in one transaction per checkpoint, together with a guard that a
commit re-sent after a crash finds, so after any number of ``kill -9`` and
restarts ``word_updates`` holds every ``(word, k)`` for k = 1 .. the word's
count exactly once, and ``word_totals`` the exact count of every word.

Where things are, read when the topology is built (environment variables,
since the source's class depends on the URL):

* ``LINES_URL``: the source, by scheme: ``redis://`` a Redis stream,
  ``nats://`` a JetStream stream, ``amqp://`` a RabbitMQ stream queue,
  ``kafka://host:port/topic`` a Kafka topic (default ``redis://127.0.0.1:6379/0``)
* ``LINES_STREAM``: the stream's (queue's, topic's) name (default ``lines``; a
  ``kafka://`` URL's path names the topic first)
* ``POSTGRES_DSN``: the database holding the two tables (default
  ``postgresql://postgres@127.0.0.1:5432/test``)

``examples/produce_lines.py`` fills any of the four sources.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

# examples/wordcount.py's counting bolt: one get and one put per word, the new
# (word, count) emitted anchored to the word.
from wordcount import WordCount

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    ConfigError,
    OutputFieldsDeclarer,
    Spout,
    Topology,
    TopologyBuilder,
    Tuple,
    connectors,
)

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
# The two tables examples/stream_to_postgres.sql creates.
UPDATES = "word_updates"
TOTALS = "word_totals"


class Split(BasicBolt):
    """Emits one ``(word,)`` per whitespace-separated word of the line."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple.values[0].split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


def source(url: str, stream: str) -> Spout:
    """The spout reading ``stream`` at ``url``, picked by the URL's scheme."""
    scheme = urlsplit(url).scheme
    spout: Spout
    if scheme in ("redis", "rediss", "unix"):
        spout = connectors.RedisStreamSpout(stream, fields=["line"], url=url)
    elif scheme in ("nats", "tls"):
        spout = connectors.JetStreamSpout(stream, fields=["line"], url=url)
    elif scheme in ("amqp", "amqps"):
        spout = connectors.RabbitMQSpout(stream, url=url, kind="stream", field="line")
    elif scheme == "kafka":
        parts = urlsplit(url)
        topic = parts.path.strip("/") or stream
        spout = connectors.KafkaSpout(topic, bootstrap=parts.netloc, fields=["line"])
    else:
        raise ConfigError(
            f"LINES_URL {url!r}: unknown scheme {scheme!r}; use redis://, nats://, amqp:// "
            "or kafka://"
        )
    return spout


def topology() -> Topology:
    dsn = os.environ.get("POSTGRES_DSN", DEFAULT_DSN)
    updates = connectors.PostgresSink(UPDATES, ["word", "count"], dsn=dsn, mode="append")
    totals = connectors.PostgresSink(
        TOTALS, ["word", "count"], dsn=dsn, mode="upsert", key=["word"]
    )
    return build(updates, totals)


def build(updates: Bolt, totals: Bolt) -> Topology:
    """The pipeline with these two sinks (bench/bench_connectors.py swaps in bolts that
    only ack, to weigh the sinks)."""
    url = os.environ.get("LINES_URL", DEFAULT_URL)
    stream = os.environ.get("LINES_STREAM", "lines")
    builder = TopologyBuilder("stream-to-postgres")
    builder.set_spout("lines", source(url, stream))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    builder.set_bolt("updates", updates, 2).fields_grouping("count", ["word"])
    builder.set_bolt("totals", totals, 2).fields_grouping("count", ["word"])
    return builder.build()
