"""A two-phase sink on every runtime: FileSpout -> split -> count -> PostgresSink.

The append table gets every ``(word, k)`` update once, the upsert table the
final count of each word, on the local runtime, on two workers and on Spark
(where the driver writes the target after its commit). The protocol and the
crash points are scripted in tests/connectors/test_sinks.py."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_harness import Runner
from word_bolts import Count, Split

from statestream import FileSpout, TopologyBuilder
from statestream.connectors import PostgresSink

pytestmark = pytest.mark.redis  # needs the real servers (PostgreSQL here)

DSN = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def tables() -> Iterator[tuple[str, str]]:
    import psycopg

    name = f"rt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name}_updates (word text NOT NULL, n integer NOT NULL)")
        conn.execute(f"CREATE TABLE {name}_counts (word text PRIMARY KEY, n integer NOT NULL)")
        yield f"{name}_updates", f"{name}_counts"
        conn.execute(f"DROP TABLE {name}_updates, {name}_counts")


def test_the_tables_equal_the_counts_on_every_runtime(
    runner: Runner, tmp_path: Path, tables: tuple[str, str]
) -> None:
    updates, counts = tables
    words = [f"w{i % 37}" for i in range(3000)]
    corpus = tmp_path / "in.txt"
    corpus.write_text("\n".join(" ".join(words[i : i + 10]) for i in range(0, len(words), 10)))
    b = TopologyBuilder(f"sinks-{uuid.uuid4().hex[:8]}")
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    b.set_bolt("updates", PostgresSink(updates, ["word", "n"], dsn=DSN), 2).shuffle_grouping(
        "count"
    )
    b.set_bolt(
        "counts", PostgresSink(counts, ["word", "n"], dsn=DSN, mode="upsert", key=["word"]), 2
    ).fields_grouping("count", ["word"])
    runner.run(b.build(), {"topology.state.checkpoint.interval.ms": 100}, batch_size=700)
    import psycopg

    with psycopg.connect(DSN) as conn:
        got = Counter(tuple(r) for r in conn.execute(f"SELECT word, n FROM {updates}"))
        final = dict(conn.execute(f"SELECT word, n FROM {counts}").fetchall())
    expected = Counter(words)
    assert final == expected
    every = Counter((w, k) for w, n in expected.items() for k in range(1, n + 1))
    assert got == every  # every (word, k) once: no duplicate, no gap
