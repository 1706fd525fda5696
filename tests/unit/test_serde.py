"""Serializers: JSON by default, pickle only by name."""

from __future__ import annotations

import pickle
import tracemalloc
from typing import Any

import pytest

from statestream._errors import ConfigError, SerializationError
from statestream._serde import (
    JsonSerializer,
    PickleSerializer,
    Serializer,
    encode_json,
    get_serializer,
    serializer_names,
)


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(2**63), 2**63 - 1, 0.1, "", "ü✓", [], {}, {"a": [1, {"b": None}]}],
    ids=repr,
)
def test_json_round_trip(value: Any) -> None:
    serializer = JsonSerializer()
    data = serializer.encode(value)
    assert isinstance(data, bytes) and data
    assert serializer.decode(data) == value


def test_json_null_is_not_empty() -> None:
    # Providers may use b"" as a tombstone; null must not collide with it.
    assert JsonSerializer().encode(None) == b"null"


@pytest.mark.parametrize(
    ("value", "type_name"),
    [({1, 2}, "set"), (object(), "object"), (2**64, "int"), ({1: "a"}, "dict"), (b"x", "bytes")],
    ids=["set", "object", "bigint", "int-keys", "bytes"],
)
def test_json_rejects_with_the_type(value: Any, type_name: str) -> None:
    with pytest.raises(SerializationError, match=repr(type_name)) as info:
        JsonSerializer().encode(value)
    assert isinstance(info.value, TypeError)
    assert "pickle" in str(info.value)  # the way out is named


def test_pickle_round_trips_python_objects() -> None:
    serializer = PickleSerializer()
    value = {"set": {1, 2}, "tuple": (1, 2), "bytes": b"\x00", 1: 2**100}
    assert serializer.decode(serializer.encode(value)) == value


def test_pickle_rejects_unpicklable_values() -> None:
    with pytest.raises(SerializationError, match="function"):
        PickleSerializer().encode(lambda: None)


def test_get_serializer() -> None:
    assert isinstance(get_serializer(), JsonSerializer)
    assert isinstance(get_serializer("json"), JsonSerializer)
    assert isinstance(get_serializer(" Pickle "), PickleSerializer)
    custom = JsonSerializer()
    assert get_serializer(custom) is custom
    assert serializer_names() == ["json", "pickle"]
    for serializer in (JsonSerializer(), PickleSerializer()):
        assert isinstance(serializer, Serializer)
        assert get_serializer(serializer.name).name == serializer.name


@pytest.mark.parametrize("name", ["yaml", "", 3])
def test_unknown_serializer(name: Any) -> None:
    with pytest.raises(ConfigError, match="json"):
        get_serializer(name)


def test_serializers_pickle() -> None:
    # They travel to Spark executors inside providers.
    for serializer in (JsonSerializer(), PickleSerializer()):
        clone = pickle.loads(pickle.dumps(serializer))
        assert clone.decode(clone.encode([1])) == [1]


def test_encoded_json_is_right_sized() -> None:
    # orjson over-allocates its output (~4 KiB each); state keeps encoded
    # keys and values around, so they must be trimmed.
    tracemalloc.start()
    try:
        kept = [encode_json(f"key-{i}") for i in range(1000)]
        kept += [JsonSerializer().encode(i) for i in range(1000)]
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == 2000
    assert current < 500_000, f"{current} bytes for 2000 short encodings"
    assert encode_json("a") == b'"a"'
