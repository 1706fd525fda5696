"""What only the redis provider promises: key layout, commit script, config, failures."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis_server import RedisServer, free_port, started_redis_server

from statestream._errors import (
    ConfigError,
    ProviderUnavailableError,
    StateCorruptError,
)
from statestream._registry import open_provider
from statestream._state import CommitOutcome, StoredKeyValueState
from statestream_providers import redis as redis_provider
from statestream_providers.redis import RedisStateProvider, index_name, key_names
from statestream_providers.redis import backend as redis_backend


def _raw(provider: Any) -> Any:
    """The provider's own redis client (real or fake)."""
    return provider.connection.client()[0]


def _stored(state: Any) -> StoredKeyValueState:
    assert isinstance(state, StoredKeyValueState)
    return state


# ------------------------------------------------------------------ layout and script


def test_key_layout(redis_factory: Any) -> None:
    provider = redis_factory()
    prefix = redis_factory.config["key_prefix"]
    state = provider.get_state("count-0")
    state.put("word", 3)
    state.put("gone", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("new", [1])
    state.delete("gone")
    state.prepare_commit(1)
    client = _raw(provider)
    data, prepare, txid = (name.encode() for name in key_names("count-0", prefix))
    index = index_name("count-0", prefix).encode()
    assert data == f"{prefix}{{count-0}}".encode()
    assert set(client.scan_iter(match=prefix + "*")) == {data, prepare, txid, index}
    assert client.zrange(index, 0, -1) == [b'"gone"', b'"word"']  # the committed keys, in order
    assert client.hgetall(data) == {b'"word"': b"3", b'"gone"': b"1"}
    assert client.hgetall(prepare) == {b'"new"': b"[1]", b'"gone"': b""}  # "" is a tombstone
    assert client.hgetall(txid) == {b"commit": b"0", b"prepare": b"1"}
    from redis.crc import key_slot

    assert key_slot(data) == key_slot(prepare) == key_slot(txid) == key_slot(index)
    state.commit(1)
    assert set(client.scan_iter(match=prefix + "*")) == {data, txid, index}
    assert client.zrange(index, 0, -1) == [b'"new"', b'"word"']
    assert client.hgetall(data) == {b'"word"': b"3", b'"new"': b"[1]"}
    assert client.hgetall(txid) == {b"commit": b"1"}


def test_commit_script_outcomes(redis_factory: Any) -> None:
    state = _stored(redis_factory().get_state("count-0"))
    backend = state._backend
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("b", 2)
    state.prepare_commit(1)
    # A late duplicate of commit 0 must leave the live delta of txid 1 alone.
    assert backend.apply_prepared(0) is CommitOutcome.ALREADY_COMMITTED
    assert backend.apply_prepared(2) is CommitOutcome.NOT_PREPARED
    assert backend.apply_prepared(1) is CommitOutcome.APPLIED
    assert backend.apply_prepared(1) is CommitOutcome.ALREADY_COMMITTED
    assert dict(redis_factory().get_state("count-0").items()) == {"a": 1, "b": 2}


def test_commit_script_drops_a_stale_delta(redis_factory: Any) -> None:
    provider = redis_factory()
    state = _stored(provider.get_state("count-0"))
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    client = _raw(provider)
    _, prepare, txid = key_names("count-0", redis_factory.config["key_prefix"])
    client.hset(prepare, '"a"', "99")  # as if left behind by a broken writer
    client.hset(txid, "prepare", 0)
    assert state._backend.apply_prepared(0) is CommitOutcome.ALREADY_COMMITTED
    assert not client.exists(prepare)
    assert client.hget(txid, "prepare") is None


def test_large_delta_with_tombstones_in_one_commit(redis_factory: Any) -> None:
    # More fields than one unpack() chunk of the Lua script, and than one HSET
    # chunk of the pipeline.
    state = redis_factory().get_state("count-0")
    for i in range(12_000):
        state.put(i, i)
    state.prepare_commit(0)
    state.commit(0)
    for i in range(0, 12_000, 2):
        state.delete(i)
    state.put("extra", True)
    state.prepare_commit(1)
    state.commit(1)
    reopened = redis_factory().get_state("count-0")
    seen = dict(reopened.items())
    assert len(seen) == 6_001
    assert seen[1] == 1 and 0 not in seen and seen["extra"] is True


@pytest.mark.parametrize("odd", ["a,b", 'q"u\n'])
def test_plain_delta_is_each_key_and_value_as_json(
    redis_factory: Any, odd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deferred puts go out as protocol bytes built from one JSON dump of all
    # keys (and one of all values) cut at the commas: a key or value holding a
    # comma must fall back to one dump each, and every field reads as its own
    # JSON text, across more than one HSET (and HMGET) chunk, beside an encoded
    # put and a tombstone.
    monkeypatch.setattr(redis_backend, "_CHUNK", 7)
    provider = redis_factory()
    state = _stored(provider.get_state("count-0"))
    state.put("gone", 1)
    state.prepare_commit(0)
    state.commit(0)
    plain: dict[str, Any] = {f"w{i}": i for i in range(40)}
    plain.update({odd: odd, "k": odd, odd + "k": -(2**60), "t": True, "n": None, "s": "a b"})
    for key, value in plain.items():
        state.put(key, value)
    state.put("list", [1, ","])  # not a plain value: encoded at its put
    state.delete("gone")
    state.prepare_commit(1)
    _, prepare, _ = key_names("count-0", redis_factory.config["key_prefix"])
    want = {orjson.dumps(k): orjson.dumps(v) for k, v in plain.items()}
    want.update({b'"list"': b'[1,","]', b'"gone"': b""})
    assert _raw(provider).hgetall(prepare) == want
    assert state.prepared_bytes == sum(len(k) + len(v) for k, v in want.items())
    state.commit(1)
    backend = state._backend
    keys = [b'"nope"', *want][::-1]  # more than one HMGET chunk, a key absent, in order
    assert backend.get_many(keys) == [want.get(k) or None for k in keys]
    reopened = provider.get_state("count-1")
    assert reopened.get("k") is None
    assert dict(redis_factory().get_state("count-0").items()) == {**plain, "list": [1, ","]}


def test_a_non_hash_key_is_corrupt(redis_factory: Any) -> None:
    provider = redis_factory()
    data, _, _ = key_names("count-0", redis_factory.config["key_prefix"])
    _raw(provider).set(data, "not a hash")
    with pytest.raises(StateCorruptError, match="key_prefix"):
        provider.get_state("count-0").get("k")


def test_namespaces_with_glob_characters_in_prefix(redis_factory: Any) -> None:
    base = redis_factory.config["key_prefix"]
    odd = redis_factory(key_prefix=base + "a*b[c]?:")
    plain = redis_factory(key_prefix=base + "a")
    for provider, namespace in ((odd, "odd-0"), (plain, "plain-0")):
        state = provider.get_state(namespace)
        state.put("k", 1)
        state.commit()
    odd.get_state("$checkpointspout-0").put("phase", "COMMITTED")
    odd.get_state("$checkpointspout-0").commit()
    assert odd.namespaces() == ["$checkpointspout-0", "odd-0"]
    assert plain.namespaces() == ["plain-0"]


def test_reconnects_after_fork(redis_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = redis_factory()
    state = provider.get_state("count-0")
    state.put("a", 1)
    state.commit()
    parent_client = _raw(provider)
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as seen from a forked child
    assert redis_factory().get_state("count-0").get("a") == 1
    assert _raw(provider) is not parent_client
    assert provider.get_state("count-0").get("b") is None
    redis_provider._INHERITED.remove(parent_client)
    parent_client.close()


@pytest.mark.redis
def test_pickles_without_its_client(real_redis_factory: Any) -> None:
    provider = real_redis_factory()
    state = provider.get_state("count-0")
    state.put("a", 1)
    state.commit()
    clone = pickle.loads(pickle.dumps(provider))
    try:
        assert clone.get_state("count-0").get("a") == 1
    finally:
        clone.close()


@pytest.mark.redis
def test_url_config(real_redis_factory: Any) -> None:
    prefix = real_redis_factory.config["key_prefix"]
    with open_provider(
        "redis", {"url": "redis://127.0.0.1:6379/0", "key_prefix": prefix}
    ) as provider:
        state = provider.get_state("count-0")
        state.put("a", 1)
        state.prepare_commit(0)
        state.commit(0)
    assert real_redis_factory().get_state("count-0").get("a") == 1


# ------------------------------------------------------------------ configuration


def test_storm_json_config() -> None:
    provider = open_provider(
        "org.apache.storm.redis.state.RedisKeyValueStateProvider",
        """{
          "keyClass": "java.lang.String",
          "valueClass": "java.lang.Long",
          "keySerializerClass": "org.apache.storm.state.DefaultStateSerializer",
          "valueSerializerClass": "org.apache.storm.state.DefaultStateSerializer",
          "jedisPoolConfig": {"host": "redis.example", "port": 6380, "timeout": 1500,
                              "database": 2, "password": "xyz"}
        }""",
    )
    assert isinstance(provider, RedisStateProvider)
    assert provider.address == "redis.example:6380"
    assert provider._connect["db"] == 2 and provider._connect["password"] == "xyz"
    assert provider._timeout_s == 1.5
    assert "xyz" not in repr(provider)


def test_explicit_keys_win_over_jedis_pool_config() -> None:
    provider = RedisStateProvider.from_config(
        {"jedisPoolConfig": {"host": "a", "port": 1, "database": 3}, "port": "6390", "db": 4}
    )
    assert provider.address == "a:6390" and provider._connect["db"] == 4


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"valueSerializerClass": "com.example.KryoThing"}, "Java serializer"),
        ({"jedisClusterConfig": {"nodes": ["h:1"]}}, "Cluster"),
        ({"jedisPoolConfig": {"hots": "x"}}, "hots"),
        ({"jedisPoolConfig": "localhost"}, "mapping"),
        ({"prot": 1}, "prot"),
        ({"port": "eighty"}, "port"),
        ({"db": 1, "database": 1}, "not both"),
        ({"url": "redis://h:1/0", "host": "h"}, "not both"),
        ({"url": "redis://h:1/0", "password": "p"}, "not both"),
        ({"url": "redis://h:1/0", "jedisPoolConfig": {"port": 1}}, "not both"),
        ({"url": "http://h:1"}, "redis://"),
        ({"retries": -1}, "retries"),
        ({"timeout": 0}, "timeout"),
        ({"serializer": "xml"}, "xml"),
    ],
)
def test_config_errors(config: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RedisStateProvider.from_config(config)


def test_url_hides_the_password() -> None:
    provider = RedisStateProvider.from_config({"url": "redis://:secret@db.example:7000/1"})
    assert provider.address == "db.example:7000"
    assert "secret" not in repr(provider)


# ------------------------------------------------------------------ failures


@pytest.mark.parametrize("retries", [0, 2])
def test_unreachable_server_fails_after_bounded_retries(
    retries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis.connection

    attempts: list[int] = []
    connect = redis.connection.Connection._connect

    def counted(self: Any) -> Any:
        attempts.append(1)
        return connect(self)

    monkeypatch.setattr(redis.connection.Connection, "_connect", counted)
    port = free_port()  # nothing listens there
    provider = RedisStateProvider.from_config(
        {"host": "127.0.0.1", "port": port, "retries": retries, "timeout": 200}
    )
    state = provider.get_state("count-0")  # lazy: no error yet
    assert attempts == []
    with pytest.raises(ProviderUnavailableError) as info:
        state.get("a")
    assert len(attempts) == retries + 1  # the first try and the retries, no more
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and f"{retries} retries" in message
    assert "check that the server is running" in message
    assert isinstance(info.value, ConnectionError)
    assert info.value.__cause__ is not None  # the redis-py error stays attached
    with pytest.raises(ProviderUnavailableError):
        state.prepare_commit(0)
    provider.close()


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with started_redis_server(tmp_path) as server:
        yield server


@pytest.mark.redis
def test_server_lost_mid_run_and_back(own_redis_server: RedisServer) -> None:
    config = {"host": "127.0.0.1", "port": own_redis_server.port, "retries": 1, "timeout": 300}
    with RedisStateProvider.from_config(config) as provider:
        state = provider.get_state("count-0")
        state.put("a", 1)
        state.prepare_commit(0)
        state.commit(0)
        state.put("b", 2)
        state.prepare_commit(1)

        own_redis_server.stop()
        with pytest.raises(ProviderUnavailableError, match=f":{own_redis_server.port}"):
            state.commit(1)
        with pytest.raises(ProviderUnavailableError):
            state.prepare_commit(1)  # the runtime's retry fails the same way
        assert state.prepared_txid == 1 and state.committed_txid == 0, "nothing moved"

        # The server comes back, empty (it keeps nothing on disk). The runtime
        # rolls the failed checkpoint back and the next one goes through on a
        # reconnected client.
        own_redis_server.start()
        state.rollback()
        state.put("c", 3)
        state.prepare_commit(1)
        state.commit(1)
    with RedisStateProvider.from_config(config) as fresh:
        reopened = fresh.get_state("count-0")
        assert dict(reopened.items()) == {"c": 3}
        assert reopened.committed_txid == 1
