"""The ``redis`` state provider: shared and durable as the Redis server is.

Needs redis-py (``pip install 'statestream[redis]'``); hiredis parses replies
when it is installed.

Config (``topology.state.provider.config``), statestream's keys::

    url:         "redis://localhost:6379/0"   # or rediss:// for TLS; or else:
    host:        "localhost"
    port:        6379
    db:          0                            # alias: database
    password:    null
    username:    null
    ssl:         false
    timeout:     2000                         # ms, connect and each reply (Storm's unit)
    retries:     3                            # retries of a failed command, with a short backoff
    key_prefix:  ""                           # put before every key (several topologies, one db)
    serializer:  "json"                       # or "pickle" (see statestream.provider)

and Storm's ``RedisKeyValueStateProvider`` JSON, so a storm.yaml carries over::

    jedisPoolConfig:       {host, port, timeout, database, password}  # read as the keys above
    keyClass, valueClass:  accepted and ignored: Python values carry their own type
    keySerializerClass, valueSerializerClass:
        Storm's default (org.apache.storm.state.DefaultStateSerializer) means
        "the configured `serializer`"; any other Java class is a ConfigError,
        since Java code cannot run here.

Explicit keys win over ``jedisPoolConfig``. ``jedisClusterConfig`` (Redis
Cluster) is not supported yet and raises ConfigError.

Key layout, for namespace ``N`` and key prefix ``P``::

    P{N}            hash  committed entries: encoded key -> encoded value
    P{N}$prepare    hash  prepared delta: encoded key -> encoded value, or "" (tombstone)
    P{N}$txid       hash  fields "commit" (last committed txid), "prepare" (prepared txid)

``{N}`` is a Redis Cluster hash tag: the three hashes of a namespace live in
one slot, which the commit script needs. Keys and values are the
serializer's bytes (JSON by default, so ``redis-cli HGETALL '{count-0}'``
reads). The names differ from Storm's (``N``, ``N$prepare``, ``N$txid``,
base64 values) by the hash tag and the encoding, so a Storm store is not
read as is.

Protocol: prepare is one MULTI/EXEC (merge the delta, record the prepared
txid); commit is one Lua script that applies the delta (HSET values, HDEL
tombstones), records the txid and drops the delta, touching only the
changed keys; a txid at or below the committed one is a no-op. Every
operation can be repeated after a lost connection, which is what redis-py's
retries and the runtime's checkpoint retries do.

The client connects on first use and again in a forked child. A server that
cannot be reached raises ProviderUnavailableError after the retries, naming
host and port; committed data is only ever changed by the commit script, so
a connection lost at any moment leaves it whole.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, cast

from statestream.provider import (
    SHARING_NETWORK,
    BackendStateProvider,
    CommitOutcome,
    ConfigError,
    Delta,
    ProviderUnavailableError,
    StateCorruptError,
    StateError,
    check_config_keys,
    config_option,
    get_serializer,
)

if TYPE_CHECKING:
    import redis as redis_module
    from redis.commands.core import Script

__all__ = ["RedisStateProvider", "key_names"]

#: Storm's default serializer class names: they stand for "the configured serializer".
STORM_DEFAULT_SERIALIZERS: Final = frozenset({"org.apache.storm.state.DefaultStateSerializer"})
_POOL_KEYS: Final = frozenset({"host", "port", "timeout", "database", "password"})
_CHUNK: Final = 10_000  # fields per HSET/HDEL command in a pipeline
_BACKOFF_BASE_S: Final = 0.05
_BACKOFF_CAP_S: Final = 1.0

# Runs atomically on the server. KEYS: data, prepare, txid hashes of one
# namespace (one slot, thanks to the hash tag); ARGV[1]: the txid.
# Returns 0 applied, 1 already committed (no-op), 2 that txid is not prepared.
_COMMIT_LUA: Final = """
local txid = tonumber(ARGV[1])
local committed = tonumber(redis.call('HGET', KEYS[3], 'commit') or '-1')
local prepared = redis.call('HGET', KEYS[3], 'prepare')
if txid <= committed then
  -- A repeated commit. Drop the delta only if it is stale (<= committed):
  -- a delta of a later txid is live and must survive a late duplicate.
  if prepared and tonumber(prepared) <= committed then
    redis.call('DEL', KEYS[2])
    redis.call('HDEL', KEYS[3], 'prepare')
  end
  return 1
end
if (not prepared) or tonumber(prepared) ~= txid then
  return 2
end
local delta = redis.call('HGETALL', KEYS[2])
local sets, dels = {}, {}
-- unpack() is bounded by Lua's C stack, so write in chunks.
for i = 1, #delta, 2 do
  if delta[i + 1] == '' then
    dels[#dels + 1] = delta[i]
    if #dels >= 4000 then redis.call('HDEL', KEYS[1], unpack(dels)); dels = {} end
  else
    sets[#sets + 1] = delta[i]
    sets[#sets + 1] = delta[i + 1]
    if #sets >= 4000 then redis.call('HSET', KEYS[1], unpack(sets)); sets = {} end
  end
end
if #sets > 0 then redis.call('HSET', KEYS[1], unpack(sets)) end
if #dels > 0 then redis.call('HDEL', KEYS[1], unpack(dels)) end
redis.call('HSET', KEYS[3], 'commit', ARGV[1])
redis.call('HDEL', KEYS[3], 'prepare')
redis.call('DEL', KEYS[2])
return 0
"""
_OUTCOMES: Final = {
    0: CommitOutcome.APPLIED,
    1: CommitOutcome.ALREADY_COMMITTED,
    2: CommitOutcome.NOT_PREPARED,
}

# Clients inherited through fork() are parked, never closed: closing would
# shut down sockets that the parent is still using.
_INHERITED: list[Any] = []


def key_names(namespace: str, key_prefix: str = "") -> tuple[str, str, str]:
    """The Redis keys of ``namespace``: (committed, prepared delta, txids)."""
    base = f"{key_prefix}{{{namespace}}}"
    return base, f"{base}$prepare", f"{base}$txid"


def _import_redis() -> ModuleType:
    try:
        import redis
    except ImportError as exc:
        raise ConfigError(
            "the redis state provider needs redis-py: pip install 'statestream[redis]'"
        ) from exc
    return redis


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


class RedisStateProvider(BackendStateProvider):
    """State in Redis hashes, one set of three per namespace (see the module docstring)."""

    name: ClassVar[str] = "redis"
    sharing: ClassVar[str] = SHARING_NETWORK  # any process that reaches the server
    _KEYS: ClassVar[frozenset[str]] = frozenset(
        {
            "url",
            "host",
            "port",
            "db",
            "database",
            "password",
            "username",
            "ssl",
            "timeout",
            "retries",
            "key_prefix",
            "serializer",
            "jedisPoolConfig",
            "jedisClusterConfig",
            "keyClass",
            "valueClass",
            "keySerializerClass",
            "valueSerializerClass",
        }
    )

    def __init__(
        self,
        *,
        url: str | None = None,
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        password: str | None = None,
        username: str | None = None,
        ssl: bool = False,
        timeout_ms: int = 2000,
        retries: int = 3,
        key_prefix: str = "",
        serializer: str = "json",
    ) -> None:
        super().__init__(get_serializer(serializer))
        if retries < 0:
            raise ConfigError(f"redis state provider config 'retries' must be >= 0, not {retries}")
        if timeout_ms <= 0:
            raise ConfigError(
                f"redis state provider config 'timeout' (ms) must be > 0, not {timeout_ms}"
            )
        self._url = url
        self._connect: dict[str, Any] = {
            "host": host,
            "port": port,
            "db": db,
            "password": password,
            "username": username,
            "ssl": ssl,
        }
        self._timeout_s = timeout_ms / 1000
        self._retries = retries
        self.key_prefix = key_prefix
        if url is not None:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("redis", "rediss", "unix"):
                raise ConfigError(
                    f"redis state provider 'url' must start with redis://, rediss:// or unix://,"
                    f" not {url!r}"
                )
            # For messages only: never show the password.
            self.address = (
                parts.path if parts.scheme == "unix" else f"{parts.hostname}:{parts.port or 6379}"
            )
        else:
            self.address = f"{host}:{port}"
        self._lock = threading.Lock()
        self._client_obj: redis_module.Redis | None = None
        self._script: Script | None = None
        self._pid = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        name = cls.name
        check_config_keys(name, config, cls._KEYS)
        if config.get("jedisClusterConfig") is not None:
            raise ConfigError(
                "redis state provider: jedisClusterConfig (Redis Cluster) is not supported yet; "
                "point `url` or jedisPoolConfig at a single Redis server"
            )
        for key in ("keySerializerClass", "valueSerializerClass"):
            value = config.get(key)
            if value is not None and value not in STORM_DEFAULT_SERIALIZERS:
                raise ConfigError(
                    f"redis state provider config {key}={value!r}: Java serializer classes "
                    "cannot run in statestream; remove it (Storm's default, "
                    "org.apache.storm.state.DefaultStateSerializer, is accepted) and choose "
                    "`serializer: json` (default) or `serializer: pickle`"
                )
        # keyClass/valueClass told Storm's Java serializer which types to expect;
        # Python values carry their own type, so they are accepted and ignored.
        pool = config.get("jedisPoolConfig") or {}
        if not isinstance(pool, Mapping):
            raise ConfigError(
                f"redis state provider config jedisPoolConfig must be a mapping, not {pool!r}"
            )
        extra = sorted(set(pool) - _POOL_KEYS)
        if extra:
            raise ConfigError(
                f"unknown key(s) {', '.join(map(repr, extra))} in the redis state provider's "
                f"jedisPoolConfig; known keys: {', '.join(sorted(_POOL_KEYS))}"
            )
        # Explicit keys first, then Storm's jedisPoolConfig, then defaults.
        merged: dict[str, Any] = {
            "host": pool.get("host"),
            "port": pool.get("port"),
            "db": pool.get("database"),
            "password": pool.get("password"),
            "timeout": pool.get("timeout"),
        }
        if config.get("db") is not None and config.get("database") is not None:
            raise ConfigError("redis state provider config: give `db` or `database`, not both")
        for key in ("host", "port", "password", "timeout"):
            if config.get(key) is not None:
                merged[key] = config[key]
        for key in ("db", "database"):
            if config.get(key) is not None:
                merged["db"] = config[key]
        url = config_option(name, config, "url", str, "")
        connection_keys = ("host", "port", "db", "database", "password", "username", "ssl")
        given = [k for k in (*connection_keys, "jedisPoolConfig") if config.get(k) is not None]
        if url and given:
            raise ConfigError(
                f"redis state provider config: give either `url` or {', '.join(given)}, not both "
                "(a url carries them: rediss://user:password@host:port/db)"
            )
        password = merged["password"]
        username = config.get("username")
        return cls(
            url=url or None,
            host=config_option(name, merged, "host", str, "localhost"),
            port=config_option(name, merged, "port", int, 6379),
            db=config_option(name, merged, "db", int, 0),
            password=None if password is None else str(password),
            username=None if username is None else str(username),
            ssl=config_option(name, config, "ssl", bool, False),
            timeout_ms=config_option(name, merged, "timeout", int, 2000),
            retries=config_option(name, config, "retries", int, 3),
            key_prefix=config_option(name, config, "key_prefix", str, ""),
            serializer=config_option(name, config, "serializer", str, "json"),
        )

    def __repr__(self) -> str:
        return f"RedisStateProvider(address={self.address!r}, key_prefix={self.key_prefix!r})"

    def __getstate__(self) -> dict[str, Any]:
        # Ship the configuration only: clients, scripts and locks stay behind.
        state = self.__dict__.copy()
        state.update(_client_obj=None, _script=None, _pid=0, _lock=None, _states={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ connection

    def _client(self) -> tuple[redis_module.Redis, Script]:
        """This process's client and commit script, created on first use (no I/O)."""
        if self._closed:
            raise StateError("the redis state provider is closed; open a new one")
        client, script = self._client_obj, self._script
        if client is not None and script is not None and self._pid == os.getpid():
            return client, script
        with self._lock:
            if self._client_obj is not None and self._pid != os.getpid():
                _INHERITED.append(self._client_obj)  # forked: leave the parent's sockets alone
                self._client_obj = None
            if self._client_obj is None:
                self._client_obj = self._make_client()
                self._script = self._client_obj.register_script(_COMMIT_LUA)
                self._pid = os.getpid()
            assert self._script is not None
            return self._client_obj, self._script

    def _make_client(self) -> redis_module.Redis:
        """A new client (no I/O yet). Tests override this to substitute fakeredis."""
        redis = _import_redis()
        from redis.backoff import ExponentialBackoff
        from redis.retry import Retry

        options: dict[str, Any] = {
            "socket_timeout": self._timeout_s,
            "socket_connect_timeout": self._timeout_s,
            # Every command we send is idempotent (see the module docstring),
            # so retrying one whose reply was lost is safe.
            "retry": Retry(ExponentialBackoff(_BACKOFF_CAP_S, _BACKOFF_BASE_S), self._retries),
        }
        if self._url is not None:
            client = redis.Redis.from_url(self._url, **options)
        else:
            client = redis.Redis(**self._connect, **options)
        return client  # type: ignore[no-any-return]

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Translate redis-py's exceptions into statestream's at the boundary."""
        redis = _import_redis()
        exceptions = redis.exceptions
        try:
            yield
        except exceptions.AuthenticationError as exc:
            raise ConfigError(
                f"redis at {self.address} refused the credentials while trying to {action}: "
                f"{exc}; check password/username in the redis state provider config"
            ) from exc
        except (exceptions.ConnectionError, exceptions.TimeoutError) as exc:
            raise ProviderUnavailableError(
                f"cannot reach redis at {self.address} to {action} "
                f"({self._retries} retries, timeout {self._timeout_s:g}s): {exc}; check that "
                "the server is running and that the redis state provider config "
                "(url or host/port) points at it"
            ) from exc
        except exceptions.ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                raise StateCorruptError(
                    f"redis at {self.address}: a key of the state store holds a non-hash value "
                    f"while trying to {action} ({exc}); another application may use the same "
                    "keys: set a `key_prefix`, or move the keys aside"
                ) from exc
            raise StateError(f"redis at {self.address} failed to {action}: {exc}") from exc
        except exceptions.RedisError as exc:
            raise StateError(f"redis at {self.address} failed to {action}: {exc}") from exc

    # ------------------------------------------------------------------ provider

    def _open_backend(self, namespace: str) -> _RedisBackend:
        return _RedisBackend(self, namespace)

    def namespaces(self) -> list[str]:
        prefix = self.key_prefix.encode()
        client, _ = self._client()
        found: set[str] = set()
        with self._errors("list namespaces"):
            pattern = _glob_escape(self.key_prefix) + "{*"
            for key in client.scan_iter(match=pattern, count=1000, _type="hash"):
                # Only data hashes end with "}"; "$prepare"/"$txid" hashes do not.
                if key.endswith(b"}"):
                    found.add(key[len(prefix) + 1 : -1].decode())
        return sorted(found)

    def _close(self) -> None:
        with self._lock:
            client, self._client_obj, self._script = self._client_obj, None, None
            if client is not None and self._pid == os.getpid():
                client.close()


class _RedisBackend:
    """:class:`~statestream.provider.StateBackend` of one namespace: three hashes."""

    __slots__ = ("_data", "_namespace", "_prepare", "_provider", "_txid")

    def __init__(self, provider: RedisStateProvider, namespace: str) -> None:
        self._provider = provider
        self._namespace = namespace
        data, prepare, txid = key_names(namespace, provider.key_prefix)
        self._data = data.encode()
        self._prepare = prepare.encode()
        self._txid = txid.encode()

    def load(self, key: bytes) -> bytes | None:
        client, _ = self._provider._client()
        with self._provider._errors(f"read state {self._namespace!r}"):
            value = client.hget(self._data, key)
        return cast("bytes | None", value)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        # HSCAN may return a field twice (when the hash is resized between
        # calls): remember what was yielded so each key comes once.
        seen: set[bytes] = set()
        cursor = 0
        while True:
            client, _ = self._provider._client()
            with self._provider._errors(f"scan state {self._namespace!r}"):
                cursor, page = client.hscan(self._data, cursor, count=1000)
            for key, value in cast("dict[bytes, bytes]", page).items():
                if key not in seen:
                    seen.add(key)
                    yield key, value
            if cursor == 0:
                return

    def load_txids(self) -> tuple[int, int | None]:
        client, _ = self._provider._client()
        with self._provider._errors(f"read the txids of state {self._namespace!r}"):
            committed, prepared = client.hmget(self._txid, ["commit", "prepare"])
        return (
            -1 if committed is None else int(committed),
            None if prepared is None else int(prepared),
        )

    def write_prepared(self, txid: int, delta: Delta) -> None:
        client, _ = self._provider._client()
        with self._provider._errors(f"prepare txid {txid} of state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            for start in range(0, len(delta), _CHUNK):
                chunk = delta[start : start + _CHUNK]
                pipe.hset(self._prepare, mapping={k: b"" if v is None else v for k, v in chunk})
            pipe.hset(self._txid, "prepare", txid)
            pipe.execute()

    def apply_prepared(self, txid: int) -> CommitOutcome:
        _, script = self._provider._client()
        with self._provider._errors(f"commit txid {txid} of state {self._namespace!r}"):
            status = script(keys=[self._data, self._prepare, self._txid], args=[txid])
        return _OUTCOMES[int(status)]

    def commit_direct(self, delta: Delta) -> None:
        client, _ = self._provider._client()
        with self._provider._errors(f"commit state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            values = [(k, v) for k, v in delta if v is not None]
            tombstones = [k for k, v in delta if v is None]
            for start in range(0, len(values), _CHUNK):
                pipe.hset(self._data, mapping=dict(values[start : start + _CHUNK]))
            for start in range(0, len(tombstones), _CHUNK):
                pipe.hdel(self._data, *tombstones[start : start + _CHUNK])
            pipe.execute()

    def discard_prepared(self) -> None:
        client, _ = self._provider._client()
        with self._provider._errors(f"roll back state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            pipe.delete(self._prepare)
            pipe.hdel(self._txid, "prepare")
            pipe.execute()
