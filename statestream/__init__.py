"""statestream: Storm's stateful-bolt model in Python.

Layers, top to bottom::

    user code    Spout, Bolt, BasicBolt, StatefulBolt,          (_components, _windowed)
                 BaseWindowedBolt
    topology     TopologyBuilder -> Topology, groupings         (_topology, _routing, _tuple)
    protocols    acker ledger, checkpoint state machine,        (_acker, _rotating, _checkpoint,
                 bolt executors, exactly-once,                   _executors, _stateful, _exactly_once,
                 retry policy, message book, dead letters,       _retry, _messages, _deadletter,
                 windows and watermarks                          _windowing, _window_kinds)
    transactions TransactionalTopologyBuilder -> Topology,      (_transactional: api, spouts,
                 batch bolts, coordinator protocol               builder, components, coordinator)
    state        State / KeyValueState / StateProvider          (_state, _kvstate, _serde, _registry;
                                                                 provider SDK: statestream.provider)
    runtimes     the contract and the runners' registry;        (runtime/contract, _runners,
                 RuntimePlan; local (embedded) | workers |       runtime/plan, runtime/local,
                 spark                                           runtime/workers, runtime/spark)
    connectors   broker spouts, two-phase sinks                 (connectors)
    config, cli                                                 (_settings, _config, _cli)

Everything a user needs is re-exported here, and everything a state provider needs in
statestream.provider; the underscored modules are private.
"""

# First: it chooses between the compiled and the pure-Python core before any
# module of that core is imported.
from . import _core  # noqa: F401
from ._clock import Clock, FakeClock, SystemClock
from ._components import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyContext,
)
from ._config import Config, load_config
from ._deadletter import DeadLetter, DeadLetterFile
from ._errors import (
    ConfigError,
    FailedException,
    PrepareRefused,
    ProtocolViolation,
    ProviderNotFoundError,
    ProviderUnavailableError,
    ReliabilityError,
    RuntimeFailure,
    SerializationError,
    SinkError,
    SourceError,
    StateCorruptError,
    StateError,
    StateLockedError,
    StatestreamError,
    StoreOutageError,
    StoreUnwritableError,
    TopologyError,
    TupleError,
)
from ._exactly_once import Rewindable
from ._executors import BasicBoltExecutor, CheckpointTupleForwarder, StatefulBoltExecutor
from ._partitioned import PartitionedSource
from ._results import ErrorReport, RunResult, TaskMetrics
from ._retry import RetryPolicy
from ._routing import stable_hash
from ._run import load_topology, run
from ._savepoint import SavepointReport, export_state, import_state
from ._spouts import FileSpout
from ._state import KeyValueState, State, StateProvider
from ._topology import BoltDeclarer, Topology, TopologyBuilder
from ._transactional import (
    BatchBolt,
    BatchOutputCollector,
    Committer,
    FilePartitionedTransactionalSpout,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalBolt,
    TransactionalSpout,
    TransactionalTopologyBuilder,
    TransactionAttempt,
)
from ._tuple import DEFAULT_STREAM, Fields, Tuple, Values
from ._windowed import (
    BaseWindowedBolt,
    Count,
    Duration,
    StatefulWindowedBolt,
    TupleWindow,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_STREAM",
    "BaseWindowedBolt",
    "BasicBolt",
    "BasicBoltExecutor",
    "BasicOutputCollector",
    "BatchBolt",
    "BatchOutputCollector",
    "Bolt",
    "BoltDeclarer",
    "CheckpointTupleForwarder",
    "Clock",
    "Committer",
    "Config",
    "ConfigError",
    "Count",
    "DeadLetter",
    "DeadLetterFile",
    "Duration",
    "ErrorReport",
    "FailedException",
    "FakeClock",
    "Fields",
    "FilePartitionedTransactionalSpout",
    "FileSpout",
    "KeyValueState",
    "MemoryTransactionalSpout",
    "OpaqueMemoryTransactionalSpout",
    "OpaquePartitionedTransactionalSpout",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "PartitionedSource",
    "PartitionedTransactionalSpout",
    "PrepareRefused",
    "ProtocolViolation",
    "ProviderNotFoundError",
    "ProviderUnavailableError",
    "ReliabilityError",
    "RetryPolicy",
    "Rewindable",
    "RunResult",
    "RuntimeFailure",
    "SavepointReport",
    "SerializationError",
    "SinkError",
    "SourceError",
    "Spout",
    "SpoutOutputCollector",
    "State",
    "StateCorruptError",
    "StateError",
    "StateLockedError",
    "StateProvider",
    "StatefulBolt",
    "StatefulBoltExecutor",
    "StatefulWindowedBolt",
    "StatestreamError",
    "StoreOutageError",
    "StoreUnwritableError",
    "SystemClock",
    "TaskMetrics",
    "Topology",
    "TopologyBuilder",
    "TopologyContext",
    "TopologyError",
    "TransactionAttempt",
    "TransactionalBolt",
    "TransactionalSpout",
    "TransactionalTopologyBuilder",
    "Tuple",
    "TupleError",
    "TupleWindow",
    "Values",
    "export_state",
    "import_state",
    "load_config",
    "load_topology",
    "run",
    "stable_hash",
]
