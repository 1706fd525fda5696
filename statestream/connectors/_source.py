"""What the broker spouts share: the bookkeeping between a broker and the runtime.

:class:`BrokerSpout` keeps, for a spout reading a log (a Redis stream, a
JetStream stream, a RabbitMQ queue):

* the **buffer** of entries read from the broker and not yet emitted;
* the **in-flight** map: every entry emitted and not yet acked, with its
  values, in emit order (its first entry is where an at-least-once restart
  continues; failed ones are kept for the position);
* the **replay** queue: failed entries waiting to be emitted again (before
  anything new), which a position carries with their values;
* **caught up / exhausted**: a read found nothing new, and everything
  emitted was acked;
* the :class:`~statestream.connectors._broker.Reconnect` policy around each
  read, and the **progress** (``(done, total)``, the lag being the
  difference) measured at most once a second in the spout's own thread.

A subclass supplies only what differs per broker: reading a batch into the
buffer (``BrokerSpout._read``), its position and seek, how far it has
read and where the stream ends (``BrokerSpout._done``,
``BrokerSpout._stream_end``), connecting and closing. It is public
(exported from :mod:`statestream.connectors`, as is :class:`Lost`): the
base of a third party's source; this module's path stays importable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._components import Spout, TopologyContext
from .._errors import ConfigError
from .._partitioned import PARTITIONS_KEY
from ._broker import Reconnect

__all__ = ["BrokerSpout", "Lost", "spread"]

_PROGRESS_EVERY_S = 1.0  # how often a spout asks the broker where the stream ends


class Lost(Exception):  # a signal from _read to _fill, not an error to report
    """Raised by ``BrokerSpout._read`` for a connection error (``Lost(error)``):
    the server was lost, and ``Reconnect`` decides whether to try again or
    stop the run."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def spread(connector: str, names: Sequence[str], task: int, tasks: int, what: str) -> list[str]:
    """The streams (or queues) of task ``task`` of ``tasks``: those whose index is
    ``task`` modulo ``tasks``; more tasks than streams is refused."""
    if tasks > len(names):
        raise ConfigError(
            f"{connector} has {tasks} tasks but {len(names)} {what}(s) {list(names)}: each "
            f"task reads whole {what}s, so give it at most {len(names)} task(s) or more "
            f"{what}s"
        )
    return [s for i, s in enumerate(names) if i % tasks == task]


class BrokerSpout(Spout):
    """The base of a spout reading a log from a broker: ours (Redis streams, JetStream,
    RabbitMQ) and a third party's (``from statestream.connectors import BrokerSpout``).

    The base keeps the bookkeeping between a broker and the runtime (the
    module docstring: buffer, in-flight, replay, caught up, reconnect,
    progress) and implements ``next_tuple``, ``ack``, ``fail``, ``exhausted``
    and ``progress``. What a subclass supplies (the hooks start with ``_``: they
    are for subclasses, not callers):

    * ``connector``: its public name, for messages;
      ``super().__init__(count, block_ms)`` from its ``__init__``;
    * ``open``: call ``super().open(...)``, take its share of the streams with
      ``_take_share`` (sets ``_mine``), connect (a server that does not
      answer: raise a :class:`~statestream.SourceError` naming it), and call
      ``_reconnect_to`` with the server's URL;
    * ``_read``: read the next batch into ``_buffer`` as ``(message id,
      values)`` pairs, the message id hashable and unique in the task; return
      whether the broker had nothing more (True), or None when nothing was
      learnt; raise :class:`Lost` for a connection error (the reconnect policy
      then decides: try again later, or stop the run once past its bound).
      Called from the runtime's thread: it waits at most ``block_ms``;
    * optionally ``_emitted`` (a message left the buffer: move the
      position on), ``_done`` and ``_stream_end`` (progress);
    * to be rewindable (exactly-once), ``position()`` and ``seek(position)``:
      build the position with ``_where`` (with ``_failed``'s entries
      to emit again), and at ``seek`` check it with ``_check_spread`` and
      call ``_restart`` with the failed entries it carried;
    * ``close``, idempotent, and ``__getstate__`` leaving out connections (a
      spout is pickled to Spark's executors and to worker processes).

    Lifecycle: ``open``, then ``seek`` (a rewindable spout, at every restore),
    ``next_tuple``/``ack``/``fail`` from the runtime's thread, ``close``.
    """

    connector = "BrokerSpout"  # the public class's name, for messages
    progress_unit = "entries"  # the metrics bank's unit for progress()

    def __init__(self, count: int, block_ms: int) -> None:
        if count < 1 or block_ms < 0:
            raise ConfigError(
                f"{self.connector}: count must be >= 1 and block_ms >= 0 (got {count}, {block_ms})"
            )
        self.count = count
        self.block_ms = block_ms
        self._reconnect: Reconnect | None = None
        self._mine: list[str] = []  # the streams (or queues) of this task, set at open
        self._tasks = 1  # the spout's parallelism, set at open
        self._buffer: deque[tuple[Hashable, list[Any]]] = deque()  # (message id, values)
        self._in_flight: dict[Hashable, list[Any]] = {}  # emitted, not acked: emit order
        self._replay: deque[Hashable] = deque()  # failed: emitted again before anything new
        self._caught_up = False
        self._end: int | None = None  # the stream's end when last asked (progress)
        self._end_due = 0.0  # when to ask again (the clock's monotonic time)

    # -- what a subclass supplies -----------------------------------------------------
    def _read(self) -> bool | None:
        """Read the next batch into ``_buffer``; return whether the broker had
        nothing more (caught up), or None when it did not answer (nothing learnt).
        Raise :class:`Lost` for a connection error."""
        raise NotImplementedError

    def _emitted(self, msg_id: Any) -> None:
        """A hook: ``msg_id`` (read from the buffer) was just emitted."""

    def _done(self) -> int | None:
        """How many entries this task has read (its position, as a count), or None."""
        return None

    def _stream_end(self) -> int | None:
        """How many entries the task's streams hold up to their end now (asked of the
        broker, at most once a second, in the spout's thread), or None."""
        return None

    # -- the base's -------------------------------------------------------------------
    def _reconnect_to(self, url: str) -> None:
        """At ``open``, once connected: a server at ``url`` lost mid-run is tried again
        for ``statestream.connectors.reconnect.secs``, then the run stops (sets
        ``_reconnect``; ``url`` is shown with its password hidden)."""
        self._reconnect = Reconnect.from_conf(self._name(), url, self.conf, self.context.clock)

    def next_tuple(self) -> None:
        if self._replay:
            msg_id = self._replay.popleft()
            self.collector.emit(self._in_flight[msg_id], msg_id)
            return
        if not self._buffer:
            self._fill()
            if not self._buffer:
                return
        msg_id, values = self._buffer.popleft()
        self._in_flight[msg_id] = values
        self._emitted(msg_id)
        self.collector.emit(values, msg_id)

    def _fill(self) -> None:
        """One read through the reconnect policy (nothing while a lost server's next
        attempt is not due), then the stream's end if it is time to ask again."""
        reconnect = self._reconnect
        if reconnect is None or not reconnect.due():
            return
        try:
            caught_up = self._read()
        except Lost as lost:
            reconnect.failed(lost.cause)  # raises SourceError once the limit is past
            return
        if caught_up is None:
            return
        reconnect.ok()
        self._caught_up = caught_up
        now = self.context.clock.monotonic()
        if now >= self._end_due:
            self._end_due = now + _PROGRESS_EVERY_S
            try:
                self._end = self._stream_end()
            except Exception:  # progress is for people watching: never the run's failure
                self._end = None

    def _restart(self, replay: Iterable[tuple[Hashable, Sequence[Any]]]) -> None:
        """Forget what was buffered and in flight (a seek): the failed entries of the
        restored position, with their values, are emitted first."""
        self._buffer.clear()
        self._caught_up = False
        self._in_flight = {msg_id: list(values) for msg_id, values in replay}
        self._replay = deque(self._in_flight)
        self._end_due = 0.0

    def _failed(self) -> Iterator[tuple[Any, list[Any]]]:
        """The failed entries waiting to be emitted again, with their values (for a position)."""
        return ((msg_id, self._in_flight[msg_id]) for msg_id in self._replay)

    def _key(self, msg_id: Any) -> Hashable:
        """``msg_id`` as the in-flight map keys it: a tuple id may come back from the
        runtime as a list (through a worker's pipe), and is made a tuple again; the
        local runtime hands back the id as it was emitted, taken as it is."""
        if type(msg_id) is list:
            return tuple(msg_id)
        return msg_id  # type: ignore[no-any-return]

    def ack(self, msg_id: Any) -> None:
        self._in_flight.pop(self._key(msg_id), None)

    def fail(self, msg_id: Any) -> None:
        key = self._key(msg_id)
        if key in self._in_flight:
            self._replay.append(key)

    def exhausted(self) -> bool:
        return self._caught_up and not self._buffer and not self._replay and not self._in_flight

    def progress(self) -> tuple[int, int | None] | None:
        """``(entries read, the streams' end)``: the lag is the difference, 0 once
        caught up (the metrics bank's optional ``ReportsProgress``). Cheap: the end
        is the one the spout last asked for, at most once a second, while reading."""
        done = self._done()
        if done is None:
            return None
        if self._caught_up and not self._buffer:
            return done, done
        return done, None if self._end is None else max(self._end, done)

    #: The key of the per-stream positions in ``_where`` (RabbitMQ keeps "queues").
    _position_key = PARTITIONS_KEY

    def _take_share(self, context: TopologyContext, names: Sequence[str], what: str) -> None:
        """At open: this task's share of ``names`` (``_mine``) and the parallelism it
        was spread by (``_tasks``, which ``_check_spread`` compares at seek)."""
        self._tasks = context.parallelism
        self._mine = spread(self._name(), names, context.task_index, self._tasks, what)

    def _where(self, per_stream: Mapping[str, Any], replay: list[Any]) -> dict[str, Any]:
        """A position: ``per_stream`` under ``_position_key``, the entries to
        replay, and the task count when there are several; plus ``_position_extra``."""
        where: dict[str, Any] = {self._position_key: dict(per_stream), "replay": replay}
        if self._tasks > 1:
            where["tasks"] = self._tasks
        where.update(self._position_extra())
        return where

    def _position_extra(self) -> dict[str, Any]:
        """What a spout keeps in its position besides the streams' (none by default)."""
        return {}

    def _check_spread(self, tasks: int, stored: Iterable[str]) -> None:
        """Refuse a position stored by another parallelism or for other streams than
        this task's (``_tasks`` and ``_mine``, set at open): the streams would be
        split another way. Closes the spout before it raises."""
        names = sorted(stored)
        if tasks != self._tasks or names != sorted(self._mine):
            self.close()
            raise self._moved(
                f"by {tasks} task(s) reading {names} on this task",
                f"has {self._tasks} task(s) and gives it {sorted(self._mine)}",
            )

    def _moved(self, stored: str, now: str) -> ConfigError:
        """The error for a checkpoint taken reading something else than this run."""
        return ConfigError(
            f"{self._name()}: the checkpoint to restore was taken {stored}, but this run "
            f"{now}; run with the same streams and parallelism, or start from an empty "
            "state store (statestream state clear)"
        )

    def _name(self) -> str:
        return f"{self.connector} {self.context.component_id!r}"
