"""A word count into Kafka, run by ``statestream run`` in tests/connectors/test_kafka_sink_kill.py.

``lines`` (a file, or a stream: a Redis stream, a Kafka topic, ...) -> ``split`` (2 tasks) -> ``count``
(2 tasks, a checkpointed count per word) -> ``updates``, a :class:`KafkaSink`
of one task (``KAFKA_SINK_TASKS``; fields grouping on ``word``) writing every ``(word, count)`` to a
topic, keyed by the word. Where things are, from the environment:

* ``LINES_FILE``: the input file; or ``LINES_URL`` and ``LINES_STREAM``: a stream, the
  spout picked by the URL's scheme as examples/stream_to_postgres.py picks it
  (``kafka://host:port``: a KafkaSpout, so Kafka -> count -> Kafka);
* ``KAFKA_BOOTSTRAP`` and ``KAFKA_TOPIC``: the broker and the topic.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    FileSpout,
    OutputFieldsDeclarer,
    Spout,
    Topology,
    TopologyBuilder,
    Tuple,
    connectors,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from stream_to_postgres import source as stream_source
from wordcount import WordCount


class Split(BasicBolt):
    """One ``(word,)`` per word of the tuple's ``line`` (a file's tuples hold its offset too)."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple.get("line").split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


def source() -> Spout:
    path = os.environ.get("LINES_FILE")
    if path:
        return FileSpout(path)
    return stream_source(os.environ["LINES_URL"], os.environ["LINES_STREAM"])


def topology() -> Topology:
    sink = connectors.KafkaSink(
        os.environ["KAFKA_TOPIC"], bootstrap=os.environ["KAFKA_BOOTSTRAP"], key="word"
    )
    builder = TopologyBuilder("words-to-kafka")
    builder.set_spout("lines", source())
    builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    # One sink task unless KAFKA_SINK_TASKS says otherwise: tansu 0.6.0 holds back a
    # committed transaction's guard offset while another task's transaction on the same
    # partitions is open (tests/connectors/test_kafka_broker.py), which Kafka does not.
    tasks = int(os.environ.get("KAFKA_SINK_TASKS", "1"))
    builder.set_bolt("updates", sink, tasks).fields_grouping("count", ["word"])
    return builder.build()
