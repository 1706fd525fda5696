"""A spout reading a RabbitMQ queue (pika, one BlockingConnection per task).

A stream queue (``x-queue-type: stream``) is a log read from an offset: the
offset lives in the checkpoint record and the spout is rewindable
(exactly-once). A classic queue forgets what it delivered once it is acked:
the spout acks the broker only when the runtime acks the message, which in
a stateful topology happens once the checkpoint covering it has committed
(at-least-once; ``auto`` says so in one line at start, since this spout has
no ``position``/``seek``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from .._components import OutputFieldsDeclarer, SpoutOutputCollector, TopologyContext
from .._errors import ConfigError, SourceError
from ._broker import Reconnect, redact, require, unreachable
from ._source import BrokerSpout, Lost

__all__ = ["RabbitMQSpout"]


class RabbitMQSpout(BrokerSpout):
    """Emits each message of RabbitMQ queue ``queue`` as one field, its body as UTF-8 text.

    ``kind="stream"`` (the default) reads a stream queue from an offset
    (``x-stream-offset``, with ``basic_qos(prefetch_count=count)``): it
    implements :class:`~statestream.Rewindable`, its position being the
    offset of the next message (plus the failed ones waiting to be emitted
    again), so a stateful topology reading it is exactly-once.
    ``kind="classic"`` consumes a classic (or quorum) queue: every delivery
    is held unacked on the broker until the runtime acks its tuple, which a
    stateful topology does once the checkpoint covering it committed, so a
    crash redelivers only what no checkpoint covered: at-least-once. The
    kind is checked against the queue at ``open``.

    One task per queue (a stream is one ordered log; a classic queue would
    work with several, but ordering is then lost): a parallelism above 1
    is refused.

    ``next_tuple`` waits at most ``block_ms`` for a delivery when none is
    buffered. With ``--until-idle`` it is exhausted once nothing arrived
    for that long and everything it emitted is acked.

    **Faults.** A broker that does not answer at ``open`` stops the run
    (exit 1, the URL named with its password hidden); a queue that does not
    exist is a :class:`~statestream.ConfigError` naming it; a broker lost
    mid-run is tried again with backoff for
    ``statestream.connectors.reconnect.secs``, then the run stops.
    """

    connector = "RabbitMQSpout"

    def __new__(cls, *args: Any, **kwargs: Any) -> RabbitMQSpout:
        # The kind decides the class: only the stream queue's has position/seek,
        # which is how the runtime tells a rewindable spout (``auto``).
        # No arguments: pickle or copy making an instance of the class it stored.
        if cls is RabbitMQSpout and (args or kwargs) and kwargs.get("kind", "stream") == "stream":
            cls = _StreamQueueSpout
        return super().__new__(cls)

    def __init__(
        self,
        queue: str,
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
        self.queue, self.url, self.kind, self.field = queue, url, kind, field
        self._connection: Any = None
        self._channel: Any = None
        self._consumer: str | None = None
        self._broker_acks: list[int] = []  # classic: delivery tags to ack at the next call
        self._emits = 0  # classic: messages emitted by this task (progress)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare([self.field])

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        require("pika", "rabbitmq", "RabbitMQSpout")
        if context.parallelism > 1:
            raise ConfigError(
                f"{self._name()} has {context.parallelism} tasks, but reads one queue in "
                "order: give it parallelism 1 (and spread the work over the bolts after it)"
            )
        self._reconnect = Reconnect.from_conf(self._name(), self.url, conf, context.clock)
        try:
            self._connect()
        except ConfigError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise unreachable(self._name(), self.url, exc) from exc
        self._check_kind()

    def _connect(self) -> None:
        import pika
        from pika.exceptions import ChannelClosedByBroker

        params = pika.URLParameters(self.url)
        params.connection_attempts, params.socket_timeout = 1, 2.0
        params.blocked_connection_timeout = 10.0
        self._connection = pika.BlockingConnection(params)
        self._channel = self._connection.channel()
        try:
            self._channel.queue_declare(self.queue, passive=True)
        except ChannelClosedByBroker as exc:
            raise ConfigError(
                f"{self._name()}: the queue {self.queue!r} does not exist on "
                f"{redact(self.url)} ({exc.reply_text}); fix the name, or declare it first"
                + (" with x-queue-type: stream" if self.kind == "stream" else "")
            ) from None
        self._channel.basic_qos(prefetch_count=self.count)

    def _check_kind(self) -> None:
        """Whether the queue is a stream: declaring it as one again is accepted only then."""
        from pika.exceptions import ChannelClosedByBroker

        probe = self._connection.channel()
        try:
            probe.queue_declare(self.queue, durable=True, arguments={"x-queue-type": "stream"})
            is_stream = True
            probe.close()
        except ChannelClosedByBroker:
            is_stream = False
        if is_stream != (self.kind == "stream"):
            actual = "stream" if is_stream else "classic"
            self.close()
            raise ConfigError(
                f"{self._name()}: the queue {self.queue!r} is a {actual} queue, but the "
                f"spout was given kind={self.kind!r}; pass kind={actual!r}"
            )

    def _consume(self, arguments: dict[str, Any] | None = None) -> None:
        self._consumer = self._channel.basic_consume(
            self.queue, self._deliver, auto_ack=False, arguments=arguments
        )

    def _deliver(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        try:
            text = body.decode()
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"{self._name()}: a message of queue {self.queue!r} is not UTF-8 "
                f"({exc.reason}); produce UTF-8 text"
            ) from None
        self._buffer.append((self._message_id(method, properties), [text]))

    def _message_id(self, method: Any, properties: Any) -> int:
        return int(method.delivery_tag)

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
            elif self._consumer is None:
                self._resubscribe()
            self._connection.process_data_events(time_limit=self.block_ms / 1000.0)
            if self._buffer:
                return False
            # Nothing came for block_ms, which under load is no proof: the broker's
            # count of the queue's messages says whether there is more.
            return self._read_all(self._message_count())
        except errors.ChannelClosedByBroker as exc:  # refused, not lost: retrying cannot help
            self._drop_connection()
            raise SourceError(
                f"{self._name()}: the broker closed the channel on queue {self.queue!r}: "
                f"{exc.reply_code} {exc.reply_text}"
            ) from exc
        except (errors.AMQPConnectionError, errors.ChannelClosed, errors.StreamLostError) as exc:
            self._drop_connection()
            raise Lost(exc) from exc

    def _done(self) -> int | None:
        return self._emits

    def _stream_end(self) -> int | None:
        """Classic: what this task emitted, holds, and what the queue holds ready."""
        return self._emits + len(self._buffer) + self._message_count()

    def _message_count(self) -> int:
        """The queue's message count now (a passive declare: a round trip, so only
        from the base's once-a-second progress)."""
        if self._channel is None:
            raise ConnectionError("not connected")
        return int(self._channel.queue_declare(self.queue, passive=True).method.message_count)

    def _read_all(self, message_count: int) -> bool:
        """Whether a queue holding ``message_count`` messages has nothing more for us:
        a classic queue counts those ready (not delivered)."""
        return message_count == 0

    def _resubscribe(self) -> None:
        """Consume again after a (re)connect. Classic: what was delivered and not acked
        was put back by the broker, and comes again with new tags."""
        self._in_flight.clear()
        self._replay.clear()
        self._consume()

    def _flush_acks(self) -> None:
        tags, self._broker_acks = self._broker_acks, []
        if self._channel is None or self._channel.is_closed:
            return  # the broker redelivers them: at-least-once
        for tag in tags:
            self._channel.basic_ack(tag)

    def ack(self, msg_id: Any) -> None:
        # In a stateful topology the runtime acks once the checkpoint covering the
        # message committed: only now may the broker forget it.
        if self._in_flight.pop(msg_id, None) is not None:
            self._broker_acks.append(msg_id)

    def _drop_connection(self) -> None:
        connection, self._connection, self._channel, self._consumer = (
            self._connection,
            None,
            None,
            None,
        )
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
        state["_connection"] = state["_channel"] = state["_consumer"] = None
        return state


class _StreamQueueSpout(RabbitMQSpout):
    """:class:`RabbitMQSpout` on a stream queue: rewindable by offset."""

    _next: int = 0  # the offset of the next message to emit
    _last_tag: int = 0  # the delivery tag to ack after a read (it only grants credit)

    def _message_id(self, method: Any, properties: Any) -> int:
        # Stream queues deliver each message's offset in a header: the message id.
        self._last_tag = int(method.delivery_tag)
        return int(properties.headers["x-stream-offset"])

    def _emitted(self, msg_id: Any) -> None:
        self._next = msg_id + 1

    def _read_all(self, message_count: int) -> bool:
        # A stream counts every message it holds, offsets from 0 (with retention
        # cutting the head, the count is lower: caught up a little early).
        return message_count <= self._next + len(self._buffer)

    def _resubscribe(self) -> None:
        self._buffer.clear()
        self._last_tag = 0
        self._consume({"x-stream-offset": self._next})

    def _read(self) -> bool | None:
        caught_up = super()._read()
        if self._last_tag and self._channel is not None:
            self._channel.basic_ack(self._last_tag, multiple=True)  # one frame per read
            self._last_tag = 0
        # A refetch after a reconnect starts at the next offset; nothing is older.
        while self._buffer and self._buffer[0][0] < self._next:  # type: ignore[operator]
            self._buffer.popleft()
        return caught_up

    def _done(self) -> int | None:
        return self._next

    def _stream_end(self) -> int | None:
        """The stream's message count (offsets from 0)."""
        return self._message_count()

    def ack(self, msg_id: Any) -> None:
        self._in_flight.pop(msg_id, None)  # nothing to tell the broker: the offset is ours

    def position(self) -> Any:
        """The offset of the next message, and the failed messages (with their text)
        that wait to be emitted again."""
        replay = [[n, values[0]] for n, values in self._failed()]
        return {"queue": self.queue, "offset": self._next, "replay": replay}

    def acked_position(self) -> Any:
        """The offset of the first message not yet acked."""
        return {"queue": self.queue, "offset": next(iter(self._in_flight), self._next)}

    def seek(self, position: Any) -> None:
        """Continue from ``position`` (from :meth:`position`; None: the stream's start)."""
        if self._channel is None:
            raise ConfigError("RabbitMQSpout.seek() before open()")
        replay: list[Any] = []
        offset = 0
        if position is not None:
            if position.get("queue") != self.queue:
                self.close()
                raise self._moved(
                    f"reading queue {position.get('queue')!r}", f"reads {self.queue!r}"
                )
            offset, replay = int(position["offset"]), position.get("replay") or []
        buffered = list(self._buffer)
        self._restart((int(n), [text]) for n, text in replay)
        if self._consumer is not None and offset == self._next:
            self._buffer.extend(buffered)  # already there: what is buffered comes next
            return
        self._next = offset
        self._consume_from_next()

    def _consume_from_next(self) -> None:
        """Consume from ``_next`` on a fresh channel. pika's basic_cancel rejects the
        deliveries it holds, which a stream queue answers by closing the
        connection; so deliver them first, and reconnect if the broker closed it."""
        import pika.exceptions as errors

        if self._consumer is not None:
            try:
                self._connection.process_data_events(time_limit=0)
                self._channel.basic_cancel(self._consumer)
            except (errors.AMQPError, errors.ChannelClosed):
                self._drop_connection()
                self._connect()
            self._consumer = None
        self._buffer.clear()
        self._resubscribe()
