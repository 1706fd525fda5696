"""A Redis store killed mid-run: back within statestream.state.outage.secs, the run
rides it out and finishes exact with exit 0; away longer, the run stops with exit 1 and
one line naming the store and the cause, and a rerun with Redis back finishes exact.
Real runs (`statestream run`, on the real clock) against a redis-server of the test's own."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from statestream._registry import open_provider

LINES = 4000
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]

TOPOLOGY = '''
import time
from statestream import FileSpout, StatefulBolt, TopologyBuilder

class SlowCount(StatefulBolt):
    """Counts the words of each line, a millisecond a line: the run lasts seconds."""

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        time.sleep(0.001)
        for word in tup.values[1].split():
            self.state.put(word, self.state.get(word, 0) + 1)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        pass

def topology():
    builder = TopologyBuilder("outage")
    builder.set_spout("lines", FileSpout(path_key="outage.input"))
    builder.set_bolt("count", SlowCount()).shuffle_grouping("lines")
    return builder.build()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnRedis:
    """A redis-server of the test's own on a spare port, keeping its data in an
    append-only file (as a production server would), so a restart loses nothing."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "yes", "--appendfsync", "always"),
                *("--dir", str(self.data_dir)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def checkpoints(self) -> int:
        """The last committed txid the store holds (-1: none yet), as a run sees it."""
        with open_provider("redis", self.config(), scope="outage") as provider:
            return int(provider.get_state("count-0").committed_txid)

    def config(self) -> dict[str, Any]:
        return {"host": "127.0.0.1", "port": self.port}


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed, and CI must run the redis tests")
        pytest.skip("redis-server is not installed")
    data = tmp_path / "redis"
    data.mkdir()
    server = OwnRedis(data)
    server.start()
    yield server
    if server.proc is not None:
        server.proc.terminate()
        server.proc.wait(10)


def _setup(tmp_path: Path) -> tuple[Path, Path, Counter[str]]:
    topo = tmp_path / "outage_topology.py"
    topo.write_text(TOPOLOGY)
    text = tmp_path / "in.txt"
    lines = [
        " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(i % 5 + 1)) for i in range(LINES)
    ]
    text.write_text("\n".join(lines) + "\n")
    return topo, text, Counter(w for line in lines for w in line.split())


def _run(topo: Path, text: Path, server: OwnRedis, *extra: str) -> subprocess.Popen[str]:
    args = [
        *(sys.executable, "-m", "statestream", "run", str(topo), "--until-idle", "--no-progress"),
        *("--set", "topology.state.provider=redis"),
        *("--set", "topology.state.provider.config=" + orjson.dumps(server.config()).decode()),
        *("--set", f"outage.input={text}", "--set", "topology.state.checkpoint.interval.ms=200"),
        *extra,
    ]
    return subprocess.Popen(
        args, cwd=text.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _committed(server: OwnRedis) -> dict[str, int]:
    with open_provider("redis", server.config(), scope="outage") as provider:
        return dict(provider.get_state("count-0").items())


def _kill_mid_run(run: subprocess.Popen[str], server: OwnRedis) -> None:
    """Kill the server once the run has committed a checkpoint and is still running."""
    while server.checkpoints() < 1:
        assert run.poll() is None, run.communicate()
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before the store could be killed"
    server.kill()


@pytest.mark.slow
@pytest.mark.redis
def test_redis_killed_and_back_within_the_bound_is_ridden_out(
    own_redis: OwnRedis, tmp_path: Path
) -> None:
    topo, text, expected = _setup(tmp_path)
    run = _run(topo, text, own_redis)
    _kill_mid_run(run, own_redis)
    time.sleep(4)  # the outage itself, not a bound on anything
    own_redis.start()
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert "is back after" in err
    assert _committed(own_redis) == dict(expected)


@pytest.mark.slow
@pytest.mark.redis
def test_redis_away_past_the_bound_stops_the_run_and_a_rerun_is_exact(
    own_redis: OwnRedis, tmp_path: Path
) -> None:
    topo, text, expected = _setup(tmp_path)
    run = _run(topo, text, own_redis, "--set", "statestream.state.outage.secs=2")
    _kill_mid_run(run, own_redis)
    _, err = run.communicate(timeout=300)  # the bound passes while the server is away
    assert run.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"statestream: error: the state store (redis at 127.0.0.1:{own_redis.port}) could "
        "not be reached for "
    ), err
    assert "statestream.state.outage.secs: 2" in last

    own_redis.start()
    rerun = _run(topo, text, own_redis)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert _committed(own_redis) == dict(expected)


@pytest.mark.slow
@pytest.mark.redis
def test_redis_stalled_past_the_claims_lease_is_ridden_out(
    own_redis: OwnRedis, tmp_path: Path
) -> None:
    """Issue 30: a Redis stalled (SIGSTOP) longer than the claim's lease used to stop
    the run (its lease lapsed unrenewed). The lease is taken again when the server
    answers, and the run finishes exact. The lease is 1 s here and the stall 3 s,
    where the defaults are 10 s and an outage bound of 60 s."""
    topo, text, expected = _setup(tmp_path)
    config = orjson.dumps({**own_redis.config(), "claim_ttl_ms": 1000}).decode()
    run = _run(topo, text, own_redis, "--set", f"topology.state.provider.config={config}")
    while own_redis.checkpoints() < 1:
        assert run.poll() is None, run.communicate()
        time.sleep(0.05)
    assert own_redis.proc is not None
    own_redis.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3)  # the stall itself, not a bound on anything
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert "took the claim of topology 'outage'" in err
    assert _committed(own_redis) == dict(expected)
