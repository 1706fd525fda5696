"""Where a KafkaSpout stands: the position it stores in the checkpoint, and the pure
decisions on partitions (which task reads one, one position out of many).

The stored shape, as the design has always said of Kafka (issue 47)::

    {"offsets": {"lines": {"0": 750, "1": 12}},   # per topic, per partition: next offset
     "replay": [["lines", 0, 4]],                  # failed records to emit again
     "tasks": 2}                                   # the parallelism that stored it

The offsets nest by topic, as Kafka's own tools show a group's offsets. They
sit under ``"offsets"``, not at the top level: ``replay`` and ``tasks``
live beside them, and a topic may be named ``replay``. A partition number is
a JSON object key, so it is stored as its decimal text.

Inside the spout, and wherever one name per partition is needed (the
:class:`~statestream.PartitionedSource` ranges the Spark driver plans, the
message ids), a partition is ``topic/partition`` (:func:`partition_key`; a
topic name has no ``/``). :func:`read_position` turns a stored position into
those names, and also reads the flat shape earlier versions stored
(``{"partitions": {"topic/p": offset}, "replay": [["topic/p", offset]],
"tasks": N}``), so a checkpoint or savepoint they wrote resumes exactly.

Pure and table-tested: :func:`owner`, :func:`share`, :func:`merge_positions`,
:func:`added_partitions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .._partitioned import PARTITIONS_KEY

__all__ = [
    "OFFSETS_KEY",
    "Standing",
    "added_partitions",
    "merge_positions",
    "nested_position",
    "owner",
    "partition_key",
    "read_position",
    "share",
    "split_key",
]

OFFSETS_KEY: Final = "offsets"


def partition_key(topic: str, partition: int) -> str:
    """How a partition is named inside the spout: ``topic/partition``."""
    return f"{topic}/{partition}"


def split_key(key: str) -> tuple[str, int]:
    """``(topic, partition)`` of a :func:`partition_key`."""
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def owner(topic_index: int, partition: int, tasks: int) -> int:
    """The task of ``tasks`` reading ``partition`` of the ``topic_index``-th topic: a
    partition added later leaves every other partition where it was, and the
    topics' first partitions go to different tasks."""
    return (topic_index + partition) % tasks


def share(topics: Sequence[str], counts: Mapping[str, int], task: int, tasks: int) -> list[str]:
    """The partitions task ``task`` of ``tasks`` reads, given each topic's partition count."""
    return [
        partition_key(t, p)
        for k, t in enumerate(topics)
        for p in range(counts[t])
        if owner(k, p, tasks) == task
    ]


def added_partitions(
    topics: Sequence[str],
    known: Mapping[str, int],
    listed: Mapping[str, int | None],
    mine: Sequence[str],
    task: int,
    tasks: int,
) -> tuple[dict[str, int], list[str]]:
    """What a look at the topics' partitions finds: the partition counts to keep
    (each topic's ``known`` count, raised to the count ``listed`` now; a topic not
    listed, None, or listed with fewer partitions keeps its count: a partition is
    never dropped while it is read) and the partitions of task ``task`` of
    ``tasks`` that are new, not in ``mine``, in reading order."""
    counts = {t: max(known[t], listed.get(t) or 0) for t in topics}
    held = set(mine)
    return counts, [k for k in share(topics, counts, task, tasks) if k not in held]


@dataclass
class Standing:
    """A position as the spout uses it: per partition (``topic/partition``) the next
    offset; the failed records to emit again; the parallelism that stored it."""

    offsets: dict[str, int] = field(default_factory=dict)
    replay: list[tuple[str, int]] = field(default_factory=list)
    tasks: int = 1


def nested_position(
    offsets: Mapping[str, int], replay: Iterable[tuple[str, int]], tasks: int
) -> dict[str, Any]:
    """The position the checkpoint stores (module docstring), nested by topic."""
    nested: dict[str, dict[str, int]] = {}
    for key, offset in sorted(offsets.items(), key=lambda item: split_key(item[0])):
        topic, partition = split_key(key)
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    again = [[*split_key(key), int(offset)] for key, offset in replay]
    return {OFFSETS_KEY: nested, "replay": again, "tasks": tasks}


def read_position(position: Mapping[str, Any]) -> Standing:
    """A stored position, of this shape or the flat one of earlier versions, as a
    :class:`Standing`."""
    offsets: dict[str, int] = {}
    for topic, partitions in (position.get(OFFSETS_KEY) or {}).items():
        for partition, offset in partitions.items():
            offsets[partition_key(topic, int(partition))] = int(offset)
    for key, offset in (position.get(PARTITIONS_KEY) or {}).items():  # the flat shape
        offsets[key] = int(offset)
    replay: list[tuple[str, int]] = []
    for entry in position.get("replay") or []:
        if len(entry) == 3:  # [topic, partition, offset]
            replay.append((partition_key(entry[0], int(entry[1])), int(entry[2])))
        else:  # the flat shape's ["topic/partition", offset]
            replay.append((str(entry[0]), int(entry[1])))
    return Standing(offsets, replay, int(position.get("tasks", 1)))


def merge_positions(positions: Iterable[Mapping[str, Any]], tasks: int) -> dict[str, Any]:
    """One position from the positions every task of a run stored (of any parallelism,
    or a mix after a rescale; of either shape): per partition the furthest offset,
    with the replays of that partition from the position that gave it; stamped
    with ``tasks``, the parallelism of the run that takes it."""
    best: dict[str, tuple[int, int]] = {}  # partition -> (offset, index of its position)
    given = [read_position(p) for p in positions if isinstance(p, Mapping)]
    for i, where in enumerate(given):
        for key, offset in where.offsets.items():
            if key not in best or offset > best[key][0]:
                best[key] = (offset, i)
    replay = [
        (key, offset)
        for i, where in enumerate(given)
        for key, offset in where.replay
        if key in best and best[key][1] == i
    ]
    return nested_position({k: o for k, (o, _) in best.items()}, replay, tasks)
