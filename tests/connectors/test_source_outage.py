"""A broker spout whose server goes away mid-run: it reconnects with backoff and
goes on exactly, or, past ``statestream.connectors.reconnect.secs``, stops the run
with one line. Each test starts a server of its own on a spare port (never the
shared ones): redis-server with AOF, nats-server with JetStream on a temp dir.
Time is the spout's fake clock, moved by the test (no wall-clock assertion).

Kafka's is a tansu broker of the test's own (tests/kafka_broker.py). tansu keeps
its storage in memory, so :class:`OwnKafka` makes a restarted broker hold what
the stopped one held (the topic, the same records at the same offsets), as a
durable broker does.

RabbitMQ is in test_rabbitmq_outage.py: a second broker node takes longer to
start than this suite may spend, so the shared broker closes the spout's own
connections instead.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_server import RedisServer, free_port

from statestream import FakeClock, SourceError, Spout
from statestream.connectors import JetStreamSpout, KafkaSpout, RedisStreamSpout
from statestream.testing import mock_context


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing answers on port {port}")


class NatsServer:
    """nats-server with JetStream on a spare port, its store in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        self._process = subprocess.Popen(
            [binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def produce(self, lines: list[str]) -> None:
        async def publish() -> None:
            import nats

            nc = await nats.connect(self.url)
            js = nc.jetstream()
            try:
                await js.stream_info("lines")
            except Exception:
                await js.add_stream(name="lines", subjects=["lines.in"])
            for line in lines:
                await js.publish("lines.in", line.encode())
            await nc.close()

        asyncio.run(publish())


class OwnRedis(RedisServer):
    """redis-server with an append-only file, so that a restart keeps the stream."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        super().__init__(binary, workdir, "--appendonly", "yes", "--appendfsync", "always")
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def produce(self, lines: list[str]) -> None:
        import redis

        client = redis.Redis.from_url(self.url)
        for line in lines:
            client.xadd("lines", {"line": line})
        client.close()


class OwnKafka:
    """A tansu broker on a spare port whose topic ``lines`` survives a restart: each
    start makes it again with every record produced so far (tansu's storage is in
    memory)."""

    def __init__(self) -> None:
        from kafka_broker import KafkaBroker, tansu_binary

        self.broker = KafkaBroker(tansu_binary())
        self.port = self.broker.port
        self.url = self.broker.bootstrap
        self.sent: list[str] = []

    def start(self) -> None:
        self.broker.start()
        self.broker.create_topic("lines", 1)
        self._send(self.sent)

    def stop(self) -> None:
        self.broker.stop()

    def produce(self, lines: list[str]) -> None:
        self.sent += lines
        self._send(lines)

    def _send(self, lines: list[str]) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.url})
        for line in lines:
            producer.produce("lines", line.encode(), partition=0)
        assert producer.flush(30) == 0


@pytest.fixture(params=["redis", "jetstream", pytest.param("kafka", marks=pytest.mark.kafka)])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: Any
    if request.param == "redis":
        made = OwnRedis(tmp_path)
    elif request.param == "kafka":
        made = OwnKafka()
    else:
        made = NatsServer(tmp_path)
    made.start()
    yield made
    made.stop()


def _spout(server: Any) -> Spout:
    # Small reads, so that the loss is met by a read, not hidden behind a buffer.
    if isinstance(server, OwnRedis):
        return RedisStreamSpout("lines", ["line"], server.url, count=10)
    if isinstance(server, OwnKafka):
        return KafkaSpout("lines", server.url, count=10)
    return JetStreamSpout("lines", url=server.url, count=10)


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.lines.append(values[0])
        self.spout.ack(msg_id)

    spout: Spout


def _opened(server: Any, limit: float) -> tuple[Spout, Lines, FakeClock]:
    spout = _spout(server)
    clock = FakeClock()
    out = Lines()
    out.spout = spout
    conf = {"statestream.connectors.reconnect.secs": limit}
    spout.open(conf, mock_context("lines", clock=clock), out)  # type: ignore[arg-type]
    spout.seek(None)  # type: ignore[attr-defined]
    return spout, out, clock


def _drive(spout: Spout, out: Lines, clock: FakeClock, count: int, step: float = 0.0) -> None:
    """next_tuple until ``count`` lines came, moving the fake clock ``step`` per call;
    a safety limit of 60 s of real time against a hang."""
    deadline = time.monotonic() + 60
    while len(out.lines) < count and time.monotonic() < deadline:
        spout.next_tuple()
        if step:
            clock.advance(step)
            time.sleep(0.005)  # the real server (re)starting and the loop thread need time


def test_a_spout_rides_out_a_server_restart_exactly(server: Any) -> None:
    lines = [f"l{i}" for i in range(300)]
    server.produce(lines[:200])
    spout, out, clock = _opened(server, limit=120.0)
    _drive(spout, out, clock, 120)
    server.stop()
    met = False
    for _ in range(400):  # the server is away: what was read comes, then nothing
        spout.next_tuple()
        clock.advance(0.1)
        met = met or spout._reconnect.down  # type: ignore[attr-defined]
        if met:
            break
        time.sleep(0.005)
    assert met, "the spout never noticed its server was gone"
    server.start()
    server.produce(lines[200:])
    _drive(spout, out, clock, 300, step=0.2)
    spout.close()
    assert out.lines == lines


def test_past_the_reconnect_limit_the_run_stops_with_one_line(server: Any) -> None:
    server.produce(["a", "b"])
    spout, out, clock = _opened(server, limit=2.0)
    _drive(spout, out, clock, 2)
    server.stop()
    with pytest.raises(SourceError) as caught:
        for _ in range(2000):
            spout.next_tuple()
            clock.advance(0.05)
            time.sleep(0.002)
    spout.close()
    message = str(caught.value)
    assert "could not reconnect within 2 s" in message
    assert "statestream.connectors.reconnect.secs" in message
    assert f"127.0.0.1:{server.port}" in message
    assert "\n" not in message
    assert out.lines == ["a", "b"]
