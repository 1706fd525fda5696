"""The live table on a terminal keeps the log visible: a run on two worker processes
inside tmux (a real terminal), one worker SIGKILLed mid-run; the restart warning
and a worker's `gave up ... dead-lettered` warning are on the screen above one
table (its header drawn once), and after the run the summary is printed once.
On a file read slowly, the table's title says elapsed, input % with ETA and the
last checkpoint's txid and age, and its rows the latency and capacity.

tmux is what a person would look with: ``capture-pane`` gives the screen as
drawn, scrollback included (.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TOPOLOGY = """
import os
import time
from pathlib import Path
from statestream import BasicBolt, Spout, TopologyBuilder

MARKERS = Path({markers!r})

class Endless(Spout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
        # The worker's pid and its parent's (the supervisor, the CLI).
        (MARKERS / f"opened-{{os.getpid()}}").write_text(str(os.getppid()))
    def next_tuple(self):
        self.n += 1
        if self.n % 100 == 0:
            time.sleep(0.05)  # a gentle rate: the machine is shared
        self.collector.emit([self.n], msg_id=self.n)
    def declare_output_fields(self, declarer):
        declarer.declare(["value"])

class Picky(BasicBolt):
    def execute(self, tuple, collector):
        if tuple.values[0] == 20:
            raise ValueError("twenty is poison")
    def declare_output_fields(self, declarer):
        pass

topology = TopologyBuilder("live")
topology.set_spout("source", Endless())
topology.set_bolt("picky", Picky(), 2).shuffle_grouping("source")
topology = topology.build()
"""

RESTART = "restarting the workers from the last committed checkpoint"
GAVE_UP = "gave up on message 20 after 1 attempt ("
LIVE_HEADER = "┃ component"
SUMMARY_HEADER = "component  emitted  executed"


def _wait(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def tmux() -> Iterator[Callable[..., str]]:
    """``tmux(*args)``: run tmux on a server of this test's own."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (.ci/run installs it)")
    socket = f"statestream-test-{uuid.uuid4().hex[:8]}"

    def run(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", socket, *args], check=True, capture_output=True, text=True
        ).stdout

    try:
        yield run
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def test_the_log_prints_above_one_live_table_and_the_summary_once(
    tmp_path: Path, tmux: Callable[..., str]
) -> None:
    topo = tmp_path / "live.py"
    topo.write_text(TOPOLOGY.format(markers=str(tmp_path)))
    command = [
        sys.executable, "-m", "statestream", "run", str(topo),
        "--set", "topology.workers=2",
        "--set", "statestream.retry.max.attempts=1",
        "--set", f"statestream.deadletter.path={tmp_path / 'dead.jsonl'}",
    ]  # fmt: skip
    exit_file = tmp_path / "exit"
    # pytest exports COLUMNS=80 and LINES=24, which rich would take over the terminal's size.
    shell = (
        f"env -u COLUMNS -u LINES {shlex.join(command)}; "
        f"echo $? > {shlex.quote(str(exit_file))}; sleep 600"
    )
    tmux("new-session", "-d", "-s", "run", "-x", "150", "-y", "60", "-c", str(tmp_path), shell)
    tmux("set-option", "-t", "run", "history-limit", "5000")

    def screen() -> str:
        # -J joins the lines tmux wrapped; -S -: the scrollback too.
        return tmux("capture-pane", "-p", "-J", "-t", "run", "-S", "-")

    def opened() -> list[Path]:
        return sorted(tmp_path.glob("opened-*"))

    _wait("the spout to open", lambda: len(opened()) == 1)
    _wait("the dead letter", lambda: GAVE_UP in screen())
    first = opened()[0]
    worker, supervisor = int(first.name.split("-")[1]), int(first.read_text())
    os.kill(worker, signal.SIGKILL)
    _wait("the restart", lambda: len(opened()) == 2)
    # The table redraws every 0.5 s: wait for it to show the restart.
    _wait("the table to count the restart", lambda: "│        1 │" in screen())

    live = screen()
    assert RESTART in live, live
    assert GAVE_UP in live, live
    assert live.count(LIVE_HEADER) == 1, live
    # The log is above the table, not drawn over by it.
    assert live.index(RESTART) < live.index(LIVE_HEADER), live

    os.kill(supervisor, signal.SIGINT)
    _wait("the run to end", exit_file.exists)
    assert exit_file.read_text().strip() == "130"
    done = screen()
    assert done.count(SUMMARY_HEADER) == 1, done
    assert LIVE_HEADER not in done, done  # the summary replaces the live table
    assert RESTART in done and GAVE_UP in done, done
    assert done.index(RESTART) < done.index(SUMMARY_HEADER), done


TITLE = re.compile(
    r"statestream: elapsed (\d+)s \| input (\d+)% ETA (\d+s|\d+m\d\ds) \| "
    r"checkpoint (\d+) \((\d+)s ago\)"
)


def _table_rows(screen: str) -> dict[str, dict[str, str]]:
    """The live table's last drawing as ``{component: {column: cell}}``."""
    lines = screen.splitlines()
    head = max(i for i, line in enumerate(lines) if LIVE_HEADER in line)
    columns = [c.strip() for c in lines[head].strip().strip("┃").split("┃")]
    rows = {}
    for line in lines[head + 1 :]:
        if "│" not in line:
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == len(columns):
            rows[cells[0]] = dict(zip(columns, cells, strict=True))
    return rows


def test_the_title_says_elapsed_input_eta_and_checkpoint_and_the_rows_latency_and_capacity(
    tmp_path: Path, tmux: Callable[..., str]
) -> None:
    """A file read at a few ms a line (tests/ui/slow_words.py): while it runs, the
    table's title says the elapsed time, the share of the input read with its ETA
    and the last checkpoint with its age; the bolts' rows have a sampled latency
    and a capacity, the spout's its complete latency."""
    (tmp_path / "corpus.txt").write_text("".join(f"a b c{i}\n" for i in range(1500)))
    tests = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "statestream", "run", str(tests / "ui" / "slow_words.py"),
               "--until-idle", "--set", "topology.stats.sample.rate=1"]  # fmt: skip
    exit_file = tmp_path / "exit"
    shell = (
        f"env -u COLUMNS -u LINES PYTHONPATH={shlex.quote(str(tests))} {shlex.join(command)}; "
        f"echo $? > {shlex.quote(str(exit_file))}; sleep 600"
    )
    tmux("new-session", "-d", "-s", "run", "-x", "220", "-y", "40", "-c", str(tmp_path), shell)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-J", "-t", "run")

    def titled() -> re.Match[str] | None:
        found = TITLE.findall(screen())
        # Part of the input read, a checkpoint committed: the run is under way.
        return TITLE.search(screen()) if found and 0 < int(found[-1][1]) < 100 else None

    _wait("a title with input, ETA and checkpoint", lambda: titled() is not None)
    title = titled()
    assert title is not None
    elapsed, share, _eta, txid, age = title.groups()
    assert int(elapsed) >= 0 and 0 < int(share) < 100 and int(txid) >= 0 and int(age) >= 0
    rows = _table_rows(screen())
    assert set(rows) >= {"lines", "split", "count"}, rows
    for bolt in ("split", "count"):
        assert re.fullmatch(r"\d+\.\d{3} ms|\d+\.\d\d s", rows[bolt]["latency"]), rows[bolt]
        assert re.fullmatch(r"\d+%", rows[bolt]["capacity"]), rows[bolt]
    assert re.fullmatch(r"\d+\.\d{3} ms|\d+\.\d\d s", rows["lines"]["latency"]), rows["lines"]
    assert rows["lines"]["capacity"] == "-"

    _wait("the run to end", exit_file.exists, timeout=120)
    assert exit_file.read_text().strip() == "0"
