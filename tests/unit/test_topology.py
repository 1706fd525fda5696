"""TopologyBuilder validation, the built Topology's shape, and pickling."""

from __future__ import annotations

import threading
from typing import Any

import cloudpickle
import pytest

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    OutputFieldsDeclarer,
    Spout,
    StatefulBolt,
    Topology,
    TopologyBuilder,
    TopologyError,
    Tuple,
)
from statestream.testing import ListSpout, SinkBolt


class Words(Spout):
    """Declares ``default`` (word, n) and a direct stream ``direct`` (word)."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word", "n"])
        declarer.declare_stream("direct", ["word"], direct=True)

    def next_tuple(self) -> None:
        pass


class Relay(BasicBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0]])


class Silent(Bolt):
    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)


class DeclaresStream(Spout):
    def __init__(self, stream: str) -> None:
        self.stream = stream

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(self.stream, ["x"])

    def next_tuple(self) -> None:
        pass


class DeclaresTwice(Spout):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["x"])
        declarer.declare(["y"])

    def next_tuple(self) -> None:
        pass


class NoOutput(Spout):
    def next_tuple(self) -> None:
        pass


class HoldsLock(Bolt):
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def execute(self, tuple: Tuple) -> None:
        pass


class NullGrouping:
    def choose_tasks(self, values: Any, n_tasks: int) -> list[int]:
        return [0]


def builder_with_spout() -> TopologyBuilder:
    b = TopologyBuilder("t")
    b.set_spout("words", Words())
    return b


def build_error(b: TopologyBuilder) -> str:
    with pytest.raises(TopologyError) as info:
        b.build()
    return str(info.value)


# -- unknown names ------------------------------------------------------------


def test_unknown_source_names_the_bolt_lists_known_ids_and_suggests_the_closest() -> None:
    b = builder_with_spout()
    b.set_bolt("split", Relay()).shuffle_grouping("words")
    b.set_bolt("count", Silent()).shuffle_grouping("splitt")
    msg = build_error(b)
    assert "bolt 'count' subscribes to unknown component 'splitt'" in msg
    assert "(known: 'count', 'split', 'words')" in msg
    assert "did you mean 'split'?" in msg


def test_unknown_source_without_a_close_match_gives_no_suggestion() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Silent()).shuffle_grouping("zzzzzz")
    msg = build_error(b)
    assert "unknown component 'zzzzzz'" in msg
    assert "did you mean" not in msg


def test_unknown_stream_names_bolt_stream_source_and_suggests() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Silent()).shuffle_grouping("words", "directt")
    msg = build_error(b)
    assert "bolt 'count' subscribes to stream 'directt' of 'words'" in msg
    assert "did you mean 'direct'?" in msg


def test_subscribing_to_a_component_without_outputs_says_where_to_declare() -> None:
    b = TopologyBuilder("t")
    b.set_spout("quiet", NoOutput())
    b.set_bolt("count", Silent()).shuffle_grouping("quiet")
    msg = build_error(b)
    assert "declares no output streams" in msg
    assert "NoOutput.declare_output_fields" in msg


def test_unknown_grouping_field_names_bolt_field_and_suggests() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Silent()).fields_grouping("words", ["wrod"])
    msg = build_error(b)
    assert "bolt 'count' groups 'words':default by field 'wrod'" in msg
    assert "did you mean 'word'?" in msg


def test_fields_grouping_with_no_fields_is_rejected_at_once() -> None:
    b = builder_with_spout()
    with pytest.raises(TopologyError, match="bolt 'count': fields_grouping on 'words' names no"):
        b.set_bolt("count", Silent()).fields_grouping("words", [])


# -- ids and streams ------------------------------------------------------------


def test_duplicate_id_is_rejected() -> None:
    b = builder_with_spout()
    with pytest.raises(TopologyError, match="component id 'words' is used twice"):
        b.set_bolt("words", Silent())


@pytest.mark.parametrize("cid", ["$checkpointspout", "__acker", "$x", "__x"])
def test_reserved_component_ids_are_rejected(cid: str) -> None:
    b = TopologyBuilder("t")
    with pytest.raises(TopologyError, match=rf"id '{cid.replace('$', '[$]')}' is reserved"):
        b.set_spout(cid, Words())
    with pytest.raises(TopologyError, match="rename it"):
        b.set_bolt(cid, Silent())


@pytest.mark.parametrize("stream", ["$checkpoint", "__tick", "$x", "__x"])
def test_reserved_stream_ids_are_rejected(stream: str) -> None:
    b = TopologyBuilder("t")
    b.set_spout("s", DeclaresStream(stream))
    msg = build_error(b)
    assert f"component 's' declares stream {stream!r}" in msg
    assert "reserved for the system" in msg


@pytest.mark.parametrize("cid", ["", 3, None])
def test_ids_must_be_non_empty_strings(cid: Any) -> None:
    with pytest.raises(TopologyError, match="ids are non-empty strings"):
        TopologyBuilder("t").set_spout(cid, Words())


def test_a_stream_declared_twice_is_a_topology_error_naming_the_component() -> None:
    b = TopologyBuilder("t")
    b.set_spout("s", DeclaresTwice())
    msg = build_error(b)
    assert "component 's': declare_output_fields" in msg
    assert "stream 'default' is declared twice" in msg


# -- groupings ------------------------------------------------------------------


def test_direct_grouping_on_a_plain_stream_is_rejected() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Silent()).direct_grouping("words")
    msg = build_error(b)
    assert "bolt 'count' uses direct_grouping on 'words':default" in msg
    assert "declare_stream(..., direct=True)" in msg


@pytest.mark.parametrize("how", ["shuffle_grouping", "all_grouping", "global_grouping"])
def test_a_direct_stream_needs_direct_grouping(how: str) -> None:
    b = builder_with_spout()
    getattr(b.set_bolt("count", Silent()), how)("words", stream="direct")
    msg = build_error(b)
    assert "bolt 'count' subscribes to the direct stream 'words':direct" in msg
    assert msg.endswith("use direct_grouping")


def test_direct_grouping_on_a_direct_stream_builds() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Silent()).direct_grouping("words", "direct")
    (sub,) = b.build().components["count"].inputs
    assert (sub.source, sub.stream, sub.grouping.kind) == ("words", "direct", "direct")


def test_custom_grouping_needs_choose_tasks() -> None:
    with pytest.raises(TopologyError, match="bolt 'count': a custom grouping needs a choose_tasks"):
        builder_with_spout().set_bolt("count", Silent()).custom_grouping("words", object())
    b = builder_with_spout()
    b.set_bolt("other", Silent()).custom_grouping("words", NullGrouping())
    assert b.build().components["other"].inputs[0].grouping.kind == "custom"


def test_every_grouping_kind_is_recorded() -> None:
    b = builder_with_spout()
    (
        b.set_bolt("count", Silent())
        .shuffle_grouping("words")
        .fields_grouping("words", "word")
        .global_grouping("words")
        .all_grouping("words")
        .none_grouping("words")
        .local_or_shuffle_grouping("words")
        .direct_grouping("words", "direct")
    )
    kinds = [(s.grouping.kind, s.grouping.fields) for s in b.build().components["count"].inputs]
    assert kinds == [
        ("shuffle", ()),
        ("fields", ("word",)),
        ("global", ()),
        ("all", ()),
        ("none", ()),
        ("shuffle", ()),
        ("direct", ()),
    ]


# -- structure --------------------------------------------------------------------


def test_bolt_without_inputs_is_rejected_with_the_fix() -> None:
    b = builder_with_spout()
    b.set_bolt("lonely", Silent())
    msg = build_error(b)
    assert "bolt 'lonely' subscribes to nothing" in msg
    assert ".shuffle_grouping('<source id>')" in msg


def test_no_spout_is_rejected() -> None:
    b = TopologyBuilder("empty")
    assert "topology 'empty' has no spout; add one with set_spout" in build_error(b)


@pytest.mark.parametrize("parallelism", [0, -1, 1.5, "2", True, None])
def test_bad_parallelism_is_rejected(parallelism: Any) -> None:
    with pytest.raises(TopologyError, match="component 'words': parallelism must be a positive"):
        TopologyBuilder("t").set_spout("words", Words(), parallelism)


def test_wrong_component_kinds_are_rejected() -> None:
    b = TopologyBuilder("t")
    with pytest.raises(TopologyError, match=r"got Words \(a spout\? use set_spout\)"):
        b.set_bolt("b", Words())  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=r"spout 's' must be a statestream\.Spout"):
        b.set_spout("s", Silent())  # type: ignore[arg-type]


def test_non_picklable_component_is_rejected_with_the_fix() -> None:
    b = builder_with_spout()
    b.set_bolt("locked", HoldsLock()).shuffle_grouping("words")
    msg = build_error(b)
    assert "component 'locked' (HoldsLock) cannot be pickled" in msg
    assert "lock" in msg
    assert "in open()/prepare(), not in __init__" in msg


def test_a_cycle_without_stateful_bolts_is_allowed() -> None:
    b = builder_with_spout()
    b.set_bolt("a", Relay()).shuffle_grouping("words").shuffle_grouping("b")
    b.set_bolt("b", Relay()).shuffle_grouping("a")
    topo = b.build()
    assert topo.find_cycle() in (["a", "b", "a"], ["b", "a", "b"])
    assert topo.upstream("a") == ["words", "b"]
    assert topo.downstream("a") == ["b"]


class Tally(StatefulBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])

    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)


@pytest.mark.parametrize("stateful", ["a", "b"])
def test_a_cycle_through_a_stateful_bolt_is_rejected_at_build(stateful: str) -> None:
    # Checkpoint barriers could never complete around the loop.
    b = builder_with_spout()
    b.set_bolt("a", Tally() if stateful == "a" else Relay()).shuffle_grouping(
        "words"
    ).shuffle_grouping("b")
    b.set_bolt("b", Tally() if stateful == "b" else Relay()).shuffle_grouping("a")
    msg = build_error(b)
    assert "stateful bolts must be acyclic" in msg
    assert "a -> b -> a" in msg or "b -> a -> b" in msg


def test_a_stateful_topology_with_a_cycle_elsewhere_is_rejected_too() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Tally()).shuffle_grouping("words")
    b.set_bolt("loop", Relay()).shuffle_grouping("words").shuffle_grouping("loop")
    assert "found the cycle loop -> loop" in build_error(b)


def test_an_acyclic_stateful_topology_builds() -> None:
    b = builder_with_spout()
    b.set_bolt("a", Relay()).shuffle_grouping("words")
    b.set_bolt("count", Tally()).shuffle_grouping("a").shuffle_grouping("words")
    assert b.build().find_cycle() is None


def test_a_self_loop_is_allowed() -> None:
    b = builder_with_spout()
    b.set_bolt("a", Relay()).shuffle_grouping("words").shuffle_grouping("a")
    assert b.build().find_cycle() == ["a", "a"]


def test_topological_order_puts_sources_before_subscribers() -> None:
    b = TopologyBuilder("t")
    # Declared out of order on purpose.
    b.set_bolt("sink", Silent()).shuffle_grouping("mid").shuffle_grouping("other")
    b.set_bolt("mid", Relay()).shuffle_grouping("words")
    b.set_bolt("other", Relay()).shuffle_grouping("words2")
    b.set_spout("words", Words())
    b.set_spout("words2", Words())
    topo = b.build()
    assert topo.topological_order() == ["words", "mid", "words2", "other", "sink"]
    assert [s.id for s in topo.spouts] == ["words", "words2"]
    assert [s.id for s in topo.bolts] == ["sink", "mid", "other"]
    assert topo.find_cycle() is None


def test_subscribers_lists_bolts_per_stream() -> None:
    b = builder_with_spout()
    b.set_bolt("a", Silent()).shuffle_grouping("words")
    b.set_bolt("b", Silent()).direct_grouping("words", "direct").all_grouping("words")
    topo = b.build()
    assert [spec.id for spec, _ in topo.subscribers("words", "default")] == ["a", "b"]
    assert [spec.id for spec, _ in topo.subscribers("words", "direct")] == ["b"]
    assert topo.subscribers("a", "default") == []


def test_component_configuration_and_add_configuration_merge() -> None:
    class Ticking(Silent):
        def component_configuration(self) -> dict[str, Any]:
            return {"topology.tick.tuple.freq.secs": 5, "t.size": 1}

    b = builder_with_spout()
    b.set_bolt("tick", Ticking()).shuffle_grouping("words").add_configuration("t.size", 2)
    b.set_spout("s2", Words()).add_configuration("topology.max.spout.pending", 3)
    topo = b.build()
    # add_configuration wins over the component's own defaults.
    assert topo.components["tick"].config == {"topology.tick.tuple.freq.secs": 5, "t.size": 2}
    assert topo.components["s2"].config == {"topology.max.spout.pending": 3}


def test_the_builder_cannot_change_a_built_topology() -> None:
    b = builder_with_spout()
    declarer = b.set_bolt("count", Silent()).shuffle_grouping("words")
    topo = b.build()
    declarer.shuffle_grouping("nowhere").add_configuration("t.x", 1)
    b.set_bolt("late", Silent()).shuffle_grouping("words")
    assert [s.source for s in topo.components["count"].inputs] == ["words"]
    assert topo.components["count"].config == {}
    assert list(topo.components) == ["words", "count"]


# -- pickling -----------------------------------------------------------------------


def test_a_built_topology_round_trips_through_cloudpickle() -> None:
    b = TopologyBuilder("wc")
    b.set_spout("words", ListSpout(["a", "b"], fields=["word"]), 1)
    b.set_bolt("split", Relay(), 2).shuffle_grouping("words")
    b.set_bolt("count", SinkBolt("out"), 3).fields_grouping("split", ["word"]).custom_grouping(
        "split", NullGrouping()
    ).add_configuration("topology.tick.tuple.freq.secs", 2)
    topo = b.build()
    copy = cloudpickle.loads(cloudpickle.dumps(topo))
    assert isinstance(copy, Topology)
    assert copy.name == "wc"
    assert list(copy.components) == ["words", "split", "count"]
    assert {c: s.parallelism for c, s in copy.components.items()} == {
        "words": 1,
        "split": 2,
        "count": 3,
    }
    count = copy.components["count"]
    assert [(s.source, s.stream, s.grouping.kind, s.grouping.fields) for s in count.inputs] == [
        ("split", "default", "fields", ("word",)),
        ("split", "default", "custom", ()),
    ]
    assert isinstance(count.inputs[1].grouping.custom, NullGrouping)
    assert count.config == {"topology.tick.tuple.freq.secs": 2}
    assert copy.components["split"].output_fields("default") == ["word"]
    assert copy.components["words"].obj.items == ["a", "b"]
    assert copy.topological_order() == topo.topological_order()
    # instantiate() gives each task its own copy of the prototype.
    first, second = copy.instantiate("count"), copy.instantiate("count")
    assert isinstance(first, SinkBolt) and first is not second
    assert first.name == "out"
