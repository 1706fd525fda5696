"""BrokerSpout as a third party uses it: a toy log source written only against
``statestream.connectors``' public names, driven as a runtime drives a spout.

No server: the "broker" is a list, which can be made to drop its connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from statestream import FakeClock, SourceError
from statestream.connectors import BrokerSpout, Lost
from statestream.connectors._source import BrokerSpout as OldPath
from statestream.testing import mock_context


class ListLog:
    """A broker holding one log per name; ``down`` makes every read fail."""

    def __init__(self, logs: Mapping[str, list[str]]) -> None:
        self.logs = {name: list(entries) for name, entries in logs.items()}
        self.down = False


class ListLogSpout(BrokerSpout):
    """The toy source: each log's entries in order, its position the next index."""

    connector = "ListLogSpout"

    def __init__(self, broker: ListLog, names: Sequence[str], count: int = 2) -> None:
        super().__init__(count, block_ms=0)
        self.broker, self.names = broker, list(names)
        self._next: dict[str, int] = {}  # name -> index of the next entry to emit
        self._read_to: dict[str, int] = {}  # name -> index of the next entry to read

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["line"])

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self._take_share(context, self.names, "log")
        self._next = {n: 0 for n in self._mine}
        self._read_to = dict(self._next)
        self._reconnect_to("list://")

    def _read(self) -> bool | None:
        if self.broker.down:
            raise Lost(ConnectionError("the list went away"))
        caught_up = True
        for name in self._mine:
            start = self._read_to[name]
            batch = self.broker.logs[name][start : start + self.count]
            self._buffer.extend(((name, start + i), [line]) for i, line in enumerate(batch))
            self._read_to[name] = start + len(batch)
            caught_up = caught_up and not batch
        return caught_up

    def _emitted(self, msg_id: Any) -> None:
        self._next[msg_id[0]] = msg_id[1] + 1

    def position(self) -> Any:
        return self._where(self._next, [[n, i, v] for (n, i), v in self._failed()])

    def seek(self, position: Any) -> None:
        self._check_spread(int(position.get("tasks", 1)), position["partitions"])
        self._next = {n: int(i) for n, i in position["partitions"].items()}
        self._read_to = dict(self._next)
        self._restart(((n, int(i)), v) for n, i, v in position["replay"])

    def close(self) -> None:
        return


class Collector:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, Any]] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append((values[0], msg_id))


def opened(
    spout: ListLogSpout, clock: FakeClock, conf: Mapping[str, Any] | None = None
) -> Collector:
    collector = Collector()
    spout.open(dict(conf or {}), mock_context("lines", clock=clock), collector)
    return collector


def drain(spout: ListLogSpout, collector: Collector, ack: bool = True) -> None:
    for _ in range(100):
        before = len(collector.emitted)
        spout.next_tuple()
        if ack and len(collector.emitted) > before:
            spout.ack(collector.emitted[-1][1])
        if spout.exhausted():
            return
    raise AssertionError(f"not exhausted after 100 calls: {collector.emitted}")


def test_the_public_name_is_the_old_paths() -> None:
    assert BrokerSpout is OldPath


def test_a_subclass_supplying_only_its_read_emits_acks_and_is_exhausted() -> None:
    broker = ListLog({"a": ["a0", "a1", "a2"], "b": ["b0"]})
    spout = ListLogSpout(broker, ["a", "b"])
    collector = opened(spout, FakeClock())
    drain(spout, collector)
    assert sorted(line for line, _ in collector.emitted) == ["a0", "a1", "a2", "b0"]
    assert spout.exhausted()
    assert spout.position()["partitions"] == {"a": 3, "b": 1}


def test_a_failed_entry_is_emitted_again_first_and_travels_in_the_position() -> None:
    broker = ListLog({"a": ["a0", "a1", "a2"]})
    spout = ListLogSpout(broker, ["a"])
    collector = opened(spout, FakeClock())
    spout.next_tuple()
    spout.next_tuple()  # a0, a1 emitted, not acked
    spout.fail(collector.emitted[0][1])
    position = spout.position()
    assert position["partitions"] == {"a": 2}
    assert position["replay"] == [["a", 0, ["a0"]]]
    spout.next_tuple()
    assert collector.emitted[-1] == ("a0", ("a", 0))  # the failed one before anything new

    again = ListLogSpout(broker, ["a"])
    replayed = opened(again, FakeClock())
    again.seek(position)
    drain(again, replayed)
    assert [line for line, _ in replayed.emitted] == ["a0", "a2"]


def test_a_lost_broker_is_ridden_out_within_the_bound_then_stops_the_run() -> None:
    clock = FakeClock()
    broker = ListLog({"a": ["a0", "a1"]})
    spout = ListLogSpout(broker, ["a"])
    collector = opened(spout, clock, {"statestream.connectors.reconnect.secs": 5.0})
    broker.down = True
    spout.next_tuple()  # lost: the next attempt in 0.1 s
    spout.next_tuple()  # not due yet: the broker is not asked
    clock.advance(0.2)
    broker.down = False
    drain(spout, collector)
    assert [line for line, _ in collector.emitted] == ["a0", "a1"]

    broker.logs["a"].append("a2")
    broker.down = True
    with pytest.raises(SourceError, match="ListLogSpout 'lines' lost list:// and could not"):
        for _ in range(100):
            spout.next_tuple()
            clock.advance(1.0)
