"""The word count's bolts as Storm's state document writes them, shared by the tests.

``Split`` emits one ``(word,)`` per word of a ``line``; ``Count`` keeps each
word's count in its KeyValueState (``state.get``/``state.put`` per tuple),
emits ``(word, count)`` anchored to its input and acks it. :func:`word_count`
wires them to a file's lines.
"""

from __future__ import annotations

from pathlib import Path

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    FileSpout,
    KeyValueState,
    OutputFieldsDeclarer,
    StatefulBolt,
    Topology,
    TopologyBuilder,
    Tuple,
)


class Split(BasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple["line"].split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


class Count(StatefulBolt):
    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        word = tuple["word"]
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        self.collector.emit([word, count], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word", "count"])


def word_count(name: str, corpus: Path) -> Topology:
    """Topology ``name``: the lines of ``corpus`` split (2 tasks) and counted (2 tasks)."""
    b = TopologyBuilder(name)
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()
