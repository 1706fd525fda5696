"""A Redis that dies mid-run stops it with one line naming the store and the fix, not
redis-py's chained tracebacks (those only with --verbose), on one process and on
two workers (where the traceback is a worker's)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from redis_server import RedisServer, started_redis_server

from statestream._registry import open_provider

pytestmark = [pytest.mark.redis, pytest.mark.slow]

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"


def _committed_txid(server: RedisServer) -> int:
    config = {"host": "127.0.0.1", "port": server.port}
    with open_provider("redis", config, scope="wordcount") as provider:
        return int(provider.get_state("count-0").committed_txid)


def _run_and_kill_the_store(tmp_path: Path, workers: int, *extra: str) -> tuple[int, str]:
    text = tmp_path / "in.txt"
    text.write_text("".join(f"line {i} of many words\n" for i in range(200_000)))
    with started_redis_server(tmp_path) as server:
        run = subprocess.Popen(
            [
                *(sys.executable, "-m", "statestream", "run", str(WORDCOUNT), "--until-idle"),
                *("--no-progress", "--set", "topology.state.provider=redis"),
                *("--set", f"topology.state.provider.config={{port: {server.port}}}"),
                *("--set", f"wordcount.input={text}", "--set", f"topology.workers={workers}"),
                *("--set", "topology.state.checkpoint.interval.ms=200"),
                *("--set", "statestream.state.outage.secs=1", *extra),
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            while _committed_txid(server) < 1:  # at work, with a checkpoint behind it
                assert run.poll() is None, run.communicate()
                time.sleep(0.05)
            server.stop()
            _, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    return run.returncode, err


@pytest.mark.parametrize("workers", [1, 2])
def test_a_dead_redis_is_one_line(tmp_path: Path, workers: int) -> None:
    code, err = _run_and_kill_the_store(tmp_path, workers)
    assert code == 1, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("statestream: error:")]
    assert len(errors) == 1 and "(redis at localhost:" in errors[0], err


def test_verbose_shows_the_tracebacks(tmp_path: Path) -> None:
    code, err = _run_and_kill_the_store(tmp_path, 2, "--verbose")
    assert code == 1, err
    assert "Traceback (most recent call last)" in err
    assert "redis.exceptions.ConnectionError" in err
