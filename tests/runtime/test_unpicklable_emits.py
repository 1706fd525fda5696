"""An emitted value that cannot be pickled stops the run on every runtime alike.

With ``topology.workers: 2`` or on Spark tuples cross processes; in one
process they do not. Every runtime pickles the first tuple of each (task,
stream) (``statestream._picklable``), so the topology that would fail at
scale-out fails the same way in one process, with one line that says why.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from runtime_harness import Items, Runner

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    OutputFieldsDeclarer,
    TopologyBuilder,
    Tuple,
)
from statestream._errors import UnpicklableTupleError


class WithLock(BasicBolt):
    """Emits each word with a lock beside it: fine in one process, not across two."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple.values[0], threading.Lock()])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word", "lock"])


class Drop(Bolt):
    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)


class LockItems(Items):
    """A spout whose tuples hold a lock."""

    def next_tuple(self) -> None:
        if self._next < len(self.items):
            self.collector.emit([threading.Lock()], self._next)
            self._next += 1


def _words() -> list[Any]:
    return [(f"w{i}",) for i in range(20)]


def test_a_bolt_emitting_an_unpicklable_value_stops_the_run(runner: Runner) -> None:
    b = TopologyBuilder("unpicklable_bolt")
    b.set_spout("words", Items(_words(), fields=["word"]))
    b.set_bolt("locks", WithLock(), 2).shuffle_grouping("words")
    b.set_bolt("drop", Drop(), 2).fields_grouping("locks", ["word"])
    with pytest.raises(UnpicklableTupleError) as caught:
        runner.run(b.build())
    message = str(caught.value)
    assert "component 'locks' task " in message
    assert "emitted on stream 'default'" in message and "a lock that cannot be pickled" in message
    assert "emit plain data" in message and "\n" not in message


def test_a_spout_emitting_an_unpicklable_value_stops_the_run(runner: Runner) -> None:
    b = TopologyBuilder("unpicklable_spout")
    b.set_spout("locks", LockItems(_words(), fields=["lock"]))
    b.set_bolt("drop", Drop(), 2).shuffle_grouping("locks")
    with pytest.raises(UnpicklableTupleError, match="component 'locks' task 0 emitted on stream"):
        runner.run(b.build())
