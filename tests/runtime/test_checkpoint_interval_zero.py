"""``topology.state.checkpoint.interval.ms: 0`` (issue 44, item 6): Storm's checkpoint
spout takes 0 as "the next checkpoint as soon as the last one committed" (its
own tests open the spout so); a run with it checkpoints over and over and
still counts every word exactly, on every runtime and in both state modes.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from runtime_harness import Runner
from word_bolts import word_count

from statestream._exactly_once import CheckpointRecord
from statestream._registry import open_provider
from statestream._stateful import CHECKPOINT_SPOUT
from statestream.testing import committed_state, random_text


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_a_run_with_interval_0_checkpoints_continuously_and_counts_exactly(
    runner: Runner, tmp_path: Path, exactly_once: bool
) -> None:
    corpus = tmp_path / "input.txt"
    expected = random_text(corpus, 400, words_per_line=5, vocabulary=50, seed=2)
    config = runner.config(
        {
            "topology.state.checkpoint.interval.ms": 0,
            "statestream.state.exactly.once": exactly_once,
            "topology.max.spout.pending": 20,
        }
    )
    topology = word_count("interval-zero", corpus)
    result = runner.run(topology, config, batch_size=50)
    assert result.reason == "idle"
    got = collections.Counter(committed_state(topology, config, "count"))
    assert got == expected
    # Not one checkpoint at the end: one after another, each started at once.
    with open_provider(
        "sqlite", config["topology.state.provider.config"], scope=topology.name
    ) as provider:
        stored = CheckpointRecord.load(provider.get_state(f"{CHECKPOINT_SPOUT}-0")).state
    assert stored.txid >= 3, stored
