"""RedisStreamSpout's reading of raw XREAD replies: the one-field fast path, the
general path (several fields, extra fields), and the errors that name the entry.

Against the real Redis on 127.0.0.1:6379 (see tests/connectors/test_sources.py for
the contract every source meets).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from statestream import FakeClock, SourceError
from statestream.connectors import RedisStreamSpout
from statestream.testing import mock_context

pytestmark = pytest.mark.redis


class Ids:
    """A collector keeping what was emitted."""

    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], Any]] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append((list(values), msg_id))

    def report_error(self, error: BaseException) -> None:
        raise error


@pytest.fixture
def stream() -> Iterator[tuple[Any, str]]:
    import redis

    client = redis.Redis()
    name = f"entries-{uuid.uuid4().hex[:8]}"
    yield client, name
    client.delete(name)
    client.close()


def opened(spout: RedisStreamSpout, *, exactly_once: bool = False) -> Ids:
    ids = Ids()
    context = mock_context("lines", clock=FakeClock())
    context.exactly_once = exactly_once
    spout.open({}, context, ids)  # type: ignore[arg-type]
    return ids


def read_all(spout: RedisStreamSpout) -> Ids:
    ids = opened(spout)
    try:
        for _ in range(10_000):
            before = len(ids.emitted)
            spout.next_tuple()
            if len(ids.emitted) == before and spout.exhausted():
                break
            if len(ids.emitted) > before:
                spout.ack(ids.emitted[-1][1])
    finally:
        spout.close()
    return ids


def test_one_field_and_entries_with_more_fields_mixed(stream: tuple[Any, str]) -> None:
    client, name = stream
    for i in range(30):
        fields = {"line": f"l{i}"} if i % 3 else {"x": "extra", "line": f"l{i}"}
        client.xadd(name, fields)
    spout = RedisStreamSpout(name, ["line"], count=7)
    got = read_all(spout)
    assert [v for v, _ in got.emitted] == [[f"l{i}"] for i in range(30)]
    assert [m[1] for _, m in got.emitted] == [e.decode() for e, _ in client.xrange(name)]


def test_several_fields_in_the_order_asked(stream: tuple[Any, str]) -> None:
    client, name = stream
    for i in range(5):
        client.xadd(name, {"b": f"b{i}", "a": f"a{i}", "c": "unused"})
    got = read_all(RedisStreamSpout(name, ["a", "b"]))
    assert [v for v, _ in got.emitted] == [[f"a{i}", f"b{i}"] for i in range(5)]


def test_an_entry_without_the_field_is_named(stream: tuple[Any, str]) -> None:
    client, name = stream
    client.xadd(name, {"line": "ok"})
    bad = client.xadd(name, {"text": "no line field"}).decode()
    with pytest.raises(SourceError) as err:
        read_all(RedisStreamSpout(name, ["line"]))
    message = str(err.value)
    assert bad in message and "'line'" in message and name in message


def test_a_value_that_is_not_utf8_is_named(stream: tuple[Any, str]) -> None:
    client, name = stream
    client.xadd(name, {"line": "fine"})
    bad = client.xadd(name, {"line": b"\xff\xfe"}).decode()
    with pytest.raises(SourceError, match="not UTF-8") as err:
        read_all(RedisStreamSpout(name, ["line"]))
    assert bad in str(err.value)


@pytest.mark.parametrize("exactly_once", [False, True])
def test_predecessors_are_kept_only_for_at_least_once(
    stream: tuple[Any, str], exactly_once: bool
) -> None:
    # acked_position() is asked only by at-least-once runs; exactly-once ones
    # restart from position() and keep no predecessor an entry.
    client, name = stream
    for i in range(20):
        client.xadd(name, {"line": f"l{i}"})
    spout = RedisStreamSpout(name, ["line"])
    ids = opened(spout, exactly_once=exactly_once)
    try:
        for _ in range(20):
            spout.next_tuple()
        assert len(ids.emitted) == 20
        assert len(spout._before) == (0 if exactly_once else 20)
        spout.ack(ids.emitted[0][1])
        assert spout.position()["partitions"] == {name: ids.emitted[-1][1][1]}
        if not exactly_once:
            first_unacked = ids.emitted[0][1][1]
            assert spout.acked_position()["partitions"] == {name: first_unacked}
        # A restored position's failed entries, too.
        failed = ids.emitted[3][1][1]
        spout.seek({"partitions": {name: ids.emitted[5][1][1]}, "replay": [[name, failed, ["x"]]]})
        assert len(spout._before) == (0 if exactly_once else 1)
    finally:
        spout.close()
