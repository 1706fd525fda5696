"""Layered, typed configuration.

Layers, lowest to highest priority::

    defaults                 every key's default, from the schema (defaults.yaml
                             shipped with the package documents them, commented)
      < --config FILE ...    YAML (.yaml/.yml, which may also hold JSON) or JSON (.json),
                             applied in the order given
      < environment          STATESTREAM_* variables
      < --set KEY=VALUE      on the command line, in order

The result is a :class:`Config`: an immutable mapping from flat dotted keys
(Storm's names where Storm has one) to typed, validated values, which also
remembers which layer set each key (:meth:`Config.source_of`), and whose
:attr:`Config.settings` holds the same values as a typed, frozen
:class:`Settings`.

Keys (the schema)
    Every key statestream reads is declared once, as a field of
    :class:`Settings`: its name, its type (a phrase the error messages quote, a
    validator, how text is read), its default, a one-paragraph doc and, where
    Storm has the key, a note on Storm's. Validation, the defaults layer, each
    key's environment variable, the :class:`Settings` attributes and
    :func:`config_keys` (the listing with docs) are derived from it;
    ``defaults.yaml`` is held to it by a unit test. Two kinds of keys pass
    through untyped: those whose first segment is one of the running topology's
    own prefixes (``topology_prefixes``, e.g. ``wordcount.output``), and those
    under a registered runner's pass-through roots
    (:attr:`~statestream._runners.Capabilities.pass_through`: Spark's
    ``spark.*``, of which only ``spark.master`` is typed). A runner's own typed
    keys (:attr:`~statestream._runners.Capabilities.settings`) are declared as
    the shared ones and join the schema when it registers. Any other key is an
    error that suggests the nearest known key.

Files
    Nested mappings are flattened to dotted keys, so ``topology:
    {message.timeout.secs: 5}`` and ``topology.message.timeout.secs: 5`` mean the
    same; the value of a known key is never flattened, which keeps mapping-typed
    values (``topology.state.provider.config``) as mappings. A key given twice
    in one file (literally or after flattening) is an error, as is a key that
    is not a string. Empty sections (``topology: {}`` or a bare ``topology:``)
    are ignored. File values are taken as typed: a quoted ``"10"`` is not an
    integer.

Environment
    ``STATESTREAM_`` + a known key upper-cased with ``.`` and ``-`` as ``_``
    (``STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDING`` -> ``topology.max.spout.pending``).
    Otherwise ``STATESTREAM_<PREFIX>_<REST>``, for a topology prefix or
    ``spark``, maps to ``<prefix>.<rest lower-cased, '_' -> '.'>``
    (``STATESTREAM_WORDCOUNT_MIN_COUNT`` -> ``wordcount.min.count``); the
    longest matching prefix wins. Keys with ``_`` or capitals in their rest
    (``spark.executor.memoryOverhead``) cannot be written this way: use a file
    or ``--set``. Any other ``STATESTREAM_*`` variable is an error.

Text values (environment and ``--set``)
    Read as a YAML scalar first (``10`` -> int, ``1.5`` -> float, ``true`` ->
    bool, ``null`` -> None, ``[a, b]`` -> list, ``{a: 1}`` -> mapping), then
    checked like a file value, with two conveniences: a string key keeps the
    text as written (``topology.name=123`` is ``'123'``), and a boolean key also
    accepts ``1`` and ``0``.

Cross-key rule
    ``topology.state.checkpoint.interval.ms`` must be below
    ``topology.message.timeout.secs * 1000``: tuples held back until a
    checkpoint commits would otherwise time out before it can.

Every problem is a :class:`~statestream._errors.ConfigError` that names the
key, where it came from (file, variable, ``--set``), what was expected and the
value that was found.
"""

from __future__ import annotations

import copy
import difflib
import enum
import json
import os
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple, TypeVar, cast, overload

import yaml

from statestream._config_kinds import (
    _KEY_RE,
    ENV_PREFIX,
    ConfigKey,
    _env_name,
    _Invalid,
    _Kind,
    _scalar,
)
from statestream._errors import ConfigError
from statestream._runners import entries
from statestream._settings import (
    _INTERVAL_KEY,
    _SHARED,
    _TIMEOUT_KEY,
    OVERRIDE_SOURCE,
    SET_SOURCE,
    Settings,
    config_keys,
    schema,
)

__all__ = [
    "Config",
    "ConfigKey",
    "Settings",
    "config_keys",
    "load_config",
    "parse_set",
    "settings_of",
]

_S = TypeVar("_S")

# --------------------------------------------------------------------------- layers


class _Setting(NamedTuple):
    """One key as a layer gives it, before validation.

    ``text`` is true for environment variables and ``--set``, whose ``value``
    is the raw string as typed.
    """

    key: str
    value: object
    source: str
    text: bool


def _where(source: str) -> str:
    return f"from {source}"


def _show(value: object) -> str:
    shown = repr(value)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return f"{shown} ({type(value).__name__})"


def _declared(prefixes: Iterable[str]) -> str:
    listed = ", ".join(repr(p) for p in sorted(prefixes))
    return f"declared: {listed}" if listed else "none declared"


def _unknown_key(key: str, source: str, prefixes: frozenset[str]) -> ConfigError:
    message = f"unknown config key {key!r} in {source}"
    known = schema()
    matches = difflib.get_close_matches(key, list(known.keys), n=1, cutoff=0.6)
    if matches:
        message += f"; did you mean {matches[0]!r}?"
    else:
        message += "."
    message += (
        " Keys specific to a topology go under its own prefix, '<prefix>.' "
        f"({_declared(p + '.' for p in prefixes)})"
    )
    if known.pass_through:
        roots = ", ".join(f"'{root}.'" for root in sorted(known.pass_through))
        message += f"; a runner's engine settings under {roots}"
    return ConfigError(message)


def _check_key_syntax(key: str, source: str) -> None:
    if not _KEY_RE.fullmatch(key):
        raise ConfigError(
            f"config key {key!r} in {source} is malformed: a key is dot-separated "
            "segments, none empty, without whitespace (e.g. 'topology.max.spout.pending')"
        )


def _validate(setting: _Setting, prefixes: frozenset[str]) -> object:
    """Return the typed value of one setting, or raise ConfigError saying what is wrong."""
    key, value, source, text = setting
    _check_key_syntax(key, source)
    known = schema()
    entry = known.keys.get(key)
    if entry is None:
        root = key.partition(".")[0]
        if root in prefixes or root in known.pass_through:
            # Untyped: the topology (or Spark) reads these itself.
            return _scalar(value) if text and isinstance(value, str) else copy.deepcopy(value)
        raise _unknown_key(key, source, prefixes)
    spec = entry.kind
    candidate = spec.from_text(value) if text and isinstance(value, str) else value
    try:
        return spec.validate(candidate)
    except _Invalid as exc:
        message = (
            f"config key {key!r} {_where(source)}: expected {spec.expected}, got {_show(value)}"
        )
        if exc.detail:
            message += f"; {exc.detail}"
        elif not text and isinstance(value, str) and _accepts_text(spec, value):
            message += "; it is a quoted string: write it without quotes"
        raise ConfigError(message) from exc


def _accepts_text(spec: _Kind, value: str) -> bool:
    try:
        spec.validate(spec.from_text(value))
    except _Invalid:
        return False
    return True


def _apply(
    values: dict[str, object],
    sources: dict[str, str],
    settings: Iterable[_Setting],
    prefixes: frozenset[str],
) -> None:
    for setting in settings:
        values[setting.key] = _validate(setting, prefixes)
        sources[setting.key] = setting.source


def _check_cross_keys(values: Mapping[str, object], sources: Mapping[str, str]) -> None:
    interval = cast(int, values[_INTERVAL_KEY])
    timeout = cast(int, values[_TIMEOUT_KEY])
    if interval >= timeout * 1000:
        raise ConfigError(
            f"config key {_INTERVAL_KEY!r} = {interval} ({_where(sources[_INTERVAL_KEY])}) "
            f"must be below {_TIMEOUT_KEY!r} * 1000 = {timeout * 1000} "
            f"({_TIMEOUT_KEY!r} = {timeout} {_where(sources[_TIMEOUT_KEY])}): tuples held "
            "until a checkpoint commits would time out first; lower the interval or raise "
            "the timeout"
        )


def _flatten(data: Mapping[Any, Any], source: str) -> list[_Setting]:
    """Flatten nested sections of a file (or override mapping) into dotted keys.

    A known key's value is kept whole (it may be a mapping, or a mistake that
    validation then reports with the key's type); an unknown path is flattened
    through, so ``spark: {sql.shuffle.partitions: 4}`` is a pass-through key.
    """
    flat: dict[str, object] = {}
    keys = schema().keys

    def walk(prefix: str, mapping: Mapping[Any, Any]) -> None:
        for raw_key, value in mapping.items():
            if not isinstance(raw_key, str):
                under = f" under {prefix!r}" if prefix else ""
                raise ConfigError(
                    f"config keys must be strings: {source} has {_show(raw_key)}{under}"
                )
            key = f"{prefix}.{raw_key}" if prefix else raw_key
            if key not in keys:
                if isinstance(value, Mapping):
                    walk(key, value)
                    continue
                if value is None and any(k.startswith(key + ".") for k in keys):
                    continue  # 'topology:' with everything below commented out
            if key in flat:
                raise ConfigError(f"config key {key!r} is given twice in {source}")
            flat[key] = value

    walk("", data)
    return [_Setting(k, v, source, False) for k, v in flat.items()]


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error.

    Plain PyYAML keeps the last value silently, which hides a typo'd override.
    Merge keys (``<<``) still override as YAML intends.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Hashable] = set()
        for key_node, _value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base class reports unhashable keys with their position
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_error(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or "invalid YAML"
        context = f" ({exc.context}" if exc.context else ""
        if context and exc.context_mark is not None and exc.context_mark.line != mark.line:
            context += f" at line {exc.context_mark.line + 1}"
        context += ")" if context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"
    return " ".join(str(exc).split())


def _reject_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"found duplicate key {key!r}")
        out[key] = value
    return out


def _parse_text(text: str, kind: str, where: str) -> object:
    """Parse a config document; ``where`` names it in errors ("config file x.yaml")."""
    if kind == "json":
        try:
            return json.loads(text, object_pairs_hook=_reject_duplicate_pairs)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"cannot parse {where} as JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
        except ValueError as exc:  # a duplicate key, from the hook
            raise ConfigError(f"cannot parse {where} as JSON: {exc}") from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)  # safe: a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse {where} as YAML: {_yaml_error(exc)}") from exc


_KINDS: Final = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}


def _file_settings(path: Path) -> list[_Setting]:
    source = f"file {path}"
    kind = _KINDS.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(
            f"config file {path} has an unsupported extension {path.suffix!r}: "
            "use .yaml or .yml (YAML, which may also hold JSON) or .json"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    data = _parse_text(text, kind, f"config file {path}")
    if data is None:
        return []  # an empty (or all-comment) file sets nothing
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config file {path} must hold a mapping of keys to values at the top level, "
            f"got {type(data).__name__}"
        )
    return _flatten(data, source)


def _env_key(name: str, prefixes: frozenset[str]) -> str | None:
    """The key an environment variable sets, or None if it maps to nothing."""
    known = schema()
    key = known.env_names.get(name)
    if key is not None:
        return key
    rest = name[len(ENV_PREFIX) :]
    # Longest prefix first, so 'word_count' wins over 'word' for WORD_COUNT_X.
    for root in sorted(prefixes | known.pass_through, key=len, reverse=True):
        token = root.upper().replace(".", "_").replace("-", "_") + "_"
        if rest.startswith(token) and len(rest) > len(token):
            return f"{root}.{rest[len(token) :].lower().replace('_', '.')}"
    return None


#: STATESTREAM_ variables that are not config keys: which core runs, and
#: whether setup.py builds the compiled one (statestream._core, setup.py).
_NOT_CONFIG_ENV: Final = frozenset({"STATESTREAM_CORE", "STATESTREAM_BUILD_CORE"})


def _unknown_env(name: str, prefixes: frozenset[str]) -> ConfigError:
    env_names = schema().env_names
    message = f"unknown config environment variable {name!r}"
    # Compare without the shared STATESTREAM_, which would make every name look close.
    rests = [n.removeprefix(ENV_PREFIX) for n in env_names]
    matches = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), rests, n=1)
    if matches:
        closest = ENV_PREFIX + matches[0]
        message += f"; did you mean {closest!r} (for {env_names[closest]!r})?"
    else:
        message += "."
    env_prefixes = (_env_name(p) + "_" for p in prefixes)
    message += (
        " A known key's variable is STATESTREAM_ and the key upper-cased, '.' and '-' as "
        "'_'; a topology's own keys are STATESTREAM_<PREFIX>_<REST> "
        f"({_declared(env_prefixes)})"
    )
    for root in sorted(schema().pass_through):
        message += f", {root}.* keys {_env_name(root)}_<REST>"
    return ConfigError(message)


def _env_settings(env: Mapping[str, str], prefixes: frozenset[str]) -> list[_Setting]:
    settings = []
    for name in sorted(env):  # sorted: the same environment always fails the same way
        if not name.startswith(ENV_PREFIX) or name in _NOT_CONFIG_ENV:
            continue
        key = _env_key(name, prefixes)
        if key is None:
            raise _unknown_env(name, prefixes)
        settings.append(_Setting(key, env[name], f"env {name}", True))
    return settings


_SET_USAGE: Final = "--set expects KEY=VALUE, e.g. --set topology.max.spout.pending=100"


def _split_set(item: str) -> tuple[str, str]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep:
        raise ConfigError(f"{_SET_USAGE}; got {item!r} (no '=')")
    if not key:
        raise ConfigError(f"{_SET_USAGE}; got {item!r} (no key before '=')")
    _check_key_syntax(key, SET_SOURCE)
    return key, raw


def parse_set(item: str) -> tuple[str, Any]:
    """Split a ``--set`` argument ``KEY=VALUE`` and read VALUE as a YAML scalar.

    ``10`` -> int, ``1.5`` -> float, ``true`` -> bool, ``null`` or nothing ->
    None, ``[a, b]`` -> list, ``{a: 1}`` -> dict; anything YAML cannot read
    stays the text. Only the first ``=`` splits, so values may contain ``=``.
    Raises ConfigError with the usage when there is no ``=`` or no key. The
    key is checked for syntax here, against the known keys only by
    :func:`load_config`.
    """
    key, raw = _split_set(item)
    return key, _scalar(raw)


def _defaults() -> tuple[Mapping[str, object], Mapping[str, str]]:
    """The lowest layer: every key of the schema (the registered runners' too) at its
    default, and ``defaults`` as each one's source (derived with the schema, and
    cached with it).

    The schema, not defaults.yaml, is read: the file is documentation that a
    unit test holds to the schema, so the two cannot differ in a release.
    """
    known = schema()
    return known.defaults, known.default_sources


def _check_prefixes(prefixes: Collection[str]) -> frozenset[str]:
    """Normalise topology prefixes to bare first segments ('wordcount.' -> 'wordcount').

    The reserved roots (topology, statestream, spark) are dropped rather than
    rejected: runtimes pass the topology's name, and TopologyBuilder's default
    name is 'topology'. Letting it through would make every typo under
    'topology.' a silent pass-through; dropping it only means such a topology
    has no namespace of its own. A prefix that could never start a key (empty,
    with an inner dot or whitespace) is a ConfigError.
    """
    if isinstance(prefixes, str):  # a lone str is a Collection[str] of characters
        prefixes = (prefixes,)
    out = set()
    for prefix in prefixes:
        root = prefix.strip().removesuffix(".") if isinstance(prefix, str) else prefix
        if not isinstance(root, str) or not re.fullmatch(r"[^\s.]+", root):
            raise ConfigError(
                f"topology prefix {prefix!r} (normally the topology's name) must be one "
                "non-empty segment without dots or whitespace, e.g. 'wordcount'; rename it"
            )
        if root not in schema().reserved:
            out.add(root)
    return frozenset(out)


# --------------------------------------------------------------------------- Config


class _Missing(enum.Enum):
    MISSING = enum.auto()


_MISSING: Final = _Missing.MISSING


class Config(Mapping[str, Any]):
    """An immutable, validated configuration: flat dotted keys to typed values.

    Every known key is always present (defaults fill the gaps) with the type
    its spec promises; pass-through keys (the topology's prefix, ``spark.*``)
    are present only when set. Reading a mapping or list value returns a
    copy, so no caller can change a Config another caller holds. A Config
    pickles (it is shipped to Spark executors) and compares equal to any
    mapping with the same items.

    ``Config()`` is the defaults alone; ``Config(overrides)`` applies a
    mapping on top, validated as a file would be. Neither reads the
    environment: :func:`load_config` does, for the CLI.
    """

    __slots__ = ("_prefixes", "_settings", "_sources", "_values")

    _values: dict[str, object]
    _sources: dict[str, str]
    _prefixes: frozenset[str]
    _settings: dict[type, Any]  # settings_of()'s, by class, each computed at its first call

    def __init__(
        self,
        overrides: Mapping[str, Any] | None = None,
        *,
        topology_prefixes: Collection[str] = (),
        source: str = OVERRIDE_SOURCE,
    ) -> None:
        prefixes = _check_prefixes(topology_prefixes)
        default_values, default_sources = _defaults()
        values, sources = dict(default_values), dict(default_sources)
        if overrides:
            _apply(values, sources, _flatten(overrides, source), prefixes)
        _check_cross_keys(values, sources)
        self._set(values, sources, prefixes)

    @classmethod
    def load(
        cls,
        files: Sequence[str | Path] | str | Path = (),
        sets: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        topology_prefixes: Collection[str] = (),
    ) -> Config:
        """Build the Config from its layers: :func:`load_config`, which says how."""
        prefixes = _check_prefixes(topology_prefixes)
        if isinstance(files, str | Path):
            files = (files,)
        if isinstance(sets, str):
            sets = (sets,)
        default_values, default_sources = _defaults()
        values, sources = dict(default_values), dict(default_sources)
        for path in files:
            _apply(values, sources, _file_settings(Path(path)), prefixes)
        environment = os.environ if env is None else env
        _apply(values, sources, _env_settings(environment, prefixes), prefixes)
        set_settings = [_Setting(*_split_set(item), SET_SOURCE, True) for item in sets]
        _apply(values, sources, set_settings, prefixes)
        _check_cross_keys(values, sources)
        return cls._create(values, sources, prefixes)

    @classmethod
    def _create(
        cls, values: dict[str, object], sources: dict[str, str], prefixes: Collection[str]
    ) -> Config:
        """A Config of ``values`` as they are (validated already), for this class."""
        self = cls.__new__(cls)
        self._set(values, sources, frozenset(prefixes))
        return self

    def _set(
        self, values: dict[str, object], sources: dict[str, str], prefixes: frozenset[str]
    ) -> None:
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_sources", sources)
        object.__setattr__(self, "_prefixes", prefixes)
        object.__setattr__(self, "_settings", {})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Config is immutable; use with_overrides() to change {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Config is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Config._create, (self._values, self._sources, tuple(sorted(self._prefixes))))

    # -- Mapping

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        # Copy mutable values so that the Config stays what it was validated as.
        return copy.deepcopy(value) if isinstance(value, dict | list) else value

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self._values!r})"

    # -- provenance and derivation

    def source_of(self, key: str) -> str:
        """Where ``key``'s value came from.

        One of ``"defaults"``, ``"file <path as given>"``, ``"env <VARIABLE>"``,
        ``"--set"``, or the ``source`` given to :meth:`with_overrides`
        (``"override"`` by default). Raises KeyError for a key that is not set.
        """
        return self._sources[key]

    @property
    def topology_prefixes(self) -> frozenset[str]:
        """The prefixes whose keys pass through untyped (without the trailing dot)."""
        return self._prefixes

    def with_overrides(
        self, mapping: Mapping[str, Any], *, source: str = OVERRIDE_SOURCE
    ) -> Config:
        """A new Config with ``mapping`` applied on top, validated as a config file is.

        Values are taken as typed (a string "10" is not an integer); nested
        mappings flatten as in a file; the cross-key rule is checked on the
        result. ``source`` is what :meth:`source_of` reports for these keys,
        e.g. ``"component 'count'"`` for per-component config. ``self`` is
        unchanged.
        """
        values, sources = dict(self._values), dict(self._sources)
        _apply(values, sources, _flatten(mapping, source), self._prefixes)
        _check_cross_keys(values, sources)
        return Config._create(values, sources, self._prefixes)

    def topology_keys(self, prefix: str) -> dict[str, Any]:
        """The keys under ``<prefix>.`` with their values, keys in full (``wordcount.output``).

        Full keys, so a topology reads a key by the same name it is written
        with in a file or ``--set``. ``prefix`` may end with a dot. Values are
        copies.
        """
        start = prefix.removesuffix(".") + "."
        return {k: self[k] for k in self._values if k.startswith(start)}

    # -- typed access to a topology's own keys
    #
    # The keys under a topology's prefix (``wordcount.limit``) pass through
    # untyped; a topology reads them with these, which check the type and name
    # the key's source. Statestream's own keys are read from settings_of().

    def _typed(self, key: str, default: object, accept: Callable[[object], bool], what: str) -> Any:
        if key not in self._values:
            if default is not _MISSING:
                return default
            message = f"config key {key!r} is not set"
            matches = difflib.get_close_matches(key, list(self._values), n=1, cutoff=0.6)
            if matches:
                message += f"; did you mean {matches[0]!r}?"
            raise ConfigError(message)
        value = self._values[key]
        if not accept(value):
            raise ConfigError(
                f"config key {key!r} {_where(self._sources[key])}: expected {what}, "
                f"got {_show(value)}"
            )
        return self[key]

    def get_int(self, key: str, default: int | _Missing = _MISSING) -> int:
        """The integer at ``key`` (a topology's own key, ``wordcount.limit``); ``default``
        if it is not set (else ConfigError, suggesting a close key).

        A value of another type (bool included) is a ConfigError naming its source.
        """
        accept = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
        return cast(int, self._typed(key, default, accept, "an integer"))

    def get_float(self, key: str, default: float | _Missing = _MISSING) -> float:
        """The number at ``key`` as a float (an int is accepted); ``default`` if not set."""
        accept = lambda v: isinstance(v, int | float) and not isinstance(v, bool)  # noqa: E731
        value = self._typed(key, default, accept, "a number")
        return float(value)

    def get_bool(self, key: str, default: bool | _Missing = _MISSING) -> bool:
        """The boolean at ``key``; ``default`` if it is not set (else ConfigError)."""
        return cast(bool, self._typed(key, default, lambda v: isinstance(v, bool), "a boolean"))

    def get_str(self, key: str, default: str | _Missing = _MISSING) -> str:
        """The string at ``key``; ``default`` if it is not set (else ConfigError)."""
        return cast(str, self._typed(key, default, lambda v: isinstance(v, str), "a string"))

    def get_mapping(
        self, key: str, default: Mapping[str, Any] | _Missing = _MISSING
    ) -> dict[str, Any]:
        """A copy of the mapping at ``key``; a copy of ``default`` if it is not set."""
        value = self._typed(key, default, lambda v: isinstance(v, dict), "a mapping")
        return dict(copy.deepcopy(value))

    # -- typed access to the known keys

    @property
    def settings(self) -> Settings:
        """Every shared key's value, typed: ``config.settings.topology_message_timeout_secs``.

        A new frozen :class:`Settings` on each call, its mapping values copies;
        statestream's own code reads the one :func:`settings_of` keeps instead.
        Pass-through keys are not in it: read them with :meth:`topology_keys`
        or the ``get_*`` methods; a runner's own keys with :meth:`settings_as`.
        """
        return self.settings_as(Settings)

    def settings_as(self, kind: type[_S]) -> _S:
        """The values of ``kind``'s keys, typed: :class:`Settings` (the shared keys) or a
        registered runner's settings class
        (:attr:`~statestream._runners.Capabilities.settings`).

        A new frozen instance on each call, its mapping values copies. A key of a
        runner registered after this Config was built has its default.
        """
        values = self._values
        return kind(
            **{
                entry.attribute: self[name] if name in values else copy.deepcopy(entry.default)
                for name, entry in _keys_of(kind).items()
            }
        )

    def shared_settings_as(self, kind: type[_S]) -> _S:
        """The one instance of ``kind`` (:meth:`settings_as`) every reader of this Config
        shares, computed at the first read: what statestream's own code reads
        (through :func:`settings_of`).

        Unlike :meth:`settings_as`'s, its mapping values are not copies: do not
        change them (copy one before handing it to code that may).
        """
        cached = self._settings.get(kind)
        if cached is None:
            # Two threads may both compute it: equal values, the later one stays.
            cached = self._settings[kind] = self.settings_as(kind)
        return cast(_S, cached)


def _keys_of(kind: type) -> Mapping[str, ConfigKey]:
    """The keys ``kind`` declares: the shared ones, or a registered runner's own."""
    if kind is Settings:
        return _SHARED
    for entry in entries():
        if entry.capabilities.settings is kind:
            return entry.keys
    raise TypeError(
        f"{kind.__qualname__} is not Settings nor the settings of a registered runner "
        "(Capabilities.settings)"
    )


@overload
def settings_of(config: Mapping[str, Any]) -> Settings: ...
@overload
def settings_of(config: Mapping[str, Any], kind: type[_S]) -> _S: ...
def settings_of(config: Mapping[str, Any], kind: type[Any] = Settings) -> Any:
    """The typed values of ``config``'s known keys: what statestream's code reads.

    ``kind`` is :class:`Settings` (the shared keys) or a registered runner's
    settings class (``settings_of(config, SparkSettings)``). For a
    :class:`Config`, computed at the first call and kept on it, so every
    reader of one Config shares one instance: do not change its mapping
    values (copy one before handing it to code that may). Any other mapping
    (a hook's ``conf`` when a test calls the hook by hand) is read as a
    Config of its known keys over the defaults, anew on each call.
    """
    if not isinstance(config, Config):
        keys = schema().keys
        return Config({k: v for k, v in config.items() if k in keys}).settings_as(kind)
    return config.shared_settings_as(kind)


def load_config(
    files: Sequence[str | Path] | str | Path = (),
    sets: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    topology_prefixes: Collection[str] = (),
) -> Config:
    """Build the Config: defaults < ``files`` in order < ``env`` < ``sets`` in order.

    ``env`` defaults to ``os.environ``; pass a mapping (``{}`` for none) to keep
    the process environment out, as tests should. ``topology_prefixes`` are
    the first segments whose keys pass through untyped (``"wordcount"``, with
    or without a trailing dot); ``topology``, ``statestream`` and ``spark``
    are ignored, since their keys are statestream's own. A single path or
    ``--set`` string is taken as a one-item sequence. Raises ConfigError for
    the first problem found, in layer order. (:meth:`Config.load` is the same.)
    """
    return Config.load(files, sets, env, topology_prefixes)
