"""Transactional spouts shipped with statestream: in memory, and over a directory of files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._components import OutputFieldsDeclarer, TopologyContext
from .._errors import ConfigError
from .api import (
    BatchOutputCollector,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionAttempt,
)

__all__ = [
    "FilePartitionedTransactionalSpout",
    "MemoryTransactionalSpout",
    "OpaqueMemoryTransactionalSpout",
]


class _Memory:
    """Partitions of value lists; metadata ``{"index": first, "amount": n}`` per batch."""

    def __init__(
        self, data: Mapping[int, Sequence[Sequence[Any]]], fields: Sequence[str], take: int
    ) -> None:
        if sorted(data) != list(range(len(data))):
            raise ConfigError(
                f"the partitions of a memory transactional spout are numbered 0..n-1, "
                f"got {sorted(data)!r}"
            )
        if type(take) is not int or take < 1:
            raise ConfigError(f"take_per_batch must be a positive integer, got {take!r}")
        self.data = {p: list(rows) for p, rows in data.items()}
        self.fields = list(fields)
        self.take = take

    def declare(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["tx", *self.fields])

    def emit(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        p: int,
        start: int,
        n: int,
    ) -> None:
        for values in self.data[p][start : start + n]:
            collector.emit([attempt, *values])

    def next_batch(
        self, attempt: TransactionAttempt, collector: BatchOutputCollector, p: int, last: Any
    ) -> dict[str, int]:
        start = last["index"] + last["amount"] if last else 0
        amount = max(0, min(self.take, len(self.data[p]) - start))
        self.emit(attempt, collector, p, start, amount)
        return {"index": start, "amount": amount}

    def exhausted(self, p: int, last: Any) -> bool:
        end = last["index"] + last["amount"] if last else 0
        return end >= len(self.data[p])


class _MemoryCoordinator(OpaquePartitionedTransactionalSpout.Coordinator):
    """The coordinator part of both memory spouts (the opaque kind's is the same)."""

    def __init__(self, memory: _Memory) -> None:
        self.memory = memory

    def number_of_partitions(self) -> int:
        return len(self.memory.data)

    def partition_exhausted(self, partition: int, last_metadata: Any) -> bool:
        return self.memory.exhausted(partition, last_metadata)


class _MemoryEmitter(PartitionedTransactionalSpout.Emitter):
    def __init__(self, memory: _Memory) -> None:
        self.memory = memory

    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_metadata: Any,
    ) -> Any:
        return self.memory.next_batch(attempt, collector, partition, last_metadata)

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        metadata: Any,
    ) -> None:
        self.memory.emit(attempt, collector, partition, metadata["index"], metadata["amount"])


class MemoryTransactionalSpout(PartitionedTransactionalSpout):
    """A partitioned transactional spout over lists kept in the topology.

    ``data`` maps a partition number (0..n-1) to its list of value lists;
    each batch takes up to ``take_per_batch`` from every partition. Tuples are
    ``(tx, *fields)``, ``tx`` being the :class:`TransactionAttempt`. A
    replay emits exactly the batch first emitted. Finite: ``--until-idle``
    ends once every partition has been emitted and committed.
    """

    def __init__(
        self,
        data: Mapping[int, Sequence[Sequence[Any]]],
        fields: Sequence[str],
        take_per_batch: int,
    ) -> None:
        self.memory = _Memory(data, fields, take_per_batch)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.memory.declare(declarer)

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Coordinator:
        return _MemoryCoordinator(self.memory)

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Emitter:
        return _MemoryEmitter(self.memory)


class _OpaqueMemoryEmitter(OpaquePartitionedTransactionalSpout.Emitter):
    def __init__(self, memory: _Memory) -> None:
        self.memory = memory

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_metadata: Any,
    ) -> Any:
        return self.memory.next_batch(attempt, collector, partition, last_metadata)


class OpaqueMemoryTransactionalSpout(OpaquePartitionedTransactionalSpout):
    """The opaque counterpart of :class:`MemoryTransactionalSpout`: every emission of a
    partition, replays included, starts where the previous transaction's batch ended
    and takes up to ``take_per_batch`` of what is there."""

    def __init__(
        self,
        data: Mapping[int, Sequence[Sequence[Any]]],
        fields: Sequence[str],
        take_per_batch: int,
    ) -> None:
        self.memory = _Memory(data, fields, take_per_batch)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.memory.declare(declarer)

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Coordinator:
        return _MemoryCoordinator(self.memory)

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Emitter:
        return _OpaqueMemoryEmitter(self.memory)


# --------------------------------------------------------------------------- files


class _Files:
    def __init__(self, directory: Path, pattern: str, take: int) -> None:
        if not directory.is_dir():
            raise ConfigError(f"the input directory {str(directory)!r} does not exist")
        self.paths = sorted(p for p in directory.glob(pattern) if p.is_file())
        if not self.paths:
            raise ConfigError(
                f"the input directory {str(directory)!r} has no file matching {pattern!r}; "
                "a partitioned file spout reads one partition per file"
            )
        self.take = take

    def path(self, partition: int, metadata: Any) -> Path:
        path = self.paths[partition]
        if metadata is not None and metadata.get("file") != path.name:
            raise ConfigError(
                f"partition {partition} was {metadata.get('file')!r} when its batches were "
                f"stored and is {path.name!r} now: the files of the input directory changed; "
                "restore them, or start from an empty state store"
            )
        return path

    def read(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        start: int,
        end: int | None,
        name: str,
    ) -> dict[str, Any]:
        """Emit lines from byte ``start``: up to ``end``, or ``take`` lines if ``end`` is None."""
        lines = 0
        with open(self.paths[partition], "rb") as f:
            f.seek(start)
            pos = start
            while (end is None and lines < self.take) or (end is not None and pos < end):
                raw = f.readline()
                if not raw:
                    break
                pos += len(raw)
                lines += 1
                collector.emit([attempt, raw.decode("utf-8").rstrip("\r\n")])
        return {"file": name, "start": start, "end": pos, "lines": lines}


class _FileCoordinator(PartitionedTransactionalSpout.Coordinator):
    def __init__(self, files: _Files) -> None:
        self.files = files

    def number_of_partitions(self) -> int:
        return len(self.files.paths)

    def partition_exhausted(self, partition: int, last_metadata: Any) -> bool:
        path = self.files.path(partition, last_metadata)
        end = last_metadata["end"] if last_metadata else 0
        return bool(end >= path.stat().st_size)


class _FileEmitter(PartitionedTransactionalSpout.Emitter):
    def __init__(self, files: _Files) -> None:
        self.files = files

    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_metadata: Any,
    ) -> Any:
        path = self.files.path(partition, last_metadata)
        start = last_metadata["end"] if last_metadata else 0
        return self.files.read(attempt, collector, partition, start, None, path.name)

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        metadata: Any,
    ) -> None:
        path = self.files.path(partition, metadata)
        self.files.read(
            attempt, collector, partition, metadata["start"], metadata["end"], path.name
        )


class FilePartitionedTransactionalSpout(PartitionedTransactionalSpout):
    """Lines of the files in a directory, one partition per file (in name order).

    Each batch takes up to ``take_per_batch`` lines of every file; a batch's
    metadata is ``{"file", "start", "end", "lines"}`` with byte offsets, so a
    replay reads exactly the same bytes. Tuples are ``(tx, line)``. Files may
    grow by whole lines while the topology runs; the set of files must not
    change once batches are stored (a partition is a file's position in the
    listing). The directory is ``directory``, or the config key
    ``directory_key`` (then ``default_directory``).
    """

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        directory_key: str | None = None,
        default_directory: str | Path | None = None,
        pattern: str = "*",
        take_per_batch: int = 1000,
    ) -> None:
        if type(take_per_batch) is not int or take_per_batch < 1:
            raise ConfigError(f"take_per_batch must be a positive integer, got {take_per_batch!r}")
        self.directory = str(directory) if directory is not None else None
        self.directory_key = directory_key
        self.default_directory = str(default_directory) if default_directory is not None else None
        self.pattern = pattern
        self.take_per_batch = take_per_batch

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["tx", "line"])

    def _files(self, conf: Mapping[str, Any]) -> _Files:
        directory = self.directory
        if directory is None and self.directory_key is not None:
            directory = conf.get(self.directory_key) or self.default_directory
        if directory is None:
            raise ConfigError(
                "FilePartitionedTransactionalSpout has no input directory: pass one, or set "
                f"{self.directory_key or 'a directory key'}"
            )
        return _Files(Path(directory), self.pattern, self.take_per_batch)

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Coordinator:
        return _FileCoordinator(self._files(conf))

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Emitter:
        return _FileEmitter(self._files(conf))
