"""One checkpoint record for both runtimes: a run killed on one is finished exactly by the other.

Both runtimes store the same :class:`~statestream._exactly_once.CheckpointRecord`
in ``$checkpointspout-0`` (the phase, and with ``PREPARING(t)`` the data spouts'
positions that committed state ``t`` ends at) and recover from it the same
way: every start is a recovery through the ``CheckpointCoordinator``, and the
spouts are sought to the positions of the txid it restores. So a word count
SIGKILLed mid-run on one runtime and finished on the other counts every word
of its input exactly once.

Each run is a ``statestream run`` process of its own (the spark ones start a
SparkSession, about 10 s each), killed with SIGKILL from inside at a chosen
point of the checkpoint protocol, on Redis.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statestream._registry import open_provider

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/0"
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")

# The local runtime killed when every bolt has acked PREPARE(txid) or COMMIT(txid),
# before the checkpoint spout stores the next phase (COMMITTING or COMMITTED).
LOCAL_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from statestream import _checkpoint
    from statestream._cli import main

    action, at_txid = sys.argv[1], int(sys.argv[2])
    on_ack = _checkpoint.CheckpointCoordinator.on_ack

    def killing_on_ack(self, acked, txid, now_ms=None):
        if acked.value == action and txid == at_txid:
            os.kill(os.getpid(), signal.SIGKILL)
        return on_ack(self, acked, txid, now_ms)

    _checkpoint.CheckpointCoordinator.on_ack = killing_on_ack
    sys.argv = ["statestream", *sys.argv[3:]]
    main()
    """
)

# The spark runtime killed at a fault_hook point ("prepared": every task prepared
# batch txid, nothing committed; "committed": batch txid committed).
SPARK_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from statestream._cli import main
    from statestream.runtime import spark

    point, at_txid = sys.argv[1], int(sys.argv[2])

    def kill(at, txid):
        if at == point and txid == at_txid:
            os.kill(os.getpid(), signal.SIGKILL)

    spark.SparkRuntime.fault_hook = staticmethod(kill)
    sys.argv = ["statestream", *sys.argv[3:]]
    main()
    """
)


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    prefix = f"sstest-{uuid.uuid4().hex[:12]}:"
    yield prefix
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def corpus(path: Path, lines: int) -> Path:
    path.write_text(
        "".join(
            " ".join(f"w{(i * 7 + j * 11) % 97}" for j in range(i % 6 + 1)) + "\n"
            for i in range(lines)
        )
    )
    return path


def make_input(tmp_path: Path, source: str, lines: int) -> tuple[Path, str]:
    """The word count's input: one file, or (``folder``) the same lines cut into four
    files of a folder, a partitioned source; and its whole text."""
    text = corpus(tmp_path / "in.txt", lines)
    if source == "file":
        return text, text.read_text()
    folder = tmp_path / "in"
    folder.mkdir()
    all_lines = text.read_text().splitlines(keepends=True)
    for i in range(4):
        (folder / f"part-{i}.txt").write_text("".join(all_lines[i::4]))
    return folder, text.read_text()


def settings(prefix: str, input_path: Path) -> list[str]:
    return [
        "--set",
        "topology.state.provider=redis",
        "--set",
        f"topology.state.provider.config={{url: '{REDIS_URL}', key_prefix: '{prefix}'}}",
        "--set",
        f"wordcount.input={input_path}",
        "--set",
        "statestream.state.exactly.once=true",
    ]


def run(args: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def counts(prefix: str) -> dict[str, Any]:
    got: dict[str, Any] = {}
    config = {"url": REDIS_URL, "key_prefix": prefix}
    with open_provider("redis", config, scope="wordcount") as provider:
        for i in range(2):
            part = dict(provider.get_state(f"count-{i}").items())
            assert not set(part) & set(got), "a word counted by two tasks"
            got.update(part)
    return got


# Each kill point once and each source once in each direction (a SparkSession a
# case, the CI's longest tests): PREPARE on a file, COMMIT on a folder.
@pytest.mark.parametrize(("action", "source"), [("PREPARE", "file"), ("COMMIT", "folder")])
def test_local_killed_mid_run_is_finished_by_spark(
    tmp_path: Path, redis_prefix: str, action: str, source: str
) -> None:
    """Local exactly-once run SIGKILLed once every bolt acked PREPARE(2) (Spark must
    roll 2 back and read from the positions of 1) or COMMIT(2) (Spark must finish
    the commit and read from the positions of 2); then ``--runner spark``: exact.
    With a folder, Spark's executors read on from the files' offsets local stored."""
    path, text = make_input(tmp_path, source, 20_000)
    conf = settings(redis_prefix, path)
    killed = run(
        [
            sys.executable,
            "-c",
            LOCAL_KILLER,
            action,
            "2",
            "run",
            WORDCOUNT,
            "--until-idle",
            *conf,
            "--set",
            "topology.state.checkpoint.interval.ms=20",
        ]
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert counts(redis_prefix), "the killed local run committed nothing"
    finished = run(
        [
            sys.executable,
            "-m",
            "statestream",
            "run",
            WORDCOUNT,
            "--until-idle",
            "--runner",
            "spark",
            *conf,
            "--set",
            "statestream.spark.batch.size=4000",
            "--set",
            "wordcount.input.batch.bytes=40000",
        ]
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert counts(redis_prefix) == collections.Counter(text.split())


@pytest.mark.parametrize(("point", "source"), [("committed", "file"), ("prepared", "folder")])
def test_spark_killed_mid_run_is_finished_by_local(
    tmp_path: Path, redis_prefix: str, point: str, source: str
) -> None:
    """Spark run SIGKILLed once every task prepared batch 1 (before the commit) or
    after batch 1 committed; then the local runtime with exactly-once state: exact.
    With a folder, the executors read batch 1's byte ranges and the local run
    reads on from the range ends stored with batch 0."""
    path, text = make_input(tmp_path, source, 600)
    conf = settings(redis_prefix, path)
    killed = run(
        [
            sys.executable,
            "-c",
            SPARK_KILLER,
            point,
            "1",
            "run",
            WORDCOUNT,
            "--until-idle",
            "--runner",
            "spark",
            *conf,
            "--set",
            "statestream.spark.batch.size=150",
            "--set",
            "wordcount.input.batch.bytes=1500",
        ]
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    finished = run(
        [
            sys.executable,
            "-m",
            "statestream",
            "run",
            WORDCOUNT,
            "--until-idle",
            *conf,
            "--set",
            "topology.state.checkpoint.interval.ms=50",
        ]
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert counts(redis_prefix) == collections.Counter(text.split())
