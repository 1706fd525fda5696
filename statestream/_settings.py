"""The config schema: every key statestream reads, declared once as a field of :class:`Settings`.

A key's declaration (:func:`_key`) gives its name, its kind (the phrase the
error messages quote, a validator, how text is read), its default, a
one-paragraph doc and, where Storm has the key, a note on Storm's.
:mod:`statestream._config` derives the layers, validation and the
environment variables from it; read a :class:`~statestream._config.Config`'s
values with :func:`~statestream._config.settings_of`.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final, Literal, cast, get_type_hints

import yaml

from ._runners import runners

__all__ = ["ConfigKey", "Settings", "config_keys"]

ENV_PREFIX: Final = "STATESTREAM_"
DEFAULTS_SOURCE: Final = "defaults"
SET_SOURCE: Final = "--set"
OVERRIDE_SOURCE: Final = "override"

# First segments that are never a topology's own prefix: the first two are
# statestream's namespaces (an unknown key there is a typo, not a pass-through),
# and spark.* always passes through.
_RESERVED_ROOTS: Final = frozenset({"topology", "statestream", "spark"})
_PASS_THROUGH_ROOTS: Final = frozenset({"spark"})

# Dotted segments without whitespace; anything else cannot be written in every
# layer (an env variable, a --set argument) and is surely a mistake.
_KEY_RE: Final = re.compile(r"[^\s.]+(?:\.[^\s.]+)*")


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


def _registered_runner(value: object) -> object:
    # The registry is a leaf (statestream._runners) that holds the built-in runners
    # from its import on: asked here, never the runtimes.
    names = runners()
    if isinstance(value, str) and value in names:
        return value
    raise _Invalid(
        f"registered: {', '.join(map(repr, names))} (statestream.runtime.contract.register_runner)"
    )


_RUNNER: Final = _Kind(
    "'local', 'spark' or another registered runner", _registered_runner, _text_as_str, str
)


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every key statestream reads, typed: the config schema.

    Each field is one key, declared once with :func:`_key` (name, type,
    default, doc, Storm note); validation, the environment variables, the
    defaults layer, :func:`config_keys` and this class's attributes all come
    from these declarations, and a unit test holds ``defaults.yaml`` to them.
    An attribute is its key with ``.`` as ``_``
    (``topology.message.timeout.secs`` -> ``topology_message_timeout_secs``).

    Get one from :attr:`Config.settings`, which fills it with the Config's
    validated values. ``Settings()`` holds the defaults; building one by hand
    with other values skips validation and is meant for tests. Frozen; a
    mapping value is the holder's own copy.

    To add a key: add a field here, then its entry to defaults.yaml
    (``_defaults_yaml_entry`` renders one; the test prints it when missing).
    """

    topology_runner: str = _key(
        "topology.runner",
        _RUNNER,
        "local",
        "Which runtime runs the topology: the embedded one, or PySpark.",
    )
    topology_workers: int = _key(
        "topology.workers",
        _POSITIVE_INT,
        1,
        """Worker processes running the topology on the local runtime. 1 runs it in
        this process; N > 1 makes `statestream run` a supervisor of N workers,
        which share the tasks round-robin and are restarted from the last
        committed checkpoint when one dies. On Spark use spark.executor.instances.""",
        storm="the same key; Storm spreads the workers over its cluster's machines.",
    )
    topology_message_timeout_secs: int = _key(
        "topology.message.timeout.secs",
        _POSITIVE_INT,
        30,
        """Seconds a spout tuple may take to be fully processed (its whole tuple
        tree acked) before it is failed and replayed.""",
        storm=_SAME,
    )
    topology_enable_message_timeouts: bool = _key(
        "topology.enable.message.timeouts",
        _BOOLEAN,
        True,
        "Whether tuples time out at all; false leaves them tracked until acked or failed.",
        storm=_SAME,
    )
    topology_acker_executors: int = _key(
        "topology.acker.executors",
        _NON_NEGATIVE_INT,
        1,
        """Number of acker tasks tracking tuple trees. 0 means at-most-once: nothing
        is tracked and each spout tuple is acked right after it is emitted.""",
        storm="the same key; Storm's default, null, means one acker per worker.",
    )
    topology_max_spout_pending: int | None = _key(
        "topology.max.spout.pending",
        _POSITIVE_INT_OR_NULL,
        None,
        """Most tracked (not yet acked or failed) tuples a spout task may have in
        flight; the spout is not asked for more until some complete. null means
        the runtime's own bound: 10,000 per spout task locally (124 MB at 781k
        distinct words against 266 MB unbounded; a large sqlite state runs slower:
        a checkpoint comes whenever the spouts wait at the bound), one batch at a
        time for a transactional topology.""",
        storm="the same key and meaning; Storm's null is unbounded (set a large number for that).",
    )
    topology_tick_tuple_freq_secs: float | None = _key(
        "topology.tick.tuple.freq.secs",
        _POSITIVE_NUMBER_OR_NULL,
        None,
        """Period in seconds of tick tuples sent to every user bolt; null sends none.
        (The runtime's own ticks, for timeouts and checkpoints, do not depend on
        it.)""",
        storm=_SAME,
    )
    topology_state_provider: str = _key(
        "topology.state.provider",
        _NON_EMPTY_STR,
        "memory",
        """Where stateful bolts keep their state: a provider name (memory, sqlite,
        redis), an entry point in group 'statestream.providers',
        'package.module:Class', or Storm's class name
        (org.apache.storm.redis.state.RedisKeyValueStateProvider). memory is not
        durable: state is lost when the process exits, as in Storm.""",
        storm="the same key; Storm's default, "
        "org.apache.storm.state.InMemoryKeyValueStateProvider, is memory here.",
    )
    # _key returns a dataclasses.field (with a default_factory here), as field() does.
    topology_state_provider_config: dict[str, Any] = _key(  # noqa: RUF009
        "topology.state.provider.config",
        _PROVIDER_CONFIG,
        {},
        """Settings handed to the state provider: a mapping, or a JSON object in a
        string as Storm passes it; always read as a mapping.""",
        storm="the same key; Storm's JSON string is accepted.",
    )
    topology_state_checkpoint_interval_ms: int = _key(
        "topology.state.checkpoint.interval.ms",
        _NON_NEGATIVE_INT,
        1000,
        """Milliseconds between checkpoints of stateful bolts; 0 starts the next
        one as soon as the last one committed, as Storm's checkpoint spout does.
        Must be below topology.message.timeout.secs * 1000, or tuples held for a
        checkpoint would time out before it commits.""",
        storm=_SAME,
    )
    topology_state_claim_wait_secs: float = _key(
        "topology.state.claim.wait.secs",
        _NON_NEGATIVE_NUMBER,
        5.0,
        """Seconds a run waits for another run of the same topology on the same
        state store to end before it stops with StateLockedError. A run holds
        its topology's scope of the store for its whole life (sqlite: a lock
        file beside the database; redis: a lease key its process renews),
        since two runs would undo each other's checkpoints; `statestream
        state clear` takes it too, with the same wait. 0 gives up at once.""",
    )
    topology_state_cache_mb: float = _key(
        "topology.state.cache.mb",
        _POSITIVE_NUMBER,
        32.0,
        """MiB of read cache for the state of the stateful bolts of each process,
        shared evenly by its bolt tasks. Keys beyond it are read from the state
        provider on their next use (least recently used first, approximately);
        changes not yet committed always stay in memory. State of any size then
        runs in bounded memory on a durable provider (on memory, the provider
        itself keeps everything).""",
    )
    topology_executor_receive_buffer_size: int = _key(
        "topology.executor.receive.buffer.size",
        _Kind("an integer >= 1", _integer(1), _scalar, int),
        1024,
        """Capacity of each task's input queue; a full queue blocks its senders
        (backpressure).""",
        storm="the same key and meaning.",
    )
    topology_transfer_buffer_size: int = _key(
        "topology.transfer.buffer.size",
        _Kind("an integer >= 0", _integer(0), _scalar, int),
        4096,
        """With topology.workers > 1: tuples a worker may have sent to a task of
        another worker beyond that task's last reported input queue, before
        the queue counts as full. A worker learns a peer's queue lengths two
        rounds late, so about three rounds of tuples are always in flight; a
        smaller value throttles a worker to less than a round's output.""",
        storm="the same key (the worker's outgoing queue); here counted in tuples per target task.",
    )
    topology_sleep_spout_wait_strategy_time_ms: int = _key(
        "topology.sleep.spout.wait.strategy.time.ms",
        _NON_NEGATIVE_INT,
        1,
        """Milliseconds an idle spout (one that emitted nothing) waits before it is
        asked again.""",
        storm="the same key and meaning.",
    )
    topology_debug: bool = _key(
        "topology.debug",
        _BOOLEAN,
        False,
        "Log every emitted and acked tuple.",
        storm=_SAME,
    )
    topology_name: str | None = _key(
        "topology.name",
        _NON_EMPTY_STR_OR_NULL,
        None,
        "Name of the topology; null lets the runtime pick one from the topology itself.",
        storm="the same key; Storm sets it to the name the topology is submitted under.",
    )
    topology_stats_sample_rate: float = _key(
        "topology.stats.sample.rate",
        _Kind("a number from 0 to 1", _fraction, _text_as_number, float),
        0.05,
        """The share of tuples whose latency is timed (execute latency per bolt
        task, complete latency per spout task; capacity is derived from them):
        one in round(1 / rate) drains of a bolt's queue or emits of a spout.
        1 times every one, at the cost of two clock reads each; 0 times none
        (no latency or capacity is shown; the counts stay).""",
        storm="the same key and meaning (Storm samples tuples, statestream a task's drains).",
    )
    statestream_progress_interval_secs: float = _key(
        "statestream.progress.interval.secs",
        _POSITIVE_NUMBER,
        5.0,
        """Seconds between status lines when stdout is not a terminal (a terminal
        gets a live progress display instead).""",
    )
    topology_ui: str | None = _key(
        "topology.ui",
        _ADDRESS_OR_NULL,
        None,
        """Serve the run's live view while it runs (`statestream run --ui` sets
        it): a page with the topology graph and the component, checkpoint and
        worker figures, /metrics (Prometheus text) and /api/v1/topology (JSON),
        at PORT on 127.0.0.1, or at HOST:PORT (0.0.0.0:PORT shows the run to the
        network). Port 0 picks a free port; the URL is printed at start. null:
        no server.""",
    )
    statestream_state_exactly_once: bool | Literal["auto"] = _key(
        "statestream.state.exactly.once",
        _BOOL_OR_AUTO,
        "auto",
        """Exactly-once state: spouts whose source can rewind (position() and
        seek(), as FileSpout has) store their positions in the checkpoint, taken
        at a consistent cut, so a recovery replays nothing twice; within a run
        any failure (a failed or timed-out tuple, a rolled-back checkpoint) goes
        back to the last committed checkpoint and rewinds the spouts instead of
        replaying Storm-style. auto: on when every spout of a stateful topology
        can rewind, otherwise Storm's at-least-once with one line at start naming
        the spout that cannot. true: refuse a spout that cannot rewind. false:
        Storm's at-least-once state.""",
    )
    statestream_state_outage_secs: float = _key(
        "statestream.state.outage.secs",
        _POSITIVE_NUMBER,
        60.0,
        """Seconds a run rides out a state store it cannot reach (a Redis
        restarted or stalled) or cannot write (a full disk): the operation that
        failed is retried with backoff meanwhile and the run pauses where it
        needs the store; a store back within this goes on as if nothing
        happened, nothing rewound. Past it the run stops with exit 1 and one
        line naming the store and the cause; what it committed stays, and the
        next run resumes from there.""",
    )
    statestream_connectors_reconnect_secs: float = _key(
        "statestream.connectors.reconnect.secs",
        _POSITIVE_NUMBER,
        30.0,
        """Seconds a connector (statestream.connectors) keeps trying a broker or
        database it lost mid-run, with backoff; its spout emits nothing
        meanwhile and the rest of the topology runs on. Past it the run stops
        with exit 1 and one line naming the server (password hidden); what it
        committed stays, and the next run resumes from there. A server that
        does not answer at start stops the run at once.""",
    )
    statestream_retry_initial_ms: int = _key(
        "statestream.retry.initial.ms",
        _NON_NEGATIVE_INT,
        100,
        """Milliseconds a failed or timed-out spout tuple waits before it is handed
        back to its spout (Spout.fail) for the second attempt; other tuples keep
        flowing meanwhile. In exactly-once state the data spouts pause this long
        after the rewind a failure causes. 0 retries at once, as Storm does.""",
    )
    statestream_retry_multiplier: float = _key(
        "statestream.retry.multiplier",
        _NUMBER_AT_LEAST_1,
        2.0,
        """Factor by which the wait grows after each further failure of the same
        message (1: a constant wait).""",
    )
    statestream_retry_max_ms: int = _key(
        "statestream.retry.max.ms",
        _NON_NEGATIVE_INT,
        10000,
        "The longest wait between two attempts of a message, in milliseconds.",
    )
    statestream_retry_max_attempts: int = _key(
        "statestream.retry.max.attempts",
        _NON_NEGATIVE_INT,
        5,
        """How many times a spout tuple is processed in all, the first time
        included, before it is given up: it goes to the dead-letter file and its
        spout is told it is settled (Spout.dead_lettered). 0 retries forever, as
        Storm does.""",
    )
    statestream_errors_max_rate: float = _key(
        "statestream.errors.max.rate",
        _POSITIVE_NUMBER,
        0.5,
        """The error-rate limit: when more than this share of the messages
        processed in the last statestream.errors.window.secs failed (judged once
        at least 10 distinct messages failed in it), the run stops with exit 1,
        naming the first error and the count, instead of dead-lettering the
        whole input: a bolt that fails every tuple is a bug, not poison. 1 (or
        more) turns the limit off.""",
    )
    statestream_errors_window_secs: float = _key(
        "statestream.errors.window.secs",
        _POSITIVE_NUMBER,
        10.0,
        "The window of statestream.errors.max.rate, in seconds.",
    )
    statestream_deadletter_path: str | None = _key(
        "statestream.deadletter.path",
        _NON_EMPTY_STR_OR_NULL,
        None,
        """The dead-letter file: one JSON line per message given up on (see
        statestream deadletter show). null: deadletter.jsonl beside the state of
        the run (in the directory of the provider's path, as sqlite's; else in
        the working directory). Created at the first message.""",
    )
    statestream_spark_batch_size: int = _key(
        "statestream.spark.batch.size",
        _POSITIVE_INT,
        50000,
        """The most items one spout task puts into one transaction of the spark
        runtime (one Spark job per transaction).""",
    )
    statestream_spark_batch_attempts: int = _key(
        "statestream.spark.batch.attempts",
        _POSITIVE_INT,
        3,
        """How many times the spark runtime rolls back and re-runs a failed batch
        before it stops with a RuntimeFailure.""",
    )
    spark_master: str = _key(
        "spark.master",
        _NON_EMPTY_STR,
        "local[2,2]",
        """Spark master URL for the spark runtime. Every other spark.* key is
        passed to Spark untouched.""",
    )


def _env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def _schema_of(cls: type) -> Mapping[str, ConfigKey]:
    """The schema declared by ``cls`` (:class:`Settings`), checked, by key in declaration order.

    Raises TypeError for a declaration the rest of this module could not rely
    on: a field that is not a :func:`_key`, an attribute that is not derived
    from its key, a Python type that is not what validation returns, a key
    outside statestream's roots (it would collide with a topology's prefix),
    a default that validation would change or refuse, an empty doc, or two
    keys with one environment variable.
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
        if not _KEY_RE.fullmatch(name) or name.partition(".")[0] not in _RESERVED_ROOTS:
            raise TypeError(
                f"{where}: {name!r} must be dotted and start with one of {sorted(_RESERVED_ROOTS)}"
            )
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


# Derived once from the declarations: validation, flattening and the error
# suggestions look keys up here, the environment layer in _ENV_NAMES.
_SCHEMA: Final = _schema_of(Settings)
_ENV_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {entry.env_var: name for name, entry in _SCHEMA.items()}
)

_TIMEOUT_KEY: Final = "topology.message.timeout.secs"
_INTERVAL_KEY: Final = "topology.state.checkpoint.interval.ms"


def config_keys() -> tuple[ConfigKey, ...]:
    """Every key statestream reads, in the order defaults.yaml lists them.

    Each :class:`ConfigKey` has its name, :attr:`~ConfigKey.type`, default,
    one-paragraph doc, Storm note and :attr:`~ConfigKey.env_var`: what a
    ``config keys`` command or generated docs print. Keys under a topology's
    own prefix and ``spark.*`` keys other than ``spark.master`` are not listed:
    they pass through untyped.
    """
    return tuple(_SCHEMA.values())


def _defaults_yaml_entry(entry: ConfigKey, width: int = 80) -> str:
    """``entry`` as defaults.yaml writes it: doc, Storm note, type, default, then the key.

    What to paste into defaults.yaml for a new key; the unit test compares
    the file with the schema entry by entry (up to line wrapping).
    """
    value = yaml.safe_dump(entry.default, default_flow_style=True).removesuffix("\n...\n")
    wrap = functools.partial(textwrap.wrap, width=width - 2, break_on_hyphens=False)
    lines = wrap(entry.doc)
    if entry.storm is not None:
        lines += wrap(f"Storm: {entry.storm}")
    lines += [f"Type: {entry.type}", f"Default: {value.strip()}"]
    return "".join(f"# {line}\n" for line in lines) + f"{entry.name}: {value.strip()}\n"
