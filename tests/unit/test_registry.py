"""Provider resolution: names, entry points, dotted paths, Storm aliases, JSON configs."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from statestream._errors import ConfigError, ProviderNotFoundError
from statestream._registry import (
    ENTRY_POINT_GROUP,
    installed_providers,
    open_provider,
    parse_provider_config,
    provider_sharing,
    resolve_provider,
)
from statestream_providers.memory import MemoryStateProvider
from statestream_providers.redis import RedisStateProvider
from statestream_providers.sqlite import SQLiteStateProvider


def test_builtin_providers_are_entry_points() -> None:
    assert {"memory", "sqlite", "redis"} <= set(installed_providers())
    assert ENTRY_POINT_GROUP == "statestream.providers"


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("memory", MemoryStateProvider),
        ("sqlite", SQLiteStateProvider),
        ("redis", RedisStateProvider),
        (" redis ", RedisStateProvider),
        ("org.apache.storm.redis.state.RedisKeyValueStateProvider", RedisStateProvider),
        ("org.apache.storm.state.InMemoryKeyValueStateProvider", MemoryStateProvider),
        ("statestream_providers.sqlite:SQLiteStateProvider", SQLiteStateProvider),
        ("statestream_providers.sqlite.SQLiteStateProvider", SQLiteStateProvider),
    ],
)
def test_resolve(spec: str, cls: type) -> None:
    assert resolve_provider(spec) is cls
    assert cls.name in installed_providers()


@pytest.fixture
def fake_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("thirdparty_state")

    class ThirdParty(MemoryStateProvider):
        name = "thirdparty"

    module.ThirdParty = ThirdParty  # type: ignore[attr-defined]
    module.not_a_provider = 42  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_dotted_path_to_a_third_party_class(fake_module: Any) -> None:
    assert resolve_provider("thirdparty_state:ThirdParty") is fake_module.ThirdParty


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("cassandra", "'cassandra' is not installed"),
        ("", "not a provider name"),
        ("no_such_module_xyz:Provider", "cannot be imported"),
        ("thirdparty_state:Missing", "has no 'Missing'"),
        ("thirdparty_state:not_a_provider", "not a state provider class"),
        ("org.apache.storm.state.SomethingElse", "cannot be imported"),
    ],
)
def test_unknown_providers_list_the_installed_ones(fake_module: Any, spec: str, match: str) -> None:
    with pytest.raises(ProviderNotFoundError, match=match) as info:
        resolve_provider(spec)
    assert "installed providers: " in str(info.value)
    assert all(name in str(info.value) for name in ("memory", "redis", "sqlite"))
    assert isinstance(info.value, ConfigError)


def test_open_provider_with_json_config() -> None:
    provider = open_provider("memory", '{"name": "registry-test"}')
    try:
        assert isinstance(provider, MemoryStateProvider)
        assert provider.store_name == "registry-test"
    finally:
        provider.close()
        MemoryStateProvider.clear("registry-test")


def test_open_provider_defaults_to_memory() -> None:
    with open_provider() as provider:
        assert isinstance(provider, MemoryStateProvider)


def test_open_provider_with_storm_redis_json_does_not_connect() -> None:
    provider = open_provider(
        "org.apache.storm.redis.state.RedisKeyValueStateProvider",
        '{"jedisPoolConfig": {"host": "nowhere.invalid", "port": 1}}',
    )
    assert isinstance(provider, RedisStateProvider)
    provider.close()


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, {}),
        ("", {}),
        ("  ", {}),
        ('{"a": 1}', {"a": 1}),
        (b'{"a": [1]}', {"a": [1]}),
        ({"a": 1}, {"a": 1}),
    ],
)
def test_parse_provider_config(config: Any, expected: dict[str, Any]) -> None:
    assert parse_provider_config(config) == expected


@pytest.mark.parametrize(
    ("config", "match"), [("{not json", "not valid JSON"), ("[1, 2]", "mapping"), (3, "mapping")]
)
def test_bad_provider_config(config: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_provider_config(config)


@pytest.mark.parametrize(
    ("spec", "sharing"),
    [
        ("memory", "process"),
        ("sqlite", "machine"),
        ("redis", "network"),
        ("org.apache.storm.redis.state.RedisKeyValueStateProvider", "network"),
        ("org.apache.storm.state.InMemoryKeyValueStateProvider", "process"),
        ("statestream_providers.sqlite:SQLiteStateProvider", "machine"),
    ],
)
def test_provider_sharing_of_the_builtins(spec: str, sharing: str) -> None:
    assert provider_sharing(spec) == sharing


@pytest.fixture
def sharing_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("sharing_state")

    class Undeclared:
        """A provider written against the protocol alone, without ``sharing``."""

        name = "undeclared"

        @classmethod
        def from_config(cls, config: Any) -> Any:
            return cls()

        def get_state(self, namespace: str) -> Any:
            raise NotImplementedError

        def close(self) -> None:
            pass

    class Networked(Undeclared):
        sharing = "network"

    class Misdeclared(Undeclared):
        sharing = "cluster"

    class Inherited(MemoryStateProvider):
        name = "inherited"

    module.Undeclared = Undeclared  # type: ignore[attr-defined]
    module.Networked = Networked  # type: ignore[attr-defined]
    module.Misdeclared = Misdeclared  # type: ignore[attr-defined]
    module.Inherited = Inherited  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_provider_sharing_of_third_party_classes(sharing_module: Any) -> None:
    assert provider_sharing("sharing_state:Undeclared") == "process"  # the narrowest
    assert provider_sharing("sharing_state:Networked") == "network"
    assert provider_sharing("sharing_state:Inherited") == "process"
    with pytest.raises(ConfigError, match=r"sharing = 'cluster'.*'process', 'machine', 'network'"):
        provider_sharing("sharing_state:Misdeclared")
    with pytest.raises(ProviderNotFoundError):
        provider_sharing("cassandra")


def test_backend_state_provider_defaults_to_process_sharing() -> None:
    from statestream.provider import SHARING_PROCESS, BackendStateProvider

    assert BackendStateProvider.sharing == SHARING_PROCESS == "process"
