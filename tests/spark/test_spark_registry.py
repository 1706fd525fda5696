"""The spark runner through the registry: ``statestream.run`` with ``topology.runner:
spark`` and a clock reaches the Spark runtime with that clock (issue 45)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import pytest

import statestream
from statestream._clock import StepClock
from statestream._registry import open_provider, stored_topologies

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount

pytestmark = pytest.mark.spark


def test_the_registry_runs_the_word_count_on_spark_on_the_given_clock(
    spark_session: Any, tmp_path: Path
) -> None:
    corpus = tmp_path / "in.txt"
    corpus.write_text("".join(f"w{i % 7} w{i % 3}\n" for i in range(60)))
    conf = {
        "topology.runner": "spark",
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "wordcount.input": str(corpus),
    }
    # Every reading moves it: that it moved shows the runtime read this clock.
    clock = StepClock(0.001)
    result = statestream.run(wordcount.topology(), conf, until_idle=True, clock=clock)
    assert result.reason == "idle"
    assert clock.now > 0
    with open_provider("sqlite", {"path": str(tmp_path / "state.db")}) as provider:
        (name,) = stored_topologies(provider.namespaces())
        counts: dict[str, int] = {}
        for i in range(2):
            counts.update(provider.get_state(f"{name}/count-{i}").items())
    assert counts == collections.Counter(corpus.read_text().split())
