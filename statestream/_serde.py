"""Serializers that turn state keys and values into bytes for a store.

A serializer is any object with a ``name`` and an ``encode``/``decode`` pair
(:class:`Serializer`). Two ship with statestream:

``json`` (:class:`JsonSerializer`, the default)
    orjson. Safe to decode from a shared store, readable with ``redis-cli``
    and ``sqlite3``. What round-trips: ``None``, ``bool``, ``int`` (64-bit),
    ``float``, ``str``, lists and dicts with ``str`` keys, nested freely.
    Tuples come back as lists. ``NaN`` and the infinities become ``null``
    (JSON has no spelling for them), so keep them out of state.

``pickle`` (:class:`PickleSerializer`)
    Any picklable object, but only when asked for by name
    (``serializer: pickle``): unpickling runs code chosen by whoever wrote the
    bytes, so anyone who can write to the store can run code in every worker
    that reads it.

State *keys* are always encoded with JSON, whatever the value serializer:
the encoded key is a key's identity in the store, so its encoding must be
canonical (pickle's is not for composite objects) and reading keys back,
as ``items()`` does, must never run code.
"""

from __future__ import annotations

import pickle
from typing import Any, ClassVar, Final, Protocol, runtime_checkable

import orjson

from statestream._errors import ConfigError, SerializationError

__all__ = [
    "JsonSerializer",
    "PickleSerializer",
    "Serializer",
    "encode_json",
    "get_serializer",
    "serializer_names",
]


def encode_json(obj: Any) -> bytes:
    """``orjson.dumps(obj)`` in a right-sized bytes object.

    orjson (3.12 and later) returns its output in an over-allocated buffer,
    about 4 KiB even for a 10-byte result, and never shrinks it. State keeps
    encoded keys and values for a long time (pending changes, the memory
    store, cache keys), so each one would pin 4 KiB: a million keys would
    cost gigabytes and make every allocation slow. ``b"%b" % data`` copies
    into an exact-size object for ~50 ns. Raises ``orjson.JSONEncodeError``.
    """
    return b"%b" % orjson.dumps(obj)


@runtime_checkable
class Serializer(Protocol):
    """Turns one object into bytes and back.

    Contract:

    * ``encode`` returns **non-empty** bytes (providers may use the empty
      string as a deletion marker) and raises :class:`SerializationError`,
      whose message names the offending type, for anything it cannot encode.
    * ``decode(encode(x))`` equals ``x`` up to the documented lossy cases.
    * Both are pure and thread-safe; a serializer instance holds no
      connection and pickles cheaply.
    """

    @property
    def name(self) -> str:
        """The name configs use for this serializer (``serializer: NAME``)."""
        ...

    def encode(self, obj: Any) -> bytes:
        """Return the bytes for ``obj`` or raise :class:`SerializationError`."""
        ...

    def decode(self, data: bytes) -> Any:
        """Return the object that ``data`` was encoded from."""
        ...


class JsonSerializer:
    """JSON through orjson: the default, and safe to read from a shared store."""

    name: ClassVar[str] = "json"

    def encode(self, obj: Any) -> bytes:
        try:
            return b"%b" % orjson.dumps(obj)  # encode_json, inlined: this is per put
        except orjson.JSONEncodeError as exc:
            raise SerializationError(
                f"cannot encode a value of type {type(obj).__name__!r} as JSON ({exc}); "
                "store JSON types (None, bool, int, float, str, list, dict with str keys) "
                "or configure `serializer: pickle`"
            ) from exc

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)

    def __repr__(self) -> str:
        return "JsonSerializer()"


class PickleSerializer:
    """Pickle: any picklable value, for stores that only trusted code can write.

    .. warning::
       Unpickling executes code named in the data. Anyone who can write to
       the state store (a shared Redis, a copied sqlite file) can then run
       arbitrary code in every process that reads the state. That is why this
       serializer is never picked implicitly: configure ``serializer: pickle``
       only for a store you control end to end.
    """

    name: ClassVar[str] = "pickle"

    def __init__(self, protocol: int = pickle.HIGHEST_PROTOCOL) -> None:
        self._protocol = protocol

    def encode(self, obj: Any) -> bytes:
        try:
            return pickle.dumps(obj, protocol=self._protocol)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            # AttributeError is what pickle raises for local functions/classes.
            raise SerializationError(
                f"cannot pickle a value of type {type(obj).__name__!r} ({exc})"
            ) from exc

    def decode(self, data: bytes) -> Any:
        return pickle.loads(data)  # opt-in only: see the class docstring

    def __repr__(self) -> str:
        return f"PickleSerializer(protocol={self._protocol})"


_SERIALIZERS: Final[dict[str, type[JsonSerializer] | type[PickleSerializer]]] = {
    JsonSerializer.name: JsonSerializer,
    PickleSerializer.name: PickleSerializer,
}


def serializer_names() -> list[str]:
    """The names :func:`get_serializer` accepts, sorted."""
    return sorted(_SERIALIZERS)


def get_serializer(name: str | Serializer | None = None) -> Serializer:
    """Return the serializer called ``name`` (``None`` means ``"json"``).

    A :class:`Serializer` instance is returned as it is, so configs built in
    code can pass their own. An unknown name raises :class:`ConfigError`
    listing the known ones.
    """
    if name is None:
        return JsonSerializer()
    if isinstance(name, str):
        cls = _SERIALIZERS.get(name.strip().lower())
        if cls is None:
            raise ConfigError(
                f"unknown serializer {name!r}; choose one of {', '.join(serializer_names())}"
            )
        return cls()
    if isinstance(name, Serializer):
        return name
    raise ConfigError(
        f"`serializer` must be a name ({', '.join(serializer_names())}), "
        f"not {type(name).__name__} {name!r}"
    )
