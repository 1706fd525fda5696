"""The spout guide (docs/guides/spouts.md), followed literally: its ClickSpout, taken
from the page itself, feeds a stateful page count that is crashed and SIGKILLed and
restarted, and the counts are exact (exactly-once, the default for a spout
that can rewind)."""

from __future__ import annotations

import collections
import json
import random
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from docs_pages import DOCS, section_code
from kill_loop import cli, seeded_rng, sigkill_runs

from statestream import Topology
from statestream.testing import (
    StepClock,
    committed_state,
    crash_and_recover,
    crash_at_checkpoint,
    crash_at_tuple,
)

GUIDE = DOCS / "guides" / "spouts.md"


def _readme_spout_code() -> str:
    # The block the page marks as run by this test (tests/docs_pages.py).
    return section_code(GUIDE, "tests/runtime/test_spout_guide.py")


# The rest of the topology: a page count as the state document counts words.
_TOPOLOGY = """
from statestream import StatefulBolt, TopologyBuilder


class PageCount(StatefulBolt):
    def init_state(self, state):
        self.state = state

    def execute(self, tuple):
        page = tuple["page"]
        count = self.state.get(page, 0) + 1
        self.state.put(page, count)
        self.collector.emit([page, count], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(["page", "count"])


def build(path):
    b = TopologyBuilder("clicks")
    b.set_spout("clicks", ClickSpout(path))
    b.set_bolt("count", PageCount(), 2).fields_grouping("clicks", ["page"])
    return b.build()
"""


def _module(tmp_path: Path) -> Path:
    path = tmp_path / "clicks_topology.py"
    source = _readme_spout_code() + _TOPOLOGY
    path.write_text(source + "\nimport os\ntopology = build(os.environ['SSTREAM_TEST_CLICKS'])\n")
    return path


def _topology(tmp_path: Path, events: Path) -> Topology:
    namespace: dict[str, Any] = {"__name__": "clicks_guide"}
    exec(compile(_readme_spout_code() + _TOPOLOGY, str(GUIDE), "exec"), namespace)
    topo = namespace["build"](str(events))
    assert isinstance(topo, Topology)
    return topo


def _events(tmp_path: Path, n: int) -> tuple[Path, dict[str, int]]:
    rng = random.Random(5)
    path = tmp_path / "clicks.jsonl"
    pages: collections.Counter[str] = collections.Counter()
    with open(path, "w") as f:
        for i in range(n):
            page = f"/p{rng.randrange(40)}"
            pages[page] += 1
            f.write(json.dumps({"user": f"u{i % 97}", "page": page, "ms": i}) + "\n")
    return path, dict(pages)


def _config(tmp_path: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 5,
    }


@pytest.mark.parametrize(
    "point",
    [
        crash_at_tuple("count", 900),
        crash_at_tuple("clicks", 1500),
        crash_at_checkpoint("count", "commit", after=True, task=1, n=4),
        crash_at_checkpoint("count", "prepare", n=2),
    ],
    ids=str,
)
def test_the_guide_spout_crashed_and_restarted_counts_exactly(tmp_path: Path, point: Any) -> None:
    events, expected = _events(tmp_path, 3000)
    topo, config = _topology(tmp_path, events), _config(tmp_path)
    # A fake clock that moves per reading puts the checkpoints at the same events
    # on any machine and core, so the nth commit a point names happens.
    outcome = crash_and_recover(topo, config, at=point, clock=StepClock(0.0003))
    assert outcome.result.errors == [] and outcome.result.counters.get("rewinds", 0) == 0
    assert committed_state(topo, config, "count") == expected


def test_the_guide_spout_at_least_once_resumes_where_it_was_acked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Its acked_position(): a crash re-reads only what was not acked (at most
    # what max.spout.pending lets be in flight, about twice), a rerun after a
    # finished file reads nothing, and the start line says where it resumes.
    from statestream.runtime.local import LocalRuntime
    from statestream.runtime.plan import as_config

    events, expected = _events(tmp_path, 3000)
    topo = _topology(tmp_path, events)
    config = {
        **_config(tmp_path),
        "statestream.state.exactly.once": False,
        "topology.max.spout.pending": 100,
    }
    outcome = crash_and_recover(
        topo, config, at=crash_at_tuple("clicks", 1500), clock=StepClock(0.0003)
    )
    got = committed_state(topo, config, "count")
    assert all(got.get(page, 0) >= n for page, n in expected.items()), "a click was lost"
    replayed = outcome.result.components["clicks"].emitted - (3000 - 1499)
    print(f"{replayed} of 1,499 clicks read again")
    assert 0 <= replayed <= 300
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("clicks:")]
    assert said[0] == "clicks: reading from the start (no position stored yet)"
    assert said[-1].startswith("clicks: resuming at byte offset ")

    caplog.clear()
    again = LocalRuntime(topo, as_config(config, ("clicks",))).run(until_idle=True)
    assert again.components["clicks"].emitted == 0
    assert committed_state(topo, config, "count") == got
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("clicks:")]
    assert line == f"clicks: resuming at byte offset {events.stat().st_size:,}"


def test_the_guide_spout_is_exactly_once_by_default(tmp_path: Path) -> None:
    from statestream.runtime.local import LocalRuntime
    from statestream.runtime.plan import as_config

    events, _ = _events(tmp_path, 10)
    topo = _topology(tmp_path, events)
    rt = LocalRuntime(topo, as_config(_config(tmp_path), ("clicks",)))
    assert rt.exactly_once


@pytest.mark.slow
def test_the_guide_spout_sigkilled_and_restarted_counts_exactly(tmp_path: Path) -> None:
    events, expected = _events(tmp_path, 200_000)
    module = _module(tmp_path)
    db = tmp_path / "state.db"
    settings = [
        "--set", "topology.state.provider=sqlite",
        "--set", f"topology.state.provider.config={{path: {db}}}",
        "--set", "topology.state.checkpoint.interval.ms=50",
    ]  # fmt: skip
    import os

    os.environ["SSTREAM_TEST_CLICKS"] = str(events)
    try:
        killed = sigkill_runs(
            [str(module), "--until-idle", *settings],
            kills=5,
            component="count",
            rng=seeded_rng(),
            work=200_000,
        )
        final = subprocess.run(
            cli("run", str(module), "--until-idle", "--no-progress", *settings),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        del os.environ["SSTREAM_TEST_CLICKS"]
    assert final.returncode == 0, final.stderr
    assert killed >= 3, f"only {killed} of 5 runs were killed before they ended"
    topo = _topology(tmp_path, events)
    assert committed_state(topo, {"topology.state.provider": "sqlite",
                                  "topology.state.provider.config": {"path": str(db)}},
                           "count") == expected  # fmt: skip


def test_the_readme_code_block_is_what_this_test_runs() -> None:
    # A guard against the guide drifting away from a runnable spout.
    code = _readme_spout_code()
    assert "class ClickSpout(Spout):" in code and "def seek(self, position):" in code
    assert "def acked_position(self):" in code
    textwrap.dedent(code)  # parses as written
    compile(code, str(GUIDE), "exec")
