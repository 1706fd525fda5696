"""Read-ahead in the local runtime (statestream._kvprefetch): before a stateful task
executes a drain, the keys its tuples will read come from the store in one call.

A word count on a store far larger than its read cache: with the key guessed
right (the fields grouping's word) the tuples' reads hit the cache; guessed
wrong (a bolt whose key is not the grouped field, one that names a wrong
key, one whose guess raises) the counts are exactly the same and read-ahead
turns itself off; ``state_key = False`` reads nothing ahead.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from word_bolts import Count, Split

from statestream import StatefulBolt, Topology, TopologyBuilder, Tuple
from statestream._kvstate import StoredKeyValueState
from statestream._registry import open_provider, stored_topologies
from statestream.runtime.local import LocalRuntime
from statestream.testing import FakeClock, ListSpout

WORDS = [f"w{(i * 7919) % 3000}" for i in range(15_000)]
LINES = [" ".join(WORDS[i : i + 12]) for i in range(0, len(WORDS), 12)]


class TupleKeyed(Count):
    """Counts under ``("w", word)``: the default guess (the word) is never the key."""

    def execute(self, tuple: Tuple) -> None:
        key = ("w", tuple["word"])
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(tuple)


class NamesAWrongKey(Count):
    state_key = staticmethod(lambda t: "not-" + t["word"])


def _raises(t: Tuple) -> Any:
    raise KeyError("no such field")


class GuessRaises(Count):
    state_key = staticmethod(_raises)


class NoReadAhead(Count):
    state_key = False


def _topology(bolt: StatefulBolt) -> Topology:
    b = TopologyBuilder("readahead")
    b.set_spout("lines", ListSpout(LINES, ["line"]))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", bolt, 2).fields_grouping("split", ["word"])
    return b.build()


def _run(bolt: StatefulBolt, path: Path) -> tuple[dict[Any, Any], list[Any]]:
    """Run the word count twice on one store (the second run reads the first's counts
    back through a cache far smaller than the state); the committed counts, and the
    second run's count tasks."""
    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(path)},
        # ~300 entries a generation, 1,500 keys a task; drains of ~100 words.
        "topology.state.cache.mb": 0.15,
        "topology.max.spout.pending": 16,
    }
    for _ in range(2):
        rt = LocalRuntime(_topology(bolt), config, clock=FakeClock())
        result = rt.run(until_idle=True)
        assert result.reason == "idle" and result.errors == []
    counts: dict[Any, Any] = {}
    with open_provider("sqlite", {"path": str(path)}) as provider:
        (name,) = stored_topologies(provider.namespaces())
        for task in (0, 1):
            counts.update(provider.get_state(f"{name}/count-{task}").items())
    return counts, rt.tasks_of["count"]


def _states(tasks: list[Any]) -> list[StoredKeyValueState]:
    states = [task.executor.state for task in tasks]
    assert all(isinstance(s, StoredKeyValueState) for s in states)
    return states


EXPECTED = {word: 2 * n for word, n in Counter(WORDS).items()}


def test_the_grouped_field_is_read_ahead_and_the_tuples_hit(tmp_path: Path) -> None:
    counts, tasks = _run(Count(), tmp_path / "state.db")
    assert counts == EXPECTED
    states = _states(tasks)
    prefetched = sum(s.prefetched for s in states)
    one_by_one = sum(s.store_reads for s in states)
    assert prefetched > 1000, "nothing read ahead"
    assert sum(s.batch_reads for s in states) < prefetched / 10, "not in batches"
    assert one_by_one < prefetched / 20, f"{one_by_one} misses after {prefetched} read ahead"
    assert all(task.key_of is not None for task in tasks)


@pytest.mark.parametrize(
    ("bolt", "expected"),
    [
        (TupleKeyed(), {("w", word): n for word, n in EXPECTED.items()}),
        (NamesAWrongKey(), EXPECTED),
        (GuessRaises(), EXPECTED),
    ],
    ids=["key-is-not-the-field", "names-a-wrong-key", "guess-raises"],
)
def test_a_wrong_guess_counts_exactly_and_stops_reading_ahead(
    bolt: StatefulBolt, expected: dict[Any, Any], tmp_path: Path
) -> None:
    counts, tasks = _run(bolt, tmp_path / "state.db")
    assert counts == expected
    assert all(task.key_of is None for task in tasks), "read-ahead still on"
    states = _states(tasks)
    # What the wrong guess cost: its reads before the judge stopped it, a
    # bounded few windows, not one a drain.
    assert sum(s.prefetched for s in states) <= 2 * 4 * 2048


def test_state_key_false_reads_nothing_ahead(tmp_path: Path) -> None:
    counts, tasks = _run(NoReadAhead(), tmp_path / "state.db")
    assert counts == EXPECTED
    assert sum(s.prefetched for s in _states(tasks)) == 0
    assert sum(s.store_reads for s in _states(tasks)) > 1000  # the misses it has instead
