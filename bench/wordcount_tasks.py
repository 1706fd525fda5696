"""examples/wordcount.py with a 2-task spout (issue 15's bench, bench_workers.py).

The same documented bolts (``SplitSentence``, ``WordCount``, imported from
examples/wordcount.py) and groupings; only the spout differs: ``FileSpout``
with parallelism 2, task ``i`` emitting the lines numbered ``i`` modulo 2,
so that with ``topology.workers: 2`` each worker reads half of the input.

    statestream run bench/wordcount_tasks.py --until-idle -c config/local.yaml \\
        --set wordcount.input=FILE --set topology.workers=2
"""

from __future__ import annotations

import sys
from pathlib import Path

_EXAMPLES = str(Path(__file__).resolve().parent.parent / "examples")
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)

from wordcount import CORPUS, SplitSentence, WordCount  # noqa: E402

from statestream import FileSpout, Topology, TopologyBuilder  # noqa: E402

SPOUT_TASKS = 2


def topology() -> Topology:
    builder = TopologyBuilder("wordcount")
    builder.set_spout(
        "sentences",
        FileSpout(path_key="wordcount.input", default_path=CORPUS, resume=True),
        SPOUT_TASKS,
    )
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    return builder.build()
