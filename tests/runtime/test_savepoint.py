"""Savepoints through the Python API, on every provider: a word count crashed mid-run on
one store is exported (``statestream.export_state``), imported into another
(``statestream.import_state``) under a changed topology (``count`` renamed
``total``, 2 tasks -> 3) and finished there, with exact counts.

The memory provider's state lives in one process: these tests export and
import it within the test's process, which is what the API offers for it
(the CLI refuses it: tests/cli/test_state_export.py).
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_server import REDIS_HOST, REDIS_PORT, delete_prefix, require_real_redis, unique_prefix
from word_bolts import Count, Split

from statestream import (
    FileSpout,
    Topology,
    TopologyBuilder,
    export_state,
    import_state,
    run,
)
from statestream.testing import (
    CrashPoint,
    StepClock,
    committed_state,
    crash_and_recover,
    crash_at_checkpoint,
    random_text,
)

# Each clock reading moves 0.3 ms: the checkpoints (every 5 ms) fall at the same
# tuples on every machine, so the crash points below are always reached.
STEP = 0.0003


def word_count(corpus: Path, counter: str = "count", tasks: int = 2) -> Topology:
    b = TopologyBuilder("savepoints")
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt(counter, Count(), tasks).fields_grouping("split", ["word"])
    return b.build()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """A new store of each provider, by name."""
    prefix = unique_prefix("sssave")
    yield {
        "memory": {"topology.state.provider.config": {"name": f"savepoint-{uuid.uuid4().hex}"}},
        "memory2": {"topology.state.provider.config": {"name": f"savepoint-{uuid.uuid4().hex}"}},
        "sqlite": {"topology.state.provider.config": {"path": str(tmp_path / "state.db")}},
        "redis": {
            "topology.state.provider.config": {
                "host": REDIS_HOST,
                "port": REDIS_PORT,
                "key_prefix": prefix,
            }
        },
    }
    delete_prefix(prefix)


def _config(stores: dict[str, dict[str, Any]], which: str) -> dict[str, Any]:
    if which == "redis":
        require_real_redis()
    return {
        "topology.state.provider": which.rstrip("2"),
        **stores[which],
        "topology.state.checkpoint.interval.ms": 5,
        "topology.executor.receive.buffer.size": 32,
    }


MOVES = [
    pytest.param("memory", "memory2", id="memory-to-memory"),
    pytest.param("memory", "sqlite", id="memory-to-sqlite"),
    pytest.param("sqlite", "redis", id="sqlite-to-redis", marks=pytest.mark.redis),
    pytest.param("redis", "memory", id="redis-to-memory", marks=pytest.mark.redis),
]
POINTS = [
    # PREPARING(2) stored, every task prepared: the export rolls txid 2 back.
    pytest.param(crash_at_checkpoint("count", "prepare", after=True, n=3), id="prepared"),
    # COMMITTING(2) stored, task 0 committed, task 1 not: the export commits task 1.
    pytest.param(crash_at_checkpoint("count", "commit", after=True, task=0, n=3), id="half-commit"),
]


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize(("source", "target"), MOVES)
def test_a_crashed_run_moves_to_another_store_and_finishes_exactly(
    tmp_path: Path, stores: dict[str, dict[str, Any]], source: str, target: str, point: CrashPoint
) -> None:
    corpus = tmp_path / "corpus.txt"
    expected = random_text(corpus, 800, words_per_line=6, vocabulary=120, seed=3)
    src, dst = _config(stores, source), _config(stores, target)
    before, after = word_count(corpus), word_count(corpus, "total", 3)
    savepoint = tmp_path / "savepoint.jsonl"
    exported: list[Any] = []

    def move() -> None:
        exported.append(export_state(savepoint, "savepoints", src))
        done = import_state(savepoint, after, dst, rename={"count": "total"})
        assert done.txid == exported[0].txid
        assert "renamed: 'count' -> 'total'" in done.notes
        assert any(n.startswith("re-partitioned: 'total' from 2 to 3 tasks") for n in done.notes)

    crash_and_recover(before, src, at=point, clock=StepClock(STEP), between=move)
    # Mid-run: the restored checkpoint holds some words, not all.
    assert exported[0].txid == 1 if "prepare" in str(point) else 2
    imported = committed_state(after, dst, "total")
    assert 0 < sum(imported.values()) < sum(expected.values())
    result = run(after, dst, until_idle=True, clock=StepClock(STEP))
    assert result.reason == "idle" and result.errors == []
    assert committed_state(after, dst, "total") == dict(expected)


def test_a_savepoint_is_the_same_whichever_store_wrote_it(
    tmp_path: Path, stores: dict[str, dict[str, Any]]
) -> None:
    # Exported from memory, imported into sqlite as it is, exported again: the same
    # entries, so the file holds nothing of the store it came from.
    corpus = tmp_path / "corpus.txt"
    random_text(corpus, 200, words_per_line=6, vocabulary=50, seed=5)
    topo = word_count(corpus)
    mem, lite = _config(stores, "memory"), _config(stores, "sqlite")
    run(topo, mem, until_idle=True, clock=StepClock(STEP))
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl.gz"
    export_state(first, topo, mem)
    import_state(first, "savepoints", lite)
    export_state(second, "savepoints", lite)
    import gzip

    assert collections.Counter(first.read_bytes().splitlines()) == collections.Counter(
        gzip.decompress(second.read_bytes()).splitlines()
    )
