"""The examples of the getting-started and guide pages run, so the docs cannot drift
from the code: each complete topology (the README's word count too) is run with
``statestream run``, each test module's tests are called, the sink guide's own sink
writes exactly once through a crash, and every other python block at least
compiles. The pages' ``statestream`` commands are run by
tests/cli/test_cli_readme_commands.py, the spout guide's spout by
tests/runtime/test_spout_guide.py."""

from __future__ import annotations

import collections
import inspect
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from docs_pages import DOCS, ROOT, Block, blocks, guide_pages, section_code

import statestream
from statestream import TopologyBuilder
from statestream.testing import (
    RewindableListSpout,
    StepClock,
    crash_and_recover,
    crash_at_checkpoint,
)

ALL_BLOCKS = [b for page in guide_pages() for b in blocks(page)]
# The README's word count too: the front page's example must run as well.
README_BLOCKS = blocks(ROOT / "README.md")


def _marked(kind: str) -> list[Block]:
    return [b for b in ALL_BLOCKS + README_BLOCKS if b.marker == kind]


def _exec(block: Block) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"docs_{block.page.stem}_{block.line}"}
    exec(compile(block.code, str(block.page), "exec"), namespace)
    return namespace


def own_sink(tmp_path: Path) -> None:
    """The sink guide's SqliteSink, behind a word list, crashed after a sink task's
    first commit and recovered: every row is in its table exactly once."""
    sink_class = _exec(next(b for b in ALL_BLOCKS if b.marker == "exec own_sink"))["SqliteSink"]
    rows = [(f"w{i}", i) for i in range(600)]
    target = tmp_path / "out.db"
    b = TopologyBuilder("sinks")
    b.set_spout("words", RewindableListSpout(rows, ["word", "n"]))
    b.set_bolt("out", sink_class(str(target)), 2).fields_grouping("words", ["word"])
    topology = b.build()
    conf = {"topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
            "topology.state.checkpoint.interval.ms": 5}  # fmt: skip
    crash_and_recover(topology, conf, clock=StepClock(0.0003),
                      at=crash_at_checkpoint("out", "commit", after=True, task=0, n=2))  # fmt: skip
    with sqlite3.connect(target) as db:
        written = db.execute("SELECT word, n FROM out").fetchall()
        guards = dict(db.execute("SELECT k, txid FROM guard").fetchall())
    assert collections.Counter(written) == collections.Counter(rows)
    # One guard a task, named by the state's lineage: sinks/out@<lineage>/<task>.
    assert sorted((k.split("@")[0], k.rsplit("/", 1)[1]) for k in guards) == [
        ("sinks/out", "0"),
        ("sinks/out", "1"),
    ], guards


def _table(text: str) -> dict[str, list[str]]:
    """The data components' rows of a run's summary table: emitted, executed, acked, failed."""
    return {row.split()[0]: row.split()[1:5] for row in text.splitlines()
            if row.split()[:1] and row.split()[0] in {"sentences", "split", "count"}}  # fmt: skip


def test_the_word_count_output_shown_is_what_it_prints(tmp_path: Path) -> None:
    shown = next(b for b in ALL_BLOCKS if b.marker == "output")
    done = subprocess.run(
        [sys.executable, "-m", "statestream", "run", str(ROOT / "examples" / "wordcount.py"),
         "--until-idle", "--no-progress"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _table(shown.code) == _table(done.stderr) != {}, (shown.code, done.stderr)


HANDLERS = {"exec own_sink": own_sink}


def test_every_block_of_the_guides_is_run_or_compiles() -> None:
    assert ALL_BLOCKS, "no code block found in the guides"
    for block in ALL_BLOCKS:
        if block.marker is None:
            if block.lang == "python":  # a fragment: it must at least be Python
                compile(block.code, str(block), "exec")
        elif block.marker.startswith("tests/"):
            reader = ROOT / block.marker
            assert reader.is_file(), f"{block}: {block.marker} does not exist"
            page = str(block.page.relative_to(DOCS))
            assert page in reader.read_text(), f"{block}: {block.marker} does not read {page}"
        else:
            known = {"topology", "pytest", "output", *HANDLERS}
            assert block.marker in known, f"{block}: {block.marker!r}"
    assert _marked("topology") and _marked("pytest")


@pytest.mark.parametrize("block", _marked("topology"), ids=str)
def test_a_topology_of_the_docs_runs_until_idle(block: Block, tmp_path: Path) -> None:
    module = tmp_path / "my_topology.py"
    module.write_text(block.code)
    lines = ["the cow jumped over the moon", "the man in the moon", "over and over"]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "statestream", "run", str(module), "--until-idle", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "idle after" in done.stderr and ", 0 errors" in done.stderr, done.stderr
    topology = statestream.load_topology(str(module))
    sink = list(topology.components)[-1]  # the last bolt executed every word
    words = sum(len(line.split()) for line in lines)
    row = next(r for r in done.stderr.splitlines() if r.split()[:1] == [sink])
    assert row.split()[2] == str(words), done.stderr


@pytest.mark.parametrize("block", _marked("pytest"), ids=str)
def test_a_test_module_of_the_docs_passes(block: Block, tmp_path: Path) -> None:
    tests = {k: v for k, v in _exec(block).items() if k.startswith("test_") and callable(v)}
    assert tests, f"{block} defines no test"
    for name, test in tests.items():
        wants = inspect.signature(test).parameters
        assert set(wants) <= {"tmp_path"}, f"{block}: {name} wants {list(wants)}"
        (tmp_path / name).mkdir()
        test(**({"tmp_path": tmp_path / name} if wants else {}))


@pytest.mark.parametrize("name", sorted(HANDLERS))
def test_a_block_run_by_its_own_test(name: str, tmp_path: Path) -> None:
    assert any(b.marker == name for b in ALL_BLOCKS), f"no block is marked {name!r}"
    HANDLERS[name](tmp_path)


def test_section_code_finds_one_marked_block() -> None:
    assert "class ClickSpout(Spout):" in section_code(
        DOCS / "guides" / "spouts.md", "tests/runtime/test_spout_guide.py"
    )
