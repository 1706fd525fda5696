"""The source conformance suite: every broker spout against its real server.

Each test runs once per source (Redis stream, JetStream stream, RabbitMQ
stream queue; the classic RabbitMQ queue where it applies), on a stream or
queue of its own that is deleted afterwards. A spout is driven by hand
(open, seek, next_tuple) with a collector that records its emits, as a
runtime would call it; the topology tests at the end run it for real.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statestream import ConfigError, FakeClock, SourceError, Spout, TopologyBuilder, run
from statestream.connectors import JetStreamSpout, KafkaSpout, RabbitMQSpout, RedisStreamSpout
from statestream.runtime.metrics import progress_of
from statestream.testing import committed_state, mock_context

BAD_URLS = {
    "redis": "redis://:s3cret@127.0.0.1:1/0",
    "jetstream": "nats://user:s3cret@127.0.0.1:1",
    "rabbitmq": "amqp://guest:s3cret@127.0.0.1:1/%2F",
    "kafka": "127.0.0.1:1",  # a bootstrap list has no password (SASL's is in config)
}


class Source:
    """One broker's stream or queue for a test: produce into it, make spouts on it."""

    kind = ""

    def __init__(self) -> None:
        self.name = f"sst_{uuid.uuid4().hex[:10]}"

    def produce(self, lines: list[str]) -> None:
        raise NotImplementedError

    def spout(self, name: str | list[str] | None = None, url: str | None = None) -> Spout:
        raise NotImplementedError

    def settle(self, total: int) -> None:
        """Wait until the broker's own count of the stream says ``total`` (if it lags)."""

    def drop(self) -> None:
        raise NotImplementedError


class RedisSource(Source):
    kind = "redis"

    def __init__(self) -> None:
        super().__init__()
        import redis

        self.client = redis.Redis()

    def produce(self, lines: list[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for line in lines:
            pipe.xadd(self.name, {"line": line})
        pipe.execute()

    def spout(self, name: str | list[str] | None = None, url: str | None = None) -> Spout:
        return RedisStreamSpout(name or self.name, ["line"], url or "redis://127.0.0.1:6379/0")

    def drop(self) -> None:
        self.client.delete(self.name)
        self.client.close()


class JetStreamSource(Source):
    kind = "jetstream"

    async def _run(self, what: Callable[[Any], Any]) -> None:
        import nats

        nc = await nats.connect("nats://127.0.0.1:4222")
        try:
            await what(nc.jetstream())
        finally:
            await nc.close()

    def produce(self, lines: list[str]) -> None:
        async def publish(js: Any) -> None:
            try:
                await js.stream_info(self.name)
            except Exception:
                await js.add_stream(name=self.name, subjects=[f"{self.name}.lines"])
            for line in lines:
                await js.publish(f"{self.name}.lines", line.encode())

        asyncio.run(self._run(publish))

    def spout(self, name: str | list[str] | None = None, url: str | None = None) -> Spout:
        return JetStreamSpout(name or self.name, url=url or "nats://127.0.0.1:4222")

    def drop(self) -> None:
        async def delete(js: Any) -> None:
            try:
                await js.delete_stream(self.name)
            except Exception:
                return

        asyncio.run(self._run(delete))


class RabbitSource(Source):
    kind = "rabbitmq"
    queue_kind = "stream"

    def __init__(self) -> None:
        super().__init__()
        import pika

        self.connection = pika.BlockingConnection(
            pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F")
        )
        self.channel = self.connection.channel()
        args = {"x-queue-type": "stream"} if self.queue_kind == "stream" else None
        self.channel.queue_declare(self.name, durable=True, arguments=args)

    def produce(self, lines: list[str]) -> None:
        for line in lines:
            self.channel.basic_publish("", self.name, line.encode())

    def spout(self, name: str | list[str] | None = None, url: str | None = None) -> Spout:
        return RabbitMQSpout(
            name or self.name,
            url or "amqp://guest:guest@127.0.0.1:5672/%2F",
            kind=self.queue_kind,  # type: ignore[arg-type]
        )

    def settle(self, total: int) -> None:
        # The broker updates a stream queue's message count about once a second:
        # wait until it counts what was produced (the spout's lag is read from it).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            declared = self.channel.queue_declare(self.name, passive=True)
            if declared.method.message_count >= total:
                return
            self.connection.sleep(0.1)

    def drop(self) -> None:
        self.channel.queue_delete(self.name)
        self.connection.close()


class RabbitClassicSource(RabbitSource):
    queue_kind = "classic"


class KafkaSource(Source):
    """A topic of one partition on the tests' tansu broker (set by :func:`make_source`)."""

    kind = "kafka"
    broker: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.broker.create_topic(self.name, 1)
        from confluent_kafka import Producer

        # One record a batch: tansu 0.6.0 gives a partition's end as its last batch's
        # first offset + 1 (the spout's lag is read from it).
        self.producer = Producer(
            {"bootstrap.servers": self.broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1}
        )

    def produce(self, lines: list[str]) -> None:
        for line in lines:
            self.producer.produce(self.name, line.encode(), partition=0)
        assert self.producer.flush(30) == 0

    def spout(self, name: str | list[str] | None = None, url: str | None = None) -> Spout:
        return KafkaSpout(name or self.name, url or self.broker.bootstrap)

    def drop(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        for future in admin.delete_topics([self.name]).values():
            future.result(timeout=10)


SOURCES: dict[str, type[Source]] = {
    "redis": RedisSource,
    "jetstream": JetStreamSource,
    "rabbitmq-stream": RabbitSource,
    "kafka": KafkaSource,
}
#: The sources as parameters of a fixture: Kafka's marked, it needs the tansu broker.
SOURCE_PARAMS = [
    pytest.param(kind, marks=pytest.mark.kafka) if kind == "kafka" else kind for kind in SOURCES
]


def make_source(request: pytest.FixtureRequest, kind: str) -> Source:
    """A fresh source of ``kind`` (the Kafka one on the session's broker)."""
    if kind == "kafka":
        KafkaSource.broker = request.getfixturevalue("kafka_broker")
    return SOURCES[kind]()


@pytest.fixture(params=SOURCE_PARAMS)
def source(request: pytest.FixtureRequest) -> Iterator[Source]:
    made = make_source(request, request.param)
    yield made
    made.drop()


class Recorder:
    """A spout's collector: what it emitted, in order, with message ids."""

    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], Any]] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append((list(values), msg_id))

    def emit_direct(self, task: int, values: Any, msg_id: Any = None, stream: str = "") -> None:
        raise AssertionError("a broker spout emits to no task directly")

    def report_error(self, error: BaseException) -> None:
        raise error

    def lines(self) -> list[str]:
        return [values[0] for values, _ in self.emitted]


def opened(spout: Spout, position: Any = "none") -> Recorder:
    """``spout`` opened as task 0 of 1, sought to ``position`` unless "none"."""
    recorder = Recorder()
    spout.open({}, mock_context("lines", clock=FakeClock()), recorder)  # type: ignore[arg-type]
    if position != "none":
        spout.seek(position)  # type: ignore[attr-defined]
    return recorder


def pump(
    spout: Spout, recorder: Recorder, count: int, *, ack: bool = True, live: bool = False
) -> None:
    """Call next_tuple until ``count`` tuples were emitted in all (acking each), or
    the spout says it is exhausted (``live``: go on, entries are on their way); a
    safety limit of 30 s against a hang."""
    deadline = time.monotonic() + 30
    while len(recorder.emitted) < count and time.monotonic() < deadline:
        before = len(recorder.emitted)
        spout.next_tuple()
        if ack and len(recorder.emitted) > before:
            spout.ack(recorder.emitted[-1][1])
        if len(recorder.emitted) == before and spout.exhausted() and not live:
            break


def catch_up(spout: Spout) -> None:
    """Call next_tuple (emitting nothing new) until the spout is exhausted, moving its
    fake clock on: a RabbitMQ stream believes the broker's count of its messages
    only once it held a while (the broker refreshes it about once a second)."""
    clock = spout.context.clock
    deadline = time.monotonic() + 30
    while not spout.exhausted() and time.monotonic() < deadline:
        spout.next_tuple()
        clock.advance(0.5)  # type: ignore[attr-defined]


def test_emits_every_entry_in_order(source: Source) -> None:
    lines = [f"line {i}" for i in range(2500)]  # more than one read batch
    source.produce(lines)
    spout = source.spout()
    recorder = opened(spout, None)
    pump(spout, recorder, len(lines))
    spout.close()
    assert recorder.lines() == lines


def test_position_and_seek_replay_exactly_what_came_after(source: Source) -> None:
    lines = [f"l{i}" for i in range(300)]
    source.produce(lines)
    first = source.spout()
    recorder = opened(first, None)
    pump(first, recorder, 120)
    where = first.position()  # type: ignore[attr-defined]
    pump(first, recorder, 200)
    first.close()
    again = source.spout()  # a restart: a fresh instance sought to the stored position
    replayed = opened(again, where)
    pump(again, replayed, 180)
    again.close()
    assert recorder.lines()[:120] == lines[:120]
    assert replayed.lines() == lines[120:]


def test_a_failed_entry_in_the_position_is_emitted_again(source: Source) -> None:
    source.produce([f"l{i}" for i in range(10)])
    spout = source.spout()
    recorder = opened(spout, None)
    pump(spout, recorder, 5, ack=False)
    spout.fail(recorder.emitted[2][1])
    for _, msg_id in recorder.emitted[:2] + recorder.emitted[3:]:
        spout.ack(msg_id)
    where = spout.position()  # type: ignore[attr-defined]
    spout.close()
    again = source.spout()
    replayed = opened(again, where)
    pump(again, replayed, 6)
    again.close()
    assert replayed.lines() == ["l2", "l5", "l6", "l7", "l8", "l9"]


@pytest.mark.parametrize("as_list", [False, True], ids=["as-emitted", "as-a-list"])
def test_exhausted_once_caught_up_and_acked(source: Source, as_list: bool) -> None:
    source.produce(["a", "b", "c"])
    spout = source.spout()
    recorder = opened(spout, None)
    pump(spout, recorder, 3, ack=False)
    assert not spout.exhausted()
    for _ in range(3):
        spout.next_tuple()  # reads nothing new: caught up
    assert not spout.exhausted(), "exhausted with 3 entries not acked"
    for _, msg_id in recorder.emitted:
        # A worker hands a tuple id back through its pipe as a list.
        spout.ack(list(msg_id) if as_list and isinstance(msg_id, tuple) else msg_id)
    catch_up(spout)
    assert spout.exhausted()
    source.produce(["d"])  # a live stream: what comes later is read
    pump(spout, recorder, 4, live=True)  # a read may still say what it saw before "d"
    spout.close()
    assert recorder.lines() == ["a", "b", "c", "d"]


def test_acked_position_resumes_at_the_first_unacked_entry(source: Source) -> None:
    source.produce([f"l{i}" for i in range(8)])
    spout = source.spout()
    recorder = opened(spout, None)
    pump(spout, recorder, 6, ack=False)
    for _, msg_id in recorder.emitted[:3] + recorder.emitted[4:]:
        spout.ack(msg_id)
    where = spout.acked_position()  # type: ignore[attr-defined]
    spout.close()
    again = source.spout()
    replayed = opened(again, where)
    pump(again, replayed, 5)
    again.close()
    assert replayed.lines() == ["l3", "l4", "l5", "l6", "l7"]


def test_progress_gives_the_lag_and_it_shrinks_to_0_when_caught_up(source: Source) -> None:
    source.produce([f"l{i}" for i in range(2500)])
    source.settle(2500)
    spout = source.spout()
    clock = FakeClock()
    recorder = Recorder()
    spout.open({}, mock_context("lines", clock=clock), recorder)  # type: ignore[arg-type]
    spout.seek(None)  # type: ignore[attr-defined]
    assert spout.progress() == (0, None)  # type: ignore[attr-defined]  # nothing asked yet
    pump(spout, recorder, 1)
    got = progress_of("lines", 0, spout)
    assert got is not None and got.unit == "entries"
    assert (got.done, got.total, got.lag) == (1, 2500, 2499)
    pump(spout, recorder, 2500)
    catch_up(spout)  # reads nothing new: caught up
    assert spout.progress() == (2500, 2500)  # type: ignore[attr-defined]
    source.produce([f"m{i}" for i in range(10)])
    source.settle(2510)
    clock.advance(1.5)  # the end is asked again at most once a second
    pump(spout, recorder, 2501, live=True)
    assert spout.progress() == (2501, 2510)  # type: ignore[attr-defined]
    pump(spout, recorder, 2510, live=True)
    catch_up(spout)
    spout.close()
    assert spout.progress() == (2510, 2510)  # type: ignore[attr-defined]


def test_several_streams_are_spread_over_the_tasks(source: Source) -> None:
    sources = [source, type(source)(), type(source)()]
    try:
        for k, each in enumerate(sources):
            each.produce([f"s{k} l{i}" for i in range(40)])
        names = [each.name for each in sources]
        read: list[list[str]] = []
        positions = []
        for task in range(2):  # task 0 reads streams 0 and 2, task 1 stream 1
            spout = source.spout(name=names)
            recorder = Recorder()
            context = mock_context("lines", task_index=task, parallelism=2, clock=FakeClock())
            spout.open({}, context, recorder)  # type: ignore[arg-type]
            spout.seek(None)  # type: ignore[attr-defined]
            pump(spout, recorder, 80 if task == 0 else 40)
            positions.append(spout.position())  # type: ignore[attr-defined]
            spout.close()
            read.append(recorder.lines())
        for k in (0, 2):  # each stream in its own order
            assert [line for line in read[0] if line.startswith(f"s{k} ")] == [
                f"s{k} l{i}" for i in range(40)
            ]
        assert len(read[0]) == 80
        assert read[1] == [f"s1 l{i}" for i in range(40)]
        # A restart with another parallelism would split the streams another way.
        single = source.spout(name=names)
        opened(single)
        with pytest.raises(ConfigError, match=r"2 task\(s\).*has 1 task\(s\)"):
            single.seek(positions[0])  # type: ignore[attr-defined]
        with pytest.raises(
            ConfigError, match=r"has 3 tasks but 2 (stream|queue|partition).*at most 2 task"
        ):
            opened_as(source.spout(name=names[:2]), 0, 3)
    finally:
        for each in sources[1:]:
            each.drop()


def opened_as(spout: Spout, task: int, tasks: int) -> Recorder:
    recorder = Recorder()
    context = mock_context("lines", task_index=task, parallelism=tasks, clock=FakeClock())
    spout.open({}, context, recorder)  # type: ignore[arg-type]
    return recorder


def test_a_missing_stream_is_an_error_naming_it(source: Source) -> None:
    spout = source.spout(name=f"{source.name}_missing")
    with pytest.raises(ConfigError, match=f"{source.name}_missing.*(does not exist|no queue)"):
        opened(spout)


def test_an_unreachable_server_names_the_url_without_its_password(source: Source) -> None:
    url = BAD_URLS[source.kind]
    spout = source.spout(url=url)
    with pytest.raises(SourceError, match="cannot reach") as caught:
        opened(spout)
    message = str(caught.value)
    assert "s3cret" not in message
    assert url.replace("s3cret", "***") in message
    assert "\n" not in message


def test_rabbitmq_classic_queue_acks_the_broker_only_on_ack() -> None:
    source = RabbitClassicSource()
    try:
        source.produce(["a", "b", "c"])
        spout = source.spout()
        assert not hasattr(spout, "position"), "a classic queue cannot rewind"
        recorder = opened(spout)
        pump(spout, recorder, 3, ack=False)
        spout.ack(recorder.emitted[0][1])
        spout.next_tuple()  # sends the broker the ack it holds
        spout.close()  # b and c were never acked: the broker keeps them
        again = source.spout()
        redelivered = opened(again)
        pump(again, redelivered, 2)
        again.close()
        assert sorted(redelivered.lines()) == ["b", "c"]
    finally:
        source.drop()


def test_the_start_line_of_a_classic_queue_says_what_comes_again() -> None:
    from statestream._checkpoint import CheckpointState, Phase
    from statestream._exactly_once import CheckpointRecord
    from statestream._resume import SpoutRef, plan_resume

    record = CheckpointRecord(CheckpointState(3, Phase.COMMITTED), {}, {})
    classic = RabbitMQSpout("q", kind="classic")
    other = object()  # a spout that cannot resume and says nothing of how
    plan = plan_resume(
        record, False, [SpoutRef("q-0", "q", 0, 1, classic), SpoutRef("o-0", "o", 0, 1, other)]
    )
    assert plan.seeks == {}
    assert plan.lines[0] == (
        "q: RabbitMQSpout cannot resume (no acked_position() and seek()): it gets again from "
        "the broker only what no committed checkpoint covered (the broker held it unacked) "
        "(at-least-once)"
    )
    assert "reads again what it read before (at-least-once)" in plan.lines[1]


def test_the_queue_kind_is_checked_at_open() -> None:
    source = RabbitClassicSource()
    try:
        with pytest.raises(ConfigError, match=r"classic queue.*kind='classic'"):
            opened(RabbitMQSpout(source.name))
    finally:
        source.drop()


# -- real topologies -------------------------------------------------------------------
LINES = [f"w{i % 7} w{i % 11} common" for i in range(2000)]


def _word_count(source: Source, name: str) -> Any:
    from word_bolts import Count, Split

    b = TopologyBuilder(name)
    b.set_spout("lines", source.spout())
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()


def _expected() -> Counter[str]:
    return Counter(w for line in LINES for w in line.split())


@pytest.mark.parametrize("workers", [1, 2])
def test_a_topology_counts_every_entry_exactly(
    source: Source, workers: int, tmp_path: Path
) -> None:
    source.produce(LINES)
    topology = _word_count(source, f"src-{source.kind}-{workers}")
    conf = {
        "topology.workers": workers,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    run(topology, conf, until_idle=True)
    assert committed_state(topology, conf, "count") == _expected()
    # Run again: the stored positions say everything was read; nothing is counted twice.
    run(topology, conf, until_idle=True)
    assert committed_state(topology, conf, "count") == _expected()


def test_two_spout_tasks_over_two_streams_count_exactly(source: Source, tmp_path: Path) -> None:
    second = type(source)()
    try:
        source.produce(LINES[:1200])
        second.produce(LINES[1200:])
        b = TopologyBuilder(f"src2-{source.kind}")
        b.set_spout("lines", source.spout(name=[source.name, second.name]), 2)
        from word_bolts import Count, Split

        b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
        b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
        topology = b.build()
        conf = {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
        run(topology, conf, until_idle=True)
        assert committed_state(topology, conf, "count") == _expected()
    finally:
        second.drop()


@pytest.mark.spark
def test_a_topology_counts_every_entry_exactly_on_spark(
    source: Source, spark_session: Any, tmp_path: Path
) -> None:
    from statestream.runtime.spark import SparkRuntime

    source.produce(LINES)
    topology = _word_count(source, f"src-spark-{source.kind}")
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    SparkRuntime(topology, conf, spark=spark_session).run(until_idle=True)
    assert committed_state(topology, conf, "count") == _expected()


def test_a_jetstream_fetch_that_times_out_before_the_streams_end_is_not_its_end() -> None:
    """A fetch given less time than the server takes to deliver (here 1 ms, as a loaded
    machine can make 50) returns nothing while entries are left: the spout must not
    say it is exhausted (an --until-idle run would end short of the stream's end)."""
    source = JetStreamSource()
    try:
        source.produce([f"l{i}" for i in range(3000)])
        spout = JetStreamSpout(source.name, url="nats://127.0.0.1:4222", block_ms=1)
        recorder = opened(spout, None)
        pump(spout, recorder, 3000)
        spout.close()
        assert len(recorder.emitted) == 3000
        assert recorder.lines() == [f"l{i}" for i in range(3000)]
    finally:
        source.drop()
