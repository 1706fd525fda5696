"""``RedisSink``: tuples into a Redis hash, set or stream, exactly once per checkpoint.

A :class:`~statestream.connectors.TwoPhaseSink` (see there for the
protocol). At each COMMIT the checkpoint's rows and the guard go in one
``MULTI/EXEC``: the guard is the field ``topology/sink/task`` of the hash
``guard`` (``statestream:sink-guard`` by default), read under ``WATCH``, so
a re-sent COMMIT finds its txid there and writes nothing, and a guard moved
by someone else between the read and the ``EXEC`` aborts the transaction
(it is tried again). The targets:

* ``"hash"``: each tuple ``(field, value)`` is ``HSET key field value`` (the
  last value per field stays);
* ``"set"``: each tuple ``(member,)`` is ``SADD key member``;
* ``"stream"``: each tuple is ``XADD key * f1 v1 f2 v2 ...`` with the input's
  field names (or ``fields=``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._components import OutputCollector, TopologyContext
from .._errors import ConfigError, SinkError
from ._broker import redact, require
from .sink import TwoPhaseSink, input_fields

__all__ = ["RedisSink"]

KINDS = ("hash", "set", "stream")


class RedisSink(TwoPhaseSink):
    """Writes each input tuple to the Redis ``key`` of ``kind`` (``hash``, ``set``, ``stream``)."""

    kind = "RedisSink"

    def __init__(
        self,
        target: str,
        key: str,
        url: str = "redis://127.0.0.1:6379/0",
        fields: Sequence[str] | None = None,
        guard: str = "statestream:sink-guard",
    ) -> None:
        super().__init__()
        if target not in KINDS:
            raise ConfigError(f"RedisSink target {target!r}: use one of {list(KINDS)}")
        self.target = target
        self.key = key
        self.url = url
        self.fields = list(fields) if fields is not None else None
        self.guard_hash = guard
        self._client: Any = None

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        if self.target == "stream" and self.fields is None:
            self.fields = input_fields(context, f"RedisSink {context.component_id!r}")
        super().prepare(conf, context, collector)

    @property
    def guard_field(self) -> str:
        return "/".join(map(str, self.guard_key))

    def open_target(self) -> None:
        redis = require("redis", "redis", "RedisSink")
        client = redis.Redis.from_url(self.url, socket_timeout=10)
        try:
            client.ping()
        except redis.RedisError as exc:
            client.close()
            raise SinkError(
                f"{self.what} cannot reach {redact(self.url)}: {exc}; start the server or fix the URL"
            ) from exc
        self._redis = redis
        self._client = client

    def close_target(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def guard(self) -> int:
        """The txid this task last wrote (-1 if none)."""
        value = self._client.hget(self.guard_hash, self.guard_field)
        return -1 if value is None else int(value)

    def write(self, rows: list[list[Any]], txid: int) -> bool:
        redis = self._redis
        while True:
            with self._client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.guard_hash)
                    seen = pipe.hget(self.guard_hash, self.guard_field)
                    if seen is not None and int(seen) >= txid:
                        return False  # written before: a COMMIT sent again
                    pipe.multi()
                    self._queue(pipe, rows)
                    pipe.hset(self.guard_hash, self.guard_field, txid)
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue  # another task moved its guard in the same hash: again
                except redis.ResponseError as exc:
                    raise SinkError(
                        f"{self.what}: Redis refused the write to {self.target} {self.key!r}: {exc}"
                    ) from exc

    def _queue(self, pipe: Any, rows: list[list[Any]]) -> None:
        key = self.key
        if self.target == "hash":
            for field, value in rows:
                pipe.hset(key, field, value)
        elif self.target == "set":
            members = [row[0] for row in rows]
            pipe.sadd(key, *members)
        else:
            names = self.fields
            assert names is not None
            for row in rows:
                pipe.xadd(key, dict(zip(names, row, strict=True)))
