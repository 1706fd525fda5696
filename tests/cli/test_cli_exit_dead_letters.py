"""Dead letters are in the exit code, and a sink's refusal ends a run one way (issue 44,
item 3): a run that gave up on messages exits 3 with the count and the file in its
summary, even when nothing raised (a bolt calling ``collector.fail()``); a sink that
refuses a row fails the run (exit 1, one line) whether the row is in the run's last
checkpoint or in an earlier one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_process import statestream

TOPOLOGY = '''
from pathlib import Path

from statestream import Bolt, FileSpout, SinkError, TopologyBuilder
from statestream.connectors import TwoPhaseSink

HERE = Path(__file__).parent


class Refuse(Bolt):
    """Fails (collector.fail, nothing raised) every line holding 'bad'."""

    def execute(self, tuple):
        if "bad" in tuple["line"]:
            self.collector.fail(tuple)
        else:
            self.collector.emit([tuple["line"]], anchors=tuple)
            self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["line"])


class Lines(TwoPhaseSink):
    """Appends its rows to a file; refuses a row holding 'refuse' as a target would."""

    def open_target(self):
        self.out = open(HERE / "out.txt", "a")

    def write(self, rows, txid):
        for (line,) in rows:
            if "refuse" in line:
                raise SinkError(f"the target refused row {line!r}")
        self.out.writelines(line + "\\n" for (line,) in rows)
        self.out.flush()
        return True

    def close_target(self):
        self.out.close()


def topology():
    b = TopologyBuilder("exits")
    b.set_spout("lines", FileSpout(str(HERE / "in.txt")))
    b.set_bolt("refuse", Refuse()).shuffle_grouping("lines")
    b.set_bolt("sink", Lines()).shuffle_grouping("refuse")
    return b.build()
'''


def _run(tmp_path: Path, lines: list[str], *extra: str) -> tuple[int, list[str]]:
    (tmp_path / "topo.py").write_text(TOPOLOGY)
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
    proc = statestream(
        "run",
        str(tmp_path / "topo.py"),
        "--until-idle",
        "--no-progress",
        "--set",
        "topology.state.provider=sqlite",
        "--set",
        f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
        "--set",
        "statestream.retry.initial.ms=1",
        *extra,
        cwd=tmp_path,
    )
    return proc.returncode, proc.stderr.splitlines()


@pytest.mark.parametrize("workers", [1, 2])
def test_dead_letters_without_an_exception_exit_3_and_say_where(
    tmp_path: Path, workers: int
) -> None:
    lines = [f"line {i}" + (" bad" if i % 50 == 7 else "") for i in range(400)]
    code, err = _run(tmp_path, lines, "--set", f"topology.workers={workers}")
    assert code == 3, err[-5:]
    summary = err[-1]
    assert "0 errors" in summary
    assert f"8 dead letters in {tmp_path / 'deadletter.jsonl'}" in summary
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 392


def test_a_clean_run_exits_0(tmp_path: Path) -> None:
    code, err = _run(tmp_path, [f"line {i}" for i in range(50)])
    assert code == 0, err[-5:]
    assert "dead letter" not in err[-1]


@pytest.mark.parametrize("where", ["last checkpoint", "mid-run"])
def test_a_refused_row_fails_the_run_with_one_line_wherever_it_is(
    tmp_path: Path, where: str
) -> None:
    n = 3000
    at = n - 1 if where == "last checkpoint" else 5
    lines = [f"line {i}" + (" refuse" if i == at else "") for i in range(n)]
    # Mid-run: a checkpoint every 1 ms, so the refused row's commit is not the last.
    interval = "20000" if where == "last checkpoint" else "1"
    code, err = _run(tmp_path, lines, "--set", f"topology.state.checkpoint.interval.ms={interval}")
    assert code == 1, err[-5:]
    failed = [line for line in err if line.startswith("statestream: error: ")]
    assert len(failed) == 1, err[-5:]
    assert failed[0] == f"statestream: error: the target refused row {lines[at]!r}"
