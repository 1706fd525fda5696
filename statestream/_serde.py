"""Serializers that turn state keys and values into bytes for a store.

A serializer is any object with a ``name`` and an ``encode``/``decode`` pair
(:class:`Serializer`). Two ship with statestream:

``json`` (:class:`JsonSerializer`, the default)
    orjson. Safe to decode from a shared store, readable with ``redis-cli``
    and ``sqlite3``. It takes exactly the values that read back equal and of
    the same type: ``None``, ``bool``, ``int`` (64-bit), finite ``float``,
    ``str``, and ``list`` and ``dict`` with ``str`` keys of those, nested
    freely. Anything else raises :class:`SerializationError` at ``put``,
    even what orjson would encode, because it would come back as something
    else after a restart: a dataclass as a dict; a datetime, date, time or
    UUID as a str; an enum member as its value; a ``dict``/``list``/``str``/
    ``int`` subclass (``defaultdict``, ``Counter``, ``IntEnum``) as the plain
    type; numpy values (not encoded at all). A ``tuple`` value is refused
    too, since it comes back a ``list`` (``(1, 2) != [1, 2]``, and
    ``value + (3,)`` would fail only after a recovery): put a list. ``NaN``
    and the infinities are refused, JSON has no spelling for them (orjson
    writes ``null``). Convert such values to JSON types yourself, or
    configure ``serializer: pickle``. *Keys* are encoded apart (below),
    and a tuple key does read back a tuple.

    The check never decodes: a ``str`` or ``int`` costs one type test; a
    list or dict, one set of item types per nesting level, gathered at C
    speed; only a value holding both a float and a ``null`` is walked item
    by item (NaN is encoded as ``null``).

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

import dataclasses
import datetime
import enum
import pickle
import uuid
from itertools import chain
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


#: Types that JSON gives back as they were, and need no look inside.
_SCALARS: Final = frozenset({str, int, bool, type(None)})
#: The same with float, which JSON gives back when finite.
_LEAVES: Final = _SCALARS | {float}
_CONTAINERS: Final = frozenset({list, dict})
_JSON_TYPES: Final = _LEAVES | _CONTAINERS
_STR_KEYS: Final = frozenset({str})
#: orjson's nesting limit; a deeper value (or a cycle) is left for orjson to refuse.
_MAX_DEPTH: Final = 255

# What _screen finds in a value.
_PLAIN: Final = 0  # JSON types only, no float: reads back equal
_FLOATS: Final = 1  # JSON types only, floats among them: equal if all are finite
_FOREIGN: Final = 2  # something else: _foreign says what and where


def _screen(obj: Any) -> int:
    """:data:`_PLAIN`, :data:`_FLOATS` or :data:`_FOREIGN`, for a value orjson encoded.

    The fast check of :meth:`JsonSerializer.encode`: level by level, the
    items of every list and dict of the level are gathered into one list and
    their types into one set, both at C speed (``chain``, ``map(type, ...)``);
    only the lists and dicts among them make the next level. No decoding,
    and no Python call per item. The value must have been encoded already,
    so it is finite and has no cycles.
    """
    cls = obj.__class__
    if cls in _SCALARS:
        return _PLAIN
    if cls is float:
        return _FLOATS
    if cls is list:
        lists: list[Any] = [obj]
        dicts: list[Any] = []
    elif cls is dict:
        lists, dicts = [], [obj]
    else:
        return _FOREIGN
    found = _PLAIN
    while True:
        if dicts:
            if not {*map(type, chain.from_iterable(dicts))} <= _STR_KEYS:
                return _FOREIGN
            items = [*chain.from_iterable(lists), *chain.from_iterable(map(dict.values, dicts))]
        else:
            items = [*chain.from_iterable(lists)]
        types = {*map(type, items)}
        if float in types:
            found = _FLOATS
        if types <= _LEAVES:
            return found
        if not types <= _JSON_TYPES:
            return _FOREIGN
        # Every list and dict here is exactly one (the types were checked).
        lists = [*filter(list.__instancecheck__, items)] if list in types else []
        dicts = [*filter(dict.__instancecheck__, items)] if dict in types else []


#: What JSON gives back for a subclass of a JSON type, with the fix to suggest.
_PLAIN_FIXES: Final = (
    (dict, "would read back as a plain dict; put dict(value)"),
    (list, "would read back as a plain list; put list(value)"),
    (str, "would read back as a plain str; put str(value)"),
    (int, "would read back as a plain int; put int(value)"),
    (float, "would read back as a plain float; put float(value)"),
)


def _foreign(obj: Any, depth: int = 0) -> tuple[Any, str, bool] | None:
    """The first part of ``obj`` that JSON would not give back equal and of the
    same type: ``(part, where, is_key)``, ``where`` being its path in ``obj``
    (``""`` for ``obj`` itself, ``"['a'][0]"``); None if there is none.

    Exact type tests only (``x.__class__ is str``): a subclass is foreign.
    """
    cls = obj.__class__
    if cls in _SCALARS:
        return None
    if cls is float:
        # inf - inf and nan - nan are nan: refused, JSON would write null.
        return None if obj - obj == 0.0 else (obj, "", False)
    if depth > _MAX_DEPTH:
        return None  # orjson raises "Recursion limit reached"
    if cls is list:
        for index, item in enumerate(obj):
            if item.__class__ in _SCALARS:
                continue
            found = _foreign(item, depth + 1)
            if found is not None:
                return found[0], f"[{index}]{found[1]}", found[2]
        return None
    if cls is dict:
        for key, item in obj.items():
            if key.__class__ is not str:
                return key, "", True
            if item.__class__ in _SCALARS:
                continue
            found = _foreign(item, depth + 1)
            if found is not None:
                return found[0], f"[{_short(key)}]{found[1]}", found[2]
        return None
    return obj, "", False


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 40 else text[:37] + "..."


def _why(part: Any) -> str:
    """Why JSON would not give ``part`` back, and what to put instead."""
    kind = type(part).__name__
    if type(part) is float:
        return f"{part!r} has no JSON form (it would read back as None); keep it out of state"
    if isinstance(part, enum.Enum):
        return f"a {kind} member would read back as its value; put member.value"
    if dataclasses.is_dataclass(part):
        return "a dataclass would read back as a dict; put dataclasses.asdict(value)"
    if isinstance(part, (datetime.date, datetime.time)):
        return "it would read back as a str; put value.isoformat() and parse it after get"
    if isinstance(part, uuid.UUID):
        return "it would read back as a str; put str(value)"
    if isinstance(part, tuple):
        return "it would read back as a list; put a list"
    for base, fix in _PLAIN_FIXES:
        if isinstance(part, base):
            return f"a {base.__name__} subclass {fix}"
    return "JSON has no such type"


def _refusal(obj: Any, part: Any, where: str, is_key: bool) -> SerializationError:
    """The error for ``obj``, whose ``part`` at ``where`` JSON would not give back."""
    if is_key:
        what = f"a dict in it (value{where}) has the key {_short(part)} of type "
        what += f"{type(part).__name__!r}, and JSON object keys are str; convert the key"
    elif where:
        what = f"value{where} is of type {type(part).__name__!r}: {_why(part)}"
    else:
        what = _why(part)
    return SerializationError(
        f"cannot store a value of type {type(obj).__name__!r} as JSON: {what}. Store JSON "
        "types (None, bool, int, finite float, str, list, dict with str keys) or configure "
        "`serializer: pickle`"
    )


class JsonSerializer:
    """JSON through orjson: the default, and safe to read from a shared store.

    Refuses every value that would not read back equal and of the same type
    (see the module docstring): what is stored is what a restart gets back.
    """

    name: ClassVar[str] = "json"

    def encode(self, obj: Any) -> bytes:
        try:
            data = b"%b" % orjson.dumps(obj)  # encode_json, inlined: this is per put
        except orjson.JSONEncodeError as exc:
            # Say which part, unless the value nests too deep (or has a cycle).
            found = None if "ecursion" in str(exc) else _foreign(obj)
            if found is not None:
                raise _refusal(obj, *found) from exc
            raise SerializationError(
                f"cannot encode a value of type {type(obj).__name__!r} as JSON ({exc}); "
                "store JSON types (None, bool, int, finite float, str, list, dict with str "
                "keys) or configure `serializer: pickle`"
            ) from exc
        cls = obj.__class__
        if cls is str or cls is int:  # the hot path: nothing to look into
            return data
        screened = _screen(obj)
        # orjson writes NaN and the infinities as null: without a null in the
        # output there are none; with one (a None, or "null" in a str) look.
        if screened == _FOREIGN or (screened == _FLOATS and b"null" in data):
            found = _foreign(obj)
            if found is not None:
                raise _refusal(obj, *found)
        return data

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
