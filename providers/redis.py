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
    claim_ttl_ms: 10000                       # ms a run's claim outlives its last renewal (>= 100)

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
    P{T}$claim      string  the claim of topology ``T`` by a run (see below), with an expiry

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

One run per topology. A run claims its topology's scope of the store
(:meth:`RedisStateProvider.claim`) before it touches any state, with a
lease: ``SET P{T}$claim <holder> NX PX claim_ttl_ms``, where the holder is
JSON naming a random token, the host, the pid and the process's start time
(``/proc/<pid>/stat``, so that a reused pid is not taken for the holder).
A thread of the claiming process renews the lease every third of the ttl
with a script that extends it only while it still holds our holder, and
releasing deletes it with a script that deletes only ours. Another
``statestream run`` of the topology (or a ``state clear``) polls for it,
then stops with StateLockedError naming the holder's pid and host. A lease
whose holder died on the same machine (same host name, boot and pid
namespace; the pid gone, or now another process) is taken over at once,
atomically; one held from another machine cannot be judged from here, and
lapses at most ``claim_ttl_ms`` after its holder died. Unlike sqlite's
file lock, the lease is the claiming process's alone: the workers it forks
neither renew nor release it, and do not keep it once it is dead (the
workers runtime kills its workers with their supervisor).

A lease can be lost while its run goes on: the key deleted, or expired
while the server could not be reached for ``claim_ttl_ms`` (the renewal
retries until then), and perhaps taken by another run since. The renewal
thread then logs an error (logger ``statestream.redis``) and the claim's
``lost`` says why (``RunClaim.lost`` for the runtimes), and the run stops
within about a second with StateLockedError. Two runs writing one
topology's state would also have the second's checkpoints refused, which
stops it after the fact.

The client connects on first use and again in a forked child. A server that
cannot be reached raises ProviderUnavailableError after the retries, naming
host and port; committed data is only ever changed by the commit script, so
a connection lost at any moment leaves it whole.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, cast

import orjson

from statestream.provider import (
    SHARING_NETWORK,
    BackendStateProvider,
    ClaimHandle,
    ClaimWait,
    CommitOutcome,
    ConfigError,
    Delta,
    ProcessClaims,
    ProviderUnavailableError,
    StateCorruptError,
    StateError,
    StateLockedError,
    check_config_keys,
    config_option,
    get_serializer,
)

from ._redis_password import warn_if_password_unchecked

if TYPE_CHECKING:
    import redis as redis_module
    from redis.commands.core import Script

__all__ = ["RedisStateProvider", "claim_key", "key_names"]

log = logging.getLogger("statestream.redis")

#: Storm's default serializer class names: they stand for "the configured serializer".
STORM_DEFAULT_SERIALIZERS: Final = frozenset({"org.apache.storm.state.DefaultStateSerializer"})
_POOL_KEYS: Final = frozenset({"host", "port", "timeout", "database", "password"})
_CHUNK: Final = 10_000  # fields per HSET/HDEL command in a pipeline
DEFAULT_CLAIM_TTL_MS: Final = 10_000
_MIN_CLAIM_TTL_MS: Final = 100
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


def claim_key(scope: str, key_prefix: str = "") -> str:
    """The Redis key of the claim of topology ``scope`` (a string, never a namespace's
    hash: ``namespaces()`` lists hashes only)."""
    return f"{key_prefix}{{{scope}}}$claim"


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
            "claim_ttl_ms",
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
        claim_ttl_ms: int = DEFAULT_CLAIM_TTL_MS,
    ) -> None:
        super().__init__(get_serializer(serializer))
        if retries < 0:
            raise ConfigError(f"redis state provider config 'retries' must be >= 0, not {retries}")
        if timeout_ms <= 0:
            raise ConfigError(
                f"redis state provider config 'timeout' (ms) must be > 0, not {timeout_ms}"
            )
        if claim_ttl_ms < _MIN_CLAIM_TTL_MS:
            raise ConfigError(
                f"redis state provider config 'claim_ttl_ms' must be >= {_MIN_CLAIM_TTL_MS} "
                f"(ms: how long a run's claim outlives its last renewal), not {claim_ttl_ms!r}"
            )
        self.claim_ttl_ms = claim_ttl_ms
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
            query = urllib.parse.parse_qs(parts.query)
            db_name = (parts.path if parts.scheme != "unix" else "").strip("/")
            url_db = db_name or query.get("db", ["0"])[0]
            self._store_id = f"{self.address}/{url_db}"
        else:
            self.address = f"{host}:{port}"
            self._store_id = f"{self.address}/{db}"
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
            claim_ttl_ms=config_option(name, config, "claim_ttl_ms", int, DEFAULT_CLAIM_TTL_MS),
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
        self.check_open()
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
                warn_if_password_unchecked(self._client_obj, self.address)
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

    def _hashes(self) -> Iterator[bytes]:
        """The names of the store's hashes, without the key prefix: ``{N}``,
        ``{N}$prepare``, ``{N}$txid`` (a claim is a string: never one)."""
        start = len(self.key_prefix.encode())
        client, _ = self._client()
        with self._errors("list namespaces"):
            pattern = _glob_escape(self.key_prefix) + "{*"
            for key in client.scan_iter(match=pattern, count=1000, _type="hash"):
                yield key[start:]

    def namespaces(self) -> list[str]:
        # Only data hashes end with "}"; "$prepare"/"$txid" hashes do not.
        return sorted({key[1:-1].decode() for key in self._hashes() if key.endswith(b"}")})

    def stored_namespaces(self) -> list[str]:
        found: set[str] = set()
        for key in self._hashes():
            for end in (b"}", b"}$prepare", b"}$txid"):
                if key.endswith(end):
                    found.add(key[1 : -len(end)].decode())
                    break
        return sorted(found)

    def _drop(self, namespaces: list[str]) -> None:
        client, _ = self._client()
        with self._errors(f"delete {len(namespaces)} namespaces"):
            pipe = client.pipeline(transaction=True)
            for ns in namespaces:
                pipe.delete(*key_names(ns, self.key_prefix))
            pipe.execute()

    def claim(self, scope: str, wait: float) -> ClaimHandle[_Lease]:
        """Hold topology ``scope`` of this store for one run, with a lease (see the
        module doc).

        Polls every 50 ms for up to ``wait`` seconds while another process
        holds it, then raises StateLockedError naming that process's pid and
        host; a holder that died on this machine is taken over at once. A
        scope this process holds already is granted again; each claim is
        released on its own, and the last one deletes the key. The claim has
        a client of its own, so it outlives :meth:`close` of this provider (a
        run closes and reopens its store; the claim is the run's).
        ProviderUnavailableError if the server cannot be reached.
        """
        self.check_open()
        key = claim_key(scope, self.key_prefix)
        ident = (self._store_id, key)
        joined = _CLAIMS.join(ident)
        if joined is not None:
            return joined
        client = self._make_client()
        try:
            with self._errors(f"claim topology {scope!r}"):
                return self._take(client, scope, key, ident, wait)
        except BaseException:
            client.close()
            raise

    def _take(
        self, client: redis_module.Redis, scope: str, key: str, ident: _Ident, wait: float
    ) -> ClaimHandle[_Lease]:
        """Poll for the lease of ``key`` until it is ours or ``wait`` is over (see claim)."""
        ttl = self.claim_ttl_ms
        value = _Holder.of_this_process(secrets.token_hex(16)).encode()
        take_over = client.register_script(_TAKE_OVER_LUA)
        where = f"{key!r} on redis at {self.address}"
        waiting = ClaimWait(self.clock, wait)
        _TAKING.add(value)
        try:
            while True:
                sent = time.monotonic()
                if client.set(key, value, nx=True, px=ttl):
                    break
                pipe = client.pipeline(transaction=True)
                pipe.get(key)
                pipe.pttl(key)
                held, pttl = pipe.execute()
                if held is None:
                    continue  # let go between the two commands: try again at once
                if held == value:
                    break  # ours: a retried command whose first reply was lost took it
                # The same store named otherwise (localhost, 127.0.0.1): the same lease.
                joined = _CLAIMS.join(ident, functools.partial(_has_value, held))
                if joined is not None:
                    client.close()
                    return joined
                holder = _Holder.decode(held)
                if holder is not None and holder.is_gone(held):
                    sent = time.monotonic()
                    if take_over(keys=[key], args=[held, value, ttl]) == 1:
                        log.info(
                            "took over the claim of topology %r (%s) from pid %d, which "
                            "died without letting go of it",
                            scope,
                            where,
                            holder.pid,
                        )
                        break
                    continue  # another claimer took it first: see who holds it now
                if waiting.over():
                    raise _locked(scope, key, where, wait, holder, held, int(pttl))
                waiting.pause()
            lease = _Lease(client, scope, key, where, value, ttl)
            handle = _CLAIMS.add(ident, lease)
            lease.start(sent)
            return handle
        finally:
            _TAKING.discard(value)

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


# ---------------------------------------------------------------------- claims

_CLAIM_POLL_S: Final = 0.05
_RENEW_JOIN_S: Final = 1.0  # how long release waits for a renewal under way

# KEYS[1]: a claim key. ARGV: the value a claimer found (a dead holder's), its
# own, the ttl in ms. Takes the key over only if it still holds the dead
# holder (or nothing), so that of two claimers taking it over one wins.
_TAKE_OVER_LUA: Final = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""
# ARGV: our value, the ttl in ms. 1: renewed; else what the key holds now (nil: gone).
_RENEW_LUA: Final = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return held
"""
# ARGV: our value. Deletes the key only if it is still ours.
_RELEASE_LUA: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_Ident = tuple[str, str]  # (store, claim key): which lease a claim of this process joins


def _process_stat(pid: int) -> tuple[bytes, int] | None:
    """The state letter and the start time (field 22, clock ticks since boot) of process
    ``pid``, from /proc/<pid>/stat; None if that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # The command name (field 2) may hold spaces and parentheses: split after its last ")".
        fields = stat[stat.rindex(b")") + 2 :].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _read(path: str, link: bool = False) -> str | None:
    try:
        if link:
            return os.readlink(path)
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


@functools.cache
def _this_process(pid: int) -> tuple[str, int | None, str | None, str | None]:
    """Host name, start time, boot id and pid namespace of this process (cached per pid:
    a forked child asks again)."""
    stat = _process_stat(pid)
    return (
        socket.gethostname(),
        None if stat is None else stat[1],
        _read("/proc/sys/kernel/random/boot_id"),
        _read("/proc/self/ns/pid", link=True),
    )


class _Holder:
    """Who holds a claim key: what its value says, as JSON."""

    __slots__ = ("boot", "host", "pid", "pidns", "start", "token")

    def __init__(
        self,
        token: str,
        host: str,
        pid: int,
        start: int | None,
        boot: str | None,
        pidns: str | None,
    ) -> None:
        self.token = token
        self.host = host
        self.pid = pid
        self.start = start  # the process's start time: a reused pid is another process
        self.boot = boot  # start times and pids are of one boot of one machine ...
        self.pidns = pidns  # ... and pids of one pid namespace (containers share a host name)

    @classmethod
    def of_this_process(cls, token: str) -> _Holder:
        pid = os.getpid()
        host, start, boot, pidns = _this_process(pid)
        return cls(token, host, pid, start, boot, pidns)

    def encode(self) -> bytes:
        return orjson.dumps({name: getattr(self, name) for name in self.__slots__})

    @classmethod
    def decode(cls, value: bytes) -> _Holder | None:
        """The holder ``value`` names, or None if it is not a claim's value."""
        try:
            fields = orjson.loads(value)
            holder = cls(**{name: fields[name] for name in cls.__slots__})
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return None
        if not isinstance(holder.pid, int) or not isinstance(holder.host, str):
            return None
        return holder

    def on_this_machine(self) -> bool:
        """Whether the holder's pid can be looked at here: same host name, boot and pid
        namespace (containers may share a host name), and a /proc to look in."""
        me = _Holder.of_this_process("")
        return (
            me.boot is not None
            and me.pidns is not None
            and (self.host, self.boot, self.pidns) == (me.host, me.boot, me.pidns)
        )

    def is_gone(self, value: bytes) -> bool:
        """Whether the holding process is certainly dead, so that its lease (``value``)
        may be taken over now.

        Only a process of this machine (this boot, this pid namespace) can be
        looked at; anything that cannot be told counts as alive. A lease of
        this very process that none of its claims holds is a leftover too (a
        release that could not reach the server).
        """
        if not self.on_this_machine():
            return False
        me = _Holder.of_this_process("")
        if self.pid == me.pid:
            # _TAKING first: a value leaves it only once it is in _CLAIMS.
            ours = value in _TAKING or any(lease.value == value for lease in _CLAIMS.holds())
            return self.start != me.start or not ours
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's
        stat = _process_stat(self.pid)
        if stat is None:
            return False  # hidden from us (hidepid): alive as far as we can tell
        state, start = stat
        # A zombie holds nothing any more; another start time is another process.
        return state in (b"Z", b"X") or (self.start is not None and start != self.start)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def _locked(
    scope: str, key: str, where: str, wait: float, holder: _Holder | None, held: bytes, pttl: int
) -> StateLockedError:
    """The StateLockedError of a claim another process holds past the wait."""
    if pttl < 0:
        hint = (
            f"the key has no expiry, so no statestream claim set it: if no run of the "
            f"topology is running, delete it (redis-cli DEL {key!r})"
        )
    elif holder is None:
        hint = (
            f"the key holds {held[:80]!r}, not a statestream claim; "
            f"it expires within {pttl / 1000:.1f} s"
        )
    elif holder.on_this_machine():
        hint = None  # alive: a dead holder of this machine would have been taken over
    else:
        hint = f"if that process is gone, its lease expires within {pttl / 1000:.1f} s"
    return StateLockedError.for_scope(
        scope,
        where,
        pid=None if holder is None else holder.pid,
        host=None if holder is None else holder.host,
        wait=wait,
        hint=hint,
    )


class _Lease:
    """This process's lease of one claim key (a :class:`~statestream.provider.Hold`),
    shared by every claim of its scope here, and the daemon thread that renews it."""

    def __init__(
        self,
        client: redis_module.Redis,
        scope: str,
        key: str,
        where: str,
        value: bytes,
        ttl_ms: int,
    ) -> None:
        self.client = client
        self.scope = scope
        self.key = key
        self.where = where
        self.value = value
        self.ttl_ms = ttl_ms
        self.lost: str | None = None  # why, once the lease is no longer ours
        self._renew = client.register_script(_RENEW_LUA)
        self._delete = client.register_script(_RELEASE_LUA)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, taken: float) -> None:
        """Start renewing; ``taken`` is when the command that took the lease was sent."""
        self._thread = threading.Thread(
            target=self._keep, args=(taken,), name=f"statestream-claim-{self.scope}", daemon=True
        )
        self._thread.start()

    def _keep(self, renewed: float) -> None:
        """Renew every third of the ttl until released or lost; never raises.

        ``renewed`` is when the last renewal that succeeded was sent: the
        server extended the lease at that moment or later, so it holds at
        least until ``renewed + ttl``, and a renewal that fails is retried
        until then.
        """
        ttl = self.ttl_ms / 1000
        delay = ttl / 3
        failing = False
        lapsed = False  # the server was away past the ttl: the key may have expired
        while not self._stop.wait(delay):
            sent = time.monotonic()
            try:
                held = self._renew(keys=[self.key], args=[self.value, self.ttl_ms])
            except Exception as exc:  # the lease outlives any error but its expiry
                if self._stop.is_set():
                    return
                left = renewed + ttl - time.monotonic()
                if left <= 0:
                    # Not lost yet: a server that cannot be reached is no other
                    # run's either. The run rides the outage out (its store
                    # operations wait, statestream._outage) and the lease is
                    # taken again when the server answers, unless another run
                    # took it meanwhile.
                    if not lapsed:
                        log.warning(
                            "the claim of topology %r (%s) could not be renewed for %g s "
                            "(%s: %s): it is taken again when the server answers, unless "
                            "another run holds it by then",
                            self.scope,
                            self.where,
                            ttl,
                            type(exc).__name__,
                            exc,
                        )
                    lapsed = failing = True
                    delay = min(ttl / 3, max(ttl / 20, _CLAIM_POLL_S))
                    continue
                if not failing:
                    log.warning(
                        "cannot renew the claim of topology %r (%s): %s: %s; retrying for "
                        "%.1f s more, until the lease would expire",
                        self.scope,
                        self.where,
                        type(exc).__name__,
                        exc,
                        left,
                    )
                failing = True
                delay = min(ttl / 3, max(ttl / 20, _CLAIM_POLL_S))
                continue
            if held == 1:
                renewed, delay, failing, lapsed = sent, ttl / 3, False, False
                continue
            if self._stop.is_set():
                return  # released meanwhile: the key went with it
            # A renewal answered past the lease's end (a stalled server holds the
            # command, then runs it) finds the key expired, as one that failed.
            lapsed = lapsed or time.monotonic() > renewed + ttl
            if held is None and lapsed and self._take_again():
                log.warning(
                    "took the claim of topology %r (%s) again: the server is back",
                    self.scope,
                    self.where,
                )
                renewed, delay, failing, lapsed = sent, ttl / 3, False, False
                continue
            if held is None:
                self._lose("its key is gone (deleted, or expired unrenewed)")
            else:
                holder = _Holder.decode(held)
                who = f"{held[:80]!r}" if holder is None else holder.describe()
                self._lose(f"another process holds it now ({who})")
            return

    def _take_again(self) -> bool:
        """Take the expired lease again, if no other run took it (SET NX); never raises."""
        try:
            return bool(self.client.set(self.key, self.value, nx=True, px=self.ttl_ms))
        except Exception:
            return False

    def _lose(self, why: str) -> None:
        lost = f"the claim of topology {self.scope!r} ({self.where}) was lost: {why}"
        _CLAIMS.forget(self)  # new claims here decide afresh
        log.error(
            "%s. Another run of the topology may write its state now, and this run would "
            "undo its checkpoints: it stops (the runtimes look every second)",
            lost,
        )
        self.lost = lost  # last: whoever sees it finds the error logged

    def end(self) -> None:
        """Stop renewing and delete the key if it is still ours; never raises, since
        runs let go of their claim on the way out of a failure."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_RENEW_JOIN_S)
        try:
            self._delete(keys=[self.key], args=[self.value])
        except Exception as exc:  # the lease expires by itself; a release must not fail a run
            log.warning(
                "could not delete the claim of topology %r (%s): %s: %s; it expires within %g s",
                self.scope,
                self.where,
                type(exc).__name__,
                exc,
                self.ttl_ms / 1000,
            )
        finally:
            self.client.close()

    def __repr__(self) -> str:
        return f"redis lease {self.where}"


def _has_value(value: bytes, lease: _Lease) -> bool:
    return lease.value == value


# The leases this process holds, by (store, claim key); and the values it is
# taking right now, which a claim of another of its threads must not take
# for leftovers (set operations are atomic: no lock).
_CLAIMS: ProcessClaims[_Lease] = ProcessClaims()
_TAKING: set[bytes] = set()
