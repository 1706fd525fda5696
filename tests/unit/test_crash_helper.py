"""``statestream.testing.crash_and_recover``: crash a run at a chosen point, run it again.

The word count here is the state document's (``state.get``/``state.put`` per
tuple, the count emitted anchored, ``ack``), over a file read by a
``FileSpout`` that can rewind, so exactly-once applies by default.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import word_bolts
from word_bolts import Split

from statestream import (
    FileSpout,
    OutputCollector,
    Topology,
    TopologyBuilder,
    TopologyContext,
    TopologyError,
)
from statestream._registry import open_provider
from statestream.testing import (
    CrashPointNotReached,
    ListSpout,
    SimulatedCrash,
    SinkBolt,
    StepClock,
    committed_state,
    crash_and_recover,
    crash_at_checkpoint,
    crash_at_tuple,
    random_text,
    sink,
)


class Count(word_bolts.Count):
    """The shared word count, recording which tasks got ``cleanup``."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.cleaned = sink("cleanup")

    def cleanup(self) -> None:
        self.cleaned.append(self.context.task_index)


# Each clock reading moves 0.3 ms: checkpoints (every 5 ms) fall at the same
# tuples on every machine and core, so the nth checkpoint a point names exists.
STEP = 0.0003


def _topology(corpus: Path) -> Topology:
    b = TopologyBuilder("crashes")
    b.set_spout("lines", FileSpout(corpus, resume=True))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, collections.Counter[str]]:
    path = tmp_path / "corpus.txt"
    return path, random_text(path, 800, words_per_line=6, vocabulary=120, seed=3)


def _config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 5,
        "topology.executor.receive.buffer.size": 32,
        **extra,
    }


CRASH_POINTS = [
    pytest.param(crash_at_tuple("count", 1500), id="count-tuple-1500"),
    pytest.param(crash_at_tuple("split", 300, task=1), id="split-task1-tuple-300"),
    pytest.param(crash_at_tuple("lines", 400), id="spout-call-400"),
    pytest.param(crash_at_checkpoint("count", "prepare", n=3), id="before-prepare-3"),
    pytest.param(crash_at_checkpoint("count", "prepare", after=True, n=3), id="after-prepare-3"),
    pytest.param(
        crash_at_checkpoint("count", "commit", after=True, task=0, n=3),
        id="commit-done-by-task0-only",
    ),
    pytest.param(crash_at_checkpoint("split", "commit", n=2), id="forwarder-before-commit-2"),
]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_at_any_point_recovers_to_exact_counts(
    tmp_path: Path, corpus: tuple[Path, collections.Counter[str]], point: Any
) -> None:
    path, expected = corpus
    topo, config = _topology(path), _config(tmp_path)
    outcome = crash_and_recover(topo, config, at=point, clock=StepClock(STEP))
    assert str(point) in str(outcome.crash)
    assert outcome.errors_before_crash == []
    assert outcome.result.reason == "idle" and outcome.result.errors == []
    assert committed_state(topo, config, "count") == dict(expected)


def test_a_commit_half_done_across_tasks_is_what_the_restart_meets(
    tmp_path: Path, corpus: tuple[Path, collections.Counter[str]]
) -> None:
    path, expected = corpus
    topo, config = _topology(path), _config(tmp_path)
    seen: list[int] = []

    def committed_txids() -> None:
        with open_provider(
            "sqlite", config["topology.state.provider.config"], scope="crashes"
        ) as provider:
            seen.extend(provider.get_state(f"count-{t}").committed_txid for t in (0, 1))

    point = crash_at_checkpoint("count", "commit", after=True, task=0, n=3)
    crash_and_recover(topo, config, at=point, between=committed_txids, clock=StepClock(STEP))
    # Task 0 committed its third COMMIT (txid 2); task 1 never got to it.
    assert seen == [2, 1]
    assert committed_state(topo, config, "count") == dict(expected)


def test_at_least_once_the_same_crash_loses_nothing_and_counts_replays_again(
    tmp_path: Path, corpus: tuple[Path, collections.Counter[str]]
) -> None:
    # The control for the test above: with Storm's replay, the lines the
    # crash left unacked after a commit are counted twice.
    path, expected = corpus
    topo = _topology(path)
    config = _config(tmp_path, **{"statestream.state.exactly.once": False})
    crash_and_recover(
        topo,
        config,
        at=crash_at_checkpoint("count", "commit", after=True, n=3),
        clock=StepClock(STEP),
    )
    got = committed_state(topo, config, "count")
    assert set(got) == set(expected)
    assert all(got[w] >= expected[w] for w in expected)
    assert sum(got.values()) > sum(expected.values())


def test_a_crash_calls_no_cleanup_and_the_recovering_run_does(
    tmp_path: Path, corpus: tuple[Path, collections.Counter[str]]
) -> None:
    path, _ = corpus
    crash_and_recover(_topology(path), _config(tmp_path), at=crash_at_tuple("count", 50))
    # Only the second run ended cleanly: each of its two count tasks, once.
    assert sorted(sink("cleanup")) == [0, 1]


def test_the_memory_provider_carries_state_from_the_crashed_run(
    corpus: tuple[Path, collections.Counter[str]],
) -> None:
    path, expected = corpus
    topo = _topology(path)
    config = {
        "topology.state.provider": "memory",
        "topology.state.provider.config": {"name": f"crash-{uuid.uuid4().hex}"},
        "topology.state.checkpoint.interval.ms": 5,
    }
    outcome = crash_and_recover(
        topo, config, at=crash_at_checkpoint("count", "commit", n=4), clock=StepClock(STEP)
    )
    # The recovering run must have started from a commit, not from nothing:
    # it executed fewer words than the whole text holds.
    counted = outcome.result.components["count"].executed
    assert counted < sum(expected.values())
    assert committed_state(topo, config, "count") == dict(expected)


def test_a_point_the_run_never_reaches_is_an_error_not_a_pass(
    tmp_path: Path, corpus: tuple[Path, collections.Counter[str]]
) -> None:
    path, expected = corpus
    words = sum(expected.values())
    with pytest.raises(CrashPointNotReached, match=f"tuple {words + 1} of 'count'"):
        crash_and_recover(_topology(path), _config(tmp_path), at=crash_at_tuple("count", words + 1))


def test_bad_crash_points_are_refused_by_name(
    tmp_path: Path, corpus: tuple[Path, collections.Counter[str]]
) -> None:
    path, _ = corpus
    topo, config = _topology(path), _config(tmp_path)
    with pytest.raises(TopologyError, match=r"no component 'cnt'; \['count', 'lines', 'split'\]"):
        crash_and_recover(topo, config, at=crash_at_tuple("cnt", 1))
    with pytest.raises(TopologyError, match="'lines' takes no checkpoints"):
        crash_and_recover(topo, config, at=crash_at_checkpoint("lines", "commit"))
    with pytest.raises(TopologyError, match=r"'count' has tasks 0\.\.1"):
        crash_and_recover(topo, config, at=crash_at_tuple("count", 1, task=2))
    with pytest.raises(ValueError, match="action must be one of"):
        crash_at_checkpoint("count", "precommit")
    with pytest.raises(ValueError, match="n counts from 1"):
        crash_at_tuple("count", 0)


def test_a_plain_topology_crashes_at_a_tuple_and_replays_unacked_tuples() -> None:
    b = TopologyBuilder("plain")
    b.set_spout("items", ListSpout(list(range(20))))
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("items")
    outcome = crash_and_recover(b.build(), at=crash_at_tuple("out", 7))
    assert isinstance(outcome.crash, SimulatedCrash)
    # The first run delivered six before dying; a fresh ListSpout emits all 20 again.
    assert sorted(v for (v,) in sink("out")) == sorted([*range(6), *range(20)])


def test_committed_state_of_a_component_without_state_names_the_stateful_ones(
    tmp_path: Path, corpus: tuple[Path, collections.Counter[str]]
) -> None:
    path, _ = corpus
    with pytest.raises(TopologyError, match=r"'split' is not a stateful bolt.*\['count'\]"):
        committed_state(_topology(path), _config(tmp_path), "split")
