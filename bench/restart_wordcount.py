"""examples/wordcount.py's topology, whose count bolts note when the first tuple reaches them.

For bench/bench_state_restart.py: the same topology (name, components,
parallelism) as the example, so it restarts on the example's stored state;
each count task appends ``time.time()`` and ``time.process_time()`` (the
process's CPU seconds so far: steadier than the wall clock on a loaded
machine) of its first ``execute`` to the file named by ``$RESTART_STAMP``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import wordcount
from wordcount import WordCount

from statestream import Topology, Tuple


class StampedWordCount(WordCount):
    """WordCount that writes the wall clock of its first tuple to $RESTART_STAMP."""

    stamped = False

    def execute(self, tuple: Tuple) -> None:
        if not self.stamped:
            self.stamped = True
            with open(os.environ["RESTART_STAMP"], "a") as f:
                f.write(f"{time.time()} {time.process_time()}\n")
        super().execute(tuple)


def topology() -> Topology:
    # The example's own builder, with the stamping bolt in place of its WordCount.
    wordcount.WordCount = StampedWordCount  # type: ignore[misc]
    return wordcount.topology()
