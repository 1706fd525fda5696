"""Test doubles for topologies: list spouts, a replaying queue, a collecting sink, a fake
clock, and a random text with its known word counts.

Component objects are copied per task (pickled), so anything a test must
observe after a run lives in a process-wide registry keyed by a name the test
chooses: ``SinkBolt("out")`` collects into ``sink("out")``, ``QueueSpout("q")``
reads ``queue("q")``. Call :func:`reset` between tests (the pytest fixture in
``tests/conftest.py`` does).
"""

from __future__ import annotations

import collections
import os
import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._clock import FakeClock
from ._components import (
    Bolt,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
)
from ._tuple import Tuple

__all__ = [
    "CRASH",
    "EOF",
    "FakeClock",
    "ListSpout",
    "QueueSpout",
    "ReplayingQueue",
    "SimulatedCrash",
    "SinkBolt",
    "queue",
    "random_text",
    "reset",
    "sink",
]


def random_text(
    path: str | os.PathLike[str],
    lines: int,
    *,
    words_per_line: int = 10,
    vocabulary: int = 800,
    seed: int = 7,
) -> collections.Counter[str]:
    """Write ``lines`` lines of words drawn from ``w0 .. w<vocabulary-1>`` to ``path``
    (the same text for the same arguments) and return how often each word occurs:
    the exact answer a word count over the file must give."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    counter: collections.Counter[str] = collections.Counter()
    with open(path, "w") as f:
        for _ in range(lines):
            words = rng.choices(vocab, k=words_per_line)
            counter.update(words)
            f.write(" ".join(words) + "\n")
    return counter


class SimulatedCrash(BaseException):
    """Raised by :data:`CRASH` to kill a run as a process crash would.

    A BaseException so that no ``except Exception`` in a runtime or a user
    component can swallow it.
    """


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


CRASH = _Sentinel("CRASH")
"""In a ListSpout's items: raise :class:`SimulatedCrash` when reached."""
EOF = _Sentinel("EOF")
"""In a ListSpout's items: the spout is exhausted here; later items are never emitted."""

_sinks: dict[str, list[Any]] = {}
_queues: dict[str, ReplayingQueue] = {}


def reset() -> None:
    """Forget every sink and queue."""
    _sinks.clear()
    _queues.clear()


def sink(name: str) -> list[Any]:
    """What ``SinkBolt(name)`` tasks have collected, in arrival order."""
    return _sinks.setdefault(name, [])


class ListSpout(Spout):
    """Emits each item of a list as a one-field tuple (or the item itself if it is a
    list/tuple matching ``fields``), with its index as message id when ``reliable``.

    A failed item is emitted again. :data:`CRASH` raises :class:`SimulatedCrash`,
    :data:`EOF` ends the list early. Exhausted once every item was emitted and
    (when reliable) acked.
    """

    def __init__(
        self,
        items: Iterable[Any],
        fields: Sequence[str] = ("value",),
        *,
        reliable: bool = True,
        stream: str = "default",
    ) -> None:
        self.items = list(items)
        self.fields = list(fields)
        self.reliable = reliable
        self.stream = stream
        self._next = 0
        self._replay: deque[int] = deque()
        self._pending: set[int] = set()
        self.acked: list[int] = []
        self.failed: list[int] = []

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(self.stream, self.fields)

    def _values(self, item: Any) -> list[Any]:
        if len(self.fields) > 1 and isinstance(item, (list, tuple)):
            return list(item)
        return [item]

    def next_tuple(self) -> None:
        if self._replay:
            i = self._replay.popleft()
        else:
            if self._next >= len(self.items):
                return
            item = self.items[self._next]
            if item is EOF:
                return
            i = self._next
            self._next += 1
            if item is CRASH:
                raise SimulatedCrash(f"ListSpout reached CRASH at index {i}")
        if self.reliable:
            self._pending.add(i)
            self.collector.emit(self._values(self.items[i]), msg_id=i, stream=self.stream)
        else:
            self.collector.emit(self._values(self.items[i]), stream=self.stream)

    def ack(self, msg_id: Any) -> None:
        self._pending.discard(msg_id)
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)
        if msg_id in self._pending:
            self._replay.append(msg_id)

    def exhausted(self) -> bool:
        at_end = self._next >= len(self.items) or self.items[self._next] is EOF
        return at_end and not self._replay and not self._pending


class ReplayingQueue:
    """A message queue that puts unacknowledged messages back, like Kestrel or RabbitMQ.

    A client takes a message (it becomes *open*), then acks it (gone for good)
    or fails it (back on the queue). When a client goes away without acking
    (:meth:`reclaim`, called when a new consumer connects after a crash), all
    its open messages go back on the queue. Nothing is lost.
    """

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self.ready: deque[tuple[int, Any]] = deque(enumerate(items))
        self.open: dict[int, Any] = {}
        self.done: dict[int, Any] = {}
        self.deliveries = 0

    def take(self) -> tuple[int, Any] | None:
        if not self.ready:
            return None
        mid, item = self.ready.popleft()
        self.open[mid] = item
        self.deliveries += 1
        return mid, item

    def ack(self, mid: int) -> None:
        if mid in self.open:
            self.done[mid] = self.open.pop(mid)

    def fail(self, mid: int) -> None:
        if mid in self.open:
            self.ready.appendleft((mid, self.open.pop(mid)))

    def reclaim(self) -> int:
        """Put every open message back (its consumer died); returns how many."""
        n = len(self.open)
        for mid in sorted(self.open, reverse=True):
            self.ready.appendleft((mid, self.open.pop(mid)))
        return n

    @property
    def empty(self) -> bool:
        return not self.ready and not self.open


def queue(name: str, items: Iterable[Any] | None = None) -> ReplayingQueue:
    """The process-wide queue ``name`` (created, with ``items``, on first use)."""
    q = _queues.get(name)
    if q is None:
        q = _queues[name] = ReplayingQueue(items or ())
    elif items is not None:
        raise ValueError(f"queue {name!r} already exists; call reset() first")
    return q


class QueueSpout(Spout):
    """Reads :func:`queue` ``name``; acks and fails go back to the queue.

    On ``open`` it reclaims messages a previous (crashed) consumer left open,
    so a restarted topology sees them again.
    """

    def __init__(self, name: str, fields: Sequence[str] = ("value",)) -> None:
        self.name = name
        self.fields = list(fields)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.fields)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.queue = queue(self.name)
        self.queue.reclaim()

    def next_tuple(self) -> None:
        got = self.queue.take()
        if got is not None:
            mid, item = got
            self.collector.emit([item] if len(self.fields) == 1 else list(item), msg_id=mid)

    def ack(self, msg_id: Any) -> None:
        self.queue.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.queue.fail(msg_id)

    def exhausted(self) -> bool:
        return self.queue.empty


class SinkBolt(Bolt):
    """Appends every input to :func:`sink` ``name`` and acks it.

    ``record`` picks what is stored: ``"values"`` (a tuple of the values, the
    default), ``"tuple"`` (the Tuple itself) or ``"task"`` (``(task_index, values)``).
    """

    def __init__(self, name: str, record: str = "values") -> None:
        if record not in ("values", "tuple", "task"):
            raise ValueError(f"record must be 'values', 'tuple' or 'task', got {record!r}")
        self.name = name
        self.record = record

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.out = sink(self.name)

    def execute(self, tup: Tuple) -> None:
        if self.record == "values":
            self.out.append(tuple(tup.values))
        elif self.record == "task":
            self.out.append((self.context.task_index, tuple(tup.values)))
        else:
            self.out.append(tup)
        self.collector.ack(tup)
