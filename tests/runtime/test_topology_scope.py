"""State belongs to its topology: two topologies on one store, with the same component
names, never share state or a checkpoint (sqlite and a real Redis). Tests that take
``local_runner`` run in one process and on two worker processes (``topology.workers: 2``)."""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Runner
from word_bolts import Count, Split, word_count

from statestream import (
    ConfigError,
    FileSpout,
    TopologyBuilder,
    TopologyError,
    run,
)
from statestream._registry import open_provider, stored_topologies
from statestream.testing import committed_state, random_text

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
        return
    import redis

    prefix = f"scope-test-{uuid.uuid4().hex[:8]}:"
    yield {
        "topology.state.provider": "redis",
        "topology.state.provider.config": {"url": REDIS_URL, "key_prefix": prefix},
    }
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}*"))
    if keys:
        client.delete(*keys)


def test_two_topologies_on_one_store_each_count_exactly(
    local_runner: Runner, tmp_path: Path, store: dict[str, Any]
) -> None:
    clicks_text, words_text = tmp_path / "clicks.txt", tmp_path / "words.txt"
    clicks_expected = random_text(clicks_text, 300, vocabulary=50, seed=1)
    words_expected = random_text(words_text, 500, vocabulary=80, seed=2)
    clicks, words = word_count("clicks", clicks_text), word_count("wordcount", words_text)
    config = local_runner.config({**store, "topology.state.checkpoint.interval.ms": 10})

    assert run(clicks, config, until_idle=True).errors == []
    assert run(words, config, until_idle=True).errors == []
    # The click topology again: its own checkpoint says it is done, whatever
    # the word count (same component names) committed in between.
    again = run(clicks, config, until_idle=True)
    assert again.errors == []
    assert ("worker_restarts" in again.counters) == local_runner.workers  # ran on workers
    assert again.components["count"].executed == 0

    assert committed_state(clicks, config, "count") == dict(clicks_expected)
    assert committed_state(words, config, "count") == dict(words_expected)
    with open_provider(
        store["topology.state.provider"], store["topology.state.provider.config"]
    ) as provider:
        found = stored_topologies(provider.namespaces())
    assert set(found) == {"clicks", "wordcount"}
    assert {"count-0", "count-1", "$checkpointspout-0"} <= set(found["clicks"])


def test_a_new_topology_with_the_same_bolt_name_starts_from_zero(
    local_runner: Runner, tmp_path: Path, store: dict[str, Any]
) -> None:
    text = tmp_path / "text.txt"
    expected = random_text(text, 200, vocabulary=30, seed=3)
    config = local_runner.config({**store, "topology.state.checkpoint.interval.ms": 10})
    run(word_count("first", text), config, until_idle=True)
    second = word_count("second", text)
    run(second, config, until_idle=True)
    assert committed_state(second, config, "count") == dict(expected)
    assert sum(collections.Counter(committed_state(second, config, "count")).values()) == sum(
        expected.values()
    )


@pytest.mark.parametrize("name", ["", "a/b", "word.count", "two words", "$mine", "__x"])
def test_a_name_that_cannot_scope_state_is_refused(name: str) -> None:
    with pytest.raises(TopologyError, match="a topology's name is a non-empty string"):
        TopologyBuilder(name)


def test_another_topology_under_the_same_name_is_refused(
    local_runner: Runner, tmp_path: Path
) -> None:
    config = local_runner.config(
        {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
    )
    text = tmp_path / "text.txt"
    random_text(text, 20, vocabulary=10, seed=4)
    run(word_count("shared", text), config, until_idle=True)

    b = TopologyBuilder("shared")
    b.set_spout("lines", FileSpout(text))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("tally", Count(), 2).fields_grouping("split", ["word"])
    with pytest.raises(
        ConfigError,
        match=r"stateful bolts \['count'\], and this one has "
        r"\['tally'\]: none in common.*state clear --topology shared",
    ):
        run(b.build(), config, until_idle=True)
    # A bolt added beside the stored one is the same topology grown: accepted.
    b = TopologyBuilder("shared")
    b.set_spout("lines", FileSpout(text))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    b.set_bolt("tally", Count(), 2).fields_grouping("split", ["word"])
    assert run(b.build(), config, until_idle=True).errors == []
