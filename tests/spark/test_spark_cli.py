"""``statestream run --runner spark`` SIGKILLed between prepare and commit, then restarted.

The killed run commits batch 0 (lines 0-29) and is killed once every task has
prepared batch 1 (lines 30-59). The restart, with the default batch size,
must roll batch 1 back and read on from the positions stored with batch 0
(line 30): lines 30-89, each counted once.

With a folder (a partitioned source: the executors read byte ranges) the
same 90 lines are three files of 30; the killed run's batches are one file's
bytes, so batch 0 is the first file and batch 1, killed once prepared, the
second; the restart reads the second and third files once, saying each step
of its start (the session, the first batch and its commit) as it goes.

Each run is a process of its own with its own SparkSession (about 10 s each),
so this file holds the one test that needs it.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from statestream._cli import main
    from statestream.runtime import spark

    def kill(point, txid):
        if point == "prepared" and txid == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    spark.SparkRuntime.fault_hook = staticmethod(kill)
    sys.argv = ["statestream", *sys.argv[1:]]
    main()
    """
)


@pytest.mark.parametrize("source", ["file", "folder"])
def test_sigkilled_driver_restarts_exactly(tmp_path: Path, source: str) -> None:
    lines = [" ".join(f"w{(i * 5 + j) % 23}" for j in range(i % 7 + 1)) + "\n" for i in range(90)]
    text = "".join(lines)
    if source == "file":
        corpus = tmp_path / "in.txt"
        corpus.write_text(text)
        # Batches of 30 lines when killed; the restart uses the default batch size.
        small = ["--set", "statestream.spark.batch.size=30"]
    else:
        corpus = tmp_path / "in"
        corpus.mkdir()
        for k in range(3):
            (corpus / f"part-{k}.txt").write_text("".join(lines[k * 30 : (k + 1) * 30]))
        first = (corpus / "part-0.txt").stat().st_size
        # Batches of the first file's bytes when killed (the input's key names its cap).
        small = ["--set", f"wordcount.input.batch.bytes={first}"]
    settings = [
        "--set",
        "topology.state.provider=sqlite",
        "--set",
        f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
        "--set",
        f"wordcount.input={corpus}",
    ]
    run = ["run", str(ROOT / "examples" / "wordcount.py"), "--until-idle", "--runner", "spark"]
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, *run, *settings, *small],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    restarted = subprocess.run(
        [sys.executable, "-m", "statestream", *run, *settings],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    # What the driver was doing is said while the run is otherwise silent (its
    # counts are 0 until the first batch commits), in order, before the summary.
    said = restarted.stderr.splitlines()
    read = (
        "60 tuples read on the driver from 1 spout task"
        if source == "file"
        else "2 ranges of 1 partitioned spout task for the executors to read"
    )
    steps = [
        "statestream: starting Spark (master local[",
        "statestream: Spark started in ",
        f"statestream: first batch: {read}; running it as a Spark job",
        "statestream: first batch committed in ",
        "component ",
    ]
    at = [next((i for i, line in enumerate(said) if line.startswith(s)), -1) for s in steps]
    assert -1 not in at and at == sorted(at), (at, restarted.stderr[-3000:])
    assert "(60 spout tuples acked)" in said[at[3]], said[at[3]]
    # The spout's row: its 60 lines emitted and acked (a batch's, when it commits).
    row = next(line.split() for line in said if line.startswith("sentences "))
    assert row[1] == row[3] == "60", row
    dump = subprocess.run(
        [sys.executable, "-m", "statestream", "state", "dump", "--component", "count", *settings],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    counts: dict[str, int] = {}
    for line in dump.stdout.splitlines():
        entry = json.loads(line)
        assert entry["key"] not in counts
        counts[entry["key"]] = entry["value"]
    assert counts == collections.Counter(text.split())
