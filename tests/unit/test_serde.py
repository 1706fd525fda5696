"""Serializers: JSON by default, pickle only by name."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import pickle
import re
import tracemalloc
import uuid
from typing import Any

import orjson
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


class Shade(enum.Enum):
    DARK = "dark"


class Rank(enum.IntEnum):
    TOP = 1


@dataclasses.dataclass
class Reading:
    sensor: str
    value: float


@pytest.mark.parametrize(
    ("value", "type_name", "fix"),
    [
        (Reading("t", 1.5), "Reading", "dataclasses.asdict"),
        (datetime.datetime(2024, 1, 2, 3, 4, 5), "datetime", "isoformat"),
        (datetime.date(2024, 1, 2), "date", "isoformat"),
        (datetime.time(3, 4), "time", "isoformat"),
        (uuid.UUID(int=7), "UUID", "str(value)"),
        (Shade.DARK, "Shade", ".value"),
        (Rank.TOP, "Rank", ".value"),
        ((1, "a"), "tuple", "list"),
        (float("nan"), "float", "nan"),
        (float("inf"), "float", "inf"),
        (collections.OrderedDict(a=1), "OrderedDict", "dict(value)"),
        (collections.defaultdict(int, a=1), "defaultdict", "dict(value)"),
        (collections.Counter(a=1), "Counter", "dict(value)"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_json_refuses_values_that_would_not_read_back_equal(
    value: Any, type_name: str, fix: str
) -> None:
    # orjson encodes every one of these, and gives back something else.
    with pytest.raises(SerializationError) as info:
        JsonSerializer().encode(value)
    message = str(info.value)
    assert repr(type_name) in message
    assert fix in message
    assert "serializer: pickle" in message


@pytest.mark.parametrize(
    ("value", "where", "type_name"),
    [
        ({"when": datetime.date(2024, 1, 2)}, "value['when']", "date"),
        ([1, [2, (3,)]], "value[1][1]", "tuple"),
        ({"a": [{"b": uuid.UUID(int=1)}]}, "value['a'][0]['b']", "UUID"),
        ({"x": [1.0, float("nan")]}, "value['x'][1]", "float"),
        ([{"k": Shade.DARK}], "value[0]['k']", "Shade"),
    ],
)
def test_json_names_where_a_nested_value_is(value: Any, where: str, type_name: str) -> None:
    with pytest.raises(SerializationError) as info:
        JsonSerializer().encode(value)
    assert f"{where} is of type {type_name!r}" in str(info.value)
    assert f"value of type {type(value).__name__!r}" in str(info.value)


def test_json_names_a_non_str_dict_key() -> None:
    with pytest.raises(SerializationError, match=r"value\['a'\]\) has the key 1 of type 'int'"):
        JsonSerializer().encode({"a": {1: "x"}})
    with pytest.raises(
        SerializationError, match=re.escape("key <Shade.DARK: 'dark'> of type 'Shade'")
    ):
        JsonSerializer().encode({Shade.DARK: 1})


def test_json_refuses_a_cycle_without_recursing_forever() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="list"):
        JsonSerializer().encode(loop)


PLAIN_VALUES: list[Any] = [
    None,
    True,
    7,
    -0.5,
    "s",
    [],
    {},
    [1, "a", None, 2.5, True, [[]], {"x": {"y": [False]}}],
    {"a": 1, "b": [1.5, {"c": None}], "": "e"},
    [[[[[[[[[[1]]]]]]]]]],
]


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=repr)
def test_plain_json_values_are_encoded_as_orjson_does_without_decoding(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The round-trip check is a type walk, never a decode of what was encoded.
    def no_decoding(data: Any) -> Any:
        raise AssertionError("encode decoded its output")

    import statestream._serde as serde

    monkeypatch.setattr(serde.orjson, "loads", no_decoding)
    assert JsonSerializer().encode(value) == orjson.dumps(value)


def test_pickle_takes_what_json_refuses() -> None:
    value = [Reading("t", 1.5), (1, 2), Shade.DARK, uuid.UUID(int=3)]
    serializer = PickleSerializer()
    assert serializer.decode(serializer.encode(value)) == value
