"""The real Redis server the tests use (127.0.0.1:6379), shared by every test directory.

Tests that need it are marked ``redis`` and call :func:`require_real_redis`;
each uses keys under a prefix of its own (:func:`unique_prefix`) and deletes
them afterwards (:func:`delete_prefix`), so that they can run in parallel.
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest

__all__ = [
    "REDIS_HOST",
    "REDIS_PORT",
    "delete_prefix",
    "redis_available",
    "require_real_redis",
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
