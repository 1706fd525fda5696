"""The suite's environment variables must not break the config of the shell they are set in.

A user runs the suite against their provider with the variables exported,
then runs a topology in the same shell; the config layer reads every
``STATESTREAM_*`` variable as a config key and refuses unknown ones.
"""

from __future__ import annotations

import pytest

from statestream import Config, ConfigError, load_config


def test_the_variables_are_outside_the_config_prefix(
    conformance_env_names: tuple[str, str],
) -> None:
    for name in conformance_env_names:
        assert not name.upper().startswith("STATESTREAM"), name


def test_a_config_builds_with_the_variables_set(
    conformance_env_names: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider_var, config_var = conformance_env_names
    monkeypatch.setenv(provider_var, "mypkg.state:MyProvider")
    monkeypatch.setenv(config_var, '{"url": "redis://localhost:6379/0"}')
    conf = load_config()  # os.environ, as `statestream run` reads it
    assert isinstance(conf, Config)
    assert conf["topology.state.provider"] == load_config(env={})["topology.state.provider"]


def test_the_old_names_would_have_failed() -> None:
    # Why they were renamed: STATESTREAM_CONFORMANCE_* is read as a config key.
    with pytest.raises(ConfigError, match="STATESTREAM_CONFORMANCE_PROVIDER"):
        load_config(env={"STATESTREAM_CONFORMANCE_PROVIDER": "mypkg.state:MyProvider"})
