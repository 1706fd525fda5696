"""The ``statestream`` command line: exit codes, messages, progress, Ctrl-C, state inspection.

Runs the real CLI as ``python -m statestream`` in a subprocess (exit codes,
signals, a non-TTY stderr), and through click's CliRunner for the quick
read-only commands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest
from cli_process import statestream
from click.testing import CliRunner

from statestream._checkpoint import Phase
from statestream._cli import main
from statestream._exactly_once import CheckpointRecord
from statestream._registry import open_provider

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")
CORPUS = ROOT / "examples" / "corpus.txt"


def cli(
    *args: str, timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return statestream(*args, cwd=cwd, timeout=timeout)


def memory_sets() -> list[str]:
    return ["--set", f"topology.state.provider.config={{name: {uuid.uuid4()}}}"]


def read_counts(path: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        assert row["word"] not in counts, f"{row['word']!r} written twice"
        counts[row["word"]] = row["count"]
    return counts


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert "Traceback" not in stderr
    return lines[0]


def test_run_wordcount_until_idle_writes_the_counter(tmp_path: Path) -> None:
    out = tmp_path / "counts.jsonl"
    proc = cli("run", WORDCOUNT, "--until-idle", "--set", f"wordcount.output={out}")
    assert proc.returncode == 0, proc.stderr
    assert read_counts(out) == Counter(CORPUS.read_text(encoding="utf-8").split())
    assert "idle after" in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--set", "topology.mesage.timeout.secs=3"],
            "did you mean 'topology.message.timeout.secs'",
        ),
        (
            ["--set", "topology.message.timeout.secs=abc"],
            "'topology.message.timeout.secs'",
        ),
        (["--config", "/nonexistent/conf.yaml"], "/nonexistent/conf.yaml"),
        (["--set", "wordcount.input=/nonexistent"], "/nonexistent"),
    ],
    ids=["unknown-key", "wrong-type", "missing-config-file", "missing-input"],
)
def test_config_errors_exit_2_with_one_line(args: list[str], needle: str) -> None:
    proc = cli("run", WORDCOUNT, "--until-idle", *args)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert needle in line
    assert line.startswith("statestream: error:")


def test_wrong_type_names_the_expected_type() -> None:
    proc = cli("run", WORDCOUNT, "--until-idle", "--set", "topology.message.timeout.secs=abc")
    assert proc.returncode == 2
    assert "expected a positive integer" in one_error_line(proc.stderr)


def test_missing_topology_file_exits_2_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    proc = cli("run", str(missing), "--until-idle")
    assert proc.returncode == 2
    assert str(missing) in one_error_line(proc.stderr)


def test_until_idle_with_duration_exits_2_with_one_line() -> None:
    result = CliRunner().invoke(main, ["run", WORDCOUNT, "--until-idle", "--duration", "1"])
    assert result.exit_code == 2
    assert "exclude each other" in one_error_line(result.stderr)


def test_until_idle_with_duration_exits_2_without_traceback() -> None:
    result = CliRunner().invoke(main, ["run", WORDCOUNT, "--until-idle", "--duration", "1"])
    assert result.exit_code == 2
    assert "--until-idle and --duration exclude each other" in result.stderr
    assert "Traceback" not in result.stderr


SPOUT_RAISES = """
from statestream import Spout, TopologyBuilder
from statestream.testing import SinkBolt

class Broken(Spout):
    def open(self, conf, context, collector):
        raise RuntimeError("cannot connect to the source")
    def next_tuple(self):
        pass
    def declare_output_fields(self, declarer):
        declarer.declare(["value"])

def topology():
    b = TopologyBuilder("broken")
    b.set_spout("source", Broken())
    b.set_bolt("sink", SinkBolt("x")).shuffle_grouping("source")
    return b.build()
"""


def test_a_spout_raising_in_open_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text(SPOUT_RAISES)
    proc = cli("run", str(path), "--until-idle")
    assert proc.returncode == 1, proc.stderr
    assert "cannot connect to the source" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_a_terminal_status_lines_go_to_stderr() -> None:
    proc = cli(
        "run", WORDCOUNT, "--duration", "2",
        "--set", "statestream.progress.interval.secs=0.5",
        *memory_sets(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    status = [line for line in proc.stderr.splitlines() if "sentences emitted=" in line]
    assert len(status) >= 2, proc.stderr
    assert "count emitted=" in status[-1]
    assert "duration after" in proc.stderr


def test_status_lines_name_each_worker_with_its_pid_tasks_and_restarts(tmp_path: Path) -> None:
    proc = cli(
        "run", WORDCOUNT, "--duration", "2",
        "--set", "statestream.progress.interval.secs=0.5",
        "--set", "topology.workers=2",
        "--set", "topology.state.provider=sqlite",
        "--set", f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    workers = [line for line in proc.stderr.splitlines() if "worker 0 pid=" in line]
    assert workers, proc.stderr
    assert "worker 1 pid=" in workers[-1]
    assert "restarts=0" in workers[-1]
    # Round-robin: the checkpoint spout is task 0, the file spout task 1.
    assert "tasks=[$checkpointspout[0]" in workers[-1]
    assert "tasks=[sentences[0]" in workers[-1]


ENDLESS = """
from pathlib import Path
from statestream import Spout, TopologyBuilder
from statestream.testing import SinkBolt

MARKERS = Path({markers!r})

class Endless(Spout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
        (MARKERS / "opened").write_text("yes")
    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)
    def ack(self, msg_id):
        if msg_id == 100:  # tell the test the topology is at work
            print("acked 100", flush=True)
    def close(self):
        (MARKERS / "closed").write_text(str(self.n))
    def declare_output_fields(self, declarer):
        declarer.declare(["value"])

topology = TopologyBuilder("endless")
topology.set_spout("source", Endless())
topology.set_bolt("sink", SinkBolt("x")).shuffle_grouping("source")
topology = topology.build()
"""


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_shuts_a_running_topology_down_cleanly_and_exits_128_plus_it(
    tmp_path: Path, workers: int, signum: int, code: int
) -> None:
    """Ctrl-C (SIGINT) exits 130 and SIGTERM 143, as `run --help` says: a stopped
    run did not finish, so it never exits 0 as one that did."""
    path = tmp_path / "endless.py"
    path.write_text(ENDLESS.format(markers=str(tmp_path)))
    args = ["run", str(path), "--no-progress", "--set", f"topology.workers={workers}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "statestream", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        # Interrupt once the topology is at work: the spout prints a line when
        # its 100th tuple is acked (readline blocks until then, or returns ""
        # if the process ended first).
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "acked 100\n", (line, proc.communicate())
        assert (tmp_path / "opened").exists()
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)  # TimeoutExpired: it did not stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert (tmp_path / "closed").exists(), "the spout's close was not called"
    assert int((tmp_path / "closed").read_text()) >= 100
    assert "stopped after" in stderr


def test_state_info_and_dump_after_a_sqlite_run(tmp_path: Path) -> None:
    conf = tmp_path / "local.yaml"
    conf.write_text(
        "topology.runner: local\n"
        "topology.state.provider: sqlite\n"
        "topology.state.provider.config:\n"
        f"  path: {tmp_path / 'data' / 'state.db'}\n"
    )
    out = tmp_path / "counts.jsonl"
    proc = cli(
        "run", WORDCOUNT, "--until-idle", "--config", str(conf),
        "--set", f"wordcount.output={out}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expected = Counter(CORPUS.read_text(encoding="utf-8").split())

    runner = CliRunner()
    info = runner.invoke(main, ["state", "info", "--config", str(conf)])
    assert info.exit_code == 0, info.output
    heading, first = info.stdout.splitlines()[:2]
    assert heading == "topology: wordcount"
    assert first.startswith("  checkpoint: txid ")
    assert first.endswith("phase COMMITTED")
    # The txid shown is the one stored, and every count task committed it.
    db = {"path": str(tmp_path / "data" / "state.db")}
    with open_provider("sqlite", db, scope="wordcount") as provider:
        stored = CheckpointRecord.load(provider.get_state("$checkpointspout-0")).state
        committed = {provider.get_state(f"count-{t}").committed_txid for t in (0, 1)}
    assert stored.phase is Phase.COMMITTED and stored.txid >= 0  # the run ended on a commit
    assert first == f"  checkpoint: txid {stored.txid} phase COMMITTED"
    assert committed == {stored.txid}
    assert "  namespace: count-0" in info.stdout
    assert "  namespace: count-1" in info.stdout

    dump = runner.invoke(main, ["state", "dump", "--config", str(conf), "--component", "count"])
    assert dump.exit_code == 0, dump.output
    rows = [orjson.loads(line) for line in dump.stdout.splitlines()]
    assert {(r["topology"], r["component"]) for r in rows} == {("wordcount", "count")}
    assert {r["task"] for r in rows} == {0, 1}
    assert sum(r["value"] for r in rows) == sum(expected.values())
    assert {r["key"]: r["value"] for r in rows} == dict(expected)

    one = runner.invoke(
        main, ["state", "dump", "--config", str(conf), "--component", "count", "--task", "1"]
    )
    assert one.exit_code == 0
    assert {orjson.loads(line)["task"] for line in one.stdout.splitlines()} == {1}


def test_providers_lists_the_three_builtins() -> None:
    result = CliRunner().invoke(main, ["providers"])
    assert result.exit_code == 0
    names = {line.split("\t")[0] for line in result.stdout.splitlines()}
    assert {"memory", "sqlite", "redis"} <= names


def test_topology_prints_the_components() -> None:
    result = CliRunner().invoke(main, ["topology", WORDCOUNT])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "topology 'wordcount'" in out
    assert "sentences (spout FileSpout, 1 task)" in out  # not "1 tasks"
    assert "split (bolt SplitSentence, 2 tasks)" in out
    assert "count (stateful bolt WordCount, 2 tasks)" in out
    assert "<- split:default fields" in out


def _sqlite_config_with_state(
    tmp_path: Path, topologies: dict[str, dict[str, dict[str, int]]], extra: str = ""
) -> Path:
    """A config file for a sqlite store holding, per topology, ``namespaces`` (committed)."""
    db = tmp_path / "data" / "state.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    for topology, namespaces in topologies.items():
        with open_provider("sqlite", {"path": str(db)}, scope=topology or None) as provider:
            for namespace, entries in namespaces.items():
                state = provider.get_state(namespace)
                for key, value in entries.items():
                    state.put(key, value)
                state.commit()
    conf = tmp_path / "local.yaml"
    conf.write_text(
        f"topology.state.provider: sqlite\ntopology.state.provider.config:\n  path: {db}\n{extra}"
    )
    return conf


def test_state_dump_of_a_component_without_state_exits_2_naming_those_with_state(
    tmp_path: Path,
) -> None:
    conf = _sqlite_config_with_state(
        tmp_path,
        {
            "t": {
                "count-0": {"a": 1},
                "count-1": {"b": 2},
                "sum-0": {"s": 3},
                "$checkpointspout-0": {"phase": 1},
            }
        },
    )
    runner = CliRunner()
    dump = runner.invoke(main, ["state", "dump", "-c", str(conf), "--component", "cnt"])
    assert dump.exit_code == 2, dump.output
    assert dump.stdout == ""
    line = one_error_line(dump.stderr)
    assert "component 'cnt' of 't' has no committed state" in line
    assert "components with state: 'count', 'sum'" in line
    assert "$checkpointspout" not in line

    task = runner.invoke(
        main, ["state", "dump", "-c", str(conf), "--component", "count", "--task", "5"]
    )
    assert task.exit_code == 2, task.output
    assert "task 5 of component 'count' has no committed state; tasks with state: 0, 1" in (
        one_error_line(task.stderr)
    )

    ok = runner.invoke(main, ["state", "dump", "-c", str(conf), "--component", "count"])
    assert ok.exit_code == 0, ok.output
    rows = [orjson.loads(line) for line in ok.stdout.splitlines()]
    assert rows == [
        {"topology": "t", "component": "count", "task": 0, "key": "a", "value": 1},
        {"topology": "t", "component": "count", "task": 1, "key": "b", "value": 2},
    ]


def test_state_dump_of_an_empty_store_exits_2(tmp_path: Path) -> None:
    conf = _sqlite_config_with_state(tmp_path, {"t": {"count-0": {}}})  # the file, no entries
    dump = CliRunner().invoke(main, ["state", "dump", "-c", str(conf), "--component", "count"])
    assert dump.exit_code == 2, dump.output
    assert "the store holds no committed state" in one_error_line(dump.stderr)


def test_state_commands_list_and_select_the_topologies_of_a_store(tmp_path: Path) -> None:
    # clicks.input in the file: a config written for another topology still reads.
    conf = _sqlite_config_with_state(
        tmp_path,
        {
            "clicks": {"count-0": {"/home": 4}},
            "wordcount": {"count-0": {"a": 1}, "count-1": {"b": 2}},
        },
        extra="clicks.input: clicks.jsonl\n",
    )
    runner = CliRunner()
    info = runner.invoke(main, ["state", "info", "-c", str(conf)])
    assert info.exit_code == 0, info.output
    assert info.stdout.splitlines() == [
        "topology: clicks",
        "  checkpoint: none",
        "  namespace: count-0",
        "topology: wordcount",
        "  checkpoint: none",
        "  namespace: count-0",
        "  namespace: count-1",
    ]
    both = runner.invoke(main, ["state", "dump", "-c", str(conf), "--component", "count"])
    assert both.exit_code == 2
    assert "several topologies; pick one with --topology: topologies with state: 'clicks', " \
        "'wordcount'" in one_error_line(both.stderr)  # fmt: skip
    clicks = runner.invoke(
        main,
        ["state", "dump", "-c", str(conf), "--component", "count", "--topology", "clicks",
         "--set", "orders.input=orders.csv"],  # the --set a run used reads here too
    )  # fmt: skip
    assert clicks.exit_code == 0, clicks.output
    assert [orjson.loads(x)["key"] for x in clicks.stdout.splitlines()] == ["/home"]
    by_file = runner.invoke(
        main, ["state", "dump", "-c", str(conf), "--component", "count", "--topology", WORDCOUNT]
    )
    assert by_file.exit_code == 0, by_file.output
    assert {orjson.loads(x)["key"] for x in by_file.stdout.splitlines()} == {"a", "b"}
    other = runner.invoke(main, ["state", "info", "-c", str(conf), "--topology", "orders"])
    assert other.exit_code == 2
    assert "no state of topology 'orders'" in one_error_line(other.stderr)


def test_state_commands_never_create_a_store(tmp_path: Path) -> None:
    db = tmp_path / "typo" / "state.db"
    runner = CliRunner()
    for command in (["info"], ["dump", "--component", "count"]):
        done = runner.invoke(
            main,
            ["state", *command, "--set", "topology.state.provider=sqlite",
             "--set", f"topology.state.provider.config={{path: {db}}}"],
        )  # fmt: skip
        assert done.exit_code == 2, done.output
        assert f"no state store at {db}" in one_error_line(done.stderr)
    assert not db.parent.exists()


def test_state_clear_deletes_one_topology_after_a_confirmation(tmp_path: Path) -> None:
    conf = _sqlite_config_with_state(
        tmp_path,
        {"clicks": {"count-0": {"/home": 4}}, "wordcount": {"count-0": {"a": 1}}},
    )
    runner = CliRunner()
    refused = runner.invoke(
        main, ["state", "clear", "-c", str(conf), "--topology", "wordcount"], input="n\n"
    )
    assert refused.exit_code == 1  # click's Abort
    done = runner.invoke(
        main, ["state", "clear", "-c", str(conf), "--topology", "wordcount"], input="y\n"
    )
    assert done.exit_code == 0, done.output
    assert "cleared 1 namespaces of topology 'wordcount'" in done.stdout
    info = runner.invoke(main, ["state", "info", "-c", str(conf)])
    assert "topology: wordcount" not in info.stdout
    assert "topology: clicks" in info.stdout
    db = {"path": str(tmp_path / "data" / "state.db")}
    with open_provider("sqlite", db, scope="clicks") as provider:
        assert dict(provider.get_state("count-0").items()) == {"/home": 4}


CLIENT_LOGS = """
import logging
from statestream import TopologyBuilder
from statestream.testing import ListSpout, SinkBolt

class Chatty(ListSpout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        # What pika logs when a RabbitMQ connection drops, however the spout copes.
        logging.getLogger("pika.adapters.utils.io_services_utils").error("lost: from pika")
        logging.getLogger("statestream.connectors").warning("lost: from statestream")

def topology():
    b = TopologyBuilder("chatty")
    b.set_spout("source", Chatty([["a"], ["b"]], fields=["value"]))
    b.set_bolt("sink", SinkBolt("x")).shuffle_grouping("source")
    return b.build()
"""


def test_a_client_librarys_connection_chatter_is_heard_only_with_verbose(tmp_path: Path) -> None:
    path = tmp_path / "chatty.py"
    path.write_text(CLIENT_LOGS)
    quiet = cli("run", str(path), "--until-idle", *memory_sets())
    assert quiet.returncode == 0, quiet.stderr
    assert "lost: from statestream" in quiet.stderr
    assert "lost: from pika" not in quiet.stderr
    loud = cli("run", str(path), "--until-idle", "-v", *memory_sets())
    assert loud.returncode == 0, loud.stderr
    assert "lost: from pika" in loud.stderr
