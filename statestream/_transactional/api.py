"""What users of transactional topologies subclass: batch bolts and transactional spouts.

Lifecycle contracts:

* A :class:`BatchBolt` prototype is copied for every batch a task sees
  (deep-copied, as components are per task): ``prepare(conf, context,
  collector, id)`` once on the copy, ``execute`` per tuple of that batch,
  then ``finish_batch`` once the task has the whole batch; the copy is then
  dropped. A batch bolt never acks or anchors: the executor does.
  Raise :class:`statestream.FailedException` (from ``execute`` or
  ``finish_batch``) to fail the batch; it is emitted again.
* A committer (a :class:`Committer` subclass, or a bolt added with
  ``set_committer_bolt``) gets ``finish_batch`` only in the commit phase:
  strictly in transaction order, after every earlier transaction committed.
* A transactional spout has two parts. Its coordinator (one task) decides
  each transaction's metadata and whether a batch is ready; its emitter
  (the spout's parallelism, every task gets every batch) emits the batch of
  an attempt. Metadata is stored by the state provider, so it must be JSON
  (dicts, lists, strings, numbers, booleans, None) with the default
  serializer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from .._components import OutputFieldsDeclarer, TopologyContext
from .._tuple import DEFAULT_STREAM, Tuple
from .coordinator import TransactionAttempt

__all__ = [
    "BatchBolt",
    "BatchOutputCollector",
    "Committer",
    "OpaquePartitionedTransactionalSpout",
    "PartitionedTransactionalSpout",
    "TransactionAttempt",
    "TransactionalBolt",
    "TransactionalSpout",
]

IdT = TypeVar("IdT")


class BatchOutputCollector(Protocol):
    """Handed to :meth:`BatchBolt.prepare` and to the emitters of transactional spouts.

    The first value of every tuple is the batch's :class:`TransactionAttempt`.
    Emits are anchored and counted for you.
    """

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None: ...
    def emit_direct(
        self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM
    ) -> None: ...
    def report_error(self, error: BaseException) -> None: ...


class _Declares:
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the fields of each output stream (the first is the attempt). Default: none."""

    def component_configuration(self) -> dict[str, Any] | None:
        """Config keys for this component only."""
        return None


class BatchBolt(_Declares, Generic[IdT]):
    """Processes one batch: ``execute`` per tuple, ``finish_batch`` once it has them all.

    A new copy serves every batch (see the module docstring); keep the
    batch's running values in instance attributes. The default ``prepare``
    keeps ``conf``, ``context``, ``collector`` and ``id``.
    """

    conf: Mapping[str, Any]
    context: TopologyContext
    collector: BatchOutputCollector
    id: IdT

    def prepare(
        self,
        conf: Mapping[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: IdT,
    ) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector
        self.id = id

    def execute(self, tuple: Tuple) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tuple)")

    def finish_batch(self) -> None:
        """Every tuple of the batch meant for this task has been executed."""


class TransactionalBolt(BatchBolt[TransactionAttempt]):
    """A :class:`BatchBolt` whose batch id is the :class:`TransactionAttempt`."""


class Committer:
    """Marker: a batch bolt whose ``finish_batch`` is part of the commit phase.

    ``class UpdateCount(TransactionalBolt, Committer)``. ``finish_batch`` of
    transaction ``t`` runs only after ``t - 1`` has committed everywhere, so
    it can update an outside store in transaction order (store the txid with
    the value to skip a replay of a committed transaction).
    """


class TransactionalSpout(_Declares):
    """A source of batches: a coordinator part and an emitter part.

    The emitter must emit the same batch whenever it gets the same
    metadata (a replay of a transaction is emitted from its stored metadata).
    """

    class Coordinator:
        """Runs in the coordinator (one task)."""

        def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
            """The metadata of transaction ``txid`` (``prev_metadata``: that of ``txid - 1``,
            None before the first). Called once per txid; the result is stored."""
            raise NotImplementedError

        def is_ready(self) -> bool:
            """Whether a new batch may start now. False also when the source is at
            its end: ``--until-idle`` stops once every transaction has committed and
            the spout is not ready."""
            return True

        def close(self) -> None:
            """Called once at shutdown."""

    class Emitter:
        """Runs in every emitter task."""

        def emit_batch(
            self, attempt: TransactionAttempt, metadata: Any, collector: BatchOutputCollector
        ) -> None:
            """Emit this task's part of the batch ``metadata`` describes."""
            raise NotImplementedError

        def cleanup_before(self, txid: int) -> None:
            """Transactions before ``txid`` are committed and will never be emitted again."""

        def close(self) -> None:
            """Called once at shutdown."""

    def get_coordinator(self, conf: Mapping[str, Any], context: TopologyContext) -> Coordinator:
        raise NotImplementedError(f"{type(self).__name__} must implement get_coordinator")

    def get_emitter(self, conf: Mapping[str, Any], context: TopologyContext) -> Emitter:
        raise NotImplementedError(f"{type(self).__name__} must implement get_emitter")


class PartitionedTransactionalSpout(_Declares):
    """A source read in partitions (files, queue partitions), each replayable from metadata.

    Partition ``p`` is emitted by emitter task ``p % parallelism``. Each
    batch takes a slice of every partition; the partition's metadata for
    each transaction is stored before the batch goes out, so a replay emits
    exactly the same slice (``emit_partition_batch``), and a new batch starts
    where the previous one ended (``emit_partition_batch_new``).
    """

    class Coordinator:
        def number_of_partitions(self) -> int:
            raise NotImplementedError

        def is_ready(self) -> bool:
            """Whether a new batch may start now (default: always)."""
            return True

        def partition_exhausted(self, partition: int, last_metadata: Any) -> bool:
            """True if nothing follows ``last_metadata`` in ``partition`` (None: nothing
            emitted yet). A finite source says so at its end, which lets
            ``--until-idle`` stop; the default, False, is an unbounded source."""
            return False

        def close(self) -> None:
            """Called once at shutdown."""

    class Emitter:
        def emit_partition_batch_new(
            self,
            attempt: TransactionAttempt,
            collector: BatchOutputCollector,
            partition: int,
            last_metadata: Any,
        ) -> Any:
            """Emit the next batch of ``partition``, starting where ``last_metadata``
            ended (None: at the start); return the metadata that describes it."""
            raise NotImplementedError

        def emit_partition_batch(
            self,
            attempt: TransactionAttempt,
            collector: BatchOutputCollector,
            partition: int,
            metadata: Any,
        ) -> None:
            """Emit again exactly the batch ``metadata`` describes."""
            raise NotImplementedError

        def close(self) -> None:
            """Called once at shutdown."""

    def get_coordinator(self, conf: Mapping[str, Any], context: TopologyContext) -> Coordinator:
        raise NotImplementedError(f"{type(self).__name__} must implement get_coordinator")

    def get_emitter(self, conf: Mapping[str, Any], context: TopologyContext) -> Emitter:
        raise NotImplementedError(f"{type(self).__name__} must implement get_emitter")


class OpaquePartitionedTransactionalSpout(_Declares):
    """A partitioned source that cannot promise the same batch twice.

    Every emission of a partition, first or replay, starts where the
    partition's batch of the previous transaction ended (its last committed
    batch after a failure, since every later transaction fails too), so
    each tuple lands in exactly one committed batch even when a replay
    differs. Committers must then store ``(value, previous value, txid)``
    and, on a txid already stored, recompute from the previous value.
    """

    class Coordinator(PartitionedTransactionalSpout.Coordinator):
        """The same as a transactional partitioned spout's coordinator part."""

    class Emitter:
        def emit_partition_batch(
            self,
            attempt: TransactionAttempt,
            collector: BatchOutputCollector,
            partition: int,
            last_metadata: Any,
        ) -> Any:
            """Emit a batch of ``partition`` starting where ``last_metadata`` ended
            (None: at the start); return the metadata that describes it."""
            raise NotImplementedError

        def close(self) -> None:
            """Called once at shutdown."""

    def get_coordinator(self, conf: Mapping[str, Any], context: TopologyContext) -> Coordinator:
        raise NotImplementedError(f"{type(self).__name__} must implement get_coordinator")

    def get_emitter(self, conf: Mapping[str, Any], context: TopologyContext) -> Emitter:
        raise NotImplementedError(f"{type(self).__name__} must implement get_emitter")
