"""A password given to a Redis server that has none is not silently accepted: the
server takes any password (redis-py authenticates with HELLO AUTH, which a
default user without a password accepts), so the log says it is not checked."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_process import statestream
from redis_server import (
    REDIS_HOST,
    REDIS_PORT,
    delete_prefix,
    require_real_redis,
    started_redis_server,
    unique_prefix,
)

from statestream._registry import open_provider
from statestream_providers import _redis_password

pytestmark = pytest.mark.redis

NOT_CHECKED = "answers without a password, so the password in the redis state provider config"


@pytest.fixture
def prefix(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A key prefix of the test's own; this process has asked no server yet."""
    require_real_redis()
    monkeypatch.setattr(_redis_password, "_ASKED", set())
    p = unique_prefix("password")
    yield p
    delete_prefix(p)


def _use(config: dict[str, object]) -> None:
    provider = open_provider("redis", config)
    try:
        provider.namespaces()  # the first command: the client connects
    finally:
        provider.close()


def test_a_password_the_server_does_not_check_is_warned_of_once(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"host": REDIS_HOST, "port": REDIS_PORT, "password": "s3cret", "key_prefix": prefix}
    with caplog.at_level(logging.WARNING, logger="statestream.redis"):
        _use(config)
        _use(config)  # the same server again: said once
    warnings = [r.getMessage() for r in caplog.records if NOT_CHECKED in r.getMessage()]
    assert warnings == [
        f"redis at {REDIS_HOST}:{REDIS_PORT} answers without a password, so the password in "
        "the redis state provider config is not checked: remove it from the config, or give "
        "the server one (requirepass, or ACL SETUSER default)"
    ]


def test_no_password_or_a_server_that_checks_it_is_not_warned_of(
    prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="statestream.redis"):
        _use({"host": REDIS_HOST, "port": REDIS_PORT, "key_prefix": prefix})
        with started_redis_server(tmp_path, "--requirepass", "s3cret") as server:
            _use({"host": "127.0.0.1", "port": server.port, "password": "s3cret"})
            _use({"url": f"redis://:s3cret@127.0.0.1:{server.port}/0"})
    assert not [r for r in caplog.records if NOT_CHECKED in r.getMessage()]


def test_a_run_on_two_workers_warns_once(prefix: str, tmp_path: Path) -> None:
    corpus = tmp_path / "in.txt"
    corpus.write_text("a b\nb c\n")
    wordcount = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"
    config = tmp_path / "redis.yaml"
    config.write_text(
        "topology.state.provider: redis\n"
        "topology.state.provider.config:\n"
        f"  url: redis://:s3cret@{REDIS_HOST}:{REDIS_PORT}/0\n"
        f"  key_prefix: '{prefix}'\n"
    )
    done = statestream(
        "run", str(wordcount), "--until-idle", "--no-progress", "--config", str(config),
        "--set", f"wordcount.input={corpus}", "--set", "topology.workers=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(NOT_CHECKED) == 1, done.stderr
