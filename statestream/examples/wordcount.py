"""Word count: the statestream hello world.

    statestream run statestream.examples.wordcount --until-idle --set wordcount.output=statestream-data/counts.jsonl

(from a checkout, ``statestream run examples/wordcount.py`` runs the same file).

``sentences`` reads a text file one line per tuple (``wordcount.input``,
default: the corpus beside this file), ``split`` breaks lines into words
(shuffle grouping, 2 tasks) and ``count`` counts them (fields grouping on
``word``, 2 tasks) in a checkpointed KeyValueState. The state provider is
``topology.state.provider`` (memory by default; ``--config config/local.yaml``
for SQLite, ``config/redis.yaml`` for Redis); after a crash the counts come
back from the last checkpoint and the spout resumes after the last line it had
committed. With ``wordcount.output=PATH`` the final count of every
word is written there as JSON lines ``{"word": ..., "count": ...}``.

Keys under ``wordcount.`` belong to this topology:

* ``wordcount.input``: the text file to count (default: ``corpus.txt`` here)
* ``wordcount.output``: where to write the final counts (default: nowhere)
* ``wordcount.fail_rate``: fail each line with this probability the first time
  ``split`` sees it in this process (a stable per-line draw), to exercise replay
  (at-least-once) or the rewind to the last checkpoint (exactly-once)
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    FailedException,
    FileSpout,
    KeyValueState,
    OutputCollector,
    OutputFieldsDeclarer,
    StatefulBolt,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
    stable_hash,
)

CORPUS = Path(__file__).with_name("corpus.txt")

# Lines failed once, for wordcount.fail_rate, per input file: kept by the
# process rather than the bolt instance, since an exactly-once rewind replaces
# the instances within a run.
_FAILED_ONCE: dict[str, set[int]] = {}


class SplitSentence(BasicBolt):
    """Emits one ``(word,)`` per whitespace-separated word of the line."""

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        super().prepare(conf, context)
        self.fail_rate = float(conf.get("wordcount.fail_rate") or 0.0)
        self.failed_once = _FAILED_ONCE.setdefault(str(conf.get("wordcount.input")), set())

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        offset, line = tuple.values
        # A stable draw per line: the same lines fail in every run.
        if (
            self.fail_rate
            and offset not in self.failed_once
            and stable_hash(["fail", offset]) % 1_000_000 < self.fail_rate * 1_000_000
        ):
            self.failed_once.add(offset)
            raise FailedException(f"line {offset} fails on first sight")
        for word in line.split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


class WordCount(StatefulBolt):
    """Counts words in a KeyValueState (word -> count) that survives restarts.

    Written as Storm's state document writes it: one ``get`` and one ``put``
    per tuple, the new count emitted anchored to the word, the word acked.
    After a crash the state comes back from the last committed checkpoint.
    """

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.output = conf.get("wordcount.output")
        if self.output and context.task_index == 0:
            # Task 0 starts the file; every task appends its words in cleanup.
            Path(self.output).parent.mkdir(parents=True, exist_ok=True)
            Path(self.output).write_bytes(b"")

    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        word = tuple.values[0]
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        self.collector.emit([word, count], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word", "count"])

    def cleanup(self) -> None:
        if self.output and getattr(self, "state", None) is not None:
            write_counts(self.output, self.state.items())


def write_counts(path: str, items: Any) -> None:
    """Append ``{"word", "count"}`` JSON lines to ``path`` under an exclusive lock."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # In chunks: the state may be far larger than memory (items() streams it).
        rest = iter(items)
        while chunk := b"".join(
            orjson.dumps({"word": w, "count": c}) + b"\n" for w, c in islice(rest, 4096)
        ):
            os.write(fd, chunk)
    finally:
        os.close(fd)


def topology() -> Topology:
    builder = TopologyBuilder("wordcount")
    builder.set_spout("sentences", FileSpout(path_key="wordcount.input", default_path=CORPUS))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    return builder.build()
