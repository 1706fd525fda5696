"""The :class:`~statestream.provider.StateBackend` of one namespace: three hashes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from statestream.provider import (
    CommitOutcome,
    Delta,
)

from . import wire

if TYPE_CHECKING:
    from redis import Redis
    from redis.commands.core import Script

    from .connection import RedisConnection


_CHUNK: Final = 10_000  # fields per HSET/HDEL/HMGET command in a pipeline

_OUTCOMES: Final = {
    0: CommitOutcome.APPLIED,
    1: CommitOutcome.ALREADY_COMMITTED,
    2: CommitOutcome.NOT_PREPARED,
}


def key_names(namespace: str, key_prefix: str = "") -> tuple[str, str, str]:
    """The Redis keys of ``namespace``: (committed, prepared delta, txids)."""
    base = f"{key_prefix}{{{namespace}}}"
    return base, f"{base}$prepare", f"{base}$txid"


def index_name(namespace: str, key_prefix: str = "") -> str:
    """The sorted set of ``namespace``'s committed keys (all scores 0, so in byte
    order), kept by every commit: what pages the state in key order."""
    return f"{key_prefix}{{{namespace}}}$keys"


# KEYS: the index, the committed hash; ARGV: the lower bound ("-" or "(" +
# the last key of the previous page) and the page size. One round trip a
# page: the keys in order and their values (false for a key the index
# holds and the hash no longer does, left by an index being built).
_PAGE_LUA: Final = """
local keys = redis.call('ZRANGE', KEYS[1], ARGV[1], '+', 'BYLEX', 'LIMIT', 0, tonumber(ARGV[2]))
local values = {}
-- unpack() is bounded by Lua's C stack, so read in chunks.
for start = 1, #keys, 4000 do
  local chunk = redis.call('HMGET', KEYS[2], unpack(keys, start, math.min(#keys, start + 3999)))
  for i = 1, #chunk do values[#values + 1] = chunk[i] end
end
return {keys, values}
"""


class _RedisBackend:
    """:class:`~statestream.provider.StateBackend` of one namespace: three hashes."""

    __slots__ = ("_connection", "_data", "_index", "_namespace", "_page", "_prepare", "_txid")

    def __init__(self, connection: RedisConnection, namespace: str, key_prefix: str) -> None:
        # The client and its errors' translation, not the provider: all a backend uses.
        self._connection = connection
        self._namespace = namespace
        data, prepare, txid = key_names(namespace, key_prefix)
        self._data = data.encode()
        self._prepare = prepare.encode()
        self._txid = txid.encode()
        self._index = index_name(namespace, key_prefix).encode()
        self._page: tuple[object, Script] | None = None  # (client, its page script)

    def load(self, key: bytes) -> bytes | None:
        client, _ = self._connection.client()
        with self._connection.errors(f"read state {self._namespace!r}"):
            value = client.hget(self._data, key)
        return cast("bytes | None", value)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The committed values of ``keys``: one HMGET a chunk, one round trip
        (packed by :mod:`.wire`: a read-ahead of thousands of keys)."""
        if not keys:
            return []  # HMGET takes at least one field
        client, _ = self._connection.client()
        commands = wire.commands(b"HMGET", self._data, keys, _CHUNK)
        with self._connection.errors(f"read state {self._namespace!r}"):
            replies = wire.send(client, b"".join(commands), len(commands))
        if len(replies) == 1:
            return cast("list[bytes | None]", replies[0])
        return [value for chunk in replies for value in chunk]

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        # HSCAN may return a field twice (when the hash is resized between
        # calls): remember what was yielded so each key comes once.
        seen: set[bytes] = set()
        cursor = 0
        while True:
            client, _ = self._connection.client()
            with self._connection.errors(f"scan state {self._namespace!r}"):
                cursor, page = client.hscan(self._data, cursor, count=1000)
            for key, value in cast("dict[bytes, bytes]", page).items():
                if key not in seen:
                    seen.add(key)
                    yield key, value
            if cursor == 0:
                return

    def scan_page(
        self, after: bytes | None, limit: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        """Up to ``limit`` committed entries by key above ``after``, in key order,
        read through the namespace's index (see index_name): one round trip a
        page, whatever the state's size."""
        client, _ = self._connection.client()
        if self._page is None or self._page[0] is not client:
            self._page = (client, client.register_script(_PAGE_LUA))
        script = self._page[1]
        if after is None:
            self._check_index(client)
        with self._connection.errors(f"scan state {self._namespace!r}"):
            keys, values = script(
                keys=[self._index, self._data],
                args=[b"-" if after is None else b"(" + after, limit],
            )
        page = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        return page, (keys[-1] if len(keys) == limit else None)

    def _check_index(self, client: Redis) -> None:
        """Build the index if it misses keys (a store a version without it wrote):
        every commit keeps it, so it never holds more keys than the hash, and
        equal counts mean it is whole."""
        with self._connection.errors(f"check the key index of state {self._namespace!r}"):
            pipe = client.pipeline(transaction=False)
            pipe.zcard(self._index)
            pipe.hlen(self._data)
            indexed, stored = pipe.execute()
            if indexed == stored:
                return
            client.delete(self._index)
            cursor = 0
            while True:
                cursor, page = client.hscan(self._data, cursor, count=_CHUNK)
                if page:
                    client.zadd(self._index, dict.fromkeys(cast("dict[bytes, bytes]", page), 0))
                if cursor == 0:
                    return

    def key_count(self) -> int:
        """The committed keys (HLEN: O(1), one round trip)."""
        client, _ = self._connection.client()
        with self._connection.errors(f"count the keys of state {self._namespace!r}"):
            return int(client.hlen(self._data))

    def load_txids(self) -> tuple[int, int | None]:
        client, _ = self._connection.client()
        with self._connection.errors(f"read the txids of state {self._namespace!r}"):
            committed, prepared = client.hmget(self._txid, ["commit", "prepare"])
        return (
            -1 if committed is None else int(committed),
            None if prepared is None else int(prepared),
        )

    def write_prepared(self, txid: int, delta: Delta) -> None:
        self.write_prepared_plain(txid, {}, delta)

    def write_prepared_plain(self, txid: int, plain: Mapping[str, Any], delta: Delta) -> int:
        """The prepared delta: ``delta`` (a tombstone as ``""``) and the deferred puts
        ``plain``, encoded here in C loops (see StateBackend), in one MULTI/EXEC
        of HSETs, one write. Returns the bytes of the keys and values."""
        keys = [*wire.json_texts(list(plain)), *(k for k, v in delta if v is not None)]
        values = [*wire.json_texts(list(plain.values())), *(v for _, v in delta if v is not None)]
        dels = [k for k, v in delta if v is None]
        sets = wire.interleave(keys, values)
        tombstones = wire.interleave(dels, [b""] * len(dels))
        payload, replies = wire.transaction(
            [
                *wire.commands(b"HSET", self._prepare, sets + tombstones, 2 * _CHUNK),
                wire.command(b"HSET", self._txid, (b"prepare", b"%d" % txid)),
            ]
        )
        client, _ = self._connection.client()
        with self._connection.errors(f"prepare txid {txid} of state {self._namespace!r}"):
            wire.exec_replies(wire.send(client, payload, replies))
        return sum(map(len, keys)) + sum(map(len, values)) + sum(map(len, dels))

    def apply_prepared(self, txid: int) -> CommitOutcome:
        _, script = self._connection.client()
        with self._connection.errors(f"commit txid {txid} of state {self._namespace!r}"):
            status = script(keys=[self._data, self._prepare, self._txid, self._index], args=[txid])
        return _OUTCOMES[int(status)]

    def commit_direct(self, delta: Delta) -> None:
        client, _ = self._connection.client()
        with self._connection.errors(f"commit state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            values = [(k, v) for k, v in delta if v is not None]
            tombstones = [k for k, v in delta if v is None]
            for start in range(0, len(values), _CHUNK):
                chunk: dict[Any, bytes] = dict(values[start : start + _CHUNK])
                pipe.hset(self._data, mapping=chunk)
                pipe.zadd(self._index, dict.fromkeys(chunk, 0))
            for start in range(0, len(tombstones), _CHUNK):
                pipe.hdel(self._data, *tombstones[start : start + _CHUNK])
                pipe.zrem(self._index, *tombstones[start : start + _CHUNK])
            pipe.execute()

    def discard_prepared(self) -> None:
        client, _ = self._connection.client()
        with self._connection.errors(f"roll back state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            pipe.delete(self._prepare)
            pipe.hdel(self._txid, "prepare")
            pipe.execute()
