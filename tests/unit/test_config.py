"""Tests for statestream._config: layering, validation, error messages, shipped files.

Every test passes ``env=`` explicitly so the real environment never leaks in.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any, Literal, get_type_hints

import pytest
import yaml
from config_files import STORM_DICT, config_error, write

from statestream._config import (
    Config,
    ConfigKey,
    Settings,
    config_keys,
    load_config,
    parse_set,
    settings_of,
)
from statestream._config_kinds import _Invalid, _key
from statestream._config_kinds import _schema_of as _schema_of_with
from statestream._errors import ConfigError
from statestream._runners import SparkSettings, runner
from statestream._settings import _SHARED, _defaults_yaml_entry, schema

_SCHEMA = schema().keys


def _schema_of(cls: type) -> Any:
    return _schema_of_with(cls, ("topology.", "statestream."))


REPO = Path(__file__).resolve().parents[2]
DEFAULTS_YAML = REPO / "statestream" / "defaults.yaml"

EXPECTED_DEFAULTS: dict[str, Any] = {
    "topology.runner": "local",
    "topology.workers": 1,
    "topology.message.timeout.secs": 30,
    "topology.enable.message.timeouts": True,
    "topology.acker.executors": 1,
    "topology.max.spout.pending": None,
    "topology.tick.tuple.freq.secs": None,
    "topology.bolts.window.length.count": None,
    "topology.bolts.window.length.duration.ms": None,
    "topology.bolts.window.sliding.interval.count": None,
    "topology.bolts.window.sliding.interval.duration.ms": None,
    "topology.bolts.tuple.timestamp.field.name": None,
    "topology.bolts.tuple.timestamp.max.lag.ms": None,
    "topology.bolts.watermark.event.interval.ms": None,
    "topology.bolts.late.tuple.stream": None,
    "topology.state.provider": "memory",
    "topology.state.provider.config": {},
    "topology.state.checkpoint.interval.ms": 1000,
    "topology.state.claim.wait.secs": 5.0,
    "topology.state.cache.mb": 32.0,
    "topology.executor.receive.buffer.size": 1024,
    "topology.transfer.buffer.size": 4096,
    "topology.sleep.spout.wait.strategy.time.ms": 1,
    "topology.debug": False,
    "topology.name": None,
    "topology.stats.sample.rate": 0.05,
    "statestream.progress.interval.secs": 5.0,
    "topology.ui": None,
    "statestream.state.exactly.once": "auto",
    "statestream.state.outage.secs": 60.0,
    "statestream.connectors.reconnect.secs": 30.0,
    "statestream.retry.initial.ms": 100,
    "statestream.retry.multiplier": 2.0,
    "statestream.retry.max.ms": 10000,
    "statestream.retry.max.attempts": 5,
    "statestream.errors.max.rate": 0.5,
    "statestream.errors.window.secs": 10.0,
    "statestream.deadletter.path": None,
    "statestream.spark.batch.size": 50000,
    "statestream.spark.batch.attempts": 3,
    "spark.master": "local[2,2]",
}


# --------------------------------------------------------------------------- defaults


def test_defaults_load_with_every_key_from_defaults() -> None:
    config = load_config(env={})
    assert dict(config) == EXPECTED_DEFAULTS
    assert {config.source_of(key) for key in config} == {"defaults"}
    assert Config() == config


def test_settings_read_the_defaults() -> None:
    config = load_config(env={})
    settings = config.settings
    assert settings.topology_runner == "local"
    assert settings.topology_message_timeout_secs == 30
    assert settings.topology_enable_message_timeouts is True
    assert settings.topology_acker_executors == 1
    assert settings.topology_max_spout_pending is None
    assert settings.topology_tick_tuple_freq_secs is None
    assert settings.topology_state_provider == "memory"
    assert settings.topology_state_provider_config == {}
    assert settings.topology_state_checkpoint_interval_ms == 1000
    assert settings.topology_executor_receive_buffer_size == 1024
    assert settings.topology_sleep_spout_wait_strategy_time_ms == 1
    assert settings.topology_debug is False
    assert settings.topology_name is None
    assert settings.statestream_progress_interval_secs == 5.0
    assert isinstance(settings.statestream_progress_interval_secs, float)
    assert settings.statestream_state_exactly_once == "auto"
    assert settings_of(config, SparkSettings).spark_master == "local[2,2]"
    assert config.topology_keys("spark") == {"spark.master": "local[2,2]"}
    assert Settings() == settings, "Settings() is the defaults"


# --------------------------------------------------------------------------- schema


def test_settings_has_one_attribute_per_key_holding_the_configs_value(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "topology.debug: true\ntopology.name: wc\n")
    config = load_config(files=[path], env={}, sets=["topology.state.provider.config={a: 1}"])
    settings = config.settings
    names = [f.name for f in dataclasses.fields(settings)]
    assert names == [key.name.replace(".", "_").replace("-", "_") for key in _SHARED.values()]
    spark = settings_of(config, SparkSettings)
    for key in config_keys():
        holder = settings if key.name in _SHARED else spark
        assert getattr(holder, key.attribute) == config[key.name], key.name
    assert settings.topology_debug is True
    assert settings.topology_name == "wc"
    assert settings.topology_state_provider_config == {"a": 1}


def test_settings_are_frozen_copies_that_follow_overrides() -> None:
    config = Config({"topology.state.provider.config": {"db": {"path": "a"}}})
    settings = config.settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.topology_debug = True  # type: ignore[misc]
    settings.topology_state_provider_config["db"]["path"] = "mutated"
    assert config.settings.topology_state_provider_config == {"db": {"path": "a"}}
    assert config.with_overrides({"topology.debug": True}).settings.topology_debug is True
    assert config.settings.topology_debug is False
    assert pickle.loads(pickle.dumps(settings)) == settings


def test_settings_are_not_for_pass_through_keys() -> None:
    config = Config({"wc.limit": 3, "spark.driver.memory": "2g"}, topology_prefixes=["wc"])
    attributes = {f.name for f in dataclasses.fields(config.settings)}
    assert not attributes & {"wc_limit", "spark_driver_memory"}


def test_every_key_is_set_by_its_environment_variable_as_named_today() -> None:
    # The rule existing users' variables follow; generated for every key.
    for key in config_keys():
        assert key.env_var == "STATESTREAM_" + key.name.upper().replace(".", "_").replace("-", "_")
        text = yaml.safe_dump(key.default, default_flow_style=True).removesuffix("\n...\n")
        config = load_config(env={key.env_var: text.strip()})
        assert config.source_of(key.name) == f"env {key.env_var}"
        assert config[key.name] == key.default
    # And a few spelled out, so a change to the rule cannot pass unnoticed.
    env_vars = {key.name: key.env_var for key in config_keys()}
    assert env_vars["topology.max.spout.pending"] == "STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDING"
    assert (
        env_vars["statestream.state.exactly.once"] == "STATESTREAM_STATESTREAM_STATE_EXACTLY_ONCE"
    )
    assert env_vars["spark.master"] == "STATESTREAM_SPARK_MASTER"


def test_config_keys_lists_every_key_with_its_doc_in_schema_order() -> None:
    keys = config_keys()
    assert [key.name for key in keys] == list(EXPECTED_DEFAULTS)
    assert [key.name for key in keys] == list(_SCHEMA)
    for key in keys:
        assert isinstance(key, ConfigKey)
        assert key.doc and "\n" not in key.doc and "  " not in key.doc, key.name
        assert key.default == EXPECTED_DEFAULTS[key.name]
        assert key.type
    timeout = _SCHEMA["topology.message.timeout.secs"]
    assert timeout.type == "a positive integer"
    assert timeout.attribute == "topology_message_timeout_secs"
    assert timeout.storm is not None
    assert _SCHEMA["statestream.spark.batch.size"].storm is None


def _declare(*keys: tuple[str, object, dict[str, Any]]) -> type:
    """A schema class declared as Settings is: (attribute, annotation, _key arguments) each."""
    declared = []
    for attribute, annotation, key in keys:
        key = {"doc": "A key.", "kind": _SCHEMA["topology.message.timeout.secs"].kind, **key}
        declared.append((attribute, annotation, _key(**key)))
    return dataclasses.make_dataclass("Declared", declared, frozen=True)


@pytest.mark.parametrize(
    ("attribute", "annotation", "key", "message"),
    [
        (
            "topology_x",
            int,
            {"name": "topology.y"},
            "attribute for 'topology.y' must be 'topology_y'",
        ),
        ("topology_x", str, {}, "declared as <class 'str'>, but 'topology.x' holds <class 'int'>"),
        ("wordcount_x", int, {"name": "wordcount.x"}, "must be dotted and start with one of"),
        ("topology_x", int, {"default": 0}, "default 0 is not a positive integer"),
        ("topology_x", int, {"doc": " "}, "'topology.x' needs a doc"),
        (
            "topology_x",
            float,
            {"kind": _SCHEMA["statestream.progress.interval.secs"].kind},
            "write the default as 1.0, as validation gives it",
        ),
    ],
)
def test_schema_declarations_are_checked(
    attribute: str, annotation: object, key: dict[str, Any], message: str
) -> None:
    key = {"name": "topology.x", "default": 1, **key}
    with pytest.raises(TypeError, match=re.escape(message)):
        _schema_of(_declare((attribute, annotation, key)))


def test_schema_keys_need_distinct_environment_variables() -> None:
    cls = _declare(
        ("topology_a", int, {"name": "topology.a", "default": 1}),
        ("topology_A", int, {"name": "topology.A", "default": 1}),
    )
    with pytest.raises(TypeError, match="same environment variable STATESTREAM_TOPOLOGY_A"):
        _schema_of(cls)
    fine = _declare(("topology_a", int, {"name": "topology.a", "default": 1}))
    assert list(_schema_of(fine)) == ["topology.a"]


def test_settings_types_are_what_validation_returns() -> None:
    hints = get_type_hints(Settings)
    assert hints["topology_runner"] is str  # any registered runner (runtime.contract)
    assert hints["statestream_state_exactly_once"] == bool | Literal["auto"]
    assert hints["topology_max_spout_pending"] == int | None
    assert all(hints[key.attribute] == key.kind.annotation for key in _SHARED.values())
    spark = get_type_hints(SparkSettings)
    assert all(spark[key.attribute] == key.kind.annotation for key in runner("spark").keys.values())


# --------------------------------------------------------------------------- defaults.yaml


_LABELS = ("Storm", "Type", "Default")


def _documented_keys(text: str) -> dict[str, dict[str, Any]]:
    """Each top-level key of a defaults.yaml text: its value and its comment block, in parts.

    A block is prose (what the key does), then an optional '# Storm:' note,
    then '# Type:' and '# Default:'. Each part may wrap over several lines and
    is joined into one paragraph, so the file may wrap as it likes; ``counts``
    says how often each label appears.
    """
    entries: dict[str, dict[str, Any]] = {}
    comments: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            comments.append(line.removeprefix("#").strip())
        elif not line.strip():
            comments = []
        else:
            assert not line[0].isspace(), f"defaults.yaml must stay flat: {line!r}"
            key, _, value = line.partition(":")
            parts: dict[str, list[str]] = {"doc": [], **{label: [] for label in _LABELS}}
            counts = dict.fromkeys(_LABELS, 0)
            section = "doc"
            for comment in comments:
                label, sep, rest = comment.partition(": ")
                if sep and label in _LABELS:
                    section, comment = label, rest
                    counts[label] += 1
                parts[section].append(comment)
            entries[key.strip()] = {
                "value": yaml.safe_load(value),
                "counts": counts,
                **{name: " ".join(" ".join(lines).split()) for name, lines in parts.items()},
            }
            comments = []
    return entries


def _defaults_yaml_differences(text: str) -> list[str]:
    """How a defaults.yaml text differs from the schema; [] when it documents it exactly."""
    documented = _documented_keys(text)
    problems = []
    if list(documented) != list(yaml.safe_load(text)):
        problems.append("every key needs its own unindented line")
    for name in documented.keys() - _SCHEMA.keys():
        problems.append(f"{name}: not in the schema (declare it in Settings, or remove it)")
    for key in config_keys():
        entry = documented.get(key.name)
        if entry is None:
            problems.append(f"{key.name}: missing; add\n{_defaults_yaml_entry(key)}")
            continue
        expected_counts = {"Storm": int(key.storm is not None), "Type": 1, "Default": 1}
        wrong = [
            part
            for part, ok in [
                ("labels", entry["counts"] == expected_counts),
                ("doc", entry["doc"] == key.doc),
                ("Storm", entry["Storm"] == (key.storm or "")),
                ("Type", entry["Type"] == key.type),
                ("value", _is_default(key, entry["value"])),
                ("Default", _is_default(key, yaml.safe_load(entry["Default"] or "~"))),
            ]
            if not ok
        ]
        if wrong:
            problems.append(
                f"{key.name}: {', '.join(wrong)} differ from the schema, which renders it as\n"
                + _defaults_yaml_entry(key)
            )
    if [name for name in documented if name in _SCHEMA] != [
        name for name in _SCHEMA if name in documented
    ]:
        problems.append("keys are not in schema order")
    return problems


def _is_default(key: ConfigKey, value: object) -> bool:
    try:
        normalised = key.kind.validate(value)
    except _Invalid:
        return False
    return normalised == key.default and type(normalised) is type(key.default)


def test_defaults_yaml_states_every_schema_key_with_its_doc_type_and_default() -> None:
    problems = _defaults_yaml_differences(DEFAULTS_YAML.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("topology.debug: false\n", "topology.debug: true\n", "topology.debug: value differ"),
        ("# Default: 30\n", "# Default: 31\n", "topology.message.timeout.secs: Default differ"),
        ("# Type: a boolean\n", "# Type: a bool\n", ": Type differ"),
        ("# Log every emitted", "# Log each emitted", "topology.debug: doc differ"),
        ("# Storm: the same key and meaning.\n", "", ": labels, Storm differ"),
        ("# Default: auto\n", "", "statestream.state.exactly.once: labels, Default differ"),
        ("topology.debug: false\n", "topology.debugg: false\n", "topology.debugg: not in"),
        ("spark.master: local[2,2]\n", "", "spark.master: missing; add\n# Spark master URL"),
    ],
)
def test_defaults_yaml_check_catches_drift(old: str, new: str, problem: str) -> None:
    text = DEFAULTS_YAML.read_text(encoding="utf-8")
    assert old in text
    problems = "\n".join(_defaults_yaml_differences(text.replace(old, new, 1)))
    assert problem in problems


def test_defaults_yaml_check_catches_keys_out_of_order() -> None:
    text = DEFAULTS_YAML.read_text(encoding="utf-8")
    blocks = text.split("\n\n")
    blocks[-1], blocks[-2] = blocks[-2] + "\n", blocks[-1].removesuffix("\n")
    assert _defaults_yaml_differences("\n\n".join(blocks)) == ["keys are not in schema order"]


def test_the_rendered_defaults_yaml_entry_reads_back_as_the_schema() -> None:
    for key in config_keys():
        rendered = _defaults_yaml_entry(key)
        assert all(len(line) <= 80 for line in rendered.splitlines()), key.name
        assert yaml.safe_load(rendered) == {key.name: key.default}


def test_config_defaults_yaml_is_a_symlink_to_the_package_file() -> None:
    link = REPO / "config" / "defaults.yaml"
    assert link.is_symlink()
    assert link.resolve() == DEFAULTS_YAML.resolve()


# --------------------------------------------------------------------------- layering


def test_layers_file_file_env_set_in_order_with_sources(tmp_path: Path) -> None:
    first = write(
        tmp_path,
        "first.yaml",
        "topology.acker.executors: 2\n"
        "topology.max.spout.pending: 10\n"
        "topology.debug: true\n"
        "topology.name: first\n",
    )
    second = write(
        tmp_path,
        "second.json",
        '{"topology.max.spout.pending": 20, "topology.debug": false, "topology.name": "second"}',
    )
    env = {
        "STATESTREAM_TOPOLOGY_DEBUG": "yes",
        "STATESTREAM_TOPOLOGY_NAME": "from-env",
        "PATH": "/usr/bin",  # not ours: ignored
    }
    config = load_config(
        files=[first, str(second)],
        env=env,
        sets=["topology.name=from-set", "topology.name=last-set-wins"],
    )
    assert config.settings.topology_acker_executors == 2
    assert config.source_of("topology.acker.executors") == f"file {first}"
    assert config.settings.topology_max_spout_pending == 20
    assert config.source_of("topology.max.spout.pending") == f"file {second}"
    assert config.settings.topology_debug is True
    assert config.source_of("topology.debug") == "env STATESTREAM_TOPOLOGY_DEBUG"
    assert config.settings.topology_name == "last-set-wins"
    assert config.source_of("topology.name") == "--set"
    assert config.source_of("topology.runner") == "defaults"


def test_source_of_an_unset_key_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        load_config(env={}).source_of("wordcount.output")


def test_nested_sections_flatten_but_mapping_values_stay_mappings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nested.yaml",
        "topology:\n"
        "  message.timeout.secs: 5\n"
        "  state:\n"
        "    provider: redis\n"
        "    provider.config:\n"
        "      host: example\n"
        "      jedisPoolConfig: {port: 6380}\n"
        "statestream: {state: {exactly.once: true}}\n"
        "spark:\n"
        "  sql.shuffle.partitions: 4\n",
    )
    config = load_config(files=[path], env={})
    assert config.settings.topology_message_timeout_secs == 5
    assert config.settings.topology_state_provider == "redis"
    assert config.settings.topology_state_provider_config == {
        "host": "example",
        "jedisPoolConfig": {"port": 6380},
    }
    assert config.settings.statestream_state_exactly_once is True
    assert config["spark.sql.shuffle.partitions"] == 4


def test_empty_file_and_empty_sections_set_nothing(tmp_path: Path) -> None:
    empty = write(tmp_path, "empty.yaml", "# nothing yet\n")
    sections = write(tmp_path, "sections.yaml", "topology:\nspark: {}\n")
    assert load_config(files=[empty, sections], env={}) == load_config(env={})


def test_yaml_file_may_hold_json(tmp_path: Path) -> None:
    path = write(tmp_path, "json-in.yaml", '{"topology.acker.executors": 0}')
    assert load_config(files=[path], env={}).settings.topology_acker_executors == 0


def test_a_single_path_or_set_string_is_one_item(tmp_path: Path) -> None:
    path = write(tmp_path, "one.yml", "topology.acker.executors: 3\n")
    config = load_config(files=path, sets="topology.debug=true", env={})
    assert config.settings.topology_acker_executors == 3
    assert config.settings.topology_debug is True


# --------------------------------------------------------------------------- coercion


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("k=10", ("k", 10)),
        ("k=true", ("k", True)),
        ("k=no", ("k", False)),
        ("k=1.5", ("k", 1.5)),
        ("k=null", ("k", None)),
        ("k=", ("k", None)),
        ("k=[a, b]", ("k", ["a", "b"])),
        ("k={a: 1, b: x}", ("k", {"a": 1, "b": "x"})),
        ("k=hello world", ("k", "hello world")),
        ("k=a=b", ("k", "a=b")),
        ("k=a: b: c", ("k", "a: b: c")),  # not YAML: kept as text
        ("k=2024-01-01", ("k", "2024-01-01")),  # not a date object
        (" k =1", ("k", 1)),
    ],
)
def test_parse_set_reads_values_as_yaml_scalars(item: str, expected: tuple[str, Any]) -> None:
    assert parse_set(item) == expected


@pytest.mark.parametrize("item", ["topology.debug", "=1", "two words=1"])
def test_parse_set_without_a_key_is_a_usage_error(item: str) -> None:
    with pytest.raises(ConfigError, match=r"KEY=VALUE|malformed"):
        parse_set(item)


def test_parse_set_usage_error_shows_the_form() -> None:
    with pytest.raises(ConfigError, match=re.escape("--set expects KEY=VALUE")):
        parse_set("topology.debug")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("yes", True), ("1", True), ("false", False), ("no", False), ("0", False)],
)
def test_bool_keys_accept_words_and_digits_from_env_and_set(text: str, expected: bool) -> None:
    from_env = load_config(env={"STATESTREAM_TOPOLOGY_DEBUG": text})
    from_set = load_config(env={}, sets=[f"topology.debug={text}"])
    assert from_env.settings.topology_debug is expected
    assert from_set.settings.topology_debug is expected


@pytest.mark.parametrize(
    ("text", "expected"), [("auto", "auto"), ("AUTO", "auto"), ("true", True), ("0", False)]
)
def test_exactly_once_is_true_false_or_auto_from_text(text: str, expected: object) -> None:
    name = "STATESTREAM_STATESTREAM_STATE_EXACTLY_ONCE"
    assert load_config(env={name: text}).settings.statestream_state_exactly_once == expected
    config = load_config(env={}, sets=[f"statestream.state.exactly.once={text}"])
    assert config.settings.statestream_state_exactly_once == expected
    assert type(config.settings.statestream_state_exactly_once) is type(expected)


def test_exactly_once_in_a_file(tmp_path: Path) -> None:
    for text, expected in [("auto", "auto"), ("false", False), ("true", True)]:
        path = write(tmp_path, "e.yaml", f"statestream.state.exactly.once: {text}\n")
        value = load_config(files=[path], env={}).settings.statestream_state_exactly_once
        assert value == expected and type(value) is type(expected)
    path = write(tmp_path, "q.yaml", "statestream.state.exactly.once: 'true'\n")
    assert "expected true, false or auto, got 'true' (str)" in config_error(files=[path])


def test_text_numbers_are_coerced_for_number_keys() -> None:
    config = load_config(
        env={"STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDING": "10"},
        sets=["topology.tick.tuple.freq.secs=1e3", "statestream.progress.interval.secs=2"],
    )
    assert config.settings.topology_max_spout_pending == 10
    assert config.settings.topology_tick_tuple_freq_secs == 1000.0
    assert config.settings.statestream_progress_interval_secs == 2.0


def test_string_keys_keep_text_as_typed() -> None:
    config = load_config(
        env={"STATESTREAM_TOPOLOGY_NAME": "123"}, sets=["topology.state.provider=true"]
    )
    assert config.settings.topology_name == "123"
    assert config.settings.topology_state_provider == "true"
    assert load_config(env={}, sets=["topology.name=null"]).settings.topology_name is None


def test_nullable_keys_accept_null_from_every_layer(tmp_path: Path) -> None:
    path = write(tmp_path, "n.yaml", "topology.max.spout.pending: ~\n")
    assert load_config(files=[path], env={}).settings.topology_max_spout_pending is None
    config = load_config(
        env={"STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDING": "5"},
        sets=["topology.max.spout.pending=null"],
    )
    assert config.settings.topology_max_spout_pending is None


# --------------------------------------------------------------------------- shipped files


def test_shipped_local_config_loads() -> None:
    config = load_config(files=[REPO / "config" / "local.yaml"], env={})
    assert config.settings.topology_runner == "local"
    assert config.settings.topology_state_provider == "sqlite"
    assert config.settings.topology_state_provider_config == {"path": "./statestream-data/state.db"}
    assert config.settings.topology_max_spout_pending == 10_000


def test_shipped_redis_config_loads() -> None:
    config = load_config(files=[REPO / "config" / "redis.yaml"], env={})
    assert config.settings.topology_state_provider == "redis"
    assert config.settings.topology_state_provider_config == {"host": "127.0.0.1", "port": 6379}


def test_shipped_storm_redis_config_loads_and_normalizes() -> None:
    path = REPO / "config" / "storm-redis.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(raw["topology.state.provider.config"], str), "must stay Storm's JSON string"
    config = load_config(files=[path], env={})
    assert (
        config.settings.topology_state_provider
        == "org.apache.storm.redis.state.RedisKeyValueStateProvider"
    )
    assert config.settings.topology_state_provider_config == STORM_DICT
    assert "password" not in config.settings.topology_state_provider_config["jedisPoolConfig"]


def test_shipped_defaults_file_loads_as_a_config_file() -> None:
    config = load_config(files=[REPO / "config" / "defaults.yaml"], env={})
    assert dict(config) == EXPECTED_DEFAULTS
