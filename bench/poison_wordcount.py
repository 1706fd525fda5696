"""The poison word count of bench/bench_poison.py: Storm's documented word count
(``state.get``/``state.put`` per word, the count emitted anchored, the word
acked) whose ``split`` raises on every line holding the word ``POISON``.

    statestream run bench/poison_wordcount.py --until-idle --set wordcount.input=FILE

``wordcount.poison_every=1`` makes ``split`` raise on every line instead (the bolt that
fails every tuple).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    FileSpout,
    OutputFieldsDeclarer,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)

# The count is the README's word count's own (state.get/state.put per word).
_spec = importlib.util.spec_from_file_location(
    "statestream_example_wordcount", Path(__file__).parents[1] / "examples" / "wordcount.py"
)
assert _spec is not None and _spec.loader is not None
_wordcount = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wordcount)
WordCount = _wordcount.WordCount


class Split(BasicBolt):
    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        super().prepare(conf, context)
        self.every = bool(int(conf.get("wordcount.poison_every") or 0))

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        line = tuple.values[1]
        if self.every or "POISON" in line:
            raise ValueError(f"cannot split {line[:30]!r}")
        for word in line.split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


def topology() -> Topology:
    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", FileSpout(path_key="wordcount.input"))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    return b.build()
