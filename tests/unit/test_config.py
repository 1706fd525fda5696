"""Tests for statestream._config: layering, validation, error messages, shipped files.

Every test passes ``env=`` explicitly so the real environment never leaks in.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any, Literal, get_type_hints

import pytest
import yaml

from statestream._config import (
    Config,
    ConfigKey,
    Settings,
    config_keys,
    load_config,
    parse_set,
)
from statestream._errors import ConfigError
from statestream._settings import _SCHEMA, _defaults_yaml_entry, _Invalid, _key, _schema_of

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


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(**kwargs: Any) -> str:
    """Run load_config (with an empty env unless given) and return the ConfigError message."""
    kwargs.setdefault("env", {})
    with pytest.raises(ConfigError) as info:
        load_config(**kwargs)
    return str(info.value)


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
    assert settings.spark_master == "local[2,2]"
    assert config.spark_conf == {"spark.master": "local[2,2]"}
    assert Settings() == settings, "Settings() is the defaults"


# --------------------------------------------------------------------------- schema


def test_settings_has_one_attribute_per_key_holding_the_configs_value(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "topology.debug: true\ntopology.name: wc\n")
    config = load_config(files=[path], env={}, sets=["topology.state.provider.config={a: 1}"])
    settings = config.settings
    names = [f.name for f in dataclasses.fields(settings)]
    assert names == [key.name.replace(".", "_").replace("-", "_") for key in config_keys()]
    for key in config_keys():
        assert getattr(settings, key.attribute) == config[key.name], key.name
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
    assert all(hints[key.attribute] == key.kind.annotation for key in config_keys())


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


# --------------------------------------------------------------------------- errors


def test_unknown_key_in_file_suggests_the_nearest_and_the_prefix(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", "topology.message.timeout.sec: 5\n")
    message = config_error(files=[path])
    assert message.startswith(
        f"unknown config key 'topology.message.timeout.sec' in file {path}; "
        "did you mean 'topology.message.timeout.secs'?"
    )
    assert "'<prefix>.'" in message


def test_unknown_key_names_the_declared_prefixes() -> None:
    message = config_error(sets=["wordcunt.output=x"], topology_prefixes=["wordcount"])
    assert "unknown config key 'wordcunt.output' in --set" in message
    assert "'wordcount.'" in message


@pytest.mark.parametrize("key", ["topology.workerz", "statestream.whatever", "output", "a.b"])
def test_unknown_keys_outside_pass_through_prefixes_are_errors(key: str) -> None:
    assert f"unknown config key {key!r}" in config_error(
        sets=[f"{key}=1"], topology_prefixes=["wordcount"]
    )


def test_unknown_env_variable_suggests_the_nearest() -> None:
    message = config_error(env={"STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDIN": "3"})
    assert "unknown config environment variable 'STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDIN'" in message
    assert "did you mean 'STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDING'" in message
    assert "STATESTREAM_<PREFIX>_<REST>" in message


def test_wrong_type_in_file_names_key_file_type_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, "t.yaml", 'topology:\n  message.timeout.secs: "ten"\n')
    assert config_error(files=[path]) == (
        f"config key 'topology.message.timeout.secs' from file {path}: "
        "expected a positive integer, got 'ten' (str)"
    )


def test_quoted_number_in_file_is_an_error_with_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "q.yaml", 'topology.acker.executors: "2"\n')
    message = config_error(files=[path])
    assert "expected a non-negative integer, got '2' (str)" in message
    assert "without quotes" in message


def test_bool_is_not_an_integer_and_one_is_not_a_bool_in_files(tmp_path: Path) -> None:
    as_int = write(tmp_path, "a.yaml", "topology.acker.executors: true\n")
    assert "got True (bool)" in config_error(files=[as_int])
    as_bool = write(tmp_path, "b.yaml", "topology.debug: 1\n")
    assert "expected a boolean, got 1 (int)" in config_error(files=[as_bool])


def test_wrong_type_from_env_names_the_variable() -> None:
    assert config_error(env={"STATESTREAM_TOPOLOGY_ACKER_EXECUTORS": "-1"}) == (
        "config key 'topology.acker.executors' from env STATESTREAM_TOPOLOGY_ACKER_EXECUTORS: "
        "expected a non-negative integer, got '-1' (str)"
    )


def test_wrong_type_from_set() -> None:
    assert config_error(sets=["topology.max.spout.pending=abc"]) == (
        "config key 'topology.max.spout.pending' from --set: "
        "expected a positive integer or null, got 'abc' (str)"
    )


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("topology.runner=storm", "'local', 'spark' or another registered runner"),
        ("topology.message.timeout.secs=0", "a positive integer"),
        ("topology.message.timeout.secs=1.5", "a positive integer"),
        ("topology.executor.receive.buffer.size=0", "an integer >= 1"),
        ("topology.transfer.buffer.size=-1", "an integer >= 0"),
        ("topology.sleep.spout.wait.strategy.time.ms=-1", "a non-negative integer"),
        ("topology.tick.tuple.freq.secs=0", "a positive number or null"),
        ("statestream.progress.interval.secs=.inf", "a positive number"),
        ("statestream.progress.interval.secs=null", "a positive number"),
        ("topology.state.provider=", "a non-empty string"),
        ("topology.name=''", "a non-empty string or null"),
        ("spark.master=", "a non-empty string"),
        ("statestream.state.exactly.once=maybe", "true, false or auto"),
        ("topology.state.provider.config=[1, 2]", "a mapping or a JSON object string"),
    ],
)
def test_validators_reject_out_of_range_values(item: str, expected: str) -> None:
    key = item.partition("=")[0]
    assert f"config key {key!r} from --set: expected {expected}, got " in config_error(sets=[item])


def test_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert config_error(files=[path]) == f"config file {path} does not exist"


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "topology.debug: true\ntopology.name: [unclosed\nx: 1\n")
    message = config_error(files=[path])
    assert message.startswith(f"cannot parse config file {path} as YAML: line 3, column ")


def test_malformed_json_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.json", '{\n  "topology.debug": true,\n}\n')
    message = config_error(files=[path])
    assert message.startswith(f"cannot parse config file {path} as JSON: line 3, column 1: ")


def test_json_extension_means_json_even_when_yaml_would_parse(tmp_path: Path) -> None:
    path = write(tmp_path, "yaml-in.json", "topology.debug: true\n")
    assert "as JSON: line 1" in config_error(files=[path])


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("dup.yaml", "topology.debug: true\ntopology.debug: false\n"),
        ("dup.json", '{"topology.debug": true, "topology.debug": false}'),
    ],
)
def test_a_key_given_twice_in_one_file_is_an_error(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path, name, text)
    message = config_error(files=[path])
    assert str(path) in message
    assert "duplicate key 'topology.debug'" in message


def test_a_key_given_twice_after_flattening_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "twice.yaml", "topology.debug: true\ntopology:\n  debug: false\n")
    assert config_error(files=[path]) == (
        f"config key 'topology.debug' is given twice in file {path}"
    )


def test_unsupported_extension_and_non_mapping_top_level(tmp_path: Path) -> None:
    toml = write(tmp_path, "c.toml", "a = 1\n")
    assert "unsupported extension '.toml'" in config_error(files=[toml])
    listed = write(tmp_path, "list.yaml", "- a\n- b\n")
    assert "must hold a mapping" in config_error(files=[listed])


def test_non_string_keys_are_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "k.yaml", "topology:\n  1: x\n")
    assert "config keys must be strings" in config_error(files=[path])


def test_a_mapping_for_a_scalar_key_is_a_type_error_not_an_unknown_key(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "topology.message.timeout.secs: {a: 1}\n")
    assert "expected a positive integer, got {'a': 1} (dict)" in config_error(files=[path])


def test_checkpoint_interval_must_be_below_the_timeout(tmp_path: Path) -> None:
    path = write(tmp_path, "t.yaml", "topology.message.timeout.secs: 2\n")
    message = config_error(files=[path], sets=["topology.state.checkpoint.interval.ms=2000"])
    assert "'topology.state.checkpoint.interval.ms' = 2000 (from --set)" in message
    assert f"'topology.message.timeout.secs' = 2 from file {path}" in message
    # Just below is fine.
    config = load_config(files=[path], sets=["topology.state.checkpoint.interval.ms=1999"], env={})
    assert config.settings.topology_state_checkpoint_interval_ms == 1999


def test_the_cross_key_rule_applies_to_with_overrides() -> None:
    config = load_config(env={})
    with pytest.raises(
        ConfigError, match=re.escape("'topology.message.timeout.secs' = 1 from override")
    ):
        config.with_overrides({"topology.message.timeout.secs": 1})


@pytest.mark.parametrize("prefix", ["", ".", "a.b", "two words"])
def test_malformed_topology_prefixes_are_rejected(prefix: str) -> None:
    assert "topology prefix" in config_error(topology_prefixes=[prefix])


@pytest.mark.parametrize("prefix", ["topology", "spark.", "statestream"])
def test_reserved_roots_are_never_pass_through_prefixes(prefix: str) -> None:
    # TopologyBuilder's default name is 'topology'; a runtime passes it as the prefix.
    config = load_config(env={}, topology_prefixes=[prefix])
    assert config.topology_prefixes == frozenset()
    root = prefix.removesuffix(".")
    if root == "spark":
        return  # spark.* passes through anyway
    message = config_error(sets=[f"{root}.typo=1"], topology_prefixes=[prefix])
    assert f"unknown config key '{root}.typo'" in message


# --------------------------------------------------------------------------- pass-through


def test_topology_prefix_keys_pass_through_from_every_layer(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "wc.yaml",
        "wordcount:\n  output: out.txt\n  stop.words: [a, the]\nwordcount.min.count: 2\n",
    )
    config = load_config(
        files=[path],
        env={"STATESTREAM_WORDCOUNT_WINDOW_SECS": "30"},
        sets=["wordcount.output=other.txt"],
        topology_prefixes=["wordcount."],
    )
    assert config.topology_keys("wordcount") == {
        "wordcount.output": "other.txt",
        "wordcount.stop.words": ["a", "the"],
        "wordcount.min.count": 2,
        "wordcount.window.secs": 30,
    }
    assert config.topology_keys("wordcount.") == config.topology_keys("wordcount")
    assert config.source_of("wordcount.window.secs") == "env STATESTREAM_WORDCOUNT_WINDOW_SECS"
    assert config.topology_prefixes == frozenset({"wordcount"})


def test_topology_keys_without_the_prefix_declared_are_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "wc.yaml", "wordcount.output: out.txt\n")
    assert "unknown config key 'wordcount.output'" in config_error(files=[path])
    message = config_error(env={"STATESTREAM_WORDCOUNT_OUTPUT": "x"})
    assert "unknown config environment variable 'STATESTREAM_WORDCOUNT_OUTPUT'" in message


def test_env_prefix_matching_prefers_the_longest_prefix() -> None:
    config = load_config(
        env={"STATESTREAM_WORD_COUNT_X": "1"}, topology_prefixes=["word", "word_count"]
    )
    assert "word_count.x" in config
    assert "word.count.x" not in config


def test_spark_keys_pass_through_untouched(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "spark.yaml",
        "spark.master: local[4]\n"
        "spark.executor.memoryOverhead: 1g\n"
        "spark:\n  sql.shuffle.partitions: 8\n",
    )
    config = load_config(
        files=[path],
        env={"STATESTREAM_SPARK_UI_ENABLED": "false"},
        sets=["spark.driver.memory=2g"],
    )
    assert config.settings.spark_master == "local[4]"
    assert config.spark_conf == {
        "spark.master": "local[4]",
        "spark.executor.memoryOverhead": "1g",
        "spark.sql.shuffle.partitions": 8,
        "spark.ui.enabled": False,
        "spark.driver.memory": "2g",
    }


# --------------------------------------------------------------------------- provider config


STORM_JSON = (
    '{"keyClass": "java.lang.String", "valueClass": "java.lang.Long", '
    '"jedisPoolConfig": {"host": "127.0.0.1", "port": 6379, "timeout": 2000, "database": 0}}'
)
STORM_DICT = {
    "keyClass": "java.lang.String",
    "valueClass": "java.lang.Long",
    "jedisPoolConfig": {"host": "127.0.0.1", "port": 6379, "timeout": 2000, "database": 0},
}


def test_provider_config_json_string_is_normalized_to_a_dict(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", f"topology.state.provider.config: '{STORM_JSON}'\n")
    assert load_config(files=[path], env={}).settings.topology_state_provider_config == STORM_DICT
    from_env = load_config(env={"STATESTREAM_TOPOLOGY_STATE_PROVIDER_CONFIG": STORM_JSON})
    assert from_env.settings.topology_state_provider_config == STORM_DICT
    from_set = load_config(env={}, sets=[f"topology.state.provider.config={STORM_JSON}"])
    assert from_set.settings.topology_state_provider_config == STORM_DICT


@pytest.mark.parametrize("text", ["null", "''"])
def test_provider_config_null_or_empty_string_is_an_empty_dict(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "e.yaml", f"topology.state.provider.config: {text}\n")
    assert load_config(files=[path], env={}).settings.topology_state_provider_config == {}


def test_malformed_provider_config_json_string_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "topology.state.provider.config: '{\"host\": }'\n")
    message = config_error(files=[path])
    assert f"config key 'topology.state.provider.config' from file {path}" in message
    assert "not valid JSON" in message
    assert "line 1, column 10" in message


def test_provider_config_json_must_be_an_object() -> None:
    message = config_error(sets=["topology.state.provider.config='[1, 2]'"])
    assert "holds a list, not an object" in message


def test_provider_config_keys_must_be_strings(tmp_path: Path) -> None:
    path = write(tmp_path, "k.yaml", "topology.state.provider.config: {1: x}\n")
    assert "mapping keys must be strings" in config_error(files=[path])


def test_provider_config_cannot_be_changed_through_the_config() -> None:
    config = Config({"topology.state.provider.config": {"db": {"path": "a"}}})
    config.settings.topology_state_provider_config["db"]["path"] = "mutated"
    config["topology.state.provider.config"]["db"] = {}
    assert config.settings.topology_state_provider_config == {"db": {"path": "a"}}


# --------------------------------------------------------------------------- Config object


def test_config_is_immutable() -> None:
    config = Config()
    with pytest.raises(AttributeError):
        config._values = {}
    with pytest.raises(TypeError):
        config["topology.debug"] = True  # type: ignore[index]


def test_with_overrides_validates_returns_new_and_keeps_the_original() -> None:
    base = load_config(env={}, topology_prefixes=["wc"])
    derived = base.with_overrides(
        {"topology": {"max.spout.pending": 5}, "wc.limit": 3}, source="component 'count'"
    )
    assert derived.settings.topology_max_spout_pending == 5
    assert derived["wc.limit"] == 3
    assert derived.source_of("topology.max.spout.pending") == "component 'count'"
    assert base.settings.topology_max_spout_pending is None
    assert "wc.limit" not in base
    with pytest.raises(ConfigError, match=re.escape("got '5' (str)")):
        base.with_overrides({"topology.max.spout.pending": "5"})
    with pytest.raises(
        ConfigError, match=re.escape("unknown config key 'topology.max.spout.pendng'")
    ):
        base.with_overrides({"topology.max.spout.pendng": 5})


def test_config_constructor_applies_overrides_without_reading_env() -> None:
    config = Config({"topology.acker.executors": 0})
    assert config.settings.topology_acker_executors == 0
    assert config.source_of("topology.acker.executors") == "override"
    with pytest.raises(ConfigError):
        Config({"nope": 1})


def test_typed_getters() -> None:
    config = Config({"wc.n": 3, "wc.rate": 2, "wc.on": True, "wc.s": "x"}, topology_prefixes=["wc"])
    assert config.get_int("wc.n") == 3
    assert config.get_float("wc.rate") == 2.0
    assert config.get_bool("wc.on") is True
    assert config.get_str("wc.s") == "x"
    assert config.get_mapping("topology.state.provider.config") == {}
    assert config.get_int("wc.missing", 7) == 7
    assert config.get_int("topology.acker.executors") == 1
    with pytest.raises(ConfigError, match=r"'wc\.on' from override: expected an integer, got True"):
        config.get_int("wc.on")
    with pytest.raises(ConfigError, match=r"'wc\.nn' is not set; did you mean 'wc\.n'"):
        config.get_int("wc.nn")


def test_config_pickles_and_deep_copies() -> None:
    config = load_config(
        env={"STATESTREAM_WC_X": "1"}, topology_prefixes=["wc"], sets=["topology.debug=true"]
    )
    for clone in (pickle.loads(pickle.dumps(config)), copy.deepcopy(config)):
        assert clone == config
        assert clone.source_of("wc.x") == "env STATESTREAM_WC_X"
        assert clone.topology_prefixes == config.topology_prefixes


def test_env_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The one test that reads os.environ: it sets what it reads.
    monkeypatch.setenv("STATESTREAM_TOPOLOGY_ACKER_EXECUTORS", "4")
    assert load_config().settings.topology_acker_executors == 4
    assert load_config(env={}).settings.topology_acker_executors == 1


# --------------------------------------------------------------------------- shipped files


def test_shipped_local_config_loads() -> None:
    config = load_config(files=[REPO / "config" / "local.yaml"], env={})
    assert config.settings.topology_runner == "local"
    assert config.settings.topology_state_provider == "sqlite"
    assert config.settings.topology_state_provider_config == {"path": "./statestream-data/state.db"}
    assert config.settings.topology_max_spout_pending == 50_000


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
