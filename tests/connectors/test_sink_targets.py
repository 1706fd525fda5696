"""What each sink does beyond the shared protocol: PostgreSQL's append and upsert and
its errors at start and at commit, Redis hash and set targets, the file cut back
to its guard on restore. The protocol itself is in test_sinks.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sink_cases import (
    FIELDS,
    PG_DSN,
    JsonLines,
    PostgresAppend,
    RedisStream,
    SinkCase,
    open_task,
    opened,
    store,
)

from statestream import SinkError
from statestream._checkpoint import Action
from statestream._stateful import apply_action
from statestream.connectors.postgres import PostgresSink
from statestream.connectors.redis_sink import RedisSink
from statestream.testing import make_tuple

pytestmark = pytest.mark.redis


def checkpoint(case: SinkCase, tmp_path: Path, batches: list[list[list[Any]]]) -> None:
    """Each batch through PREPARE(t)/COMMIT(t) on one task of a sink of ``case``."""
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    for t, rows in enumerate(batches):
        for row in rows:
            sink.execute(make_tuple(row, FIELDS))
        apply_action(sink, state, Action.PREPARE, t, True)
        apply_action(sink, state, Action.COMMIT, t, True)


@pytest.fixture
def upsert(tmp_path: Path) -> Iterator[SinkCase]:
    yield from opened(PostgresAppend(tmp_path, mode="upsert"))


@pytest.fixture
def append(tmp_path: Path) -> Iterator[SinkCase]:
    yield from opened(PostgresAppend(tmp_path))


def test_postgres_append_keeps_every_row_and_upsert_the_last_per_key(
    append: PostgresAppend, upsert: PostgresAppend, tmp_path: Path
) -> None:
    # c: the last row of its batch wins, not the largest.
    batches = [[["a", 1], ["b", 1], ["a", 2]], [["c", 2], ["a", 3], ["c", 1]]]
    checkpoint(append, tmp_path / "1", batches)
    checkpoint(upsert, tmp_path / "2", batches)
    assert append.rows() == [["a", 1], ["a", 2], ["a", 3], ["b", 1], ["c", 1], ["c", 2]]
    assert upsert.rows() == [["a", 3], ["b", 1], ["c", 1]]


def test_postgres_errors_at_start_name_the_table_and_hide_the_password(
    append: PostgresAppend, tmp_path: Path
) -> None:
    class Missing(SinkCase):
        def make(self) -> PostgresSink:
            return PostgresSink(
                "no_such_table", FIELDS, dsn=PG_DSN.replace("postgres@", "postgres:s3cret@")
            )

    class Mismatch(SinkCase):
        def make(self) -> PostgresSink:
            return PostgresSink(append.table, ["word", "total"], dsn=PG_DSN)

    class NoKey(SinkCase):
        def make(self) -> PostgresSink:
            return PostgresSink(append.table, FIELDS, dsn=PG_DSN, mode="upsert", key=["word"])

    class Unreachable(SinkCase):
        def make(self) -> PostgresSink:
            return PostgresSink(append.table, FIELDS, dsn="postgresql://u:s3cret@127.0.0.1:1/test")

    expected = {
        Missing: "table 'no_such_table' does not exist in postgresql://postgres:***@",
        Mismatch: f"table '{append.table}' has no column(s) ['total'] (it has ['word', 'n'])",
        NoKey: "has no primary key or unique index on ['word']",
        Unreachable: "cannot reach postgresql://u:***@127.0.0.1:1/test",
    }
    for kind, text in expected.items():
        case = kind()
        case.opened, case.topology = [], append.topology
        with pytest.raises(SinkError) as err:
            open_task(case, store(tmp_path))
        assert text in str(err.value)
        assert "s3cret" not in str(err.value)
        assert "\n" not in str(err.value)


def test_postgres_a_refused_row_stops_with_the_sink_task_row_and_reason(
    append: PostgresAppend, tmp_path: Path
) -> None:
    sink, state = open_task(append, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    for row in (["a", 1], ["b", None], ["c", 3]):
        sink.execute(make_tuple(row, FIELDS))
    apply_action(sink, state, Action.PREPARE, 0, True)
    with pytest.raises(SinkError) as err:
        apply_action(sink, state, Action.COMMIT, 0, True)
    message = str(err.value)
    assert "PostgresSink 'out' task 0" in message
    assert "refused row ['b', None]" in message
    assert 'null value in column "n"' in message
    assert append.rows() == []  # nothing of the batch: one transaction


@pytest.mark.parametrize("target", ["hash", "set"])
def test_redis_hash_and_set_targets(target: str, tmp_path: Path) -> None:
    case = RedisStream(tmp_path)
    case.opened, case.topology = [], "topo-" + case.prefix
    key = case.prefix + ":" + target

    class Target(SinkCase):
        def make(self) -> RedisSink:
            return RedisSink(target, key, guard=case.prefix + ":guard")

    t = Target()
    t.opened, t.topology = case.opened, case.topology
    try:
        checkpoint(t, tmp_path, [[["a", 1], ["b", 1]], [["a", 2]]])
        again, state = open_task(t, store(tmp_path))  # COMMIT(1) re-sent after a restart
        apply_action(again, state, Action.COMMIT, 1, True)
        # The guard's field names the state's lineage: topology/out@<lineage>/0.
        (field,) = case.client.hgetall(case.prefix + ":guard")
        assert field.startswith(f"{t.topology}/out@") and field.endswith("/0")
        assert case.client.hget(case.prefix + ":guard", field) == "1"
        if target == "hash":
            assert case.client.hgetall(key) == {"a": "2", "b": "1"}
        else:
            assert case.client.smembers(key) == {"a", "b"}
    finally:
        for s in case.opened:
            s.cleanup()
        case.close()


def test_a_file_is_cut_back_to_its_guard_on_restore(tmp_path: Path) -> None:
    case = JsonLines(tmp_path)
    case.opened, case.topology = [], "topo-file"
    checkpoint(case, tmp_path, [[["a", 1]], [["b", 1]]])
    out = tmp_path / "out-0.jsonl"
    committed = out.read_bytes()
    with open(out, "ab") as f:  # a crash mid-append left half a batch
        f.write(b'{"word": "c", "n"')
    assert json.loads((tmp_path / "out-0.jsonl.guard").read_text())["length"] == len(committed)
    open_task(case, store(tmp_path))  # the restart: prepare cuts it back
    assert out.read_bytes() == committed
    for s in case.opened:
        s.cleanup()


@pytest.mark.parametrize(
    ("column", "values"),
    [
        # jsonb: the JSON path takes the value's JSON (->), a string stays a JSON string.
        ("jsonb", [{"k": [1, 2]}, "s", 3]),
        # numeric and timestamptz: the JSON path casts the value's text.
        ("numeric", [1.5, 2, None]),
        ("timestamptz", ["2026-11-27T00:00:00+00:00"]),
        # An array column: written by COPY (its JSON text is not its input syntax).
        ("integer[]", [[1, 2], []]),
    ],
)
def test_postgres_writes_each_column_type_as_given(
    column: str, values: list[Any], append: PostgresAppend, tmp_path: Path
) -> None:
    append.conn.execute(f"ALTER TABLE {append.table} ALTER COLUMN n DROP NOT NULL")
    append.conn.execute(f"ALTER TABLE {append.table} ALTER COLUMN n TYPE {column} USING NULL")
    rows = [[f"w{i}", v] for i, v in enumerate(values)]
    checkpoint(append, tmp_path, [rows])
    got = append.conn.execute(f"SELECT word, n FROM {append.table} ORDER BY word").fetchall()
    read = [[w, str(n) if column == "timestamptz" and n is not None else n] for w, n in got]
    if column == "timestamptz":
        rows = [[w, "2026-11-27 00:00:00+00:00"] for w, _ in rows]
    assert read == rows


def test_redis_a_key_of_another_type_is_refused_before_any_write(tmp_path: Path) -> None:
    case = RedisStream(tmp_path)
    case.opened, case.topology = [], "topo-" + case.prefix
    case.client.set(case.key, "not a stream")
    try:
        with pytest.raises(SinkError) as err:
            checkpoint(case, tmp_path, [[["a", 1]]])
        assert "RedisSink 'out' task 0" in str(err.value)
        assert "WRONGTYPE" in str(err.value)
        assert case.client.hgetall(case.prefix + ":guard") == {}  # the guard did not move
        assert case.client.get(case.key) == "not a stream"
    finally:
        for s in case.opened:
            s.cleanup()
        case.close()


class SharedGuard(PostgresAppend):
    """Sinks of one table whose guard table is a fresh one of the test's own."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.guard = f"{self.table}_guard"

    def make(self) -> PostgresSink:
        return PostgresSink(self.table, FIELDS, dsn=PG_DSN, guard_table=self.guard)

    def close(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.guard}")
        super().close()


def start_at_once(case: SharedGuard, provider: Any, tasks: int) -> list[BaseException]:
    """``tasks`` sinks of ``case`` prepared (their targets checked) at the same moment,
    each on a thread of its own; what they raised."""
    import threading

    start = threading.Barrier(tasks)
    failed: list[BaseException] = []

    def one(task: int) -> None:
        start.wait()
        try:
            open_task(case, provider, task)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed


def test_postgres_sinks_starting_at_once_create_the_guard_table_once(tmp_path: Path) -> None:
    # Every sink task of a first run with topology.workers (or on Spark's executors)
    # checks its target at once; CREATE TABLE IF NOT EXISTS racing itself fails one
    # of them on pg_type's unique index, unless they take turns.
    for case in opened(SharedGuard(tmp_path)):
        assert isinstance(case, SharedGuard)
        provider = store(tmp_path)
        for _ in range(3):  # a fresh guard table each time: the race is at its creation
            case.conn.execute(f"DROP TABLE IF EXISTS {case.guard}")
            assert start_at_once(case, provider, 8) == []
        assert case.conn.execute("SELECT to_regclass(%s)", (case.guard,)).fetchone()[0]
