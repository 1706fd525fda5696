"""``RedisSink``: tuples into a Redis hash, set or stream, exactly once per checkpoint.

A :class:`~statestream.connectors.TwoPhaseSink` (see there for the
protocol). At each COMMIT the checkpoint's rows and the guard go in ONE
call of a Lua script (``EVALSHA``), which Redis runs atomically as it runs a
``MULTI/EXEC``: it reads the guard, the field ``topology/sink/task`` of the
hash ``guard`` (``statestream:sink-guard`` by default), and if it holds the
txid or above (a re-sent COMMIT) writes nothing; otherwise it checks the
target key's type (a key of another type is refused before anything is
written), writes every row and sets the guard. One command a checkpoint,
its arguments packed by hiredis when installed: no command or reply per row
on the client (a redis-py pipeline of one ``XADD`` per row cost ~69,000
instructions a row). The targets:

* ``"hash"``: each tuple ``(field, value)`` is set in the hash ``key`` (the
  last value per field stays; ``HSET`` with many field/values at once);
* ``"set"``: each tuple's first value is a member added to ``key`` (``SADD``);
* ``"stream"``: each tuple is ``XADD key * f1 v1 f2 v2 ...`` with the input's
  field names (or ``fields=``), in order.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from .._components import OutputCollector, TopologyContext
from .._errors import ConfigError, SinkError
from ._broker import client_name, require, target_unreachable
from .sink import TwoPhaseSink, input_fields

__all__ = ["RedisSink"]

KINDS = ("hash", "set", "stream")

# KEYS: the guard hash, the target. ARGV: guard field, txid, target kind, the
# number n of fields a row has, n field names (a stream's), then the rows'
# values, n a row. Returns 1 if it wrote, 0 if the guard held txid already.
# Values go to HSET/SADD in slices: unpack() has a stack limit (~8,000).
WRITE_LUA = """
local seen = redis.call('HGET', KEYS[1], ARGV[1])
if seen and tonumber(seen) >= tonumber(ARGV[2]) then return 0 end
local kind, n = ARGV[3], tonumber(ARGV[4])
local have = redis.call('TYPE', KEYS[2])['ok']
if have ~= 'none' and have ~= kind then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is a ' .. have .. ', not a ' .. kind)
end
local first, last = 5 + n, #ARGV
if kind == 'stream' then
  local entry = {}
  for i = first, last, n do
    for j = 1, n do
      entry[2 * j - 1] = ARGV[4 + j]
      entry[2 * j] = ARGV[i + j - 1]
    end
    redis.call('XADD', KEYS[2], '*', unpack(entry))
  end
else
  local command = kind == 'hash' and 'HSET' or 'SADD'
  local step = n * 1000
  for i = first, last, step do
    redis.call(command, KEYS[2], unpack(ARGV, i, math.min(i + step - 1, last)))
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


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
        if target != "stream":
            # A hash keeps the last value of each field, a set each member once:
            # the stage keeps the last row of each first value.
            self.keep_last_by = operator.itemgetter(0)

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
        # Named per task (CLIENT LIST's name): whose connection it is.
        client = redis.Redis.from_url(
            self.url, socket_timeout=10, client_name=client_name(self.context)
        )
        try:
            client.ping()
        except redis.RedisError as exc:
            client.close()
            raise target_unreachable(self.what, self.url, exc) from exc
        self._redis = redis
        self._client = client
        self._script = client.register_script(WRITE_LUA)

    def close_target(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def earlier_guards(self) -> list[tuple[str, int]]:
        """This task's guard fields of other lineages in the guard hash (a client of its
        own: the writing one belongs to the writer thread)."""
        redis = require("redis", "redis", "RedisSink")
        topology, _, task = self.guard_key
        component = self.context.component_id
        client = redis.Redis.from_url(self.url, socket_timeout=10)
        try:
            found = []
            for pattern in (f"{topology}/{component}/{task}", f"{topology}/{component}@*/{task}"):
                for field, value in client.hscan_iter(self.guard_hash, match=_glob(pattern)):
                    name = field.decode() if isinstance(field, bytes) else str(field)
                    if name != self.guard_field:
                        found.append((name.split("/")[1].partition("@")[2], int(value)))
            return found
        finally:
            client.close()

    def guard(self) -> int:
        """The txid this task last wrote (-1 if none)."""
        value = self._client.hget(self.guard_hash, self.guard_field)
        return -1 if value is None else int(value)

    def write(self, rows: list[list[Any]], txid: int) -> bool:
        if self.target == "stream":
            names = self.fields
            assert names is not None
        else:
            names = ["field", "value"] if self.target == "hash" else ["member"]
        n = len(names)
        # A set's member is a tuple's first value (the rest are not used).
        values = [row[0] for row in rows] if n == 1 else [v for row in rows for v in row]
        if len(values) != n * len(rows):
            bad = next(row for row in rows if len(row) != n)
            raise SinkError(f"{self.what}: row {bad!r} does not have the {n} values {names}")
        args = [self.guard_field, txid, self.target, n, *names, *values]
        try:
            wrote = self._script(keys=[self.guard_hash, self.key], args=args)
        except self._redis.ResponseError as exc:
            raise SinkError(
                f"{self.what}: Redis refused the write to {self.target} {self.key!r}: {exc}"
            ) from exc
        except self._redis.DataError as exc:
            raise SinkError(f"{self.what}: a row cannot be sent to Redis: {exc}") from exc
        return bool(wrote)


def _glob(pattern: str) -> str:
    """``pattern`` for HSCAN MATCH with the glob characters of its names escaped (a
    trailing ``@*`` is the wildcard)."""
    head, star, tail = pattern.partition("@*")
    escape = str.maketrans({c: "\\" + c for c in "*?[]\\"})
    return head.translate(escape) + ("@*" if star else "") + tail.translate(escape)
