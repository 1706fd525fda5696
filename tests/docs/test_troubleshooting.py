"""The troubleshooting guide (docs/guides/troubleshooting.md) is what statestream prints:
each line the page quotes (a block marked for this file) is produced by running its
case, in page order, with ``statestream run`` in a fresh directory, and the case
exits with the status its heading names (``(exit N)``). ``…`` in a quoted line
stands for what varies (a path, a pid, a duration)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from docs_pages import DOCS, ROOT, blocks

pytestmark = pytest.mark.slow

PAGE = DOCS / "guides" / "troubleshooting.md"
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")
CONFIG = ROOT / "config"

Case = Callable[[Path], subprocess.CompletedProcess[str]]


def _run(cwd: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``statestream ARGS`` in ``cwd``; with ``code``, run first in the same process
    (to take a library away: ``sys.modules[name] = None`` makes its import fail)."""
    argv = ["statestream", *args]
    program = (
        f"{code or ''}\nimport sys\nsys.argv = {argv!r}\nfrom statestream._cli import main\nmain()"
    )
    return subprocess.run(
        [sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def _topology(cwd: Path, name: str, body: str) -> str:
    (cwd / "input.txt").write_text((ROOT / "examples" / "corpus.txt").read_text())
    (cwd / f"{name}.py").write_text(textwrap.dedent(body))
    return f"{name}.py"


def unknown_key(cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(cwd, "run", WORDCOUNT, "--until-idle", "--set", "topology.state.provder=sqlite")


def unknown_provider(cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(cwd, "run", WORDCOUNT, "--until-idle", "--set", "topology.state.provider=sqlit")


def no_redis_py(cwd: Path) -> subprocess.CompletedProcess[str]:
    args = ("run", WORDCOUNT, "--until-idle", "-c", str(CONFIG / "redis.yaml"))
    return _run(cwd, *args, code="import sys; sys.modules['redis'] = None")


def no_pyspark(cwd: Path) -> subprocess.CompletedProcess[str]:
    args = ("run", WORDCOUNT, "--until-idle", "--runner", "spark", "-c", str(CONFIG / "local.yaml"))
    return _run(cwd, *args, code="import sys; sys.modules['pyspark'] = None")


def unknown_component(cwd: Path) -> subprocess.CompletedProcess[str]:
    path = _topology(cwd, "typo", """
        from statestream import BasicBolt, FileSpout, TopologyBuilder

        class Split(BasicBolt):
            def execute(self, tuple, collector):
                collector.emit([tuple["line"]])

            def declare_output_fields(self, declarer):
                declarer.declare(["word"])

        def topology():
            b = TopologyBuilder("typo")
            b.set_spout("sentences", FileSpout("input.txt"))
            b.set_bolt("split", Split()).shuffle_grouping("sentence")
            return b.build()
    """)  # fmt: skip
    return _run(cwd, "run", path, "--until-idle")


def every_tuple_fails(cwd: Path) -> subprocess.CompletedProcess[str]:
    path = _topology(cwd, "arity", """
        from statestream import BasicBolt, FileSpout, TopologyBuilder

        class Split(BasicBolt):
            def execute(self, tuple, collector):
                collector.emit([tuple["line"], 1])

            def declare_output_fields(self, declarer):
                declarer.declare(["word"])

        def topology():
            b = TopologyBuilder("arity")
            b.set_spout("sentences", FileSpout("input.txt"))
            b.set_bolt("split", Split()).shuffle_grouping("sentences")
            return b.build()
    """)  # fmt: skip
    return _run(cwd, "run", path, "--until-idle", "--no-progress")


def bad_value(cwd: Path) -> subprocess.CompletedProcess[str]:
    path = _topology(cwd, "badvalue", """
        import datetime
        from statestream import FileSpout, StatefulBolt, TopologyBuilder

        class Keep(StatefulBolt):
            def init_state(self, state):
                self.state = state

            def execute(self, tuple):
                self.state.put("last", datetime.datetime(2026, 1, 1))
                self.collector.ack(tuple)

        def topology():
            b = TopologyBuilder("badvalue")
            b.set_spout("sentences", FileSpout("input.txt"))
            b.set_bolt("keep", Keep()).shuffle_grouping("sentences")
            return b.build()
    """)  # fmt: skip
    return _run(cwd, "run", path, "--until-idle", "--no-progress")


def unpicklable(cwd: Path) -> subprocess.CompletedProcess[str]:
    path = _topology(cwd, "unpicklable", """
        import threading
        from statestream import BasicBolt, FileSpout, TopologyBuilder

        class Lock(BasicBolt):
            def execute(self, tuple, collector):
                collector.emit([threading.Lock()])

            def declare_output_fields(self, declarer):
                declarer.declare(["lock"])

        class Sink(BasicBolt):
            def execute(self, tuple, collector):
                pass

        def topology():
            b = TopologyBuilder("unpicklable")
            b.set_spout("sentences", FileSpout("input.txt"))
            b.set_bolt("lock", Lock()).shuffle_grouping("sentences")
            b.set_bolt("sink", Sink()).shuffle_grouping("lock")
            return b.build()
    """)  # fmt: skip
    return _run(cwd, "run", path, "--until-idle", "--no-progress")


def undecodable(cwd: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "bad.txt").write_bytes(b"good line\nbad \xff\xfe line\n")
    args = ("--until-idle", "--no-progress", "--set", f"wordcount.input={cwd / 'bad.txt'}")
    return _run(cwd, "run", WORDCOUNT, *args)


def store_held(cwd: Path) -> subprocess.CompletedProcess[str]:
    local = ("-c", str(CONFIG / "local.yaml"))
    first = subprocess.Popen(
        [sys.executable, "-m", "statestream", "run", WORDCOUNT, *local, "--no-progress"],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        lock = cwd / "statestream-data" / "state.db.wordcount.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        wait = ("--set", "topology.state.claim.wait.secs=1")
        return _run(cwd, "run", WORDCOUNT, *local, "--until-idle", *wait)
    finally:
        first.terminate()
        first.wait(60)


def store_unreachable(cwd: Path) -> subprocess.CompletedProcess[str]:
    redis = ("--set", "topology.state.provider=redis",
             "--set", 'topology.state.provider.config={url: "redis://127.0.0.1:6390/0"}')  # fmt: skip
    return _run(cwd, "run", WORDCOUNT, "--until-idle", *redis)


def errors_at_the_end(cwd: Path) -> subprocess.CompletedProcess[str]:
    path = _topology(cwd, "flaky", """
        from statestream import BasicBolt, FileSpout, TopologyBuilder

        class Split(BasicBolt):
            def execute(self, tuple, collector):
                if "mill" in tuple["line"]:
                    raise ValueError("no mills here")
                for word in tuple["line"].split():
                    collector.emit([word])

            def declare_output_fields(self, declarer):
                declarer.declare(["word"])

        def topology():
            b = TopologyBuilder("flaky")
            b.set_spout("sentences", FileSpout("input.txt"))
            b.set_bolt("split", Split()).shuffle_grouping("sentences")
            return b.build()
    """)  # fmt: skip
    fast = ("--set", "statestream.retry.initial.ms=1")
    return _run(cwd, "run", path, "--until-idle", "--no-progress", *fast)


def spark_memory(cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(cwd, "run", WORDCOUNT, "--until-idle", "--runner", "spark")


def spark_sqlite_cluster(cwd: Path) -> subprocess.CompletedProcess[str]:
    # Refused before a session starts: no cluster is needed to see it.
    cluster = ("-c", str(CONFIG / "local.yaml"), "--set", "spark.master=spark://127.0.0.1:7077")
    return _run(cwd, "run", WORDCOUNT, "--until-idle", "--runner", "spark", *cluster)


def spark_no_rewind(cwd: Path) -> subprocess.CompletedProcess[str]:
    path = _topology(cwd, "norewind", """
        from statestream import StatefulBolt, TopologyBuilder
        from statestream.testing import ListSpout

        class Keep(StatefulBolt):
            def init_state(self, state):
                self.state = state

            def execute(self, tuple):
                self.collector.ack(tuple)

        def topology():
            b = TopologyBuilder("norewind")
            b.set_spout("numbers", ListSpout([1, 2, 3], ["n"]))
            b.set_bolt("keep", Keep()).shuffle_grouping("numbers")
            return b.build()
    """)  # fmt: skip
    return _run(cwd, "run", path, "--until-idle", "--runner", "spark")


CASES: list[Case] = [
    unknown_key,
    unknown_provider,
    no_redis_py,
    no_pyspark,
    unknown_component,
    every_tuple_fails,
    bad_value,
    unpicklable,
    undecodable,
    store_held,
    store_unreachable,
    errors_at_the_end,
    spark_memory,
    spark_sqlite_cluster,
    spark_no_rewind,
]


def _quoted() -> list[tuple[str, int, str]]:
    """Per block marked for this file, in page order: its heading, the exit status
    the heading names, and the line it quotes."""
    lines = PAGE.read_text().splitlines()
    out = []
    for block in blocks(PAGE):
        if block.marker != "tests/docs/test_troubleshooting.py":
            continue
        heading = next(
            line for line in reversed(lines[: block.line - 1]) if line.startswith("### ")
        )
        status = re.search(r"\(exit (\d)\)$", heading)
        assert status, f"{heading!r} names no exit status"
        out.append((heading, int(status[1]), block.code.strip()))
    return out


def _pattern(quoted: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in quoted.split("…")))


def test_every_quoted_line_has_its_case() -> None:
    assert len(_quoted()) == len(CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.__name__ for c in CASES])
def test_the_case_prints_the_quoted_line_and_exits_as_the_heading_says(
    index: int, tmp_path: Path
) -> None:
    heading, status, quoted = _quoted()[index]
    done = CASES[index](tmp_path)
    lines = done.stderr.splitlines()
    assert any(_pattern(quoted).fullmatch(line) for line in lines), (heading, done.stderr)
    assert done.returncode == status, (heading, done.returncode, done.stderr)
