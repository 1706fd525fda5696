"""What only the memory provider promises: process-wide named stores."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator

import pytest

from statestream._errors import ConfigError
from statestream._registry import open_provider
from statestream_providers.memory import MemoryStateProvider


@pytest.fixture
def store_name() -> Iterator[str]:
    name = f"memory-test-{uuid.uuid4().hex}"
    yield name
    MemoryStateProvider.clear(name)


def _commit(provider: MemoryStateProvider, namespace: str, value: object) -> None:
    state = provider.get_state(namespace)
    state.put("k", value)
    state.commit()


def test_a_new_instance_with_the_same_name_sees_the_commits(store_name: str) -> None:
    with MemoryStateProvider.from_config({"name": store_name}) as first:
        _commit(first, "count-0", 1)
    with MemoryStateProvider.from_config({"name": store_name}) as second:
        assert second.get_state("count-0").get("k") == 1
        assert second.namespaces() == ["count-0"]


def test_stores_with_other_names_are_separate(store_name: str) -> None:
    other = store_name + "-other"
    try:
        with (
            MemoryStateProvider.from_config({"name": store_name}) as one,
            MemoryStateProvider.from_config({"name": other}) as two,
        ):
            _commit(one, "count-0", "one")
            assert two.get_state("count-0").get("k") is None
            assert two.namespaces() == []
    finally:
        MemoryStateProvider.clear(other)


def test_clear_empties_the_store_for_everyone(store_name: str) -> None:
    provider = MemoryStateProvider.from_config({"name": store_name})
    _commit(provider, "count-0", 1)
    MemoryStateProvider.clear(store_name)
    assert provider.namespaces() == []
    assert (
        MemoryStateProvider.from_config({"name": store_name}).get_state("count-0").get("k") is None
    )


def test_default_store_and_storm_alias() -> None:
    provider = open_provider("org.apache.storm.state.InMemoryKeyValueStateProvider")
    assert isinstance(provider, MemoryStateProvider)
    assert provider.store_name == "default"


def test_unknown_config_key() -> None:
    with pytest.raises(ConfigError, match=r"'path'.*known keys: name, serializer"):
        MemoryStateProvider.from_config({"path": "/tmp/x"})


def test_pickles_into_the_store_of_the_same_name(store_name: str) -> None:
    provider = MemoryStateProvider.from_config({"name": store_name})
    _commit(provider, "count-0", 1)
    clone = pickle.loads(pickle.dumps(provider))
    assert clone.get_state("count-0").get("k") == 1
