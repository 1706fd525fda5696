"""`statestream deadletter show|replay` without the run's config: a run on sqlite
(config/local.yaml's store) writes its dead letters beside the database, and a
command given no -c looks where a memory run writes. It must not say "nothing was
ever dead-lettered": it names the file it looked at and how to name the right one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOPOLOGY = '''
from statestream import BasicBolt, FileSpout, TopologyBuilder


class Refuse(BasicBolt):
    """Raises on the line "poison", passes the others on."""

    def execute(self, tuple, collector):
        if tuple.values[1] == "poison":
            raise ValueError("poison line")

    def declare_output_fields(self, declarer):
        declarer.declare(["line"])


def topology():
    builder = TopologyBuilder("refusing")
    builder.set_spout("lines", FileSpout(path_key="refusing.input"))
    builder.set_bolt("refuse", Refuse()).shuffle_grouping("lines")
    return builder.build()
'''

CONFIG = """
topology.state.provider: sqlite
topology.state.provider.config:
  path: ./statestream-data/state.db
statestream.retry.max.attempts: 1
statestream.retry.initial.ms: 1
"""


def _statestream(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statestream", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.mark.parametrize("command", ["show", "replay"])
def test_without_the_run_config_the_file_looked_at_and_the_right_one_are_named(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "refusing.py").write_text(TOPOLOGY)
    (tmp_path / "in.txt").write_text("fine\npoison\nfine too\n")
    (tmp_path / "local.yaml").write_text(CONFIG)
    ran = _statestream(
        tmp_path, "run", "refusing.py", "--until-idle", "--no-progress",
        "-c", "local.yaml", "--set", "refusing.input=in.txt",
    )  # fmt: skip
    assert (tmp_path / "statestream-data" / "deadletter.jsonl").exists(), ran.stderr

    done = _statestream(tmp_path, "deadletter", command)

    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "nothing was ever dead-lettered" not in done.stderr
    assert "no dead-letter file at deadletter.jsonl (where a run with " \
        "topology.state.provider 'memory' writes it); there is one at " \
        "statestream-data/deadletter.jsonl: name it with --path " \
        "statestream-data/deadletter.jsonl, or give the -c/--set the run had" in done.stderr  # fmt: skip
    named = _statestream(
        tmp_path, "deadletter", command, "--path", "statestream-data/deadletter.jsonl"
    )
    assert named.returncode == 0, named.stderr
    with_config = _statestream(tmp_path, "deadletter", command, "-c", "local.yaml")
    assert with_config.returncode == 0, with_config.stderr


def test_with_no_file_anywhere_it_says_where_a_run_writes_one(tmp_path: Path) -> None:
    done = _statestream(tmp_path, "deadletter", "show", "--path", "elsewhere.jsonl")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "statestream: error: no dead-letter file at elsewhere.jsonl (--path): nothing was "
        "dead-lettered there. A run writes statestream.deadletter.path, else "
        "deadletter.jsonl beside its sqlite database: give the -c/--set the run had, or "
        "--path FILE"
    )
