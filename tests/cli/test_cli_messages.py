"""Errors keep the sentence that says what to do: a long message loses its middle
(the values it quotes), never its end; a value (a tuple, a user's message
quoting its input) is what gets cut."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cli_process import statestream

PUT_DATETIME = """
import datetime
from statestream import FileSpout, StatefulBolt, TopologyBuilder

class Put(StatefulBolt):
    def init_state(self, state):
        self.state = state
    def execute(self, tuple):
        self.state.put("when", datetime.datetime(2020, 1, 1))
        self.collector.ack(tuple)
    def declare_output_fields(self, declarer):
        pass

def topology():
    b = TopologyBuilder("put_datetime")
    b.set_spout("lines", FileSpout({input!r}))
    b.set_bolt("put", Put()).shuffle_grouping("lines")
    return b.build()
"""

LONG_MESSAGE = """
from statestream import BasicBolt, FileSpout, TopologyBuilder

class Refuse(BasicBolt):
    def execute(self, tuple, collector):
        raise ValueError("cannot use " + "x" * 5000 + ": set refuse.enabled=false to let it pass")
    def declare_output_fields(self, declarer):
        pass

def topology():
    b = TopologyBuilder("long_message")
    b.set_spout("lines", FileSpout({input!r}))
    b.set_bolt("refuse", Refuse()).shuffle_grouping("lines")
    return b.build()
"""


def _run(tmp_path: Path, source: str, *sets: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "in.txt").write_text("a\nb\n")
    path = tmp_path / "t.py"
    path.write_text(source.format(input=str(tmp_path / "in.txt")))
    args = ["run", str(path), "--until-idle", "--no-progress"]
    for item in ("statestream.retry.max.attempts=1", "statestream.retry.initial.ms=1", *sets):
        args += ["--set", item]
    return statestream(*args, cwd=tmp_path)


def test_a_serialization_error_is_never_cut_inside_its_fix(tmp_path: Path) -> None:
    done = _run(tmp_path, PUT_DATETIME)
    assert done.returncode != 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "of type 'datetime' as JSON" in line]
    assert said, done.stderr
    for line in said:
        # Every line that names the error also says both fixes, whole.
        assert "put value.isoformat() and parse it after get" in line, line
        assert "or configure `serializer: pickle`" in line, line


def test_a_long_user_message_loses_its_middle_not_its_end(tmp_path: Path) -> None:
    done = _run(tmp_path, LONG_MESSAGE)
    assert done.returncode != 0, done.stderr
    # statestream's own lines (the log's error, the summary), not the traceback's.
    said = [
        line for line in done.stderr.splitlines() if "statestream" in line and "cannot use" in line
    ]
    assert said, done.stderr
    for line in said:
        assert "x: set refuse.enabled=false to let it pass" in line, line
        assert "characters cut" in line and len(line) < 1000, line
