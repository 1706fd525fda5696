"""Rescale keeps state: a stateful bolt's parallelism changed between runs (2 -> 3 -> 1),
each time after a crash at a random moment; every key ends in exactly one task, the
one its grouping sends it to, with its whole count (sqlite and a real Redis). Tests that
take ``local_runner`` run in one process and on two worker processes; the crashes
(SimulatedCrash at a tuple, crash_and_recover) are the one-process runtime's."""

from __future__ import annotations

import collections
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Runner
from word_bolts import Count, Split

from statestream import (
    ConfigError,
    FileSpout,
    Topology,
    TopologyBuilder,
    run,
)
from statestream._registry import open_provider, stored_topologies
from statestream._routing import task_for_key
from statestream._state import StoredKeyValueState
from statestream.testing import (
    ListSpout,
    SimulatedCrash,
    crash_and_recover,
    crash_at_tuple,
    random_text,
)

REDIS_URL = "redis://127.0.0.1:6379/0"


def _wordcount(corpus: Path, tasks: int) -> Topology:
    b = TopologyBuilder("rescale")
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), tasks).fields_grouping("split", ["word"])
    return b.build()


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    common = {"topology.state.checkpoint.interval.ms": 5}
    if request.param == "sqlite":
        yield {
            **common,
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
        return
    import redis

    prefix = f"rescale-test-{uuid.uuid4().hex[:8]}:"
    yield {
        **common,
        "topology.state.provider": "redis",
        "topology.state.provider.config": {"url": REDIS_URL, "key_prefix": prefix},
    }
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}*"))
    if keys:
        client.delete(*keys)


def _stored(config: dict[str, Any]) -> dict[int, dict[str, int]]:
    """Every task namespace of "count" in the store, whatever the current parallelism."""
    with open_provider(
        config["topology.state.provider"], config["topology.state.provider.config"]
    ) as provider:
        found = stored_topologies(provider.namespaces()).get("rescale", [])
        return {
            int(ns.rpartition("-")[2]): dict(provider.get_state(f"rescale/{ns}").items())
            for ns in found
            if ns.startswith("count-")
        }


def _check_layout(config: dict[str, Any], tasks: int, expected: collections.Counter[str]) -> None:
    stored = _stored(config)
    assert set(stored) <= set(range(tasks)), f"state left in old tasks: {sorted(stored)}"
    seen: dict[str, int] = {}
    for task, entries in stored.items():
        for word, count in entries.items():
            assert word not in seen, f"{word!r} in tasks {seen[word]} and {task}"
            assert task == task_for_key(word, tasks), f"{word!r} in task {task}, not its owner"
            seen[word] = count
    assert seen == dict(expected)


def test_crash_then_restart_with_another_parallelism_keeps_every_count(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    corpus = tmp_path / "corpus.txt"
    expected = random_text(corpus, 1500, words_per_line=6, vocabulary=200, seed=9)
    words = sum(expected.values())
    seed = int(os.environ.get("SSTREAM_TEST_SEED") or int.from_bytes(os.urandom(4), "big"))
    print(f"\ncrash points seed {seed} (rerun with SSTREAM_TEST_SEED={seed})")
    rng = random.Random(seed)
    # 2 tasks, crash; restart with 3, crash; restart with 1, to the end.
    first = rng.randrange(words // 6, words // 3)
    with pytest.raises(SimulatedCrash):
        _run_until_crash(_wordcount(corpus, 2), store, first)
    with pytest.raises(SimulatedCrash):
        _run_until_crash(_wordcount(corpus, 3), store, rng.randrange(words // 6, words // 3))
    result = run(_wordcount(corpus, 1), store, until_idle=True)
    assert result.errors == [] and result.reason == "idle"
    _check_layout(store, 1, expected)


def _run_until_crash(topology: Topology, config: dict[str, Any], n: int) -> None:
    from statestream.runtime.local import LocalRuntime
    from statestream.runtime.plan import as_config
    from statestream.testing import _armed

    armed, _ = _armed(topology, crash_at_tuple("count", n))
    LocalRuntime(armed, as_config(config, (topology.name,))).run(until_idle=True)


@pytest.mark.parametrize("tasks", [(2, 3), (3, 1), (1, 4)], ids=lambda t: f"{t[0]}-to-{t[1]}")
def test_a_restart_with_another_parallelism_after_a_crash_is_exact(
    tmp_path: Path, tasks: tuple[int, int]
) -> None:
    corpus = tmp_path / "corpus.txt"
    expected = random_text(corpus, 800, words_per_line=6, vocabulary=150, seed=4)
    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 5,
    }
    before, after = tasks
    outcome = crash_and_recover(
        _wordcount(corpus, before),
        config,
        at=crash_at_tuple("count", 2000),
        then=_wordcount(corpus, after),
    )
    assert outcome.result.errors == []
    _check_layout(config, after, expected)


@pytest.mark.parametrize("restart_tasks", [3, 1])
def test_a_crash_inside_the_rescale_is_finished_by_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restart_tasks: int
) -> None:
    corpus = tmp_path / "corpus.txt"
    expected = random_text(corpus, 600, words_per_line=6, vocabulary=150, seed=5)
    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 5,
    }
    run(_wordcount(corpus, 2), config, until_idle=True)

    def die(self: Any, key: Any) -> Any:
        # The moved keys are committed at their new owners; their old copies
        # are not deleted yet: the worst moment, two copies of each.
        raise SimulatedCrash("killed while moving keys")

    with monkeypatch.context() as patch:
        patch.setattr(StoredKeyValueState, "delete", die)
        with pytest.raises(SimulatedCrash):
            run(_wordcount(corpus, 3), config, until_idle=True)
    # The next start may even come with another parallelism.
    result = run(_wordcount(corpus, restart_tasks), config, until_idle=True)
    assert result.errors == []
    _check_layout(config, restart_tasks, expected)


class ShuffledCount(Count):
    pass


def test_a_bolt_whose_keys_do_not_follow_its_grouping_cannot_change_parallelism(
    local_runner: Runner, tmp_path: Path
) -> None:
    config = local_runner.config(
        {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
    )

    def topology(tasks: int) -> Topology:
        b = TopologyBuilder("rescale")
        b.set_spout("words", ListSpout(["a", "b", "c"], fields=["word"]))
        b.set_bolt("count", ShuffledCount(), tasks).shuffle_grouping("words")
        return b.build()

    run(topology(2), config, until_idle=True)
    with pytest.raises(ConfigError, match=r"stateful bolt 'count' changed parallelism.*shuffle"):
        run(topology(3), config, until_idle=True)
    assert run(topology(2), config, until_idle=True).errors == []  # the old parallelism runs


class ByFirstLetter(Count):
    """Its state is kept per word, and it says which task owns a key after a rescale."""

    def rescale_task(self, key: str, n_tasks: int) -> int:
        return task_for_key(key, n_tasks)


def test_a_bolt_with_rescale_task_decides_the_owners(local_runner: Runner, tmp_path: Path) -> None:
    config = local_runner.config(
        {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
    )
    words = [f"w{i % 13}" for i in range(100)]

    def topology(tasks: int, items: list[str]) -> Topology:
        b = TopologyBuilder("rescale")
        b.set_spout("words", ListSpout(items, fields=["word"]))
        b.set_bolt("count", ByFirstLetter(), tasks).shuffle_grouping("words")
        return b.build()

    run(topology(1, words), config, until_idle=True)
    # No refusal: the hook says where each key goes (nothing new is counted).
    assert run(topology(3, []), config, until_idle=True).errors == []
    stored = _stored(config)
    assert set(stored) == {0, 1, 2}
    for task, entries in stored.items():
        assert all(task_for_key(w, 3) == task for w in entries)
    merged = {w: c for entries in stored.values() for w, c in entries.items()}
    assert merged == dict(collections.Counter(words))


@pytest.mark.spark
def test_spark_rescales_what_the_local_runtime_left(spark_session: Any, tmp_path: Path) -> None:
    from statestream.runtime.spark import SparkRuntime

    corpus = tmp_path / "corpus.txt"
    expected = random_text(corpus, 300, words_per_line=6, vocabulary=80, seed=6)
    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 5,
    }
    # The local runtime with 2 tasks dies mid-way; Spark, with 3, rescales the
    # state before its first job and finishes the input.
    with pytest.raises(SimulatedCrash):
        _run_until_crash(_wordcount(corpus, 2), config, 900)
    result = SparkRuntime(_wordcount(corpus, 3), config, spark=spark_session).run(until_idle=True)
    assert result.errors == []
    _check_layout(config, 3, expected)
