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
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, NamedTuple

import yaml

from ._config_kinds import (
    _ADDRESS_OR_NULL,
    _BOOL_OR_AUTO,
    _BOOLEAN,
    _NON_EMPTY_STR,
    _NON_EMPTY_STR_OR_NULL,
    _NON_NEGATIVE_INT,
    _NON_NEGATIVE_NUMBER,
    _NUMBER_AT_LEAST_1,
    _POSITIVE_INT,
    _POSITIVE_INT_OR_NULL,
    _POSITIVE_NUMBER,
    _POSITIVE_NUMBER_OR_NULL,
    _PROVIDER_CONFIG,
    _SAME,
    ConfigKey,
    _fraction,
    _integer,
    _Invalid,
    _key,
    _Kind,
    _scalar,
    _schema_of,
    _text_as_number,
    _text_as_str,
)
from ._errors import ConfigError
from ._runners import Runner, entries, runners

__all__ = ["ConfigKey", "Settings", "config_keys", "schema"]

DEFAULTS_SOURCE: Final = "defaults"
SET_SOURCE: Final = "--set"
OVERRIDE_SOURCE: Final = "override"

# statestream's own namespaces: never a topology's prefix, and an unknown key
# under them is a typo, not a pass-through. The registered runners add the
# roots they pass through to their engines (:func:`pass_through_roots`).
_OWN_ROOTS: Final = frozenset({"topology", "statestream"})


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
    # Windowed bolts (statestream._windowed): Storm's keys, for a bolt not
    # configured with its with_* methods (set them with add_configuration).
    topology_bolts_window_length_count: int | None = _key(
        "topology.bolts.window.length.count",
        _POSITIVE_INT_OR_NULL,
        None,
        "A windowed bolt's window length in tuples (Count); its with_window wins.",
        storm=_SAME,
    )
    topology_bolts_window_length_duration_ms: int | None = _key(
        "topology.bolts.window.length.duration.ms",
        _POSITIVE_INT_OR_NULL,
        None,
        "A windowed bolt's window length in milliseconds (Duration); its with_window wins.",
        storm=_SAME,
    )
    topology_bolts_window_sliding_interval_count: int | None = _key(
        "topology.bolts.window.sliding.interval.count",
        _POSITIVE_INT_OR_NULL,
        None,
        "A windowed bolt's slide in tuples; null with a length: a tumbling window.",
        storm=_SAME,
    )
    topology_bolts_window_sliding_interval_duration_ms: int | None = _key(
        "topology.bolts.window.sliding.interval.duration.ms",
        _POSITIVE_INT_OR_NULL,
        None,
        "A windowed bolt's slide in milliseconds; null with a length: a tumbling window.",
        storm=_SAME,
    )
    topology_bolts_tuple_timestamp_field_name: str | None = _key(
        "topology.bolts.tuple.timestamp.field.name",
        _NON_EMPTY_STR_OR_NULL,
        None,
        """Event time: the field holding each tuple's timestamp (ms since the epoch);
        null: processing time.""",
        storm=_SAME,
    )
    topology_bolts_tuple_timestamp_max_lag_ms: int | None = _key(
        "topology.bolts.tuple.timestamp.max.lag.ms",
        _POSITIVE_INT_OR_NULL,
        None,
        "Event time: how far behind the latest timestamp a tuple may come (null: 0).",
        storm=_SAME,
    )
    topology_bolts_watermark_event_interval_ms: int | None = _key(
        "topology.bolts.watermark.event.interval.ms",
        _POSITIVE_INT_OR_NULL,
        None,
        "Event time: how often the watermark moves, on the runtime's clock (null: 1000);"
        " it also moves once a task has taken 4,096 tuples since it last moved.",
        storm="the same key (Storm's default: 1000); Storm moves it on the interval only.",
    )
    topology_bolts_late_tuple_stream: str | None = _key(
        "topology.bolts.late.tuple.stream",
        _NON_EMPTY_STR_OR_NULL,
        None,
        "Event time: the stream late tuples go out on as (tuple, timestamp); null: dropped.",
        storm="the same key; Storm emits the late tuple itself, statestream its values.",
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


#: The shared keys, derived once from the declarations.
_SHARED: Final = _schema_of(Settings, tuple(f"{root}." for root in sorted(_OWN_ROOTS)))


class _Schema(NamedTuple):
    """Every key a config can hold with the runners registered now: the shared ones,
    then each runner's own (:attr:`~statestream._runners.Capabilities.settings`)."""

    keys: Mapping[str, ConfigKey]
    """Validation, flattening and the error suggestions look keys up here."""
    env_names: Mapping[str, str]
    """Each key's environment variable, to the key."""
    pass_through: frozenset[str]
    """The roots the runners hand to their engines untouched (``spark``)."""
    reserved: frozenset[str]
    """First segments that are never a topology's own prefix."""
    defaults: Mapping[str, object]
    """Every key at its default: the lowest layer of a config."""
    default_sources: Mapping[str, str]
    """``defaults`` as every key's source in that layer."""


def schema() -> _Schema:
    """The config's schema with the runners registered now (cached per registry)."""
    return _schema_for(entries())


@functools.cache
def _schema_for(registered: tuple[Runner, ...]) -> _Schema:
    keys = dict(_SHARED)
    owner = dict.fromkeys(keys, "the shared settings")
    env_names = {entry.env_var: name for name, entry in keys.items()}
    for runner_entry in registered:
        for name, entry in runner_entry.keys.items():
            where = f"runner {runner_entry.name!r}"
            clash = owner.get(name) or owner.get(env_names.get(entry.env_var, ""))
            if clash is not None:
                raise ConfigError(
                    f"{where} declares config key {name!r}, which {clash} declare already "
                    "(or its environment variable); rename it under "
                    f"statestream.{runner_entry.name}."
                )
            keys[name] = entry
            owner[name] = where
            env_names[entry.env_var] = name
    roots = frozenset(root for r in registered for root in r.capabilities.pass_through)
    defaults = {name: copy.deepcopy(entry.default) for name, entry in keys.items()}
    return _Schema(
        MappingProxyType(keys),
        MappingProxyType(env_names),
        roots,
        _OWN_ROOTS | roots,
        MappingProxyType(defaults),
        MappingProxyType(dict.fromkeys(defaults, DEFAULTS_SOURCE)),
    )


_TIMEOUT_KEY: Final = "topology.message.timeout.secs"
_INTERVAL_KEY: Final = "topology.state.checkpoint.interval.ms"


def config_keys() -> tuple[ConfigKey, ...]:
    """Every key statestream reads, in the order defaults.yaml lists them: the shared
    ones, then each registered runner's own, in registration order.

    Each :class:`ConfigKey` has its name, :attr:`~ConfigKey.type`, default,
    one-paragraph doc, Storm note and :attr:`~ConfigKey.env_var`: what a
    ``config keys`` command or generated docs print. Keys under a topology's
    own prefix and a runner's pass-through keys (``spark.*`` other than
    ``spark.master``) are not listed: they pass through untyped.
    """
    return tuple(schema().keys.values())


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
