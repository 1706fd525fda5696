"""A spout reading RabbitMQ queues (pika, one BlockingConnection per task).

A stream queue (``x-queue-type: stream``) is a log read from an offset: the
offset lives in the checkpoint record and the spout is rewindable
(exactly-once). A classic queue forgets what it delivered once it is acked:
the spout acks the broker only when the runtime acks the message, which in
a stateful topology happens once the checkpoint covering it has committed
(at-least-once; ``auto`` says so in one line at start, since this spout has
no ``position``/``seek``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Literal

from .._components import OutputFieldsDeclarer, SpoutOutputCollector, TopologyContext
from .._errors import ConfigError, SourceError
from ._broker import client_name, redact, require, unreachable
from ._source import BrokerSpout, Lost

__all__ = ["RabbitMQSpout"]

_COUNT_REFRESH_S = 1.5  # how stale a stream queue's message count may be


class RabbitMQSpout(BrokerSpout):
    """Emits each message of RabbitMQ queue(s) ``queue`` as one field, its body as UTF-8 text.

    ``kind="stream"`` (the default) reads a stream queue from an offset
    (``x-stream-offset``, with ``basic_qos(prefetch_count=count)``): it
    implements :class:`~statestream.Rewindable`, its position being the
    offset of the next message per queue (plus the failed ones waiting to be
    emitted again), so a stateful topology reading it is exactly-once.
    ``kind="classic"`` consumes a classic (or quorum) queue: every delivery
    is held unacked on the broker until the runtime acks its tuple, which a
    stateful topology does once the checkpoint covering it committed, so a
    crash redelivers only what no checkpoint covered: at-least-once. The
    kind is checked against each queue at ``open``.

    **Several queues, several tasks.** ``queue`` may be a list: task ``i``
    of N consumes the queues whose index is ``i`` modulo N (one connection,
    one consumer per queue), each in its own order. More tasks than queues
    is refused; so is a restart whose parallelism differs from the one that
    stored the positions.

    ``next_tuple`` waits at most ``block_ms`` for a delivery when none is
    buffered. With ``--until-idle`` it is exhausted once nothing arrived
    for that long, the broker counts nothing more, and everything it
    emitted is acked.

    **Faults.** A broker that does not answer at ``open`` stops the run
    (exit 1, the URL named with its password hidden); a queue that does not
    exist is a :class:`~statestream.ConfigError` naming it; a broker lost
    mid-run is tried again with backoff for
    ``statestream.connectors.reconnect.secs``, then the run stops.
    """

    connector = "RabbitMQSpout"
    # How a restart resumes without a position (statestream._resume): the broker
    # redelivers what was not acked, which is what no checkpoint covered.
    resumes = (
        "gets again from the broker only what no committed checkpoint covered (the broker "
        "held it unacked)"
    )

    def __new__(cls, *args: Any, **kwargs: Any) -> RabbitMQSpout:
        # The kind decides the class: only the stream queue's has position/seek,
        # which is how the runtime tells a rewindable spout (``auto``).
        # No arguments: pickle or copy making an instance of the class it stored.
        if cls is RabbitMQSpout and (args or kwargs) and kwargs.get("kind", "stream") == "stream":
            cls = _StreamQueueSpout
        return super().__new__(cls)

    def __init__(
        self,
        queue: str | Sequence[str],
        url: str = "amqp://guest:guest@127.0.0.1:5672/%2F",
        *,
        kind: Literal["stream", "classic"] = "stream",
        field: str = "line",
        count: int = 1000,
        block_ms: int = 50,
    ) -> None:
        if kind not in ("stream", "classic"):
            raise ConfigError(f"RabbitMQSpout: kind is 'stream' or 'classic', not {kind!r}")
        super().__init__(count, block_ms)
        self.queues = [queue] if isinstance(queue, str) else list(queue)
        if not self.queues:
            raise ConfigError("RabbitMQSpout needs at least one queue")
        self.url, self.kind, self.field = url, kind, field
        self._connection: Any = None
        self._channel: Any = None
        self._consumers: dict[str, str] = {}  # queue -> consumer tag
        self._broker_acks: list[tuple[int, int]] = []  # classic: message ids to ack next call
        # Which connection this is (1 for the first): a delivery tag names a message
        # only on its channel, and they start again at 1 on a new one.
        self._generation = 0
        self._emits = 0  # classic: messages emitted by this task (progress)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare([self.field])

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        require("pika", "rabbitmq", "RabbitMQSpout")
        self._take_share(context, self.queues, "queue")
        self._reconnect_to(self.url)
        try:
            self._connect()
        except ConfigError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise unreachable(self._name(), self.url, exc) from exc
        for queue in self._mine:
            self._check_kind(queue)

    def _connect(self) -> None:
        import pika
        from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker

        params = pika.URLParameters(self.url)
        params.connection_attempts, params.socket_timeout = 1, 2.0
        # Named per task (rabbitmqctl list_connections client_properties, the
        # management UI): whose connection it is.
        params.client_properties = {"connection_name": client_name(self.context)}
        params.blocked_connection_timeout = 10.0
        self._connection = pika.BlockingConnection(params)
        self._channel = self._connection.channel()
        self._generation += 1
        for queue in self._mine:
            try:
                self._channel.queue_declare(queue, passive=True)
            except ChannelClosedByBroker as exc:
                if _recovering(exc):  # a restarted broker: the queue is there, not yet back
                    raise AMQPConnectionError(exc.reply_text) from exc
                raise ConfigError(
                    f"{self._name()}: the queue {queue!r} does not exist on "
                    f"{redact(self.url)} ({exc.reply_text}); fix the name, or declare it first"
                    + (" with x-queue-type: stream" if self.kind == "stream" else "")
                ) from None
        self._channel.basic_qos(prefetch_count=self.count)

    def _check_kind(self, queue: str) -> None:
        """Whether the queue is a stream: declaring it as one again is accepted only then."""
        from pika.exceptions import ChannelClosedByBroker

        probe = self._connection.channel()
        try:
            probe.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
            is_stream = True
            probe.close()
        except ChannelClosedByBroker:
            is_stream = False
        if is_stream != (self.kind == "stream"):
            actual = "stream" if is_stream else "classic"
            self.close()
            raise ConfigError(
                f"{self._name()}: the queue {queue!r} is a {actual} queue, but the "
                f"spout was given kind={self.kind!r}; pass kind={actual!r}"
            )

    def _consume(self, queue: str, arguments: dict[str, Any] | None = None) -> None:
        self._consumers[queue] = self._channel.basic_consume(
            queue, partial(self._deliver, queue), auto_ack=False, arguments=arguments
        )

    def _deliver(
        self, queue: str, _channel: Any, method: Any, properties: Any, body: bytes
    ) -> None:
        try:
            text = body.decode()
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"{self._name()}: a message of queue {queue!r} is not UTF-8 "
                f"({exc.reason}); produce UTF-8 text"
            ) from None
        msg_id = self._message_id(queue, method, properties)
        if msg_id is not None:
            self._buffer.append((msg_id, [text]))

    def _message_id(self, queue: str, method: Any, properties: Any) -> Any:
        """The delivery's message id, or None to skip it (the stream spout's hook).
        Classic: ``(connection, delivery tag)``, unique over the task's connections:
        an ack of a delivery of a lost connection, which the runtime sends once the
        checkpoint covering it committed, must not ack the delivery that carries
        its tag on the next connection (no checkpoint covers that one yet)."""
        return (self._generation, int(method.delivery_tag))

    def next_tuple(self) -> None:
        if self._broker_acks:
            self._flush_acks()
        super().next_tuple()

    def _emitted(self, msg_id: Any) -> None:
        self._emits += 1

    def _read(self) -> bool | None:
        import pika.exceptions as errors

        try:
            if self._channel is None or self._channel.is_closed:
                self._connect()
                self._resubscribe()
            elif not self._consumers:
                self._resubscribe()
            self._connection.process_data_events(time_limit=self.block_ms / 1000.0)
            self._after_read()  # within the try: the connection may be lost meanwhile
            if self._buffer:
                return False
            # Nothing came for block_ms, which under load is no proof: the broker's
            # count of the queues' messages says whether there is more.
            return self._read_all(self._message_count())
        except errors.ChannelClosedByBroker as exc:  # refused, not lost: retrying cannot help
            self._drop_connection()
            if _recovering(exc):  # ... unless the queue's node is only coming back
                raise Lost(exc) from exc
            raise SourceError(
                f"{self._name()}: the broker closed the channel on queue(s) {self._mine}: "
                f"{exc.reply_code} {exc.reply_text}"
            ) from exc
        except (errors.AMQPConnectionError, errors.ChannelClosed, errors.StreamLostError) as exc:
            self._drop_connection()
            raise Lost(exc) from exc

    def _after_read(self) -> None:
        """Talk to the broker after a read (a hook: the stream spout acks for credit)."""

    def _done(self) -> int | None:
        return self._emits

    def _stream_end(self) -> int | None:
        """Classic: what this task emitted, holds, and what the queues hold ready."""
        return self._emits + len(self._buffer) + self._message_count()

    def _message_count(self) -> int:
        """The task's queues' message count now (passive declares: round trips, so
        only when a read found nothing, or from the once-a-second progress)."""
        if self._channel is None:
            raise ConnectionError("not connected")
        return sum(
            int(self._channel.queue_declare(q, passive=True).method.message_count)
            for q in self._mine
        )

    def _read_all(self, message_count: int) -> bool:
        """Whether queues holding ``message_count`` messages have nothing more for us:
        a classic queue counts those ready (not delivered)."""
        return message_count == 0

    def _resubscribe(self) -> None:
        """Consume again after a (re)connect. Classic: what was delivered and not acked
        was put back by the broker, and comes again with new tags."""
        self._in_flight.clear()
        self._replay.clear()
        for queue in self._mine:
            self._consume(queue)

    def _flush_acks(self) -> None:
        from pika.exceptions import AMQPError

        acks, self._broker_acks = self._broker_acks, []
        if self._channel is None or self._channel.is_closed:
            return  # the broker redelivers them: at-least-once
        try:
            for generation, tag in acks:
                if generation == self._generation:  # else its connection is gone: redelivered
                    self._channel.basic_ack(tag)
        except AMQPError:
            # The connection was lost (pika learns it here, at the first frame
            # sent): the broker redelivers what these acks were for (at-least-
            # once), and the next read reconnects under the reconnect policy.
            self._drop_connection()

    def ack(self, msg_id: Any) -> None:
        # In a stateful topology the runtime acks once the checkpoint covering the
        # message committed: only now may the broker forget it.
        key: Any = self._key(msg_id)
        if self._in_flight.pop(key, None) is not None:
            self._broker_acks.append(key)

    def _drop_connection(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._consumers = {}
        self._buffer.clear()
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception:  # already broken: dropping it is all we want
                return

    def close(self) -> None:
        if self._broker_acks and self._channel is not None and self._channel.is_open:
            self._flush_acks()
        self._drop_connection()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_connection"] = state["_channel"] = None
        state["_consumers"] = {}
        return state


# What help(), IDEs and the API reference show: __init__'s parameters, not the
# (*args, **kwargs) of the __new__ that picks the class by kind.
RabbitMQSpout.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    list(inspect.signature(RabbitMQSpout.__init__).parameters.values())[1:]
)


class _StreamQueueSpout(RabbitMQSpout):
    """:class:`RabbitMQSpout` on stream queues: rewindable by offset per queue."""

    _position_key = "queues"

    resumes = ""  # rewindable: the position says where it resumes
    _next: dict[str, int]  # queue -> the offset of the next message to emit
    _last_tag: int = 0  # the delivery tag to ack after a read (it only grants credit)
    _quiet_since: float | None = None  # when the count first said "nothing more"

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self._next = {q: 0 for q in self._mine}

    def _message_id(self, queue: str, method: Any, properties: Any) -> Any:
        # Stream queues deliver each message's offset in a header: the message id.
        self._last_tag = int(method.delivery_tag)
        offset = int(properties.headers["x-stream-offset"])
        # A consumer starts at the chunk holding its offset: what precedes it was read.
        return (queue, offset) if offset >= self._next[queue] else None

    def _emitted(self, msg_id: Any) -> None:
        self._next[msg_id[0]] = msg_id[1] + 1

    def _read_all(self, message_count: int) -> bool:
        # A stream counts every message it holds, offsets from 0 (with retention
        # cutting the head, the count is lower: caught up a little early). The
        # broker refreshes that count about once a second, so a count saying
        # "nothing more" is believed only when it still says so a while later
        # with nothing delivered meanwhile (a stale one ended runs early).
        if message_count > sum(self._next.values()) + len(self._buffer):
            self._quiet_since = None
            return False
        now = self.context.clock.monotonic()
        if self._quiet_since is None:
            self._quiet_since = now
        return now - self._quiet_since >= _COUNT_REFRESH_S

    def _resubscribe(self) -> None:
        self._buffer.clear()
        self._last_tag = 0
        for queue in self._mine:
            self._consume(queue, {"x-stream-offset": self._next[queue]})

    def _read(self) -> bool | None:
        caught_up = super()._read()
        if self._buffer:
            self._quiet_since = None  # something came: the count is to be asked again
        return caught_up

    def _after_read(self) -> None:
        if self._last_tag:
            self._channel.basic_ack(self._last_tag, multiple=True)  # one frame per read
            self._last_tag = 0

    def _done(self) -> int | None:
        return sum(self._next.values())

    def _stream_end(self) -> int | None:
        """The streams' message counts (offsets from 0)."""
        return self._message_count()

    def ack(self, msg_id: Any) -> None:
        # nothing to tell the broker: the offset is ours
        self._in_flight.pop(self._key(msg_id), None)

    def position(self) -> Any:
        """Per queue the offset of the next message, and the failed messages (with
        their text) that wait to be emitted again."""
        return self._where(self._next, [[q, n, v[0]] for (q, n), v in self._failed()])

    def acked_position(self) -> Any:
        """Per queue the offset of the first message not yet acked."""
        offsets = dict(self._next)
        # The lowest, not the first emitted: the replays of a position come first
        # in the order they failed, which is not the queue's.
        in_flight: Iterable[tuple[str, int]] = self._in_flight  # type: ignore[assignment]
        for q, n in in_flight:
            if n < offsets.get(q, n + 1):
                offsets[q] = n
        return self._where(offsets, [])

    def seek(self, position: Any) -> None:
        """Continue from ``position`` (from :meth:`position`; None: the streams' start)."""
        if self._channel is None:
            raise ConfigError("RabbitMQSpout.seek() before open()")
        offsets = {q: 0 for q in self._mine}
        replay: list[Any] = []
        if position is not None:
            self._check_spread(int(position.get("tasks", 1)), position.get("queues") or {})
            offsets = {q: int(n) for q, n in position["queues"].items()}
            replay = position.get("replay") or []
        buffered = list(self._buffer)
        self._restart(((q, int(n)), [text]) for q, n, text in replay)
        if self._consumers and offsets == self._next:
            self._buffer.extend(buffered)  # already there: what is buffered comes next
            return
        self._next = offsets
        self._quiet_since = None
        self._consume_from_next()

    def _consume_from_next(self) -> None:
        """Consume from ``_next`` on a fresh connection. pika's basic_cancel rejects
        the deliveries it holds, which a stream queue answers by closing the
        connection, at a moment of the broker's choosing (seen after the cancel
        had returned, from the next read: the spout failed with "basic.nack and
        basic.reject not supported by stream queues"); so the consumers go with
        their connection, and reading goes on on a new one."""
        if self._consumers:
            self._drop_connection()
            self._connect()
            self._consumers = {}
        self._buffer.clear()
        self._resubscribe()


def _recovering(exc: Any) -> bool:
    """Whether the broker refused because a durable queue's node is still coming
    back (after a broker restart: ``404 NOT_FOUND - home node ... of durable queue
    ... is down or inaccessible``): a lost connection to ride out, not a missing queue."""
    return getattr(exc, "reply_code", None) == 404 and "down or inaccessible" in str(
        getattr(exc, "reply_text", "")
    )
