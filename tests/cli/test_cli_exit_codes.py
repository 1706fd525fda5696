"""No silent stop: a bad input byte, a position that is not JSON, a run that ends with
errors; each is a non-zero exit whose message names the thing (the `run` command's
exit codes: 0 clean, 1 failed, 2 usage, 3 finished with errors)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from statestream import FileSpout, SourceError, TopologyBuilder, run
from statestream.testing import SinkBolt, sink

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statestream", "run", *args, "--until-idle", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _bad_file(tmp_path: Path) -> tuple[Path, int]:
    """201 lines; line 32 holds a byte that is not UTF-8. Returns the path and its offset."""
    path = tmp_path / "input.txt"
    lines = [f"line number {i} of the input".encode() for i in range(201)]
    lines[31] = b"caf\xe9 au lait"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, sum(len(x) + 1 for x in lines[:31]) + 3


def test_an_undecodable_byte_stops_the_run_naming_file_line_and_offset(tmp_path: Path) -> None:
    path, offset = _bad_file(tmp_path)
    done = _run(WORDCOUNT, "--set", f"wordcount.input={path}")
    assert done.returncode == 1, done.stderr
    assert f"line 32 of {path} is not utf-8 (byte offset {offset}, b'\\xe9'" in done.stderr
    assert "encoding=" in done.stderr and "errors='replace'" in done.stderr
    assert "idle" not in done.stderr  # never reported as the end of the input


def test_errors_replace_reads_every_line(tmp_path: Path) -> None:
    path, _ = _bad_file(tmp_path)
    b = TopologyBuilder("replace")
    b.set_spout("lines", FileSpout(path, errors="replace"))
    b.set_bolt("out", SinkBolt("lines")).shuffle_grouping("lines")
    result = run(b.build(), until_idle=True)
    assert result.reason == "idle" and result.errors == []
    got = dict(sink("lines"))
    assert len(got) == 201 and got[31] == "caf\ufffd au lait"


def test_a_latin1_file_reads_with_its_encoding(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("café\r\nthé\r\n".encode("latin-1"))
    b = TopologyBuilder("latin1")
    b.set_spout("lines", FileSpout(path, encoding="latin-1"))
    b.set_bolt("out", SinkBolt("lines")).shuffle_grouping("lines")
    run(b.build(), until_idle=True)
    assert sorted(sink("lines")) == [(0, "café"), (1, "thé")]


def test_the_spout_raises_source_error_in_the_library_too(tmp_path: Path) -> None:
    path, _ = _bad_file(tmp_path)
    b = TopologyBuilder("strict")
    b.set_spout("lines", FileSpout(path))
    b.set_bolt("out", SinkBolt("lines")).shuffle_grouping("lines")
    with pytest.raises(SourceError, match="line 32"):
        run(b.build(), until_idle=True)


def test_an_unknown_encoding_is_a_config_error(tmp_path: Path) -> None:
    path, _ = _bad_file(tmp_path)
    topo = tmp_path / "enc.py"
    topo.write_text(
        textwrap.dedent(
            f"""
            from statestream import FileSpout, TopologyBuilder
            from statestream.testing import SinkBolt
            b = TopologyBuilder("enc")
            b.set_spout("lines", FileSpout({str(path)!r}, encoding="utf-9"))
            b.set_bolt("out", SinkBolt("x")).shuffle_grouping("lines")
            topology = b.build()
            """
        )
    )
    done = _run(str(topo))
    assert done.returncode == 2, done.stderr
    assert "FileSpout 'lines'" in done.stderr and "utf-9" in done.stderr


_TOPOLOGIES = """
from statestream import Bolt, Spout, StatefulBolt, TopologyBuilder

class Numbers(Spout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
    def next_tuple(self):
        if self.n < 50:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1
    def exhausted(self):
        return self.n >= 50
    def declare_output_fields(self, declarer):
        declarer.declare(["n"])

class SetPosition(Numbers):
    def position(self):
        return {{self.n}}
    def seek(self, position):
        pass

class MissingFile(Numbers):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        open("{missing}")

class Keep(StatefulBolt):
    def init_state(self, state):
        self.state = state
    def execute(self, tuple):
        self.state.put(str(tuple["n"]), 1)
        self.collector.ack(tuple)

class Picky(Bolt):
    def execute(self, tuple):
        if tuple["n"] % 10 == 3:
            raise ValueError("cannot take " + "x" * 5000)
        self.collector.ack(tuple)

def _build(spout, bolt):
    b = TopologyBuilder("t")
    b.set_spout("numbers", spout)
    b.set_bolt("bolt", bolt).shuffle_grouping("numbers")
    return b.build()

not_json = _build(SetPosition(), Keep())
missing = _build(MissingFile(), Picky())
picky = _build(Numbers(), Picky())
"""


@pytest.fixture
def topologies(tmp_path: Path) -> Path:
    path = tmp_path / "topologies.py"
    path.write_text(_TOPOLOGIES.format(missing=tmp_path / "gone" / "input.csv"))
    return path


def test_a_position_that_is_not_json_fails_fast_naming_the_spout(topologies: Path) -> None:
    done = _run(f"{topologies}:not_json", "--set", "topology.state.checkpoint.interval.ms=10")
    assert done.returncode == 1, done.stderr
    assert "spout 'numbers' returned a position() that is not JSON (set" in done.stderr
    assert "$checkpointspout" not in done.stderr


def test_a_run_that_ends_with_errors_exits_3_with_a_one_line_summary(topologies: Path) -> None:
    done = _run(f"{topologies}:picky")
    assert done.returncode == 3, done.stderr
    summary = done.stderr.strip().splitlines()[-1]
    assert summary.startswith("statestream: idle after ")
    assert "5 errors (the first: bolt[0] ValueError('cannot take xxx" in summary
    # The 5,000-character message is cut in its middle (its end would say what to do).
    assert len(summary) < 800 and "characters cut) ... xxx" in summary


def test_a_failed_run_keeps_the_exception_text(topologies: Path, tmp_path: Path) -> None:
    done = _run(f"{topologies}:missing")
    assert done.returncode == 1, done.stderr
    assert (
        "component 'numbers' task 0: open() raised FileNotFoundError: [Errno 2] No such file "
        f"or directory: '{tmp_path / 'gone' / 'input.csv'}'" in done.stderr
    )
