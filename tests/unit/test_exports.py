"""The public API: what ``statestream`` promises, and the executors ``build()`` adds."""

from __future__ import annotations

import statestream
from statestream import (
    BasicBolt,
    BasicBoltExecutor,
    Bolt,
    CheckpointTupleForwarder,
    StatefulBolt,
    StatefulBoltExecutor,
    TopologyBuilder,
)
from statestream.testing import ListSpout

PROMISED = {
    # user API
    "Spout", "Bolt", "BasicBolt", "StatefulBolt", "TopologyBuilder", "Topology", "BoltDeclarer",
    "TopologyContext", "OutputCollector", "BasicOutputCollector", "SpoutOutputCollector",
    "OutputFieldsDeclarer", "Fields", "Values", "Tuple", "DEFAULT_STREAM", "FileSpout",
    "Rewindable", "PartitionedSource", "stable_hash",
    # transactional topologies
    "TransactionalTopologyBuilder", "TransactionAttempt", "BatchBolt", "TransactionalBolt",
    "Committer", "BatchOutputCollector", "TransactionalSpout", "PartitionedTransactionalSpout",
    "OpaquePartitionedTransactionalSpout", "MemoryTransactionalSpout",
    "OpaqueMemoryTransactionalSpout", "FilePartitionedTransactionalSpout",
    # windows (Storm's windowed bolts)
    "BaseWindowedBolt", "StatefulWindowedBolt", "TupleWindow", "Count", "Duration",
    # the executors the builder adds
    "BasicBoltExecutor", "CheckpointTupleForwarder", "StatefulBoltExecutor",
    # state
    "State", "KeyValueState", "StateProvider",
    # running
    "run", "load_topology", "Config", "load_config", "RunResult", "TaskMetrics", "ErrorReport",
    "Clock", "SystemClock", "FakeClock",
    # savepoints: a topology's state moved between stores
    "export_state", "import_state", "SavepointReport",
    # poison tuples: the retry policy, the dead-letter file
    "RetryPolicy", "DeadLetter", "DeadLetterFile",
    # errors
    "StatestreamError", "ConfigError", "TopologyError", "TupleError", "ReliabilityError",
    "StateError", "StateCorruptError", "SerializationError", "ProviderNotFoundError",
    "ProviderUnavailableError", "ProtocolViolation", "RuntimeFailure", "SourceError", "SinkError",
    "FailedException",
    "StateLockedError", "PrepareRefused", "StoreOutageError", "StoreUnwritableError",
}  # fmt: skip


def test_the_exports_are_what_we_promise() -> None:
    assert set(statestream.__all__) == PROMISED
    assert len(statestream.__all__) == len(set(statestream.__all__))
    for name in statestream.__all__:
        assert getattr(statestream, name) is not None, name
        assert not name.startswith("_")


class Split(BasicBolt):
    def execute(self, tuple, collector):  # type: ignore[no-untyped-def]
        collector.emit([tuple[0]])

    def declare_output_fields(self, declarer):  # type: ignore[no-untyped-def]
        declarer.declare(["word"])


class Count(StatefulBolt):
    def init_state(self, state):  # type: ignore[no-untyped-def]
        self.state = state

    def execute(self, tuple):  # type: ignore[no-untyped-def]
        self.collector.ack(tuple)


class Sink(Bolt):
    def execute(self, tuple):  # type: ignore[no-untyped-def]
        self.collector.ack(tuple)


def test_build_wraps_every_bolt_as_storm_s_builder_does() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(["a b"]))
    b.set_bolt("split", Split()).shuffle_grouping("src")
    b.set_bolt("count", Count()).fields_grouping("split", "word")
    b.set_bolt("sink", Sink()).shuffle_grouping("split")
    topo = b.build()
    split, count, sink = (topo.components[c] for c in ("split", "count", "sink"))
    assert type(count.obj) is StatefulBoltExecutor and isinstance(count.user_obj, Count)
    assert type(split.obj) is CheckpointTupleForwarder
    assert type(split.obj.bolt) is BasicBoltExecutor and isinstance(split.user_obj, Split)
    assert type(sink.obj) is CheckpointTupleForwarder and isinstance(sink.user_obj, Sink)
    assert count.is_stateful and not split.is_stateful


def test_without_state_only_basic_bolts_are_wrapped() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout(["a b"]))
    b.set_bolt("split", Split()).shuffle_grouping("src")
    b.set_bolt("sink", Sink()).shuffle_grouping("split")
    topo = b.build()
    assert type(topo.components["split"].obj) is BasicBoltExecutor
    assert type(topo.components["sink"].obj) is Sink


def test_every_connector_shows_its_real_signature() -> None:
    """help() and the API reference show each connector's parameters, not the
    (*args, **kwargs) of RabbitMQSpout's __new__ (issue 48 item 6)."""
    import inspect

    from statestream import connectors

    for name in connectors.__all__:
        obj = getattr(connectors, name)
        if not inspect.isclass(obj):
            continue
        params = inspect.signature(obj).parameters
        assert not any(p.kind is p.VAR_POSITIONAL for p in params.values()), (name, params)
    params = inspect.signature(connectors.RabbitMQSpout).parameters
    assert list(params)[:2] == ["queue", "url"] and {"kind", "field"} <= set(params)
