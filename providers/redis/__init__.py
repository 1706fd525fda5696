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
    P{N}$keys       sorted set  the committed keys (score 0: in byte order), for paged
                    reads in key order (items(), rescale); built on the first read
                    of a store written without it
    P{T}$claim      string  the claim of topology ``T`` by a run (see below), with an expiry

``{N}`` is a Redis Cluster hash tag: the three hashes of a namespace live in
one slot, which the commit script needs. Keys and values are the
serializer's bytes (JSON by default, so ``redis-cli HGETALL '{count-0}'``
reads). The names differ from Storm's (``N``, ``N$prepare``, ``N$txid``,
base64 values) by the hash tag and the encoding, so a Storm store is not
read as is.

Protocol: prepare is one MULTI/EXEC (merge the delta, record the prepared
txid); commit is one Lua script that applies the delta (HSET values, HDEL
tombstones, and the same keys in the ``$keys`` index), records the txid and
drops the delta, touching only the changed keys; a txid at or below the committed one is a no-op. Every
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

from .connection import _INHERITED as _INHERITED
from .lease import _TAKE_OVER_LUA as _TAKE_OVER_LUA
from .provider import RedisStateProvider, claim_key, index_name, key_names
from .provider import _glob_escape as _glob_escape

__all__ = ["RedisStateProvider", "claim_key", "index_name", "key_names"]
