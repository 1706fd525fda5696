"""``KafkaSink``: tuples as records of a Kafka topic, each checkpoint in one Kafka transaction.

A :class:`~statestream.connectors.TwoPhaseSink` (see there for the
protocol). At each COMMIT one Kafka transaction of the sink task's own
transactional producer holds the checkpoint's records and the guard, so a
``read_committed`` consumer of the topic sees each record once, through any
crash, as Flink's ``KafkaSink`` gives with its two-phase commit:

* **the fence**: each sink task has one ``transactional.id``,
  ``<guard>:<topology>:<sink>:<task>``, the same across restarts. Opening
  the task's producer (``init_transactions``) fences every older producer
  of that id: a transaction a killed or hung process left open is aborted
  there (or, had it reached its commit, completed), and such a process can
  no longer commit anything. From then on this producer is the only writer
  of the task's guard.
* **the guard**: the consumer group ``<guard>:<topology>:<sink>@<lineage>:<task>``
  with the offset ``txid + 1`` on partition 0 of the topic, committed IN
  the transaction (``send_offsets_to_transaction``, the offsets of Kafka's
  own consume-transform-produce exactly-once): it counts only if the
  transaction commits, with the records. When the producer opens (after
  the fence), the sink reads the group's committed offset (an OffsetFetch
  that waits for a pending transactional offset) and knows which checkpoint
  of its lineage was written last; a COMMIT re-sent after a crash finds it
  there and writes nothing. A guard names the lineage of the sink's state
  (``statestream state clear`` or a new store starts another), so an
  earlier lineage's guard is never taken as written. The guard needs no
  topic of its own: the groups live in Kafka's offsets topic, which is
  compacted.

Records: ``value`` says what a tuple's record holds: by default a JSON
object of the input's fields (or ``fields=``), encoded by orjson; a field
name: that field's value (a ``str`` as UTF-8, ``bytes`` as they are,
anything else as JSON); a callable: called with the tuple, returning
``str``, ``bytes`` or None. ``key`` the same, None by default (no key:
the producer spreads the records over the partitions). A record's key and
value are made in ``execute``, so a callable that raises fails that tuple
(retried or dead-lettered as any bolt's), never a checkpoint.

Start and faults: ``prepare`` asks the broker for the topic's metadata; a
broker that does not answer within ``timeout`` is one
:class:`~statestream.SinkError` line (exit 1), a missing topic a
:class:`~statestream.ConfigError` naming the fix (exit 2). A broker lost
mid-run is waited for at the COMMIT where it stands, each attempt a new
producer (fencing the last, so a half-done transaction is aborted) within
``statestream.connectors.reconnect.secs``; then the run stops, nothing
committed lost. Every call to the broker is bounded by ``timeout`` (plus a
second), whatever the client library does: a call still running then counts
as a lost broker (librdkafka 2.16.1 was seen holding
``send_offsets_to_transaction`` past its own timeout after its connections
were cut). A record the broker refuses (the topic deleted, a record
too large) stops the run naming it; so does a producer fenced by another
process writing as the same task (another run of the same topology name
on this cluster: give it another ``guard``).

Until a task's producer opens again after a crash (at the first COMMIT
with records, or at once when recovery has a stage to write), a
transaction the killed process left open holds back ``read_committed``
consumers of the partitions it touched, at most ``transaction.timeout.ms``
(60 s by default; ``config={"transaction.timeout.ms": ...}``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from .._components import OutputCollector, TopologyContext
from .._errors import ConfigError, SinkError
from .._tuple import Tuple
from ._broker import client_name, require, target_unreachable
from .sink import TwoPhaseSink, input_fields

__all__ = ["KafkaSink"]

log = logging.getLogger("statestream")
T = TypeVar("T")

GUARD = "statestream-sink-guard"
# librdkafka's own (negative) error codes, named with a leading underscore in
# confluent_kafka.KafkaError: RD_KAFKA_RESP_ERR__FENCED (this producer was fenced)
# and RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC (a topic not in the metadata).
_LOCAL_FENCED = -144
_LOCAL_UNKNOWN_TOPIC = -188
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

#: What a record's key or value is staged as (the stage is JSON): text, or for
#: bytes a one-item list of them decoded as latin-1 (one char a byte, lossless).
Staged = str | list[str] | None
#: What ``key=`` and ``value=`` accept: a field name or a callable of the tuple.
Part = str | Callable[[Tuple], "str | bytes | None"] | None


def _stage(value: Any) -> Staged:
    """A field's value or a callable's result as it is staged: text as it is, bytes
    kept apart, None as None, anything else as its JSON text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return [bytes(value).decode("latin-1")]
    return orjson.dumps(value).decode()


def _payload(staged: Staged) -> str | bytes | None:
    """What the producer is given for a staged key or value (a str is sent as UTF-8)."""
    if isinstance(staged, list):
        return staged[0].encode("latin-1")
    return staged


def _part_of(part: Part, fields: Sequence[str], what: str) -> Callable[[Tuple], Staged] | None:
    """The function making a record's key or value from a tuple (None: no key)."""
    if part is None:
        return None
    if callable(part):
        call = part
        return lambda tup: _stage(call(tup))
    if part not in fields:
        raise ConfigError(f"{what}: no field {part!r} in the input's fields {list(fields)}")
    index = list(fields).index(part)
    return lambda tup: _stage(tup.values[index])


class Stuck(Exception):
    """A call to the broker that did not return in time (:meth:`KafkaSink._bounded`):
    tried again as a lost broker."""


class _ClientLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """librdkafka's own log (connection attempts, retries) at DEBUG: what a lost broker
    means to the run is said once, by the sink (statestream's log), not per retry."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        self.logger.log(logging.DEBUG, msg, *args, **kwargs)


_CLIENT_LOG = _ClientLog(logging.getLogger("statestream.kafka"), {})


class KafkaSink(TwoPhaseSink):
    """Writes each input tuple as one record of the Kafka ``topic``, each checkpoint's
    records in one Kafka transaction with the sink task's guard (module docstring).

    ``KafkaSink("counts", bootstrap="broker:9092", key="word")``: each tuple a
    record keyed by its ``word``, its value a JSON object of the tuple's fields.
    ``config`` adds librdkafka settings (``security.protocol``, ``sasl.*``,
    ``compression.type``, ...) to every client the sink opens; ``timeout`` bounds
    each call to the broker, in seconds.
    """

    kind = "KafkaSink"

    def __init__(
        self,
        topic: str,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        key: str | Callable[[Tuple], str | bytes | None] | None = None,
        value: str | Callable[[Tuple], str | bytes | None] | None = None,
        fields: Sequence[str] | None = None,
        guard: str = GUARD,
        config: Mapping[str, Any] | None = None,
        timeout: float = 10.0,
    ) -> None:
        super().__init__()
        if not topic:
            raise ConfigError("KafkaSink: give the topic its records go to")
        for name, part in (("key", key), ("value", value)):
            if part is not None and not isinstance(part, str) and not callable(part):
                raise ConfigError(
                    f"KafkaSink {topic!r}: {name}={part!r}: give a field name or a callable "
                    "of the tuple"
                )
        if timeout <= 0:
            raise ConfigError(f"KafkaSink {topic!r}: timeout={timeout!r}: give seconds above 0")
        self.topic = topic
        self.bootstrap = self.url = bootstrap
        self.key = key
        self.value = value
        self.fields = list(fields) if fields is not None else None
        self.guard_prefix = guard
        self.config = dict(config or {})
        self.timeout = timeout
        self._producer: Any = None
        self._consumer: Any = None
        self._group = ""  # the guard group the consumer was opened for
        self._guard = -1  # the txid the guard holds (valid while the producer is open)
        self._failed: list[Any] = []  # delivery errors of the transaction being written

    # -- building records ------------------------------------------------------------
    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        what = f"KafkaSink {context.component_id!r}"
        by_name = self.value is None or isinstance(self.value, str) or isinstance(self.key, str)
        names = self.fields if self.fields is not None else []
        if self.fields is None and by_name:
            names = input_fields(context, what)
        self._key_of = _part_of(self.key, names, what)
        if self.value is None:
            self._value_of: Callable[[Tuple], Staged] | None = _json_object(names)
        else:
            self._value_of = _part_of(self.value, names, what)
        super().prepare(conf, context, collector)

    def row(self, tup: Tuple) -> list[Any]:
        """``[key, value]`` of the tuple's record, as staged (module docstring)."""
        key = self._key_of(tup) if self._key_of is not None else None
        value = self._value_of(tup) if self._value_of is not None else None
        return [key, value]

    # -- the broker ------------------------------------------------------------------
    def _settings(self, **more: Any) -> dict[str, Any]:
        return {
            **self.config,
            "bootstrap.servers": self.bootstrap,
            "client.id": client_name(self.context),
            "logger": _CLIENT_LOG,
            **more,
        }

    def check_target(self) -> None:
        """The broker answers and the topic is there (no producer is opened: on Spark
        the executors prepare the sink too, and the driver's producer must stay the
        only one of its transactional.id)."""
        kafka = require("confluent_kafka", "kafka", "KafkaSink")
        admin = require("confluent_kafka.admin", "kafka", "KafkaSink")
        client = admin.AdminClient(self._settings())
        try:
            # Every topic's metadata, not the topic's: a broker may create a topic it
            # is asked about (tansu 0.6.0 does, whatever the request says).
            found = client.list_topics(timeout=self.timeout).topics.get(self.topic)
        except kafka.KafkaException as exc:
            raise target_unreachable(self.what, self.bootstrap, exc) from exc
        error = found.error if found is not None else None
        if found is None or (error is not None and error.code() in _missing(kafka)):
            raise ConfigError(
                f"{self.what}: the topic {self.topic!r} does not exist on {self.bootstrap}; "
                f"fix the name, or create it first (kafka-topics.sh --create --topic "
                f"{self.topic} --bootstrap-server {self.bootstrap})"
            )
        if error is not None:
            raise SinkError(f"{self.what}: the topic {self.topic!r} cannot be written: {error}")

    @property
    def transactional_id(self) -> str:
        """``<guard>:<topology>:<sink>:<task>``: the task's producer, whatever the lineage
        (a producer left open by an earlier lineage's run is fenced too)."""
        # ':' between the parts, not '/': tansu 0.6.0 lists a group or id named
        # "a/b" as "a" (earlier_guards lists the groups by name).
        return ":".join(map(str, (self.guard_prefix, *self.task_key)))

    @property
    def guard_group(self) -> str:
        """``<guard>:<topology>:<sink>@<lineage>:<task>``: the consumer group whose offset
        on partition 0 of the topic is the last txid written, plus 1."""
        return ":".join(map(str, (self.guard_prefix, *self.guard_key)))

    def open_target(self) -> None:
        kafka = require("confluent_kafka", "kafka", "KafkaSink")
        self._kafka = kafka
        failed = self._failed
        producer = kafka.Producer(
            self._settings(**{
                "transactional.id": self.transactional_id,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                "delivery.report.only.error": True,
                "on_delivery": lambda err, _msg: failed.append(err),
            })
        )  # fmt: skip
        self._producer = producer
        try:
            # Fences every older producer of this task: its open transaction is
            # aborted (or completed) before this returns (module docstring).
            self._bounded("init_transactions", producer.init_transactions, self.timeout)
            self._read_guard()
        except (kafka.KafkaException, Stuck) as exc:
            self.close_target()  # not open yet for TwoPhaseSink: closed here
            raise target_unreachable(self.what, self.bootstrap, exc) from exc
        except BaseException:
            self.close_target()
            raise

    def _read_guard(self) -> None:
        """Open the guard group's consumer and read the txid it holds (after the fence:
        nothing else can move it while this producer is open)."""
        kafka = self._kafka
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        group = self.guard_group
        consumer = kafka.Consumer(
            self._settings(**{
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            })
        )  # fmt: skip
        self._consumer = consumer
        try:
            (seen,) = self._bounded(
                "committed", consumer.committed, [kafka.TopicPartition(self.topic, 0)], self.timeout
            )
        except (kafka.KafkaException, Stuck) as exc:
            raise target_unreachable(self.what, self.bootstrap, exc) from exc
        self._guard = seen.offset - 1 if seen.offset >= 0 else -1
        self._group = group

    def close_target(self) -> None:
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
        if producer is not None:
            # Whatever is queued or in a transaction is dropped: the next producer's
            # fence aborts the transaction anyway, and a broker that is away must
            # not hold the close (module docstring).
            producer.purge()
            producer.flush(0)

    def guard(self) -> int:
        """The txid this task last wrote (-1 if none)."""
        if self._group != self.guard_group:
            self._read_guard()
        return self._guard

    def earlier_guards(self) -> list[tuple[str, int]]:
        """This task's guard groups of other lineages (an admin client of its own)."""
        kafka = require("confluent_kafka", "kafka", "KafkaSink")
        admin = require("confluent_kafka.admin", "kafka", "KafkaSink")
        client = admin.AdminClient(self._settings())
        topology, _, task = self.guard_key
        head, tail = f"{self.guard_prefix}:{topology}:{self.context.component_id}", f":{task}"
        listed = client.list_consumer_groups(request_timeout=self.timeout).result()
        lineages = {}
        for group in (g.group_id for g in listed.valid):
            if group == self.guard_group or not group.endswith(tail):
                continue
            middle = group[len(head) : -len(tail)]
            if group.startswith(head) and (middle == "" or middle.startswith("@")):
                lineages[group] = middle[1:]
        found = []
        for group, lineage in lineages.items():
            asked = kafka.ConsumerGroupTopicPartitions(group, [kafka.TopicPartition(self.topic, 0)])
            (future,) = client.list_consumer_group_offsets(
                [asked], request_timeout=self.timeout
            ).values()
            (seen,) = future.result().topic_partitions
            if seen.offset >= 0:
                found.append((lineage, seen.offset - 1))
        return found

    def write(self, rows: list[list[Any]], txid: int) -> bool:
        if self.guard() >= txid:
            return False  # written before: a COMMIT sent again
        kafka, producer, topic = self._kafka, self._producer, self.topic
        self._failed.clear()
        producer.begin_transaction()
        for key, value in rows:
            record = _payload(value)
            keyed = _payload(key)
            while True:
                try:
                    producer.produce(topic, record, keyed)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.05)
                except kafka.KafkaException as exc:  # refused by the client itself
                    self._failed.append(exc.args[0] if exc.args else None)
                    raise self._failure(exc) from exc
        guard = [kafka.TopicPartition(topic, 0, txid + 1)]
        try:
            self._bounded(
                "send_offsets_to_transaction",
                producer.send_offsets_to_transaction,
                guard,
                self._consumer.consumer_group_metadata(),
                self.timeout,
            )
            self._bounded("commit_transaction", producer.commit_transaction, self.timeout)
        except kafka.KafkaException as exc:
            raise self._failure(exc) from exc
        self._guard = txid
        return True

    def _bounded(self, name: str, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, a call to the broker given ``self.timeout``, on a thread of its
        own, waited for a second longer than that at most: librdkafka 2.16.1 was seen
        to hold ``send_offsets_to_transaction`` far past its timeout after its
        connections were cut (the group coordinator's request waiting on a broker
        handle it had replaced, until some connection changed state). A call still
        running then raises :class:`Stuck`, a lost broker: the producer is dropped
        and the next one fences it."""
        done: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                done.append((True, call(*args)))
            except BaseException as exc:  # handed to the caller, whatever it is
                done.append((False, exc))

        thread = threading.Thread(target=run, name=f"statestream-kafka-{name}", daemon=True)
        thread.start()
        thread.join(self.timeout + 1.0)
        if not done:
            raise Stuck(f"{name} did not return within {self.timeout + 1.0:g} s")
        ok, value = done[0]
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def _failure(self, exc: Any) -> Exception:
        """The error a failed transaction raises: a refusal (no retry can fix it) as a
        :class:`~statestream.SinkError`; anything else as it is, a lost broker
        (TwoPhaseSink then opens a new producer, whose fence aborts what is left)."""
        kafka = self._kafka
        error = exc.args[0] if exc.args else None
        codes = {e.code() for e in self._failed if e is not None}
        if codes & _missing(kafka):
            return SinkError(
                f"{self.what}: the topic {self.topic!r} is gone from {self.bootstrap}; "
                "create it again, then run again (what was committed stays)"
            )
        if kafka.KafkaError.MSG_SIZE_TOO_LARGE in codes:
            return SinkError(
                f"{self.what}: a record is larger than {self.topic!r} takes "
                "(message.max.bytes, of the broker or the sink's config); make the records "
                "smaller or raise the limit"
            )
        fenced = (
            _LOCAL_FENCED,
            kafka.KafkaError.PRODUCER_FENCED,
            kafka.KafkaError.INVALID_PRODUCER_EPOCH,
        )
        if error is not None and error.code() in fenced:
            return self._fenced(error)
        return exc  # type: ignore[no-any-return]

    def _fenced(self, error: Any) -> SinkError:
        return SinkError(
            f"{self.what}: another producer took over the transactional.id "
            f"{self.transactional_id!r} ({error.str()}): another run of topology "
            f"{self.context.topology_name!r} writes to {self.bootstrap}; stop it, or give "
            "one of them another guard="
        )


def _json_object(fields: Sequence[str]) -> Callable[[Tuple], Staged]:
    """A tuple's values as a JSON object of ``fields`` (the default record value)."""
    names = list(fields)

    def value(tup: Tuple) -> Staged:
        return orjson.dumps(dict(zip(names, tup.values, strict=True))).decode()

    return value


def _missing(kafka: Any) -> set[int]:
    """The error codes of a topic (or partition) the broker does not have."""
    return {kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, _LOCAL_UNKNOWN_TOPIC}
