"""Tests for statestream._config: its errors, pass-through keys, the provider config and
the Config object (the layering and the schema are in test_config.py).

Every test passes ``env=`` explicitly so the real environment never leaks in.
"""

from __future__ import annotations

import copy
import pickle
import re
import sys
from pathlib import Path

import pytest
from config_files import STORM_DICT, STORM_JSON, config_error, write

from statestream._config import (
    Config,
    load_config,
    settings_of,
)
from statestream._errors import ConfigError
from statestream._runners import SparkSettings
from statestream.runtime.spark.config import spark_conf

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
    # Where json places the mistake: the "}" up to Python 3.12, the comma from 3.13.
    at = "line 2, column 25" if sys.version_info >= (3, 13) else "line 3, column 1"
    assert message.startswith(f"cannot parse config file {path} as JSON: {at}: ")


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
    assert settings_of(config, SparkSettings).spark_master == "local[4]"
    assert spark_conf(config) == {
        "spark.master": "local[4]",
        "spark.executor.memoryOverhead": "1g",
        "spark.sql.shuffle.partitions": 8,
        "spark.ui.enabled": False,
        "spark.driver.memory": "2g",
    }


# --------------------------------------------------------------------------- provider config


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
