"""A refusal raised in a worker process reads as it does in one process: its one
line once, no worker traceback, the `run` command's exit code for a
configuration mistake (2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOPOLOGY = textwrap.dedent(
    """
    import os
    from statestream import Bolt, FileSpout, TopologyBuilder

    class Drop(Bolt):
        def execute(self, tup):
            self.collector.ack(tup)

    def topology():
        b = TopologyBuilder("refusal")
        spout = FileSpout(path_key="refusal.input", resume=True)
        b.set_spout("lines", spout, int(os.environ["SPOUT_TASKS"]))
        b.set_bolt("drop", Drop(), 2).shuffle_grouping("lines")
        return b.build()
    """
)


def _run(tmp_path: Path, spout_tasks: int, workers: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "statestream",
            "run",
            str(tmp_path / "refusal.py"),
            "--config",
            str(tmp_path / "conf.json"),
            "--set",
            f"topology.workers={workers}",
            "--until-idle",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SPOUT_TASKS": str(spout_tasks)},
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_half_read_file_on_more_spout_tasks_is_refused_once(tmp_path: Path, workers: int) -> None:
    (tmp_path / "refusal.py").write_text(TOPOLOGY)
    conf = {
        "refusal.input": str(tmp_path / "in.txt"),
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    (tmp_path / "conf.json").write_text(json.dumps(conf))
    data = tmp_path / "in.txt"
    data.write_text("".join(f"line {i}\n" for i in range(50)))
    first = _run(tmp_path, spout_tasks=1, workers=1)
    assert first.returncode == 0, first.stderr
    # More lines: the stored position (50 lines, 1 task) is now half way.
    with data.open("a") as f:
        f.write("".join(f"line {i}\n" for i in range(50, 100)))
    again = _run(tmp_path, spout_tasks=2, workers=workers)
    assert again.returncode == 2, again.stderr
    refusal = "the stored position was taken with 1 task(s)"
    assert again.stderr.count(refusal) == 1, again.stderr
    assert "Traceback" not in again.stderr and "failed:" not in again.stderr, again.stderr
