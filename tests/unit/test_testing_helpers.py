"""``statestream.testing`` for users' tests: reset, spout records, a rewindable list
spout, one bolt under a mock collector, the shipped pytest fixture."""

from __future__ import annotations

import collections
import uuid
from typing import Any

import pytest
from word_bolts import Count

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    FailedException,
    OutputFieldsDeclarer,
    TopologyBuilder,
    Tuple,
    run,
)
from statestream._registry import open_provider
from statestream.pytest_plugin import statestream_reset  # noqa: F401  (a fixture)
from statestream.testing import (
    ListSpout,
    MockBasicCollector,
    MockCollector,
    RewindableListSpout,
    committed_state,
    crash_and_recover,
    crash_at_tuple,
    make_tuple,
    memory_state,
    mock_context,
    reset,
    sink,
    spout_record,
)


class Split(BasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if tuple["line"] == "poison":
            raise FailedException("not a sentence")
        for word in tuple["line"].split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


_FAILED_ONCE: set[int] = set()


class FailOnce(Bolt):
    """Fails items 2 and 5 the first time it sees them."""

    def execute(self, tuple: Tuple) -> None:
        v = tuple["value"]
        if v in (2, 5) and v not in _FAILED_ONCE:
            _FAILED_ONCE.add(v)
            self.collector.fail(tuple)
        else:
            self.collector.ack(tuple)


def test_reset_empties_the_memory_provider() -> None:
    name = f"leak-{uuid.uuid4().hex}"
    with open_provider("memory", {"name": name}) as provider:
        state = provider.get_state("count-0")
        state.put("w", 3)
        state.commit()
    reset()
    with open_provider("memory", {"name": name}) as provider:
        assert dict(provider.get_state("count-0").items()) == {}


def test_a_named_list_spout_records_its_acks_and_fails_for_the_test() -> None:
    _FAILED_ONCE.clear()
    b = TopologyBuilder("record")
    b.set_spout("items", ListSpout(list(range(8)), name="items"))
    b.set_bolt("flaky", FailOnce(), 2).shuffle_grouping("items")
    run(b.build(), until_idle=True)
    record = spout_record("items")
    assert sorted(record.failed) == [2, 5]
    assert sorted(record.acked) == list(range(8))


def _words_topology(spout: Any) -> Any:
    b = TopologyBuilder("words")
    b.set_spout("words", spout)
    b.set_bolt("count", Count(), 2).fields_grouping("words", ["word"])
    return b.build()


def test_a_rewindable_list_spout_gives_exactly_once_after_a_crash() -> None:
    words = [f"w{i % 7}" for i in range(300)]
    config = {
        "topology.state.provider": "memory",
        "topology.state.provider.config": {"name": f"rw-{uuid.uuid4().hex}"},
        "topology.state.checkpoint.interval.ms": 2,
        "statestream.state.exactly.once": True,  # refused for a spout that cannot rewind
    }
    topo = _words_topology(RewindableListSpout(words, fields=["word"]))
    crash_and_recover(topo, config, at=crash_at_tuple("count", 200))
    assert committed_state(topo, config, "count") == dict(collections.Counter(words))


def test_the_plain_list_spout_cannot_rewind_and_says_so() -> None:
    from statestream import ConfigError

    topo = _words_topology(ListSpout(["a"], fields=["word"]))
    with pytest.raises(ConfigError, match=r"spout 'words' \(ListSpout\) cannot rewind"):
        run(topo, {"statestream.state.exactly.once": True}, until_idle=True)


def test_rewindable_list_spout_position_holds_the_failed_items() -> None:
    spout = RewindableListSpout(["a", "b", "c", "d"])
    collector = _SpoutCollector()
    spout.open({}, mock_context("items"), collector)
    spout.seek(None)
    for _ in range(3):
        spout.next_tuple()
    spout.fail(1)
    position = spout.position()
    assert position == {"next": 3, "replay": [1]}
    again = RewindableListSpout(["a", "b", "c", "d"])
    again_out = _SpoutCollector()
    again.open({}, mock_context("items"), again_out)
    again.seek(position)
    for _ in range(3):
        again.next_tuple()
    assert again_out.emitted == [["b"], ["d"]]
    assert not again.exhausted()  # b and d wait for their acks
    again.ack(1)
    again.ack(3)
    assert again.exhausted()


class _SpoutCollector:
    def __init__(self) -> None:
        self.emitted: list[list[Any]] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append(list(values))

    def emit_direct(self, task: int, values: Any, msg_id: Any = None, stream: str = "") -> None:
        raise AssertionError("no direct emits here")

    def report_error(self, error: BaseException) -> None:
        raise AssertionError(error)


def test_one_stateful_bolt_under_a_mock_collector() -> None:
    bolt = Count()
    collector = MockCollector()
    bolt.prepare({}, mock_context("count"), collector)
    bolt.init_state(memory_state())
    first, second = make_tuple(["a"], ["word"]), make_tuple(["a"], ["word"])
    bolt.execute(first)
    bolt.execute(second)
    assert collector.values() == [["a", 1], ["a", 2]]
    assert [e.anchors for e in collector.emitted] == [[first], [second]]
    assert collector.acked == [first, second] and collector.failed == []
    assert bolt.state.get("a") == 2


def test_a_basic_bolt_under_a_mock_basic_collector() -> None:
    bolt = Split()
    bolt.prepare({}, mock_context("split"))
    collector = MockBasicCollector()
    bolt.execute(make_tuple(["to be or"], ["line"]), collector)
    assert collector.values() == [["to"], ["be"], ["or"]]
    with pytest.raises(FailedException):
        bolt.execute(make_tuple(["poison"], ["line"]), collector)


def test_make_tuple_reads_by_field_and_says_what_does_not_fit() -> None:
    t = make_tuple(["w", 3], ["word", "count"], component="split", stream="words", task_index=1)
    assert (t["word"], t[1], t.source_component, t.source_stream) == ("w", 3, "split", "words")
    assert make_tuple([1, 2])["f1"] == 2
    with pytest.raises(ValueError, match=r"2 values \['w', 3\] for the fields \['word'\]"):
        make_tuple(["w", 3], ["word"])


def test_mock_context_gives_the_task_and_the_clock() -> None:
    from statestream.testing import FakeClock

    clock = FakeClock(5.0)
    ctx = mock_context("count", task_index=1, parallelism=3, clock=clock)
    assert (ctx.component_id, ctx.task_index, ctx.parallelism) == ("count", 1, 3)
    assert ctx.clock.monotonic() == 5.0
    assert ctx.state_namespace == "count-1"


def test_the_shipped_fixture_resets(request: pytest.FixtureRequest) -> None:
    sink("before").append(1)
    request.getfixturevalue("statestream_reset")
    assert sink("before") == []
