"""What a sink is handed at once: the local runtime's batch entry, and the stage of a
target that keeps the last row of each key.

The local runtime hands a sink task everything waiting in its inbox through
``TwoPhaseSink.execute_batch`` and acks each tuple itself; a row that cannot be
made must still fail only its own tuple (the batch is executed again one tuple
at a time). A sink whose target keeps the last row of each key (PostgreSQL
upsert, a Redis hash or set) stages one row a key, the last one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sink_cases import FIELDS, PG_DSN, PostgresAppend, SinkCase, open_task, opened, store

from statestream import SinkError, TopologyBuilder, Tuple
from statestream._checkpoint import Action
from statestream._stateful import apply_action
from statestream.connectors import FileSink
from statestream.connectors.postgres import PostgresSink
from statestream.connectors.redis_sink import RedisSink
from statestream.connectors.sink import STAGE_KEY, TwoPhaseSink
from statestream.runtime.local import LocalRuntime
from statestream.testing import RewindableListSpout, make_tuple

pytestmark = pytest.mark.redis


#: The size of each batch a PickyFileSink task was handed (by any instance: a rewind
#: replaces the task's instance).
BATCHES: list[int] = []


class PickyFileSink(FileSink):
    """A FileSink whose ``row`` refuses the word ``bad``; records each batch's size."""

    def row(self, tup: Tuple) -> list[Any]:
        if tup.values[0] == "bad":
            raise ValueError("no bad words")
        return super().row(tup)

    def execute_batch(self, tuples: list[Tuple]) -> None:
        BATCHES.append(len(tuples))
        super().execute_batch(tuples)


def test_a_row_that_cannot_be_made_fails_its_own_tuple_only(tmp_path: Path) -> None:
    words = [f"w{i}" for i in range(400)]
    words[123] = "bad"
    BATCHES.clear()
    sink = PickyFileSink(tmp_path / "out.jsonl")
    builder = TopologyBuilder("batch")
    builder.set_spout("words", RewindableListSpout(words, ["word"]))
    builder.set_bolt("out", sink).shuffle_grouping("words")
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 20,
        "statestream.retry.initial.ms": 1,
        "statestream.deadletter.path": str(tmp_path / "dead.jsonl"),
    }
    result = LocalRuntime(builder.build(), conf).run(until_idle=True)
    assert result.reason == "idle"
    written = [json.loads(line)["word"] for line in (tmp_path / "out.jsonl").read_text().split()]
    # Every word but the bad one, once: a batch holding it was taken one tuple at a
    # time, so its other tuples were written and only it was dead-lettered.
    assert sorted(written) == sorted(w for w in words if w != "bad")
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().split("\n") if line]
    assert [d["values"] for d in dead] == [["bad"]]
    assert "no bad words" in dead[0]["error"]
    # The runtime did hand the sink whole inboxes, the bad word's among them.
    assert max(BATCHES) > 1


class EvensOnly(FileSink):
    """A FileSink whose own ``execute`` drops odd numbers (acking them)."""

    def execute(self, tuple: Tuple) -> None:
        if tuple.values[0] % 2:
            self.collector.ack(tuple)
            return
        super().execute(tuple)


def test_a_sink_with_its_own_execute_gets_every_tuple_through_it(tmp_path: Path) -> None:
    builder = TopologyBuilder("own-execute")
    builder.set_spout("numbers", RewindableListSpout(list(range(300)), ["n"]))
    builder.set_bolt("out", EvensOnly(tmp_path / "out.jsonl")).shuffle_grouping("numbers")
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    result = LocalRuntime(builder.build(), conf).run(until_idle=True)
    assert result.reason == "idle"
    written = [json.loads(line)["n"] for line in (tmp_path / "out.jsonl").read_text().split()]
    assert sorted(written) == list(range(0, 300, 2))


@pytest.fixture
def upsert(tmp_path: Path) -> Iterator[SinkCase]:
    yield from opened(PostgresAppend(tmp_path, mode="upsert"))


def stage_rows(state: Any) -> list[list[Any]]:
    stage = state.get(STAGE_KEY)
    rows: list[list[Any]] = json.loads(stage["json"])
    return rows


def test_an_upsert_stages_the_last_row_of_each_key(upsert: SinkCase, tmp_path: Path) -> None:
    sink, state = open_task(upsert, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    rows = [["a", 1], ["b", 1], ["a", 2], ["c", 5], ["b", 2], ["a", 3]]
    sink.execute_batch([make_tuple(r, FIELDS) for r in rows[:3]])
    for r in rows[3:]:
        sink.execute(make_tuple(r, FIELDS))
    apply_action(sink, state, Action.PREPARE, 0, True)
    assert stage_rows(state) == [["a", 3], ["b", 2], ["c", 5]]
    # Prepared again (a PREPARE sent again with more rows): still one row a key.
    sink.execute(make_tuple(["c", 1], FIELDS))
    apply_action(sink, state, Action.PREPARE, 0, True)
    assert stage_rows(state) == [["a", 3], ["b", 2], ["c", 1]]
    apply_action(sink, state, Action.COMMIT, 0, True)
    assert upsert.rows() == [["a", 3], ["b", 2], ["c", 1]]


class RedisHash(SinkCase):
    def __init__(self, key: str) -> None:
        self.key = key

    def make(self) -> RedisSink:
        return RedisSink("hash", self.key)


def test_a_redis_hash_stages_the_last_value_of_each_field(tmp_path: Path) -> None:
    import uuid

    import redis

    key = f"sink-batch-{uuid.uuid4().hex[:10]}"
    client = redis.Redis()
    try:
        for case in opened(RedisHash(key)):
            sink, state = open_task(case, store(tmp_path))
            apply_action(sink, state, Action.INITSTATE, -1, False)
            sink.execute_batch([make_tuple(r, FIELDS) for r in [["x", 1], ["y", 1], ["x", 2]]])
            apply_action(sink, state, Action.PREPARE, 0, True)
            assert stage_rows(state) == [["x", 2], ["y", 1]]
            apply_action(sink, state, Action.COMMIT, 0, True)
            assert client.hgetall(key) == {b"x": b"2", b"y": b"1"}
    finally:
        client.delete(key)
        client.close()


@pytest.fixture
def append(tmp_path: Path) -> Iterator[SinkCase]:
    yield from opened(PostgresAppend(tmp_path))


def test_an_append_stage_keeps_the_order_of_batches_and_rows(
    append: SinkCase, tmp_path: Path
) -> None:
    sink, state = open_task(append, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    rows = [["w", i] for i in range(9)]
    sink.execute_batch([make_tuple(r, FIELDS) for r in rows[0:2]])
    sink.execute_batch([])
    sink.execute_batch([make_tuple(r, FIELDS) for r in rows[2:4]])
    sink.execute(make_tuple(rows[4], FIELDS))  # one at a time, between batches
    sink.execute_batch([make_tuple(r, FIELDS) for r in rows[5:7]])
    apply_action(sink, state, Action.PREPARE, 0, True)
    assert stage_rows(state) == rows[:7]
    # Prepared again (a PREPARE sent again with more rows): its first stage first.
    sink.execute_batch([make_tuple(r, FIELDS) for r in rows[7:]])
    apply_action(sink, state, Action.PREPARE, 0, True)
    assert stage_rows(state) == rows
    apply_action(sink, state, Action.COMMIT, 0, True)
    assert append.rows() == rows
    # Rolled back: what was buffered is dropped, by batch or one at a time.
    sink.execute_batch([make_tuple(["x", 1], FIELDS)])
    sink.execute(make_tuple(["y", 1], FIELDS))
    apply_action(sink, state, Action.ROLLBACK, 0, True)
    apply_action(sink, state, Action.PREPARE, 1, True)
    assert state.get(STAGE_KEY)["txid"] == 0  # nothing staged for 1


class SetRowSink(PostgresSink):
    """An append sink whose row for the word ``bad`` holds a set, which orjson refuses."""

    def row(self, tup: Tuple) -> list[Any]:
        word, n = tup.values
        return [word, {n} if word == "bad" else n]


class SetRow(PostgresAppend):
    def make(self) -> TwoPhaseSink:
        return SetRowSink(self.table, FIELDS, dsn=PG_DSN)


def test_a_batch_that_cannot_be_encoded_is_named_at_prepare(tmp_path: Path) -> None:
    for case in opened(SetRow(tmp_path)):
        sink, state = open_task(case, store(tmp_path))
        apply_action(sink, state, Action.INITSTATE, -1, False)
        sink.execute_batch([make_tuple(["ok", 1], FIELDS)])
        sink.execute_batch([make_tuple(r, FIELDS) for r in [["a", 1], ["bad", 2]]])
        sink.execute_batch([make_tuple(["ok", 2], FIELDS)])
        with pytest.raises(SinkError, match="cannot be staged as JSON"):
            apply_action(sink, state, Action.PREPARE, 0, True)
