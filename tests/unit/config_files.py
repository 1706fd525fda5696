"""What the config tests share: writing a config file and the ConfigError load_config raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statestream._config import load_config
from statestream._errors import ConfigError

# Storm's Redis provider config, as its JSON string and as statestream reads it.
STORM_JSON = (
    '{"keyClass": "java.lang.String", "valueClass": "java.lang.Long", '
    '"jedisPoolConfig": {"host": "127.0.0.1", "port": 6379, "timeout": 2000, "database": 0}}'
)
STORM_DICT = {
    "keyClass": "java.lang.String",
    "valueClass": "java.lang.Long",
    "jedisPoolConfig": {"host": "127.0.0.1", "port": 6379, "timeout": 2000, "database": 0},
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
