"""A spout reading Kafka topics, rewindable by offset (exactly-once).

The spout never joins a consumer group: each task ``assign``-s its share of
the partitions at the offsets its position holds (librdkafka, through
confluent-kafka), so the checkpoint record alone says where the input
stands: ``{"offsets": {topic: {partition: next_offset}}, ...}``
(statestream.connectors._kafka_positions, with the pure decisions on
partitions: which task reads one, one position out of every task's).
:class:`_Records` turns a record into a tuple's values, for the spout and
for a Spark executor's range read alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

import orjson

from .._components import OutputFieldsDeclarer, SpoutOutputCollector, TopologyContext
from .._config import settings_of
from .._errors import ConfigError, SourceError
from .._runners import SparkSettings
from ._broker import redact, require, unreachable
from ._kafka_positions import (
    added_partitions,
    merge_positions,
    nested_position,
    owner,
    partition_key,
    read_position,
    share,
    split_key,
)
from ._source import BrokerSpout, Lost

__all__ = ["KafkaSpout", "merge_positions", "owner", "partition_key", "share"]

Format = Literal["text", "json", "bytes"]
METADATA: Final = ("key", "partition", "offset", "timestamp", "topic")
_TIMEOUT_S: Final = 5.0  # metadata and offsets asked at open, at an assign, by the driver
_PROBE_S: Final = 0.5  # a lost broker: how long one attempt to reach it may block
_DISCOVER_EVERY_S: Final = 10.0  # how often a task asks whether partitions were added
_GROUP_EVERY_S: Final = 1.0  # how often the acked offsets go to the consumer group

log = logging.getLogger("statestream")

# librdkafka's error codes the spout acts on. Its local ones are spelled
# KafkaError._PARTITION_EOF and so on (a leading underscore, which the lint
# takes for private): their values are fixed by librdkafka's ABI.
_EOF: Final = -191  # _PARTITION_EOF: a partition read to its end
_RESET: Final = -140  # _AUTO_OFFSET_RESET: the offset to read is gone
_OUT_OF_RANGE: Final = 1  # OFFSET_OUT_OF_RANGE
_UNKNOWN_TOPIC: Final = 3  # UNKNOWN_TOPIC_OR_PART
# A broker gone: _ALL_BROKERS_DOWN, _TRANSPORT, _RESOLVE, and a broker restarted
# that does not know its topics yet.
_LOST: Final = frozenset({-187, -195, -193, _UNKNOWN_TOPIC})


class _Records:
    """What a record becomes: its value (``text``: one UTF-8 field; ``json``: the
    named keys of a JSON object; ``bytes``: one field, as it came), then the
    ``metadata`` asked for. A record that does not fit is one
    :class:`~statestream.SourceError` naming its topic, partition and offset."""

    def __init__(self, what: str, fmt: Format, fields: Sequence[str], metadata: Sequence[str]):
        self.what, self.format, self.fields, self.metadata = what, fmt, list(fields), list(metadata)

    def values(self, msg: Any) -> list[Any]:
        value = msg.value()
        try:
            if self.format == "text":
                out: list[Any] = [None if value is None else value.decode()]
            elif self.format == "bytes":
                out = [value]
            else:
                record = orjson.loads(value)
                out = [record[f] for f in self.fields]
        except Exception as exc:  # each client's decode error: one line
            reason = f"no key {exc}" if isinstance(exc, KeyError) else f"{exc}"
            raise SourceError(
                f"{self.what}: the record at offset {msg.offset()} of partition "
                f"{msg.partition()} of topic {msg.topic()!r} cannot be read as "
                f"{'UTF-8 text' if self.format == 'text' else f'a JSON object with {self.fields}'}"
                f" ({type(exc).__name__}: {reason}); produce it so, or read it with "
                "format='bytes'"
            ) from None
        for name in self.metadata:
            out.append(self._meta(msg, name))
        return out

    def _meta(self, msg: Any, name: str) -> Any:
        if name == "key":
            key = msg.key()
            if key is None or self.format == "bytes":
                return key
            return key.decode(errors="replace")
        if name == "timestamp":
            kind, ms = msg.timestamp()
            return None if kind == 0 else ms  # TIMESTAMP_NOT_AVAILABLE
        return {"partition": msg.partition, "offset": msg.offset, "topic": msg.topic}[name]()


class _QuietLog:
    """librdkafka's log lines, as debug records: a lost broker is reported once by
    the spout (Reconnect), not at every connection attempt of the client."""

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        log.debug("librdkafka: " + msg, *args)


def _client_conf(bootstrap: str, group: str | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        # Never joined: offsets are committed to it (``group``) for lag tools only.
        "group.id": group or "statestream",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,  # how the spout knows it caught up
        "auto.offset.reset": "error",  # an offset that is gone is an error, not a jump
        "isolation.level": "read_committed",
        "reconnect.backoff.max.ms": 1000,
        "logger": _QuietLog(),
        **extra,
    }


class KafkaSpout(BrokerSpout):
    """Emits each record of one or more Kafka topics, in offset order per partition.

    What it emits: the record's value, as UTF-8 text with ``format="text"``
    (the default; one field, ``fields=["line"]``), the named keys of a JSON
    object with ``format="json"``, or the bytes as they came with
    ``format="bytes"``; then the record's ``metadata`` asked for, any of
    ``key``, ``partition``, ``offset``, ``timestamp`` (milliseconds: a
    windowed bolt's ``with_timestamp_field("timestamp")`` takes it as event
    time) and ``topic``, as more output fields. A record that cannot be read
    so stops the run with one line naming its topic, partition and offset.

    **Exactly-once.** Its position is, per topic and partition, the offset of
    the next record (``{"offsets": {topic: {partition: offset}}, ...}``; a
    position of the flat shape earlier versions stored is read too), and the
    failed records to emit again, kept in the checkpoint record, never in a
    consumer group: each
    task ``assign``-s its partitions at those offsets (a restore reads again
    from the earliest failed one, emitting only the failed ones below the
    position). ``acked_position()`` serves at-least-once state.

    **Partitions and tasks.** The partitions of every topic are spread over
    the spout's tasks (:func:`owner`); partitions added while it runs are
    found within 10 s and read from their start; a restart with another
    parallelism takes every partition's position from whichever task held it
    (:func:`merge_positions`). More tasks than partitions is refused.

    **Consumer group.** ``group``: the offsets below which every record was
    acked (with stateful bolts, what committed checkpoints cover) are also
    committed to that consumer group, at most once a second, for lag tools
    (on Spark: each checkpoint's, as the driver commits it, :meth:`committed`);
    they are never read back. Without it nothing is written to the broker.

    **Spark.** A :class:`~statestream.PartitionedSource`: the driver plans
    each partition's offset range to its end, at most
    ``statestream.spark.batch.size`` records a batch, and executors read them.

    **Faults.** A broker that does not answer at ``open`` stops the run (exit
    1); a topic that does not exist is a :class:`~statestream.ConfigError`
    naming it (exit 2); a broker lost mid-run is tried again for
    ``statestream.connectors.reconnect.secs``, then the run stops; an offset
    the broker no longer has (retention, a topic made anew) stops the run.
    ``config`` passes more librdkafka settings (``security.protocol``,
    ``sasl.*``, ...); its values never appear in messages.
    """

    connector = "KafkaSpout"

    def __init__(
        self,
        topic: str | Sequence[str],
        bootstrap: str = "127.0.0.1:9092",
        fields: Sequence[str] = ("line",),
        *,
        format: Literal["text", "json", "bytes"] = "text",
        metadata: Sequence[str] = (),
        group: str | None = None,
        config: Mapping[str, Any] | None = None,
        count: int = 1000,
        block_ms: int = 50,
    ) -> None:
        self.topics = [topic] if isinstance(topic, str) else list(topic)
        self.fields, self.metadata = list(fields), list(metadata)
        if not self.topics or not self.fields:
            raise ConfigError("KafkaSpout needs at least one topic and one field")
        if format not in ("text", "json", "bytes"):
            raise ConfigError(f"KafkaSpout: format {format!r}: use 'text', 'json' or 'bytes'")
        if format != "json" and len(self.fields) != 1:
            raise ConfigError(
                f"KafkaSpout: format={format!r} emits the value as one field, but fields is "
                f"{self.fields}; give one field, or format='json' to read several keys"
            )
        unknown = [m for m in self.metadata if m not in METADATA]
        clash = set(self.fields) & set(self.metadata)
        if unknown or clash or len(set(self.metadata)) != len(self.metadata):
            raise ConfigError(
                f"KafkaSpout: metadata {self.metadata}: each at most once, out of "
                f"{list(METADATA)}, none named as one of fields {self.fields}"
            )
        super().__init__(count, block_ms)
        self.bootstrap, self.format, self.group = bootstrap, format, group
        self.config = dict(config or {})
        self._consumer: Any = None
        # A second client, for what must not wait behind the reading client's fetch
        # on its connection (a broker answers a connection's requests in order):
        # metadata, offsets, the fetches that confirm a partition's end.
        self._meta: Any = None
        self._planned: dict[str, int] = {}  # the ends end_position found for a plan
        self._records = _Records("KafkaSpout", format, self.fields, self.metadata)
        self._counts: dict[str, int] = {}  # topic -> its partitions, as last seen
        self._next: dict[str, int] = {}  # partition -> offset after the last emitted
        self._resend: dict[str, set[int]] = {}  # partition -> failed offsets below _next
        self._read_to: dict[str, int] = {}  # partition -> the offset the consumer gives next
        self._eof: dict[str, bool] = {}  # partition -> read to its end, as last fetched
        self._assigned = False
        self._down = False  # a lost broker seen, not reached since
        self._errors: list[Any] = []  # librdkafka's errors since the last read
        self._discover_due = 0.0
        self._group_due = 0.0
        self._committed: dict[str, int] | None = None  # committed() last told (Spark)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare([*self.fields, *self.metadata])

    # -- connecting --------------------------------------------------------------------
    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        kafka = require("confluent_kafka", "kafka", "KafkaSpout")
        self._records.what = self._name()
        # An offset is one record: a Spark batch reads at most its batch size of each.
        self.batch_limit = settings_of(conf, SparkSettings).statestream_spark_batch_size
        self._tasks = context.parallelism
        self._consumer = kafka.Consumer(
            {
                **_client_conf(self.bootstrap, self.group, self.config),
                "error_cb": self._errors.append,
            }
        )
        try:
            self._counts = {t: self._partitions_of(t) for t in self.topics}
        except kafka.KafkaException as exc:
            self.close()
            raise unreachable(self._name(), self.bootstrap, _Reason(exc)) from exc
        except ConfigError:
            self.close()
            raise
        total = sum(self._counts.values())
        if self._tasks > total:
            self.close()
            raise ConfigError(
                f"{self._name()} has {self._tasks} tasks but {total} partition(s) in "
                f"{self.topics}: each task reads whole partitions, so give it at most "
                f"{total} task(s) or more partitions"
            )
        self._mine = self._share()
        self._reconnect_to(self.bootstrap)
        self._start({}, [])

    def _partitions_of(self, topic: str) -> int:
        """How many partitions ``topic`` has (a metadata request); a ConfigError if it
        does not exist, a KafkaException if the broker does not answer."""
        listed = self._consumer.list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        if listed is None or listed.error is not None or not listed.partitions:
            raise ConfigError(
                f"{self._name()}: the topic {topic!r} does not exist on "
                f"{redact(self.bootstrap)}; fix its name, or create it first (kafka-topics.sh "
                f"--create --topic {topic} --partitions N)"
            )
        return len(listed.partitions)

    def _share(self) -> list[str]:
        return share(self.topics, self._counts, self.context.task_index, self._tasks)

    def _start(self, offsets: Mapping[str, int], resend: Iterable[Sequence[Any]]) -> None:
        mine = set(self._mine)
        self._next = {k: int(o) for k, o in offsets.items() if k in mine}
        self._resend = {}
        for key, offset, *_ in resend:
            if key in mine and int(offset) < self._next.get(key, 0):
                self._resend.setdefault(key, set()).add(int(offset))
        self._restart(())
        # Assigned at the first read, not here: the Spark driver seeks a partitioned
        # spout at every batch and never reads it.
        self._assigned = False
        self._eof = {}

    def _assign(self) -> None:
        """Read each partition of the task from its earliest failed offset, or its
        position, or (never read) the first offset the broker still has."""
        from confluent_kafka import TopicPartition

        for key in self._mine:
            if key not in self._next:
                low, _ = self._client().get_watermark_offsets(
                    TopicPartition(*split_key(key)), timeout=_TIMEOUT_S, cached=False
                )
                self._next[key] = max(int(low), 0)
        self._read_to = {k: min(self._resend.get(k) or {self._next[k]}) for k in self._mine}
        self._eof = {k: False for k in self._mine}
        self._consumer.assign([TopicPartition(*split_key(k), o) for k, o in self._read_to.items()])
        self._assigned = True

    # -- reading (BrokerSpout's hooks) --------------------------------------------------
    def _read(self) -> bool | None:
        """The next records the client fetched (waiting at most ``block_ms``) into the
        buffer; caught up once every partition was read to its end."""
        if self._consumer is None:
            return None
        from confluent_kafka import KafkaException

        try:
            if not self._assigned:
                self._assign()
            self._chores()
        except KafkaException as exc:
            raise Lost(_Reason(exc)) from exc
        got = self._take(self._consumer.consume(self.count, self.block_ms / 1000.0))
        errors, self._errors[:] = list(self._errors), []
        for err in errors:
            if err.fatal():
                raise SourceError(f"{self._name()}: {err.str()}")
        lost = next((e for e in errors if _is_lost(e)), None)
        if got:
            self._down = False
        elif lost is not None or self._down:
            self._down = True
            try:  # a closed idle connection is not a lost broker: ask it
                self._consumer.list_topics(self.topics[0], timeout=_PROBE_S)
            except KafkaException as exc:
                raise Lost(_Reason(exc if lost is None else lost)) from exc
            self._down = False
        return all(self._eof.values())

    def _take(self, messages: Sequence[Any]) -> bool:
        """Buffer ``messages`` (those after what was read of their partition, and below
        the position only the failed ones); note the ends reached. Whether any came."""
        got = False
        for m in messages:
            err = m.error()
            if err is not None:
                self._event(m, err)
                continue
            key = partition_key(m.topic(), m.partition())
            offset = m.offset()
            if offset < self._read_to.get(key, offset + 1):
                continue  # fetched before a seek, or not this task's
            self._read_to[key] = offset + 1
            self._eof[key] = False
            if offset < self._next[key] and offset not in self._resend.get(key, ()):
                continue  # read again only for a failed record before it
            self._buffer.append(((key, offset), self._records.values(m)))
            got = True
        return got

    def _event(self, m: Any, err: Any) -> None:
        code = err.code()
        if code == _EOF:
            key = partition_key(m.topic(), m.partition())
            if key in self._eof and m.offset() >= self._read_to.get(key, 0):
                self._eof[key] = True
        elif code in (_RESET, _OUT_OF_RANGE):
            raise SourceError(
                f"{self._name()}: partition {m.partition()} of topic {m.topic()!r} has no "
                f"record at the offset to read ({err.str()}): it was deleted (retention) or "
                "the topic was made anew; start from an empty state store (statestream "
                "state clear) to read what it holds now"
            )
        else:
            self._errors.append(err)  # fatal, or a lost broker: the read decides

    def _chores(self) -> None:
        """Now and then: new partitions of the topics, the acked offsets to the group."""
        now = self.context.clock.monotonic()
        if now >= self._discover_due:
            self._discover_due = now + _DISCOVER_EVERY_S
            self._discover()
        if self.group is not None and now >= self._group_due:
            self._group_due = now + _GROUP_EVERY_S
            self._commit_group(self._consumer, asynchronous=True)

    def _discover(self) -> None:
        """Partitions added to a topic: this task's new ones are read from their start."""
        from confluent_kafka import TopicPartition

        listed: dict[str, int | None] = {}
        for t in self.topics:
            found = self._client().list_topics(t, timeout=_TIMEOUT_S).topics.get(t)
            ok = found is not None and found.error is None
            listed[t] = len(found.partitions) if ok else None
        self._counts, new = added_partitions(
            self.topics, self._counts, listed, self._mine, self.context.task_index, self._tasks
        )
        if not new:
            return
        log.warning("%s: partitions %s were added; reading them from their start",
                    self._name(), new)  # fmt: skip
        self._mine += new
        for key in new:
            low, _ = self._client().get_watermark_offsets(
                TopicPartition(*split_key(key)), timeout=_TIMEOUT_S, cached=False
            )
            self._next[key] = self._read_to[key] = max(int(low), 0)
            self._eof[key] = False
        # assign, not incremental_assign: the client is assign-ed (mixing the two
        # crashed librdkafka 2.16 here); each partition goes on from where it was read.
        self._consumer.assign([TopicPartition(*split_key(k), o) for k, o in self._read_to.items()])

    def _commit_group(
        self, consumer: Any, *, asynchronous: bool, offsets: Mapping[str, int] | None = None
    ) -> None:
        """Commit ``offsets`` (by default the acked ones) to the group ``group``."""
        from confluent_kafka import TopicPartition

        if offsets is None:
            offsets = self._acked_offsets()
        if offsets:
            consumer.commit(
                offsets=[TopicPartition(*split_key(k), o) for k, o in offsets.items()],
                asynchronous=asynchronous,
            )

    def _emitted(self, msg_id: Any) -> None:
        key, offset = msg_id
        if offset >= self._next[key]:
            self._next[key] = offset + 1
        else:
            self._resend[key].discard(offset)

    def _done(self) -> int | None:
        return sum(self._next.get(k, 0) for k in self._mine)

    def _stream_end(self) -> int | None:
        """The task's partitions' ends as the broker answers them (ListOffsets, once a
        second, on the second client: never behind the reading client's fetch)."""
        from confluent_kafka import TopicPartition

        total = 0
        for key in self._mine:
            _, high = self._client().get_watermark_offsets(
                TopicPartition(*split_key(key)), timeout=_TIMEOUT_S, cached=False
            )
            total += max(int(high), self._next.get(key, 0))
        return total

    # -- positions (statestream.Rewindable) ----------------------------------------------
    def _pending(self) -> list[tuple[str, int]]:
        """The failed records to emit again: those failed in this run, and those of a
        restored position not read again yet, as ``(partition, offset)``."""
        failed = {(k, o) for (k, o), _ in self._failed()}
        failed.update((k, o) for k, offsets in self._resend.items() for o in offsets)
        return sorted(failed)

    def position(self) -> Any:
        """Per topic and partition the offset after the last record emitted, and the
        failed records that wait to be emitted again (statestream.connectors.
        _kafka_positions has the shape)."""
        return nested_position(self._next, self._pending(), self._tasks)

    def acked_position(self) -> Any:
        """Per topic and partition the offset of the first record not yet acked."""
        return nested_position(self._acked_offsets(), [], self._tasks)

    def _acked_offsets(self) -> dict[str, int]:
        offsets = dict(self._next)
        in_flight: Iterable[tuple[str, int]] = self._in_flight  # type: ignore[assignment]
        for key, offset in [*in_flight, *self._pending()]:
            if offset < offsets.get(key, offset + 1):
                offsets[key] = offset
        return offsets

    def merge_positions(self, positions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The position this task resumes from, out of every stored task's
        (statestream._resume asks, whatever parallelism stored them)."""
        return merge_positions(positions, self._tasks)

    def seek(self, position: Any) -> None:
        """Continue from ``position`` (None: each partition's start); a position of
        the flat shape earlier versions stored is read as well."""
        if self._consumer is None:
            raise ConfigError("KafkaSpout.seek() before open()")
        if position is None:
            self._start({}, [])
            return
        where = read_position(position)
        if where.tasks != self._tasks:
            self.close()
            raise self._moved(f"by {where.tasks} task(s)", f"has {self._tasks} task(s)")
        self._start(where.offsets, where.replay)

    def committed(self, position: Any) -> None:
        """A checkpoint holding ``position`` (this task's) committed: with ``group``,
        its offsets go to the group, for lag tools (asynchronously; the last ones
        again, synchronously, at close). The Spark driver calls it after each
        commit (statestream.PartitionedSource): it reads no records there, so
        nothing is ever acked on it. The local runtime does not: the spout
        commits its acked offsets itself while it reads."""
        if self.group is None or self._consumer is None:
            return
        self._committed = read_position(position).offsets
        try:
            self._commit_group(self._consumer, asynchronous=True, offsets=self._committed)
        except Exception as exc:  # lag tools' view only: never the run's failure
            log.debug("%s: committing to group %s failed: %s", self._name(), self.group, exc)

    def partition_places(self, position: Any) -> dict[str, int]:
        """Each partition's next offset in ``position``, by :meth:`partitions`' names
        (statestream.PartitionedSource: the position is nested by topic)."""
        return read_position(position).offsets

    def with_partition_places(self, position: Any, places: Mapping[str, int]) -> Any:
        """``position`` with its partitions at ``places`` (statestream.PartitionedSource)."""
        where = read_position(position)
        return nested_position({**where.offsets, **places}, where.replay, where.tasks)

    # -- read by range (statestream.PartitionedSource) ----------------------------------
    def partitions(self) -> Sequence[str]:
        return list(self._mine)

    def end_position(self, partition: str) -> int:
        """The offset after the partition's last record now (see :meth:`_ends`)."""
        from confluent_kafka import KafkaException

        try:
            # The driver asks for each partition in turn: all are found at the first.
            if partition == self._mine[0] or partition not in self._planned:
                self._planned = self._ends(self._mine)
            return self._planned[partition]
        except KafkaException as exc:
            raise SourceError(
                f"{self._name()}: the end of {partition} failed on "
                f"{redact(self.bootstrap)}: {_Reason(exc)}"
            ) from exc

    def _client(self) -> Any:
        """The second client (made at the first use)."""
        if self._meta is None:
            from confluent_kafka import Consumer

            # Its fetches only confirm an end: an empty one need not wait for data.
            conf = {**_client_conf(self.bootstrap, None, self.config), "fetch.wait.max.ms": 10}
            self._meta = Consumer(conf)
        return self._meta

    def _ends(self, keys: Sequence[str]) -> dict[str, int]:
        """The offset after the last record of each partition of ``keys`` now: the
        broker's answer (ListOffsets), then what a fetch from just before it finds
        to the partition's end (a round trip each). The answer alone is not the end
        on tansu 0.6.0: it gives the last batch's first offset + 1 (so does its
        fetch's high watermark); the last record read is right on any broker."""
        from confluent_kafka import TopicPartition

        ends: dict[str, int] = {}
        for key in keys:
            _, high = self._client().get_watermark_offsets(
                TopicPartition(*split_key(key)), timeout=_TIMEOUT_S, cached=False
            )
            ends[key] = max(int(high), 0)
        waiting = {k for k in keys if ends[k] > 0}
        if not waiting:
            return ends
        self._client().assign([TopicPartition(*split_key(k), ends[k] - 1) for k in waiting])
        for _ in range(int(_TIMEOUT_S / 0.1)):  # a bound, not a decision: 5 s at most
            for m in self._meta.consume(self.count, 0.1):
                key = partition_key(m.topic(), m.partition())
                if m.error() is None:
                    ends[key] = max(ends[key], m.offset() + 1)
                elif m.error().code() == _EOF:
                    waiting.discard(key)
            if not waiting:
                break
        return ends

    def read(self, partition: str, start: int, end: int) -> Iterator[list[Any]]:
        """The records of ``partition`` with an offset in ``[start, end)``, in order."""
        from confluent_kafka import TopicPartition

        start, end = int(start), int(end)
        if start >= end:
            return
        topic, p = split_key(partition)
        consumer = self._consumer
        consumer.assign([TopicPartition(topic, p, start)])
        at, idle = start, 0
        while at < end:
            messages = consumer.consume(self.count, 1.0)
            idle = 0 if messages else idle + 1
            if idle > 30:
                raise SourceError(
                    f"{self._name()}: nothing came from {partition} at offset {at} in 30 s "
                    f"(reading [{start}, {end}) from {redact(self.bootstrap)})"
                )
            for m in messages:
                err = m.error()
                if err is None:
                    if m.offset() >= end:
                        return
                    if m.offset() >= at:
                        at = m.offset() + 1
                        yield self._records.values(m)
                elif err.code() == _EOF:
                    # Past transaction markers: the client's position says where it is.
                    at = max(at, consumer.position([TopicPartition(topic, p)])[0].offset)
                else:
                    self._event(m, err)

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        meta, self._meta = self._meta, None
        for client in (consumer, meta):
            if client is not None:
                # What the spout read and acked; on the Spark driver, which reads
                # nothing, the offsets of the last checkpoint committed (committed()).
                reader = self._assigned or self._committed is not None
                if client is consumer and self.group is not None and reader:
                    try:
                        offsets = None if self._assigned else self._committed
                        self._commit_group(consumer, asynchronous=False, offsets=offsets)
                    except Exception as exc:  # lag tools' view only: never the run's failure
                        log.debug("%s: committing to group %s failed: %s", self._name(),
                                  self.group, exc)  # fmt: skip
                client.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # Clients do not travel; open() makes them.
        state.update(_consumer=None, _meta=None, _errors=[])
        return state


class _Reason(Exception):
    """A client error shown as its text alone (``KafkaError{code=...,str="..."}`` is
    what confluent-kafka prints)."""

    def __init__(self, exc: Any) -> None:
        err = exc.args[0] if getattr(exc, "args", None) else exc
        super().__init__(err.str() if hasattr(err, "str") else str(err))


def _is_lost(err: Any) -> bool:
    """Whether librdkafka's ``err`` says the broker went away."""
    return err.code() in _LOST
