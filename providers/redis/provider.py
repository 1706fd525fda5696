"""The redis state provider: config, the client, namespaces and claims (see the package doc)."""

from __future__ import annotations

import functools
import logging
import secrets
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from statestream.provider import (
    SHARING_NETWORK,
    BackendStateProvider,
    ClaimHandle,
    ClaimWait,
    ConfigError,
    check_config_keys,
    config_option,
    get_serializer,
)

if TYPE_CHECKING:
    import redis as redis_module


from .backend import _RedisBackend, index_name, key_names
from .connection import RedisConnection, import_redis
from .lease import _CLAIMS, _TAKE_OVER_LUA, _TAKING, _has_value, _Holder, _Ident, _Lease, _locked

__all__ = ["RedisStateProvider", "claim_key", "index_name", "key_names"]

log = logging.getLogger("statestream.redis")

#: Storm's default serializer class names: they stand for "the configured serializer".
STORM_DEFAULT_SERIALIZERS: Final = frozenset({"org.apache.storm.state.DefaultStateSerializer"})
_POOL_KEYS: Final = frozenset({"host", "port", "timeout", "database", "password"})
DEFAULT_CLAIM_TTL_MS: Final = 10_000
_MIN_CLAIM_TTL_MS: Final = 100
_BACKOFF_BASE_S: Final = 0.05
_BACKOFF_CAP_S: Final = 1.0


def claim_key(scope: str, key_prefix: str = "") -> str:
    """The Redis key of the claim of topology ``scope`` (a string, never a namespace's
    hash: ``namespaces()`` lists hashes only)."""
    return f"{key_prefix}{{{scope}}}$claim"


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
        #: This process's client and the translation of its errors: all the
        #: backends are given.
        self.connection = self._new_connection()

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
        # Ship the configuration only: the connection (client, script, lock) stays behind.
        state = self.__dict__.copy()
        del state["connection"]
        state.update(_states={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.connection = self._new_connection()

    # ------------------------------------------------------------------ connection

    def _new_connection(self) -> RedisConnection:
        return RedisConnection(
            self._make_client,
            address=self.address,
            retries=self._retries,
            timeout_s=self._timeout_s,
        )

    def _make_client(self) -> redis_module.Redis:
        """A new client (no I/O yet). Tests override this to substitute fakeredis."""
        redis = import_redis()
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

    # ------------------------------------------------------------------ provider

    def _open_backend(self, namespace: str) -> _RedisBackend:
        return _RedisBackend(self.connection, namespace, self.key_prefix)

    def _hashes(self) -> Iterator[bytes]:
        """The names of the store's hashes, without the key prefix: ``{N}``,
        ``{N}$prepare``, ``{N}$txid`` (a claim is a string: never one)."""
        start = len(self.key_prefix.encode())
        client, _ = self.connection.client()
        with self.connection.errors("list namespaces"):
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
        client, _ = self.connection.client()
        with self.connection.errors(f"delete {len(namespaces)} namespaces"):
            pipe = client.pipeline(transaction=True)
            for ns in namespaces:
                pipe.delete(*key_names(ns, self.key_prefix), index_name(ns, self.key_prefix))
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
            with self.connection.errors(f"claim topology {scope!r}"):
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
        self.connection.close()
