"""`statestream topology FILE --format dot|mermaid` prints the graph the live view draws;
`statestream run --ui` refuses a bad address as a usage error before the run starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_process import statestream

from statestream._run import load_topology
from statestream._ui.graph import to_dot, to_mermaid, topology_graph

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py")


@pytest.mark.parametrize(("fmt", "draw"), [("dot", to_dot), ("mermaid", to_mermaid)])
def test_topology_format_prints_the_pages_graph(fmt: str, draw: object) -> None:
    done = statestream("topology", EXAMPLE, "--format", fmt)
    assert done.returncode == 0, done.stderr
    assert done.stdout == draw(topology_graph(load_topology(EXAMPLE)))  # type: ignore[operator]


def test_a_bad_ui_address_is_exit_2_with_one_line(tmp_path: Path) -> None:
    done = statestream("run", EXAMPLE, "--until-idle", "--ui", "nowhere", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "statestream: error: config key 'topology.ui' from --set: expected a port, "
        "HOST:PORT or null, got 'nowhere' (str)"
    ]
