"""The redis provider's client in this process and the translation of its errors.

What a namespace's :class:`~.backend._RedisBackend` needs of its provider and
nothing more: the backends are built with a :class:`RedisConnection`, never
with the provider, so what they may touch is this class's public names.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from statestream.provider import (
    ConfigError,
    ProviderUnavailableError,
    StateCorruptError,
    StateError,
)

from .._redis_password import warn_if_password_unchecked

if TYPE_CHECKING:
    import redis as redis_module
    from redis.commands.core import Script

__all__ = ["RedisConnection", "import_redis"]

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
local sets, dels, adds = {}, {}, {}
-- Counted, not measured with #: # searches the table each time. The score is
-- the string '0': a Lua number would be formatted by printf for each key.
local nsets, ndels = 0, 0
-- unpack() is bounded by Lua's C stack, so write in chunks. KEYS[4], the
-- sorted set of the committed keys (score 0: byte order), follows the hash.
local function del()
  redis.call('HDEL', KEYS[1], unpack(dels, 1, ndels))
  redis.call('ZREM', KEYS[4], unpack(dels, 1, ndels))
  dels = {}; ndels = 0
end
local function set()
  redis.call('HSET', KEYS[1], unpack(sets, 1, nsets))
  redis.call('ZADD', KEYS[4], unpack(adds, 1, nsets))
  sets = {}; adds = {}; nsets = 0
end
for i = 1, #delta, 2 do
  local key, value = delta[i], delta[i + 1]
  if value == '' then
    ndels = ndels + 1
    dels[ndels] = key
    if ndels >= 4000 then del() end
  else
    sets[nsets + 1] = key
    sets[nsets + 2] = value
    adds[nsets + 1] = '0'
    adds[nsets + 2] = key
    nsets = nsets + 2
    if nsets >= 4000 then set() end
  end
end
if nsets > 0 then set() end
if ndels > 0 then del() end
redis.call('HSET', KEYS[3], 'commit', ARGV[1])
redis.call('HDEL', KEYS[3], 'prepare')
redis.call('DEL', KEYS[2])
return 0
"""


# Clients inherited through fork() are parked, never closed: closing would
# shut down sockets that the parent is still using.
_INHERITED: list[Any] = []


def import_redis() -> ModuleType:
    """redis-py, or ConfigError with the install hint."""
    try:
        import redis
    except ImportError as exc:
        raise ConfigError(
            "the redis state provider needs redis-py: pip install 'statestream[redis]'"
        ) from exc
    return redis


class RedisConnection:
    """One provider's client in this process, made by ``make_client`` on first use
    (no I/O until a command) and again in a forked child, with the commit
    script registered on it; and the translation of redis-py's exceptions
    into statestream's, naming ``address``.

    Not picklable on purpose: its provider ships its configuration and
    makes a new one where it lands.
    """

    def __init__(
        self,
        make_client: Callable[[], redis_module.Redis],
        *,
        address: str,
        retries: int,
        timeout_s: float,
    ) -> None:
        self._make_client = make_client
        self._address = address  # for messages only: never the password
        self._retries = retries
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._client: redis_module.Redis | None = None
        self._script: Script | None = None
        self._pid = 0
        self._closed = False

    def __reduce__(self) -> str | tuple[Any, ...]:
        raise TypeError("a RedisConnection does not pickle: pickle its provider")

    def client(self) -> tuple[redis_module.Redis, Script]:
        """This process's client and commit script, created on first use (no I/O)."""
        if self._closed:
            raise StateError("the redis state provider is closed; open a new one")
        client, script = self._client, self._script
        if client is not None and script is not None and self._pid == os.getpid():
            return client, script
        with self._lock:
            if self._client is not None and self._pid != os.getpid():
                _INHERITED.append(self._client)  # forked: leave the parent's sockets alone
                self._client = None
            if self._client is None:
                self._client = self._make_client()
                self._script = self._client.register_script(_COMMIT_LUA)
                self._pid = os.getpid()
                warn_if_password_unchecked(self._client, self._address)
            assert self._script is not None
            return self._client, self._script

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Translate redis-py's exceptions into statestream's at the boundary."""
        redis = import_redis()
        exceptions = redis.exceptions
        address = self._address
        try:
            yield
        except exceptions.AuthenticationError as exc:
            raise ConfigError(
                f"redis at {address} refused the credentials while trying to {action}: "
                f"{exc}; check password/username in the redis state provider config"
            ) from exc
        except (exceptions.ConnectionError, exceptions.TimeoutError) as exc:
            raise ProviderUnavailableError(
                f"cannot reach redis at {address} to {action} "
                f"({self._retries} retries, timeout {self._timeout_s:g}s): {exc}; check that "
                "the server is running and that the redis state provider config "
                "(url or host/port) points at it"
            ) from exc
        except exceptions.ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                raise StateCorruptError(
                    f"redis at {address}: a key of the state store holds a non-hash value "
                    f"while trying to {action} ({exc}); another application may use the same "
                    "keys: set a `key_prefix`, or move the keys aside"
                ) from exc
            raise StateError(f"redis at {address} failed to {action}: {exc}") from exc
        except exceptions.RedisError as exc:
            raise StateError(f"redis at {address} failed to {action}: {exc}") from exc

    def close(self) -> None:
        """Close this process's client; the object is not used again (the provider's
        ``close``)."""
        with self._lock:
            self._closed = True
            client, self._client, self._script = self._client, None, None
            if client is not None and self._pid == os.getpid():
                client.close()
