"""The real Redis server the tests use (127.0.0.1:6379), shared by every test directory.

Tests that need it are marked ``redis`` and call :func:`require_real_redis`;
each uses keys under a prefix of its own (:func:`unique_prefix`) and deletes
them afterwards (:func:`delete_prefix`), so that they can run in parallel.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = [
    "REDIS_HOST",
    "REDIS_PORT",
    "RedisServer",
    "delete_prefix",
    "free_port",
    "redis_available",
    "require_real_redis",
    "started_redis_server",
    "unique_prefix",
]

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379


def redis_available(host: str = REDIS_HOST, port: int = REDIS_PORT) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_real_redis() -> None:
    """Skip without a Redis server, except on CI, where its absence is a failure."""
    if not redis_available():
        message = f"no Redis server on {REDIS_HOST}:{REDIS_PORT}"
        if os.environ.get("CI"):
            pytest.fail(f"{message}, and CI must run the redis tests")
        pytest.skip(message)


def unique_prefix(kind: str) -> str:
    """A key prefix no other test uses: ``<kind>:<random hex>:``."""
    return f"{kind}:{uuid.uuid4().hex}:"


def delete_prefix(prefix: str) -> None:
    """Delete every key under ``prefix``."""
    import redis

    from statestream_providers.redis import _glob_escape

    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT)
    try:
        pattern = _glob_escape(prefix) + "*"
        keys = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
    finally:
        client.close()


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (as of now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A redis-server of the test's own, on a spare port, that keeps nothing on disk;
    ``args`` are more of its options (``"--requirepass", "secret"``)."""

    def __init__(self, binary: str, workdir: Path, *args: str) -> None:
        self.binary = binary
        self.workdir = workdir
        self.args = args
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [
                *(self.binary, "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.workdir)),
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None


@contextmanager
def started_redis_server(workdir: Path, *args: str) -> Iterator[RedisServer]:
    """A :class:`RedisServer` running for the ``with`` block (a failure on CI
    without redis-server, a skip elsewhere)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed, and CI must run the redis tests")
        pytest.skip("redis-server is not installed")
    server = RedisServer(binary, workdir, *args)
    server.start()
    try:
        yield server
    finally:
        server.stop()
