"""Transactional topologies: batches processed in parallel, committed in order.

Modules, top to bottom::

    api          what users subclass: BatchBolt, TransactionalBolt, Committer,
                 TransactionalSpout and the partitioned spouts; TransactionAttempt
    spouts       MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout,
                 FilePartitionedTransactionalSpout
    builder      TransactionalTopologyBuilder: build() gives an ordinary Topology
    components   the coordinator spout, emitter and batch-bolt executors it is made of
    driver       what a runtime that plays the coordinator itself (Spark) needs
    coordinator  the coordinator's protocol (pure, table-tested)
    completion   count-based batch completion and routing (pure)
"""

from .api import (
    BatchBolt,
    BatchOutputCollector,
    Committer,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalBolt,
    TransactionalSpout,
)
from .builder import TransactionalTopologyBuilder
from .coordinator import TransactionAttempt
from .spouts import (
    FilePartitionedTransactionalSpout,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
)

__all__ = [
    "BatchBolt",
    "BatchOutputCollector",
    "Committer",
    "FilePartitionedTransactionalSpout",
    "MemoryTransactionalSpout",
    "OpaqueMemoryTransactionalSpout",
    "OpaquePartitionedTransactionalSpout",
    "PartitionedTransactionalSpout",
    "TransactionAttempt",
    "TransactionalBolt",
    "TransactionalSpout",
    "TransactionalTopologyBuilder",
]
