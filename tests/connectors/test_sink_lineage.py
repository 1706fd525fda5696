"""A sink writes everything after the state is reset (issue 44, item 1).

A sink's guard ``(topology, sink, task) -> txid`` lives in its target and outlives
the state: after ``statestream state clear`` (or on a new store) txids count from
0 again, and a guard from before made every checkpoint up to it look written
already: 0 rows, exit 0. Guards now name the lineage of the state they belong to
(``TwoPhaseSink.guard_key``: born with the sink task's first checkpoint, gone
with the state), so one of another lineage is never taken as written.

Each case runs the word count into five sinks (PostgreSQL append, Redis hash,
a file, a Kafka topic, a user's own ``TwoPhaseSink`` over sqlite) to its end, resets the state
(``statestream state clear``, or the store's file deleted), empties the targets
as a user would, and runs a longer input (more checkpoints than the first run
had): every target holds exactly the second run's results.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from statestream import TopologyBuilder
from statestream._spouts import FileSpout
from statestream.connectors import FileSink, KafkaSink, PostgresSink, RedisSink, TwoPhaseSink

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from kafka_committed import committed_records
from runtime_harness import Runner
from word_bolts import Count, Split

pytestmark = pytest.mark.kafka

DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
WORDS = [f"w{i % 37}" for i in range(600)]


class SqliteSink(TwoPhaseSink):
    """A user's own sink, as the TwoPhaseSink docstring writes it."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def open_target(self) -> None:
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.db.execute("CREATE TABLE IF NOT EXISTS out (word TEXT, n INT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS guard (k TEXT PRIMARY KEY, txid INT)")

    def write(self, rows: list[list[Any]], txid: int) -> bool:
        key = "/".join(map(str, self.guard_key))
        self.db.execute("BEGIN IMMEDIATE")
        try:
            seen = self.db.execute("SELECT txid FROM guard WHERE k = ?", (key,)).fetchone()
            if seen is not None and seen[0] >= txid:
                self.db.execute("ROLLBACK")
                return False
            self.db.executemany("INSERT INTO out VALUES (?, ?)", rows)
            self.db.execute("INSERT OR REPLACE INTO guard VALUES (?, ?)", (key, txid))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return True

    def close_target(self) -> None:
        self.db.close()


class Targets:
    def __init__(self, tmp_path: Path, kafka: Any) -> None:
        import psycopg
        import redis

        self.id = uuid.uuid4().hex[:10]
        self.name = f"lineage-{self.id}"
        self.pg = psycopg.connect(DSN, autocommit=True)
        self.table = f"lineage_{self.id}"
        self.pg.execute(f"CREATE TABLE {self.table} (word text, n integer)")
        self.redis = redis.Redis.from_url(REDIS, decode_responses=True)
        self.hash, self.guard = f"lineage:{self.id}", f"lineage:{self.id}:guard"
        self.file = tmp_path / "out.jsonl"
        self.db = tmp_path / "user.db"
        self.kafka = kafka
        self.topic = f"lineage-{self.id}"
        kafka.create_topic(self.topic, 2)
        self.emptied: set[tuple[int, int]] = set()  # records before the last empty()

    def topology(self, corpus: Path) -> Any:
        b = TopologyBuilder(self.name)
        b.set_spout("lines", FileSpout(str(corpus)))
        b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
        b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
        sinks: dict[str, TwoPhaseSink] = {
            "pg": PostgresSink(
                self.table, ["word", "n"], dsn=DSN, guard_table=f"{self.table}_guard"
            ),
            "redis": RedisSink("hash", self.hash, REDIS, guard=self.guard),
            "file": FileSink(str(self.file)),
            "user": SqliteSink(str(self.db)),
            "kafka": KafkaSink(self.topic, bootstrap=self.kafka.bootstrap),
        }
        for cid, sink in sinks.items():
            b.set_bolt(cid, sink).fields_grouping("count", ["word"])
        return b.build()

    def empty(self) -> None:
        """What a user does to the targets with the state: the rows go, the guards stay."""
        self.pg.execute(f"TRUNCATE {self.table}")
        self.redis.delete(self.hash)
        self.file.unlink()
        with sqlite3.connect(self.db) as db:
            db.execute("DELETE FROM out")
        # A topic cannot be emptied: the records written so far are skipped when read.
        self.emptied = {(r.partition, r.offset) for r in self.records()}

    def records(self) -> list[Any]:
        return committed_records(self.kafka.bootstrap, self.topic, 2)

    def read(self) -> dict[str, Any]:
        with sqlite3.connect(self.db) as db:
            user = Counter(map(tuple, db.execute("SELECT word, n FROM out")))
        lines = self.file.read_bytes().splitlines()
        return {
            "pg": Counter(map(tuple, self.pg.execute(f"SELECT word, n FROM {self.table}"))),
            "redis": {w: int(n) for w, n in self.redis.hgetall(self.hash).items()},
            "file": Counter((r["word"], r["count"]) for r in map(orjson.loads, lines)),
            "user": user,
            "kafka": Counter(
                (v["word"], v["count"])
                for v in (
                    orjson.loads(r.value or b"")
                    for r in self.records()
                    if (r.partition, r.offset) not in self.emptied
                )
            ),
        }

    def close(self) -> None:
        self.pg.execute(f"DROP TABLE IF EXISTS {self.table}, {self.table}_guard")
        self.pg.close()
        self.redis.delete(self.hash, self.guard)
        self.redis.close()


def expected(words: list[str]) -> dict[str, Any]:
    counts = Counter(words)
    every = Counter((w, k) for w, n in counts.items() for k in range(1, n + 1))
    return {"pg": every, "redis": dict(counts), "file": every, "user": every, "kafka": every}


@pytest.fixture
def targets(tmp_path: Path, kafka_broker: Any) -> Iterator[Targets]:
    t = Targets(tmp_path, kafka_broker)
    try:
        yield t
    finally:
        t.close()


def corpus(tmp_path: Path, words: list[str]) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("\n".join(" ".join(words[i : i + 10]) for i in range(0, len(words), 10)))
    return path


def clear(tmp_path: Path, name: str) -> str:
    """``statestream state clear`` as a user runs it; its output."""
    conf = tmp_path / "state.yaml"
    conf.write_text(
        f"topology.state.provider: sqlite\ntopology.state.provider.config:\n"
        f"  path: {tmp_path / 'state.db'}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "statestream", "state", "clear", "--yes", "--topology", name,
         "-c", str(conf)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


@pytest.fixture(params=["local", "workers", pytest.param("spark", marks=pytest.mark.spark)])
def runner(request: pytest.FixtureRequest, tmp_path: Path) -> Runner:
    if request.param == "spark":
        return Runner("spark", tmp_path, request.getfixturevalue("spark_session"))
    return Runner(request.param, tmp_path)


CONF = {"topology.state.checkpoint.interval.ms": 100, "statestream.spark.batch.size": 20}
# A longer input the second time: more checkpoints than the first run took.
MORE = WORDS + [f"x{i % 11}" for i in range(400)]


def test_every_sink_writes_everything_after_state_clear(
    runner: Runner, targets: Targets, tmp_path: Path
) -> None:
    runner.run(targets.topology(corpus(tmp_path, WORDS)), CONF)
    assert targets.read() == expected(WORDS)
    said = clear(tmp_path, targets.name)
    assert "sinks' targets" in said  # it says what it does not clear
    targets.empty()
    runner.run(targets.topology(corpus(tmp_path, MORE)), CONF)
    assert targets.read() == expected(MORE)


def test_every_sink_writes_everything_on_a_new_store(
    targets: Targets, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner = Runner("local", tmp_path)
    runner.run(targets.topology(corpus(tmp_path, WORDS)), CONF)
    (tmp_path / "state.db").unlink()  # the store deleted (or another db, another file)
    targets.empty()
    with caplog.at_level("WARNING", logger="statestream"):
        runner.run(targets.topology(corpus(tmp_path, MORE)), CONF)
    assert targets.read() == expected(MORE)
    # Each sink task said once what its target held of the earlier lineage
    # (the user's own sink lists no guards: it says nothing).
    said = [r.getMessage() for r in caplog.records if "earlier lineage" in r.getMessage()]
    assert sorted(m.split(":")[0] for m in said) == [
        "FileSink 'file' task 0",
        "KafkaSink 'kafka' task 0",
        "PostgresSink 'pg' task 0",
        "RedisSink 'redis' task 0",
    ], said
