"""The sinks under the conformance suite (tests/connectors/test_sinks.py), one case each.

A :class:`SinkCase` builds a sink of its kind over one target (a table, a
Redis key, a file) and reads back what the target holds, as sorted rows.
``task`` lets a test run two tasks of one sink. :func:`open_task` prepares
a sink as a runtime would, with a TopologyContext over a sqlite state
store, and returns it with its state.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_server import REDIS_HOST, REDIS_PORT, require_real_redis

from statestream import FakeClock, KeyValueState, TopologyContext
from statestream._registry import open_provider
from statestream._state import StateProvider
from statestream._tuple import Fields
from statestream.connectors.sink import TwoPhaseSink
from statestream.testing import MockCollector

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
FIELDS = ["word", "n"]


class SinkCase:
    name = ""
    #: Every sink a test opened: cleaned up at the end (a crashed one is abandoned
    #: mid-test, but its connection must not outlive the test).
    opened: list[TwoPhaseSink]
    topology: str

    def make(self) -> TwoPhaseSink:
        raise NotImplementedError

    def rows(self) -> list[list[Any]]:
        """What the target holds, sorted."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class PostgresAppend(SinkCase):
    name = "postgres"

    def __init__(self, tmp_path: Path, mode: str = "append") -> None:
        import psycopg

        self.conn = psycopg.connect(PG_DSN, autocommit=True)
        self.table = f"sink_{uuid.uuid4().hex[:10]}"
        self.mode = mode
        key = "PRIMARY KEY" if mode == "upsert" else ""
        self.conn.execute(f"CREATE TABLE {self.table} (word text {key}, n integer NOT NULL)")

    def make(self) -> TwoPhaseSink:
        from statestream.connectors.postgres import PostgresSink

        key = ["word"] if self.mode == "upsert" else []
        return PostgresSink(self.table, FIELDS, dsn=PG_DSN, mode=self.mode, key=key)

    def rows(self) -> list[list[Any]]:
        return sorted(list(r) for r in self.conn.execute(f"SELECT word, n FROM {self.table}"))

    def close(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.table}")
        self.conn.close()


class RedisStream(SinkCase):
    name = "redis"

    def __init__(self, tmp_path: Path) -> None:
        require_real_redis()
        import redis

        self.client = redis.Redis(REDIS_HOST, REDIS_PORT, decode_responses=True)
        self.prefix = f"sinktest:{uuid.uuid4().hex[:10]}"
        self.key = self.prefix + ":out"

    def make(self) -> TwoPhaseSink:
        from statestream.connectors.redis_sink import RedisSink

        return RedisSink(
            "stream",
            self.key,
            url=f"redis://{REDIS_HOST}:{REDIS_PORT}/0",
            guard=self.prefix + ":guard",
        )

    def rows(self) -> list[list[Any]]:
        entries = self.client.xrange(self.key)
        return sorted([f["word"], int(f["n"])] for _, f in entries)

    def close(self) -> None:
        for k in self.client.scan_iter(self.prefix + ":*"):
            self.client.delete(k)
        self.client.close()


class KafkaTopic(SinkCase):
    """A topic of two partitions on the test's tansu broker, read as a ``read_committed``
    consumer gets it (kafka_committed: tansu does not hide aborted records itself)."""

    name = "kafka"

    def __init__(self, tmp_path: Path, broker: Any) -> None:
        from tests.kafka_broker import unique_topic

        self.bootstrap = broker.bootstrap
        self.topic = unique_topic("sink")
        broker.create_topic(self.topic, 2)

    def make(self) -> TwoPhaseSink:
        from statestream.connectors.kafka_sink import KafkaSink

        return KafkaSink(self.topic, bootstrap=self.bootstrap)

    def rows(self) -> list[list[Any]]:
        from kafka_committed import committed_records

        values = [
            json.loads(r.value or b"") for r in committed_records(self.bootstrap, self.topic, 2)
        ]
        return sorted([v["word"], v["n"]] for v in values)


class JsonLines(SinkCase):
    name = "file"

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "out.jsonl"

    def make(self) -> TwoPhaseSink:
        from statestream.connectors.files import FileSink

        return FileSink(self.path)

    def rows(self) -> list[list[Any]]:
        # Two tasks in open_task's context: each writes out-<task>.jsonl.
        lines = [
            line for p in self.path.parent.glob("out*.jsonl") for line in p.read_text().splitlines()
        ]
        return sorted([d["word"], d["n"]] for d in map(json.loads, lines))


CASES: dict[str, type[SinkCase]] = {
    "postgres": PostgresAppend,
    "redis": RedisStream,
    "file": JsonLines,
    "kafka": KafkaTopic,
}


def case_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkCase]:
    if request.param == "kafka":
        case: SinkCase = KafkaTopic(tmp_path, request.getfixturevalue("kafka_broker"))
    else:
        case = CASES[request.param](tmp_path)
    yield from opened(case)


def opened(case: SinkCase) -> Iterator[SinkCase]:
    """``case`` for one test: its own topology name, and at the end its sinks cleaned up
    and the case closed."""
    case.opened = []
    # Its own topology name: the guards of tests running at once stay apart.
    case.topology = f"topo-{uuid.uuid4().hex[:10]}"
    try:
        yield case
    finally:
        for sink in case.opened:
            sink.cleanup()
        case.close()


def store(tmp_path: Path) -> StateProvider:
    """A new provider over the test's sqlite store: each call is a restart."""
    return open_provider("sqlite", {"path": str(tmp_path / "state.db")}, scope="topo")


def open_task(
    case: SinkCase, provider: StateProvider, task: int = 0
) -> tuple[TwoPhaseSink, KeyValueState]:
    """A new sink of ``case`` prepared as task ``task`` of component ``out`` of
    topology ``case.topology``, with its state."""
    sink = case.make()
    case.opened.append(sink)
    context = TopologyContext(
        case.topology,
        "out",
        task,
        task + 1,
        {"out": [1, 2], "src": [0]},
        {"src": {"default": Fields(FIELDS)}},
        state_opener=provider.get_state,
        clock=FakeClock(),
        sources=[("src", "default")],
    )
    sink.prepare({}, context, MockCollector())
    return sink, provider.get_state(context.state_namespace)
