"""Partitioned sources: a spout whose input is a set of partitions, each read by range.

A :class:`~statestream.Rewindable` spout is read record by record by whoever
holds it, so on Spark every record passes through the driver. A
:class:`PartitionedSource` is also a set of partitions (the files of a
folder, the streams of a Redis key list), each with a position, and any
process can read any range of one: so the driver only plans, per partition,
the range ``[start, end)`` a batch covers, stores the ends with
``PREPARING(t)`` (the spout's ``position()``, as for any rewindable spout),
and the executors read the ranges themselves, as Spark's Kafka source and
Storm's partitioned transactional spouts do. A replayed batch is planned from
the same stored positions against ends read again, capped the same way, so a
source whose ranges are immutable (files appended by whole lines, streams)
reads the same records.

Pure: :func:`plan_ranges` and :func:`split_range` decide; :func:`read_lines`
is the one reader of a byte range of a text file (it reads, it decides
nothing).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import IO, Any, Protocol, runtime_checkable

from ._exactly_once import Rewindable

__all__ = [
    "PARTITIONS_KEY",
    "PartitionedSource",
    "Range",
    "is_partitioned",
    "placed_at",
    "places_of",
    "plan_ranges",
    "range_size",
    "read_lines",
    "split_range",
]

PARTITIONS_KEY = "partitions"
"""Key of the per-partition positions ``{partition: position}`` in a partitioned
spout's ``position()``."""


@runtime_checkable
class PartitionedSource(Rewindable, Protocol):
    """A rewindable spout whose partitions can be read by range, in any process.

    Lifecycle, on every runtime:

    * ``open`` first, as for any spout; :meth:`partitions` is then the
      partitions this spout task owns (the runtime gives task ``i`` of ``n``
      the partitions ``i``, ``i + n``, ...: a spout decides it in ``open``
      from ``context.task_index`` and ``context.parallelism``).
    * ``seek`` once after ``open``, as :class:`~statestream.Rewindable` says.
      A position holds, under :data:`PARTITIONS_KEY`, a dict mapping each of
      :meth:`partitions` to where its next range starts; ``seek`` of such a
      position makes the spout stand there. A spout whose position has a
      shape of its own (KafkaSpout's nests offsets by topic) says where its
      partitions stand with two more methods instead:
      ``partition_places(position)``, that dict, and
      ``with_partition_places(position, places)``, the position with those
      partitions at ``places`` (``places_of`` and ``placed_at`` of this module).
    * The local runtime and the workers call ``next_tuple`` as on any spout:
      the spout reads its own partitions, and ``position()`` at a cut says
      where each one stands.
    * The Spark driver never calls ``next_tuple``: per batch it asks
      :meth:`end_position` of each partition, plans the ranges
      (:func:`plan_ranges`), and ``seek``-s the spout to the planned ends, so
      that ``position()`` (stored with ``PREPARING(t)``) is where the batch
      ends. Each executor task opens a fresh instance of the spout (the same
      task index) and calls :meth:`read` for one range; it emits nothing
      through the collector. After each checkpoint commits, the driver calls
      ``committed(position)`` of a spout that has it, with the task's
      position the checkpoint holds (its records are done: KafkaSpout writes
      the offsets to a consumer group for lag tools), as the local runtime's
      acks would tell a spout that reads itself.

    ``read(p, a, b)`` followed by ``read(p, b, c)`` must yield exactly what
    ``read(p, a, c)`` yields, whatever the split, and the same on every call:
    that is what makes a replay, and a run continued on another runtime,
    exact. A spout whose positions are integers (a byte offset, a sequence
    number) may set ``batch_limit``, the most position units one batch
    reads; its ranges are then capped, and split into several Spark tasks.
    """

    def partitions(self) -> Sequence[str]:
        """This task's partitions, in the order they are read (after ``open``)."""
        ...

    def end_position(self, partition: str) -> Any:
        """Where ``partition`` ends now (cheap: a file's size, a stream's last id)."""
        ...

    def read(self, partition: str, start: Any, end: Any) -> Iterator[Sequence[Any]]:
        """The values of every record of ``partition`` in ``[start, end)``, in order,
        on the default stream."""
        ...


def is_partitioned(spout: object) -> bool:
    """Whether ``spout`` implements :class:`PartitionedSource` (for the instance: a
    spout class may implement it for some inputs only, as FileSpout for a folder)."""
    check = getattr(spout, "is_partitioned", None)
    if callable(check):
        return bool(check())
    return all(
        callable(getattr(spout, name, None))
        for name in ("partitions", "end_position", "read", "position", "seek")
    )


def places_of(spout: object, position: Mapping[str, Any]) -> dict[str, Any]:
    """Where each of ``spout``'s partitions stands in ``position``, by partition name."""
    places = getattr(spout, "partition_places", None)
    if callable(places):
        return dict(places(position))
    return dict(position[PARTITIONS_KEY])


def placed_at(spout: object, position: Mapping[str, Any], places: Mapping[str, Any]) -> Any:
    """``position`` with the partitions of ``places`` standing there (the others as
    they were)."""
    place = getattr(spout, "with_partition_places", None)
    if callable(place):
        return place(position, places)
    return {**position, PARTITIONS_KEY: {**position[PARTITIONS_KEY], **places}}


@dataclass(frozen=True)
class Range:
    """One range of one partition that one executor task reads: ``[start, end)``."""

    partition: str
    start: Any
    end: Any


def _sized(start: Any, end: Any) -> bool:
    return type(start) is int and type(end) is int


def plan_ranges(
    starts: Mapping[str, Any],
    ends: Mapping[str, Any],
    order: Sequence[str],
    limit: int | None = None,
) -> list[Range]:
    """The ranges of the next batch: from each partition's start to its end, in
    ``order``, the integer ranges capped at ``limit`` units in all (the first
    partitions first; a batch always covers at least one unit when any is
    left, so it moves). A partition whose start equals its end is left out; an
    opaque (non-integer) range is taken whole. A partition missing from
    ``starts`` starts at its ``ends`` type's zero: 0 for integers, else None."""
    ranges: list[Range] = []
    left = limit
    for partition in order:
        end = ends[partition]
        start = starts.get(partition, 0 if type(end) is int else None)
        if start == end:
            continue
        if _sized(start, end):
            if end < start:
                raise ValueError(f"partition {partition!r} ends at {end}, before {start}")
            if left is not None:
                if left <= 0:
                    break
                end = min(end, start + left)
                left -= end - start
        ranges.append(Range(partition, start, end))
    return ranges


def range_size(r: Range) -> int:
    """The units ``r`` covers (1 for an opaque range: its size is unknown)."""
    return r.end - r.start if _sized(r.start, r.end) else 1


def split_range(r: Range, pieces: int) -> list[Range]:
    """``r`` cut into up to ``pieces`` ranges of near-equal size (an opaque range,
    or one of fewer units than pieces, stays whole as far as it must)."""
    if not _sized(r.start, r.end) or pieces <= 1:
        return [r]
    size = r.end - r.start
    pieces = min(pieces, size)
    if pieces <= 1:
        return [r] if size > 0 else []
    cuts = [r.start + size * i // pieces for i in range(pieces + 1)]
    return [Range(r.partition, a, b) for a, b in pairwise(cuts) if a < b]


def read_lines(f: IO[bytes], start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, raw line)`` of every line of ``f`` whose first byte is in
    ``[start, end)``: a line that starts before ``end`` is read through its
    newline even past ``end``, and one that started before ``start`` is left to
    the range before, as Hadoop's line record reader splits a file. So the
    ranges of any cut points read every line exactly once. The position of a
    file is the offset where its next unread line starts."""
    if start >= end:
        return
    if start > 0:
        f.seek(start - 1)
        # The rest of the line holding byte start-1: a newline there means a line
        # starts at ``start``; otherwise the line belongs to the range before.
        pos = start - 1 + len(f.readline())
    else:
        f.seek(0)
        pos = 0
    readline = f.readline
    while pos < end:
        raw = readline()
        if not raw:
            return
        yield pos, raw
        pos += len(raw)
