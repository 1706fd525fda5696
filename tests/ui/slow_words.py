"""A word count that reads its lines slowly, so that a run lasts while a test looks at it.

``SlowLines`` is a FileSpout that naps a few milliseconds before each line
(``slow_words.nap.ms``, default 3): the run's length comes from the input's size,
and no test asserts on it. The corpus is ``corpus.txt`` in the working
directory; the bolts are the shared word count's (tests/word_bolts.py, on
PYTHONPATH).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from word_bolts import Count, Split

from statestream import FileSpout, Topology, TopologyBuilder


class SlowLines(FileSpout):
    def open(self, conf: Any, context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.nap = float(conf.get("slow_words.nap.ms", 3)) / 1000

    def next_tuple(self) -> None:
        time.sleep(self.nap)
        super().next_tuple()


def topology() -> Topology:
    b = TopologyBuilder("slow_words")
    b.set_spout("lines", SlowLines(Path("corpus.txt")))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()
