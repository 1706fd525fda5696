"""The kinds of config values and the declaration of a key (:func:`_key`,
:class:`ConfigKey`): what :class:`statestream._settings.Settings` declares its
keys with. A kind is the phrase the error messages quote, a validator and how
text (an environment variable, ``--set``) is read.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final, Literal, cast, get_type_hints

import yaml

ENV_PREFIX: Final = "STATESTREAM_"


def _env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


# --------------------------------------------------------------------------- validators


class _Invalid(Exception):
    """Raised by a validator: the value does not have the key's type.

    ``detail`` says more when "expected X, got Y" alone would not explain it
    (a JSON syntax error, say).
    """

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Kind:
    """The type of a config key: how a value is checked, read from text and typed.

    ``expected`` is the phrase used in error messages and, verbatim, on the
    ``# Type:`` line of the key's entry in defaults.yaml. ``validate`` takes a
    typed value (as a file or the YAML reading of a text holds it) and returns
    it normalised, or raises :class:`_Invalid`. ``from_text`` turns the raw
    text of an environment variable or ``--set`` into such a typed value.
    ``annotation`` is the Python type of a validated value, which the key's
    :class:`Settings` attribute must declare.
    """

    expected: str
    validate: Callable[[object], object]
    from_text: Callable[[str], object]
    annotation: Any


def _scalar(text: str) -> object:
    """Read ``text`` as a YAML scalar (or flow list/mapping); fall back to the text itself.

    The fallback covers text YAML cannot parse (``a: b: c``) and values that
    YAML reads as something outside the JSON data model (dates), so a text
    value is always str, int, float, bool, None, list or dict.
    """
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if value is None and text.strip() not in ("", "~", "null", "Null", "NULL"):
        return text  # a comment ("# x") or a bare document marker, not a null
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    return text


def _text_as_str(text: str) -> object:
    # A string key keeps what was typed: '--set topology.name=123' names the
    # topology "123". Only null and explicitly quoted text are read as YAML.
    value = _scalar(text)
    return value if value is None or isinstance(value, str) else text


def _text_as_bool(text: str) -> object:
    value = _scalar(text)
    # Shell users write 1/0 for booleans; YAML already takes yes/no/on/off.
    if type(value) is int and value in (0, 1):
        return bool(value)
    return value


def _text_as_number(text: str) -> object:
    value = _scalar(text)
    if isinstance(value, str):
        # PyYAML (YAML 1.1) reads '1e3' as a string; a number key wants it as 1000.0.
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _integer(minimum: int, *, nullable: bool = False) -> Callable[[object], object]:
    def validate(value: object) -> object:
        if value is None and nullable:
            return None
        # bool is an int subclass; 'true' is never a count.
        if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
            return value
        raise _Invalid

    return validate


def _positive_number(*, nullable: bool = False) -> Callable[[object], object]:
    def validate(value: object) -> object:
        if value is None and nullable:
            return None
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            return float(value)
        raise _Invalid

    return validate


def _number_at_least(minimum: float) -> Callable[[object], object]:
    def validate(value: object) -> object:
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= minimum
        ):
            return float(value)
        raise _Invalid

    return validate


def _fraction(value: object) -> object:
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    ):
        return float(value)
    raise _Invalid


def _boolean(value: object) -> object:
    if isinstance(value, bool):
        return value
    raise _Invalid


def _bool_or_auto(value: object) -> object:
    if isinstance(value, bool) or value == "auto":
        return value
    raise _Invalid


def _text_as_bool_or_auto(text: str) -> object:
    return "auto" if text.strip().lower() == "auto" else _text_as_bool(text)


def _non_empty_str(*, nullable: bool = False) -> Callable[[object], object]:
    def validate(value: object) -> object:
        if value is None and nullable:
            return None
        if isinstance(value, str) and value.strip():
            return value
        raise _Invalid

    return validate


def _choice(*choices: str) -> Callable[[object], object]:
    def validate(value: object) -> object:
        if isinstance(value, str) and value in choices:
            return value
        raise _Invalid

    return validate


def _plain_mapping(value: Mapping[Any, Any], path: str = "") -> dict[str, Any]:
    """Deep-copy ``value`` into plain dicts and lists, insisting on string keys.

    String keys keep the config JSON-shaped, which is what Storm's providers
    expect and what survives a trip through an environment variable.
    """
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            where = f" under {path!r}" if path else ""
            raise _Invalid(f"mapping keys must be strings, found {key!r}{where}")
        out[key] = _plain_value(item, f"{path}.{key}" if path else key)
    return out


def _plain_value(value: object, path: str) -> Any:
    if isinstance(value, Mapping):
        return _plain_mapping(value, path)
    if isinstance(value, list | tuple):
        return [_plain_value(item, path) for item in value]
    return value


def _provider_config(value: object) -> object:
    # Storm passes topology.state.provider.config as a JSON string; a YAML user
    # writes a mapping. Both become a dict so providers see one shape.
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _Invalid(
                f"the string is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
            ) from exc
        if not isinstance(decoded, dict):
            raise _Invalid(f"the JSON string holds a {type(decoded).__name__}, not an object")
        return decoded
    if isinstance(value, Mapping):
        return _plain_mapping(value)
    raise _Invalid


# --------------------------------------------------------------------------- kinds

_BOOLEAN: Final = _Kind("a boolean", _boolean, _text_as_bool, bool)
_BOOL_OR_AUTO: Final = _Kind(
    "true, false or auto", _bool_or_auto, _text_as_bool_or_auto, bool | Literal["auto"]
)
_POSITIVE_INT: Final = _Kind("a positive integer", _integer(1), _scalar, int)
_POSITIVE_INT_OR_NULL: Final = _Kind(
    "a positive integer or null", _integer(1, nullable=True), _scalar, int | None
)
_NON_NEGATIVE_INT: Final = _Kind("a non-negative integer", _integer(0), _scalar, int)
_POSITIVE_NUMBER: Final = _Kind("a positive number", _positive_number(), _text_as_number, float)
_POSITIVE_NUMBER_OR_NULL: Final = _Kind(
    "a positive number or null", _positive_number(nullable=True), _text_as_number, float | None
)
_NON_EMPTY_STR: Final = _Kind("a non-empty string", _non_empty_str(), _text_as_str, str)
_NON_EMPTY_STR_OR_NULL: Final = _Kind(
    "a non-empty string or null", _non_empty_str(nullable=True), _text_as_str, str | None
)
_NON_NEGATIVE_NUMBER: Final = _Kind(
    "a non-negative number", _number_at_least(0), _text_as_number, float
)
_NUMBER_AT_LEAST_1: Final = _Kind("a number >= 1", _number_at_least(1), _text_as_number, float)
_PROVIDER_CONFIG: Final = _Kind(
    "a mapping or a JSON object string", _provider_config, _scalar, dict[str, Any]
)


# The live view's address: a port alone (bound to loopback) or HOST:PORT,
# [IPv6]:PORT; statestream/_ui/server.py parse_address reads it.
_ADDRESS_RE: Final = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]:|[^\s:\[\]]*:)?\d{1,5}")


def _address_or_null(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # `topology.ui: 8080` in YAML is a number
    if (
        isinstance(value, str)
        and _ADDRESS_RE.fullmatch(value.strip())
        and int(value.rsplit(":", 1)[-1]) <= 65535
    ):
        return value.strip()
    raise _Invalid


_ADDRESS_OR_NULL: Final = _Kind("a port, HOST:PORT or null", _address_or_null, _scalar, str | None)


def _one_of(*choices: str) -> _Kind:
    listed = ", ".join(repr(c) for c in choices)
    literal = cast(Any, Literal)[choices]  # Literal['a', 'b'], built at run time
    return _Kind(f"one of {listed}", _choice(*choices), _text_as_str, literal)


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One entry of the schema: a key statestream reads, documented once.

    ``name`` is the dotted key (Storm's name where Storm has one), ``kind``
    its type, ``default`` its value when no layer sets it (already in the
    normalised form validation gives), ``doc`` one paragraph saying what it
    does, and ``storm`` a note on Storm's key of the same name, or None for a
    key Storm does not have. The rest is derived: :attr:`type` (the phrase
    error messages and defaults.yaml use), :attr:`env_var` and
    :attr:`attribute` (the key's :class:`Settings` attribute).
    """

    name: str
    kind: _Kind
    default: object
    doc: str
    storm: str | None = None

    @property
    def type(self) -> str:
        """What a value must be, as error messages and defaults.yaml say it."""
        return self.kind.expected

    @property
    def env_var(self) -> str:
        """The environment variable that sets the key: ``STATESTREAM_`` + key, upper-cased.

        ``.`` and ``-`` become ``_``: ``topology.max.spout.pending`` ->
        ``STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDING``.
        """
        return _env_name(self.name)

    @property
    def attribute(self) -> str:
        """The key's :class:`Settings` attribute: ``.`` and ``-`` as ``_``."""
        return self.name.replace(".", "_").replace("-", "_")


_SCHEMA_ENTRY: Final = "statestream.config.key"


def _key(name: str, kind: _Kind, default: object, doc: str, *, storm: str | None = None) -> Any:
    """Declare one config key, as a field of :class:`Settings` (see :func:`_schema_of`).

    ``doc`` may be wrapped across source lines; it is kept as one paragraph.
    """
    entry = ConfigKey(name, kind, default, " ".join(doc.split()), storm)
    metadata = {_SCHEMA_ENTRY: entry}
    if isinstance(default, dict | list):
        factory = functools.partial(copy.deepcopy, default)
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


_SAME: Final = "the same key, meaning and default."

# Dotted segments without whitespace; anything else cannot be written in every
# layer (an env variable, a --set argument) and is surely a mistake.
_KEY_RE: Final = re.compile(r"[^\s.]+(?:\.[^\s.]+)*")


def _schema_of(cls: type, starts: tuple[str, ...]) -> Mapping[str, ConfigKey]:
    """The keys declared by ``cls`` (:class:`Settings`, or a runner's settings class),
    checked, by key in declaration order.

    Raises TypeError for a declaration the rest of the config could not rely
    on: a field that is not a :func:`_key`, an attribute that is not derived
    from its key, a Python type that is not what validation returns, a key
    that does not begin with one of ``starts`` (it would collide with a
    topology's prefix or another runner's keys), a default that validation
    would change or refuse, an empty doc, or two keys with one environment
    variable.
    """
    hints = get_type_hints(cls)
    schema: dict[str, ConfigKey] = {}
    env_vars: dict[str, str] = {}
    for fld in fields(cls):
        entry = fld.metadata.get(_SCHEMA_ENTRY)
        where = f"{cls.__qualname__}.{fld.name}"
        if not isinstance(entry, ConfigKey):
            raise TypeError(f"{where} is not declared with _key()")
        name = entry.name
        if not _KEY_RE.fullmatch(name) or not name.startswith(starts):
            raise TypeError(f"{where}: {name!r} must be dotted and start with one of {starts}")
        if fld.name != entry.attribute:
            raise TypeError(f"{where}: the attribute for {name!r} must be {entry.attribute!r}")
        if hints[fld.name] != entry.kind.annotation:
            raise TypeError(
                f"{where}: declared as {hints[fld.name]!r}, but {name!r} holds "
                f"{entry.kind.annotation!r}"
            )
        try:
            normalised = entry.kind.validate(entry.default)
        except _Invalid:
            raise TypeError(f"{where}: default {entry.default!r} is not {entry.type}") from None
        if normalised != entry.default or type(normalised) is not type(entry.default):
            raise TypeError(f"{where}: write the default as {normalised!r}, as validation gives it")
        if not entry.doc:
            raise TypeError(f"{where}: {name!r} needs a doc")
        if entry.env_var in env_vars:
            raise TypeError(
                f"{where}: {name!r} and {env_vars[entry.env_var]!r} map to the same "
                f"environment variable {entry.env_var}"
            )
        env_vars[entry.env_var] = name
        schema[name] = entry
    return MappingProxyType(schema)
