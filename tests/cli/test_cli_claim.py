"""Two `statestream run`s of one topology on one store: the second is refused (exit 1,
one line naming the topology, the store and the first run's pid) and the
first counts exactly; another topology on the same file runs beside it.

The runs are real processes. The first one's spout is not done until the
test creates its gate file, so it is still running, whatever the machine's
speed, while the others start.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from statestream._run import load_topology
from statestream.testing import committed_state, random_text

TESTS = Path(__file__).resolve().parents[1]

_TOPOLOGIES = f"""
import sys
from pathlib import Path

sys.path.insert(0, {str(TESTS)!r})
from word_bolts import Count, Split

from statestream import FileSpout, TopologyBuilder

HERE = Path(__file__).parent


class GatedLines(FileSpout):
    \"\"\"The lines of text.txt; not done until the file <topology>.gate exists.\"\"\"

    def exhausted(self) -> bool:
        gate = HERE / f"{{self.context.topology_name}}.gate"
        return gate.exists() and super().exhausted()


def _build(name):
    b = TopologyBuilder(name)
    b.set_spout("lines", GatedLines(HERE / "text.txt"))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()


def wordcount():
    return _build("wordcount")


def clicks():
    return _build("clicks")
"""


def _command(topology: str, db: Path, workers: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "statestream",
        "run",
        topology,
        "--until-idle",
        "--set",
        "topology.state.provider=sqlite",
        "--set",
        f"topology.state.provider.config={{path: {db}}}",
        "--set",
        "topology.state.claim.wait.secs=0.3",
        "--set",
        f"topology.workers={workers}",
        "--set",
        "topology.state.checkpoint.interval.ms=50",
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_run_of_a_topology_on_its_store_is_refused(tmp_path: Path, workers: int) -> None:
    (tmp_path / "topologies.py").write_text(_TOPOLOGIES)
    expected = collections.Counter(random_text(tmp_path / "text.txt", 300, vocabulary=40, seed=7))
    db = tmp_path / "data" / "state.db"
    wordcount, clicks = (f"{tmp_path / 'topologies.py'}:{name}" for name in ("wordcount", "clicks"))

    first = subprocess.Popen(
        _command(wordcount, db, workers),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert first.stderr is not None
        for line in first.stderr:
            lines.append(line)
            if "statestream: running 'wordcount'" in line:
                started.set()  # printed once the run is open: its claim is held
        started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(60) and first.poll() is None, "".join(lines)

        second = subprocess.run(
            _command(wordcount, db, workers), capture_output=True, text=True, env=_env(), timeout=60
        )
        assert second.returncode == 1, second.stderr
        error = [line for line in second.stderr.splitlines() if line.strip()]
        assert error == [
            "statestream: error: another `statestream run` or `state clear` of topology "
            f"'wordcount' holds {db} (pid {first.pid}) and did not let go within 0.3 s; wait "
            "for it to end or stop it, or run this one under another topology name or store"
        ]

        # Another topology on the same file, meanwhile: it runs to its end.
        (tmp_path / "clicks.gate").touch()
        other = subprocess.run(
            _command(clicks, db, workers), capture_output=True, text=True, env=_env(), timeout=60
        )
        assert other.returncode == 0, other.stderr
        assert first.poll() is None, "the first run ended before the others ran"

        (tmp_path / "wordcount.gate").touch()
        assert first.wait(60) == 0, "".join(lines)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
        reader.join(10)
        if first.stderr is not None:
            first.stderr.close()

    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(db)},
    }
    assert committed_state(load_topology(wordcount), config, "count") == dict(expected)
    assert committed_state(load_topology(clicks), config, "count") == dict(expected)
